// vramsim._native: the command line's library for the Python package (python/vramsim/). Every call parses
// CLI-style arguments with the CLI's own parser and runs the CLI's own commands in this process
// (sim/cli/cli_app.h), so that options, defaults, results and error messages are the CLI's.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "sim/cli/cli_app.h"
#include "sim/cli/commands.h"
#include "sim/core/error.h"

#include <fmt/format.h>

namespace py = pybind11;
using vramsim::cli::CommandResult;

namespace {

// The commands keep their parsed options in static storage and capture_stdout swaps the process's `stdout`:
// one command at a time. Taken with the GIL released, so that other Python threads run meanwhile.
std::mutex& command_mutex() {
  static std::mutex m;
  return m;
}

template <typename F>
auto locked(F&& f) {
  py::gil_scoped_release release;
  const std::lock_guard<std::mutex> lock(command_mutex());
  return f();
}

// A command's result held for Python: its --json text, and its pages made when asked.
class Result {
 public:
  explicit Result(CommandResult r) : m_result(std::move(r)), m_json(vramsim::cli::json_text(m_result.json)) {}
  const std::string& json() const { return m_json; }
  std::string html() const { return call(m_result.html, "a page"); }
  std::string perfetto() const { return call(m_result.perfetto, "a Perfetto trace"); }
  std::string summary() const { return call(m_result.summary, "a memory summary"); }
  std::string text() const { return call(m_result.text, "a text report"); }

 private:
  static std::string call(const std::function<std::string()>& f, const char* what) {
    if (!f) {
      throw vramsim::InputError(fmt::format("this command makes no {}", what));
    }
    return locked([&] { return f(); });
  }
  CommandResult m_result;
  std::string m_json;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "vramsim's C++ library: the command line's commands run in this process";
  // The CLI's error line, less its "vramsim: error: " prefix. A ValueError: bad arguments are the usual
  // cause.
  static py::exception<vramsim::InputError> error(m, "VramsimError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of host memory");
    } catch (const std::exception& e) {  // InputError, and whatever else the CLI reports as an error line
      error(vramsim::cli::one_line(e.what()).c_str());
    }
  });

  py::class_<Result>(m, "Result")
      .def_property_readonly("json", &Result::json, "the document the command's --json prints")
      .def("html", &Result::html, "the page --html writes")
      .def("perfetto", &Result::perfetto, "the trace --perfetto writes")
      .def("summary", &Result::summary, "replay: torch.cuda.memory_summary()'s table")
      .def("text", &Result::text, "the report the command prints without --json");

  m.def(
      "run",
      [](const std::vector<std::string>& args) {
        const vramsim::cli::CapturedRun r = locked([&] { return vramsim::cli::run_cli_captured(args); });
        return py::make_tuple(r.status, py::bytes(r.out));
      },
      py::arg("args"),
      "`vramsim ARGS...` in this process: (exit status, what it printed on stdout as bytes)");
  m.def(
      "result",
      [](const std::vector<std::string>& args) {
        return Result(locked([&] { return vramsim::cli::run_cli_for_result(args); }));
      },
      py::arg("args"), "`vramsim predict|trace|replay ARGS...` in this process, its result as an object");
  m.def(
      "options",
      [](const std::string& command) {
        py::list out;
        for (const vramsim::cli::OptionInfo& o :
             locked([&] { return vramsim::cli::command_options(command); })) {
          out.append(py::make_tuple(o.names, o.flag, o.many, o.description));
        }
        return out;
      },
      py::arg("command"), "the options of `vramsim COMMAND`: (names, is_flag, takes_several, help)");
  m.def(
      "simulated_gpu",
      [](const std::string& gpu, const std::string& capacity, std::int64_t workspace_bytes) {
        const vramsim::cli::SimulatedGpu g =
            locked([&] { return vramsim::cli::trace_simulated_gpu(gpu, capacity, workspace_bytes); });
        return py::make_tuple(g.name, g.compute_capability, g.total_memory_bytes, g.cublas_workspace_bytes);
      },
      py::arg("gpu"), py::arg("capacity"), py::arg("cublas_workspace_bytes"),
      "the GPU `vramsim trace --gpu/--capacity` shows a script: (name, compute capability x10, total bytes, "
      "cuBLAS workspace bytes)");
}
