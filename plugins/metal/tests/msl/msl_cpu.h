// Runs MSL kernels (compiled as C++ against metal_stdlib in this folder) on the CPU, for tests.
//
// Each threadgroup runs alone. A kernel without barriers runs its threads one after another; in a
// kernel with barriers each thread is a fiber (ucontext) on one OS thread, which runs until it
// reaches a threadgroup barrier, then yields; when every fiber of the group has yielded, all go on. A group whose threads do not all reach the same barriers (undefined in Metal)
// is reported, not hung. Threadgroup arrays are function statics (see metal_stdlib), which is
// right because groups never overlap.
#pragma once

#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700  // macOS declares the (deprecated) ucontext routines only with it
#endif
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include <metal_stdlib>

namespace rt_cpu {
struct Fiber {
  ucontext_t context;
  std::vector<char> stack;
  uint3 position;  // in the threadgroup ("thread" and "kernel" are macros here)
  bool done = false;
};

inline ucontext_t scheduler;
inline Fiber* current = nullptr;
inline const std::function<void(uint3, uint3)>* body = nullptr;
inline uint3 group;

inline void yield_at_barrier() { swapcontext(&current->context, &scheduler); }

inline void fiber_main() {
  (*body)(group, current->position);
  current->done = true;
}

inline void no_barrier() {
  std::fprintf(stderr, "msl_cpu: a kernel launched without fibers reached a barrier\n");
  std::abort();
}

// Runs `work(group, thread)` for every thread of every group of the grid (as fibers when the kernel
// has `barriers`); returns 0, or -1 if a group's threads diverged at a barrier.
inline int launch(const unsigned grid[3], const unsigned block[3], const std::function<void(uint3, uint3)>& work,
                  bool barriers) {
  const unsigned threads = block[0] * block[1] * block[2];
  if (!barriers) {
    barrier_hook = no_barrier;
    for (unsigned gz = 0; gz < grid[2]; gz++)
      for (unsigned gy = 0; gy < grid[1]; gy++)
        for (unsigned gx = 0; gx < grid[0]; gx++)
          for (unsigned t = 0; t < threads; t++) {
            lane = t % 32;
            work(uint3{gx, gy, gz}, uint3{t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])});
          }
    barrier_hook = nullptr;
    return 0;
  }
  std::vector<Fiber> fibers(threads);
  for (auto& f : fibers) f.stack.resize(256 * 1024);
  body = &work;
  barrier_hook = yield_at_barrier;
  int status = 0;
  for (unsigned gz = 0; gz < grid[2] && status == 0; gz++)
    for (unsigned gy = 0; gy < grid[1] && status == 0; gy++)
      for (unsigned gx = 0; gx < grid[0] && status == 0; gx++) {
        group = uint3{gx, gy, gz};
        for (unsigned t = 0; t < threads; t++) {
          Fiber& f = fibers[t];
          f.position = uint3{t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
          f.done = false;
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = f.stack.data();
          f.context.uc_stack.ss_size = f.stack.size();
          f.context.uc_link = &scheduler;
          makecontext(&f.context, fiber_main, 0);
        }
        for (bool running = true; running;) {  // one round: every fiber up to its next barrier, or its end
          unsigned finished = 0;
          for (unsigned t = 0; t < threads; t++) {
            current = &fibers[t];
            lane = t % 32;
            swapcontext(&scheduler, &current->context);
            finished += current->done;
          }
          if (finished != 0 && finished != threads) {
            std::fprintf(stderr, "msl_cpu: group (%u, %u, %u): %u of %u threads ended while the rest wait at a "
                                 "barrier\n", gx, gy, gz, finished, threads);
            status = -1;
          }
          running = finished == 0;
        }
      }
  barrier_hook = nullptr;
  return status;
}
}  // namespace rt_cpu
