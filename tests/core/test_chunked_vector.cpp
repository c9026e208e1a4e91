// ChunkedVector (sim/core/chunked_vector.h), the tape's node and variable storage: the same elements at the
// same indices as std::vector across several chunks, references that stay valid while it grows (the
// contract the tape relies on: it reads a variable while it appends the next), and every element
// constructed once and destroyed once, in index order.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "sim/core/chunked_vector.h"

namespace vramsim {
namespace {

TEST_CASE("ChunkedVector indexes as a vector and never moves its elements", "[quick][core][chunked-vector]") {
  ChunkedVector<std::string, 2> v;  // chunks of 4: 1,000 elements span 250 of them
  std::vector<std::string> expected;
  std::vector<const std::string*> addresses;
  for (int i = 0; i < 1000; ++i) {
    // Long enough to live on the heap: a moved string would leave its old address empty.
    std::string s = "element number " + std::to_string(i) + " of the chunked vector";
    expected.push_back(s);
    const std::string& added = i % 2 == 0 ? v.push_back(std::move(s)) : v.emplace_back(expected.back());
    addresses.push_back(&added);
    CHECK(&v.back() == &added);
  }
  REQUIRE(v.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(v[i] == expected[i]);
    CHECK(&v[i] == addresses[i]);  // the first element's address, 999 appends later
  }
}

struct Counted {
  explicit Counted(std::vector<int>* log, int id) : log(log), id(id) {}
  Counted(const Counted&) = delete;
  Counted(Counted&& other) = delete;  // ChunkedVector must construct in place, never move
  ~Counted() { log->push_back(id); }
  std::vector<int>* log;
  int id;
};

TEST_CASE("ChunkedVector destroys each element once, in index order", "[quick][core][chunked-vector]") {
  std::vector<int> destroyed;
  {
    ChunkedVector<Counted, 3> v;
    for (int i = 0; i < 20; ++i) {
      v.emplace_back(&destroyed, i);
    }
    CHECK(destroyed.empty());
    ChunkedVector<Counted, 3> moved = std::move(v);  // the chunks change owner; no element is touched
    CHECK(destroyed.empty());
    CHECK(v.empty());
    CHECK(moved.size() == 20);
    CHECK(moved[19].id == 19);
  }
  std::vector<int> expected;
  for (int i = 0; i < 20; ++i) {
    expected.push_back(i);
  }
  CHECK(destroyed == expected);
}

}  // namespace
}  // namespace vramsim
