// Errors the user can fix: bad input files, bad options, unknown names.
//
// Three kinds of failure, three mechanisms (see README "Design"):
//   * user / input errors  -> throw vramsim::InputError (one line: "<where>: <problem>")
//   * broken internal invariants -> SIM_ASSERT (sim/core/assert.h), aborts
//   * simulated out-of-memory -> not an error; policies return AllocResult::oom and reports count it
#pragma once

#include <stdexcept>
#include <string>

namespace vramsim {

// An error in something the user supplied. `what()` is a single line naming the file (or option),
// the position where known, and the problem, e.g. "trace.pickle: byte 1234: unsupported opcode 0x63".
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// Input that is valid but beyond a documented bound on the work one step of vramsim does (e.g. the
// offline-optimal planner's pairs of overlapping lifetimes). A command that runs several such steps by
// default may skip the one that throws it and say so; one the user asked for by name fails with the message.
class WorkBoundError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace vramsim
