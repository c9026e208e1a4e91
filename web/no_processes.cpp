// A browser starts no processes: emscripten's libc declares posix_spawnp but does not define it, and `vramsim
// trace` (sim/trace/tracer_process.cpp, which runs Python) calls it. Here it fails as a system without the
// call does, so trace reports its own "cannot start" error and exit status 2 instead of the link failing.
#include <spawn.h>

#include <cerrno>

extern "C" int posix_spawnp(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                            char* const[], char* const[]) {
  return ENOSYS;
}
