// The ranks of one job given as FILE... on the command line (replay, compare): files as given, a folder's
// snapshots in natural order (rank10 after rank9).
#pragma once

#include <string>
#include <vector>

namespace vramsim::cli {

// Natural order of file names: digit runs compare as numbers; names equal as numbers (rank01, rank1) in
// byte order, so a folder lists the same on every file system.
bool natural_less(const std::string& a, const std::string& b);

// The files FILE... names: each file as given; a folder's .pickle / .json / .vtrace files in natural order.
// A folder with none of them is an InputError.
std::vector<std::string> rank_files(const std::vector<std::string>& given);

}  // namespace vramsim::cli
