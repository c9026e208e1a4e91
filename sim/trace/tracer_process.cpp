#include "sim/trace/tracer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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
  std::string outcome;    // what the tracer wrote to OUT.status ("" when it wrote nothing)
};

// Set by SIGINT / SIGTERM / SIGHUP while a tracer runs: the child's process group is stopped and the command
// ends through the normal error path (so that its scratch folder is removed).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void note_stop_signal(int signal) { g_stop_signal = signal; }

// Installs note_stop_signal for the life of the object, restoring the previous handlers after.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = note_stop_signal;
    sigemptyset(&action.sa_mask);
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      sigaction(kSignals[i], &action, &m_previous[i]);
    }
  }
  ~StopSignals() {
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      sigaction(kSignals[i], &m_previous[i], nullptr);
    }
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> m_previous{};
};

// Copies the child's stderr to ours line by line, one line behind, so that the last one can be kept back:
// when the tracer fails, it is the error, which vramsim prints itself (once).
class LineRelay {
 public:
  void add(const char* data, std::size_t n) {
    m_pending.append(data, n);
    std::size_t nl = 0;
    while ((nl = m_pending.find('\n')) != std::string::npos) {
      if (m_held) {
        std::fprintf(stderr, "%s\n", m_held->c_str());
      }
      m_held = m_pending.substr(0, nl);
      m_pending.erase(0, nl + 1);
    }
    if (m_pending.size() > 65536) {  // a line without end: pass it on
      std::fwrite(m_pending.data(), 1, m_pending.size(), stderr);
      m_pending.clear();
    }
  }
  std::string last_line() {
    if (!m_pending.empty()) {
      if (m_held) {
        std::fprintf(stderr, "%s\n", m_held->c_str());
      }
      m_held = m_pending;
      m_pending.clear();
    }
    return m_held.value_or("");
  }

 private:
  std::string m_pending;
  std::optional<std::string> m_held;
};

int exit_status(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                : 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
}

// Stops the child's whole process group (the script's own children included) and reaps the child.
void stop_group(pid_t pid) {
  kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// Spawns argv[0] (looked up on PATH) in a process group of its own, with the child's stdout on our stderr
// and its stderr through a pipe that we copy to our stderr, keeping the last line. Returns when the child
// has exited: a process the script started in the background may keep the pipe open, so the pipe is read
// only until then (and drained of what is already in it), never to its end. `timeout_s` > 0 stops the
// child's group after that many seconds (InputError naming --timeout); a SIGINT / SIGTERM / SIGHUP stops it
// too (InputError).
ChildResult spawn_and_wait(std::vector<std::string> argv, std::vector<std::string> env, int timeout_s,
                           const std::string& script) {
  ChildResult r;
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    throw InputError(fmt::format("vramsim trace: pipe: {}", std::strerror(errno)));
  }
  fcntl(pipefd[0], F_SETFL, fcntl(pipefd[0], F_GETFL) | O_NONBLOCK);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  posix_spawn_file_actions_addclose(&actions, pipefd[1]);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> cargv = c_strings(argv);
  std::vector<char*> cenv = c_strings(env);
  const StopSignals stop_signals;
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return r;  // not started: no such interpreter
  }
  r.started = true;
  LineRelay relay;
  const auto start = std::chrono::steady_clock::now();
  char buf[4096];
  bool pipe_open = true;
  bool exited = false;
  int wait_status = 0;
  const auto drain = [&] {  // what is in the pipe now; false at its end
    for (;;) {
      const ssize_t n = read(pipefd[0], buf, sizeof buf);
      if (n > 0) {
        relay.add(buf, static_cast<std::size_t>(n));
        continue;
      }
      return !(n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK));
    }
  };
  while (!exited) {
    if (pipe_open) {
      struct pollfd fd {
        pipefd[0], POLLIN, 0
      };
      poll(&fd, 1, 100);
      pipe_open = drain();
    } else {
      poll(nullptr, 0, 100);
    }
    const pid_t done = waitpid(pid, &wait_status, WNOHANG);
    exited = done == pid;
    if (!exited && g_stop_signal != 0) {
      stop_group(pid);
      close(pipefd[0]);
      throw InputError(fmt::format("{}: stopped by signal {} (vramsim trace was interrupted)", script,
                                   static_cast<int>(g_stop_signal)));
    }
    if (!exited && timeout_s > 0 &&
        std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
      stop_group(pid);
      close(pipefd[0]);
      throw InputError(fmt::format("{}: still running after --timeout {} s: stopped", script, timeout_s));
    }
  }
  if (pipe_open) {
    drain();
  }
  close(pipefd[0]);
  r.last_line = relay.last_line();
  r.status = exit_status(wait_status);
  return r;
}

std::string read_outcome(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

}  // namespace

std::string run_tracer(const TracerInvocation& t) {
  std::vector<std::string> tried;
  const std::string status_path = t.out_vtrace + ".status";
  for (const std::string& python : t.pythons) {
    std::remove(status_path.c_str());
    ChildResult r =
        spawn_and_wait(tracer_argv(t, python), child_environment(t.package_dir), t.timeout_s, t.script);
    if (!r.started) {
      tried.push_back(python + " (not found)");
      continue;
    }
    // The exit status is the tracer's only when it wrote its outcome: the script may end the interpreter
    // itself with any status (os._exit(4) is not "no PyTorch").
    r.outcome = read_outcome(status_path);
    std::remove(status_path.c_str());
    if (r.outcome == "no-torch" && r.status == kTracerNoTorch) {
      tried.push_back(python + " (no PyTorch)");
      continue;
    }
    if (r.outcome == "traced" && r.status == 0) {
      if (!r.last_line.empty()) {
        std::fprintf(stderr, "%s\n", r.last_line.c_str());
      }
      return python;
    }
    if (r.outcome == "failed" && (r.status == kTracerScriptFailed || r.status == kTracerBadOptions)) {
      throw InputError(r.last_line.empty() ? fmt::format("{}: the traced script failed", t.script)
                                           : r.last_line);
    }
    if (r.outcome.empty()) {
      throw InputError(
          fmt::format("{}: the interpreter ended with status {} before the tracer finished (the "
                      "script ended it, e.g. with os._exit, or it was killed){}{}",
                      t.script, r.status, r.last_line.empty() ? "" : ": ", r.last_line));
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
