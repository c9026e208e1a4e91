// Running the Python tracer (traces/tracer/vramsim_trace) on the user's script, as a child process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vramsim {

struct TracerInvocation {
  std::vector<std::string> pythons;  // interpreters to try in order; the first one with PyTorch runs it
  std::string package_dir;           // the folder holding vramsim_trace/ (put on PYTHONPATH)
  std::string script;
  std::vector<std::string> script_args;
  std::string out_vtrace;  // the tracer writes it and out_vtrace + ".markers.json"
  std::string gpu_name;
  int compute_capability = 90;  // major * 10 + minor
  std::int64_t total_memory_bytes = 0;
  std::optional<std::int64_t> cublas_workspace_bytes;  // default: PyTorch's choice for the GPU
  int timeout_s = 0;  // --timeout: stop the script (and what it started) after this many seconds; 0 = never
};

// Runs the tracer. The script's own output (stdout and stderr) goes to our stderr, so that stdout keeps
// only vramsim's report. Returns the interpreter that ran it. Throws InputError with the tracer's one-line
// error when the script fails, when it runs past `timeout_s`, when vramsim is interrupted (SIGINT, SIGTERM,
// SIGHUP: the script's process group is stopped first), and when no candidate interpreter has PyTorch.
std::string run_tracer(const TracerInvocation& invocation);

// The interpreters `vramsim trace` tries without --python: $VRAMSIM_PYTHON, else python3 on PATH and then
// /usr/bin/python3 (Debian's python3-torch lives there; another python3 may come first on PATH).
std::vector<std::string> default_pythons();

// $VRAMSIM_TRACER_DIR, else the source tree's traces/tracer this binary was built from.
std::string default_tracer_dir();

}  // namespace vramsim
