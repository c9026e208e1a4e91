// Running one function on several threads: the one place vramsim starts threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace vramsim {

// The most threads any command starts, whatever is asked (plan --threads is checked against it).
inline constexpr int kMaxThreads = 1024;

// Runs `work` on up to `threads` threads, the caller's included, and waits for all of them. A thread that
// cannot be started (the system's limit on threads or memory) is not an error: the work is shared by those
// that did start (at worst the caller alone), so `work` must take its items from a shared counter. The first
// exception any of them throws is rethrown here, after every thread has been joined.
template <typename Work>
void run_on_threads(std::size_t threads, const Work& work) {
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto guarded = [&] {
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) {
        error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    const std::size_t n = std::min<std::size_t>(threads, static_cast<std::size_t>(kMaxThreads));
    pool.reserve(n > 0 ? n - 1 : 0);
    for (std::size_t t = 1; t < n; ++t) {
      pool.emplace_back(guarded);
    }
  } catch (const std::system_error&) {  // no more threads: the ones started share the work
  } catch (const std::bad_alloc&) {
  }
  guarded();
  for (std::thread& t : pool) {
    t.join();
  }
  if (error) {
    std::rethrow_exception(error);
  }
}

}  // namespace vramsim
