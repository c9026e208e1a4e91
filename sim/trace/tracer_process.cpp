#include "sim/trace/tracer_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "sim/core/error.h"

extern char** environ;

namespace vramsim {
namespace {

// Exit statuses of `python -m vramsim_trace` (traces/tracer/vramsim_trace/__main__.py).
constexpr int kTracerBadOptions = 2;
constexpr int kTracerScriptFailed = 3;
constexpr int kTracerNoTorch = 4;

std::vector<std::string> tracer_argv(const TracerInvocation& t, const std::string& python) {
  std::vector<std::string> argv = {python,
                                   "-m",
                                   "vramsim_trace",
                                   "--out",
                                   t.out_vtrace,
                                   "--gpu",
                                   t.gpu_name,
                                   "--compute-capability",
                                   fmt::format("{}.{}", t.compute_capability / 10, t.compute_capability % 10),
                                   "--total-memory",
                                   std::to_string(t.total_memory_bytes)};
  if (t.cublas_workspace_bytes) {
    argv.push_back("--cublas-workspace-bytes");
    argv.push_back(std::to_string(*t.cublas_workspace_bytes));
  }
  argv.push_back(t.script);
  argv.push_back("--");
  argv.insert(argv.end(), t.script_args.begin(), t.script_args.end());
  return argv;
}

std::vector<std::string> child_environment(const std::string& package_dir) {
  std::vector<std::string> env;
  std::string pythonpath = package_dir;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("PYTHONPATH=", 0) == 0) {
      if (kv.size() > 11) {
        pythonpath += fmt::format(":{}", kv.substr(11));
      }
    } else if (kv.rfind("PYTHONDONTWRITEBYTECODE=", 0) != 0) {
      env.push_back(kv);
    }
  }
  env.push_back(fmt::format("PYTHONPATH={}", pythonpath));
  env.push_back("PYTHONDONTWRITEBYTECODE=1");  // nothing written into the source tree
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (std::string& s : v) {
    out.push_back(s.data());
  }
  out.push_back(nullptr);
  return out;
}

struct ChildResult {
  bool started = false;
  int status = 0;         // exit status, or 128 + signal
  std::string last_line;  // the last line the child wrote to stderr, not yet passed on
};

// Spawns argv[0] (looked up on PATH) with the child's stdout on our stderr and its stderr through a pipe
// that we copy to our stderr, keeping the last line.
ChildResult spawn_and_wait(std::vector<std::string> argv, std::vector<std::string> env) {
  ChildResult r;
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    throw InputError(fmt::format("vramsim trace: pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  posix_spawn_file_actions_addclose(&actions, pipefd[1]);
  std::vector<char*> cargv = c_strings(argv);
  std::vector<char*> cenv = c_strings(env);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return r;  // not started: no such interpreter
  }
  r.started = true;
  // Lines are passed on one behind, so that the last one can be kept back: when the tracer fails, it is the
  // error, which vramsim prints itself (once).
  std::string pending;
  std::optional<std::string> held;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl = 0;
    while ((nl = pending.find('\n')) != std::string::npos) {
      if (held) {
        std::fprintf(stderr, "%s\n", held->c_str());
      }
      held = pending.substr(0, nl);
      pending.erase(0, nl + 1);
    }
    if (pending.size() > 65536) {  // a line without end: pass it on
      std::fwrite(pending.data(), 1, pending.size(), stderr);
      pending.clear();
    }
  }
  if (!pending.empty()) {
    if (held) {
      std::fprintf(stderr, "%s\n", held->c_str());
    }
    held = pending;
  }
  r.last_line = held.value_or("");
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

}  // namespace

std::string run_tracer(const TracerInvocation& t) {
  std::vector<std::string> tried;
  for (const std::string& python : t.pythons) {
    const ChildResult r = spawn_and_wait(tracer_argv(t, python), child_environment(t.package_dir));
    if (!r.started) {
      tried.push_back(python + " (not found)");
      continue;
    }
    if (r.status == kTracerNoTorch) {
      tried.push_back(python + " (no PyTorch)");
      continue;
    }
    if (r.status == 0) {
      if (!r.last_line.empty()) {
        std::fprintf(stderr, "%s\n", r.last_line.c_str());
      }
      return python;
    }
    if (r.status == kTracerScriptFailed || r.status == kTracerBadOptions) {
      throw InputError(r.last_line.empty() ? fmt::format("{}: the traced script failed", t.script)
                                           : r.last_line);
    }
    throw InputError(fmt::format("{}: the tracer ended with status {}{}{}", t.script, r.status,
                                 r.last_line.empty() ? "" : ": ", r.last_line));
  }
  std::string list;
  for (const std::string& s : tried) {
    list += (list.empty() ? "" : ", ") + s;
  }
  throw InputError(fmt::format(
      "--python: no interpreter with PyTorch found (tried {}); install PyTorch (Debian: python3-torch) or "
      "name one with --python",
      list));
}

std::vector<std::string> default_pythons() {
  if (const char* p = std::getenv("VRAMSIM_PYTHON"); p != nullptr && *p != '\0') {
    return {p};
  }
  return {"python3", "/usr/bin/python3"};
}

std::string default_tracer_dir() {
  if (const char* p = std::getenv("VRAMSIM_TRACER_DIR"); p != nullptr && *p != '\0') {
    return p;
  }
  return VRAMSIM_TRACER_DIR;
}

}  // namespace vramsim
