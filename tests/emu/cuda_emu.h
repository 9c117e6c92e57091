// A CPU stand-in for the CUDA features tracker's kernels use, for tests only: every thread of a
// block is a fiber (its own stack, ucontext), and the block's fibers take turns on the launching
// OS thread, each running until it reaches a barrier (__syncthreads, a warp shuffle) or returns;
// __shared__ variables are statics (one block runs at a time); warp shuffles exchange through an
// array between two warp barriers. Fibers switch in a fraction of a microsecond where OS threads
// at a std::barrier took a trip through the kernel's scheduler each, on CI's two cores most of the
// emulated tests' time.
// It checks the kernels' index arithmetic and launch logic against the NumPy reference; it says
// nothing about speed, the memory model or anything only a GPU shows.
#pragma once
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline dim3 threadIdx;  // the running fiber's: set at every switch
inline dim3 blockIdx;  // one block runs at a time
inline dim3 blockDim, gridDim;
inline unsigned emu_tid;
inline float emu_lanes[1024];
alignas(16) inline char emu_dynamic_shared[256 * 1024];
inline std::pair<uintptr_t, uintptr_t> emu_stacks;  // the fibers' stacks: a thread's locals, not memory

// The block's fibers and where each stands: running, waiting at a barrier (which one: the block's,
// or warp w's as 1 + w), or done. A barrier opens when every fiber of its group that has not
// returned waits at it (a thread that returns early leaves its barriers, as on a GPU).
struct EmuFiber {
    ucontext_t context;
    int waiting = -1;  // -1: runnable; 0: the block's barrier; 1 + w: warp w's
    bool done = false;
};
inline std::vector<EmuFiber> emu_fibers;
inline ucontext_t emu_scheduler;

// Whether a kernel's thread (not the scheduler) runs: what the memory trace records (emu_trace.h).
// volatile: g++ takes the sanitizer's hooks for calls that read no memory, and dropped the store
// that turns tracing back on after a barrier where only loads and stores followed it to the next.
inline volatile bool emu_tracing = false;
inline void emu_trace_kernel(bool on) { emu_tracing = on; }

inline void emu_wait(int barrier) {
    emu_trace_kernel(false);
    emu_fibers[emu_tid].waiting = barrier;
    swapcontext(&emu_fibers[emu_tid].context, &emu_scheduler);
    emu_trace_kernel(true);
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __constant__

using std::max;
using std::min;

inline void __syncthreads() { emu_wait(0); }

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    const int warp = 1 + static_cast<int>(emu_tid / 32);
    emu_lanes[emu_tid] = v;
    emu_wait(warp);
    const float other = emu_lanes[emu_tid ^ lane_mask];
    emu_wait(warp);
    return other;
}

inline float __int_as_float(unsigned i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

struct alignas(16) float4 {  // a 16-byte load, as CUDA's float4 is
    float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

// A GPU faults on a 16-byte access to an address that is not a multiple of 16: the kernels check
// theirs through emu_aligned (common.cuh's vector accesses), and the launch fails as the GPU's would.
inline bool emu_misaligned = false;
inline void emu_aligned(const void* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16) emu_misaligned = true;
}

using EmuKernel = std::function<void(void**)>;
inline std::map<std::string, EmuKernel>& emu_kernels() {
    static std::map<std::string, EmuKernel> table;
    return table;
}
inline std::map<std::string, std::pair<void*, size_t>>& emu_symbols() {
    static std::map<std::string, std::pair<void*, size_t>> table;
    return table;
}

template <class T>
using emu_arg_t = std::remove_cv_t<std::remove_reference_t<T>>;

// The kernel's arguments are copied onto the thread's stack before it runs, as a GPU hands them in
// registers: the memory trace records what the kernel's own code touches.
template <class... A, size_t... I>
void emu_apply(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    std::tuple<emu_arg_t<A>...> values{*static_cast<emu_arg_t<A>*>(args[I])...};
    emu_trace_kernel(true);
    std::apply(kernel, values);
    emu_trace_kernel(false);
}

template <class... A>
bool emu_register(const char* name, void (*kernel)(A...)) {
    emu_kernels()[name] = [kernel](void** args) { emu_apply(kernel, args, std::index_sequence_for<A...>{}); };
    return true;
}

// The fibers of one launch: a stack each (reserved, not committed, until a kernel touches it), made
// once per launch and rewound for every block of the grid.
inline constexpr size_t EMU_STACK = 256 * 1024;
inline const EmuKernel* emu_kernel = nullptr;
inline void** emu_args = nullptr;

inline void emu_fiber_main() {
    (*emu_kernel)(emu_args);
    emu_fibers[emu_tid].done = true;
    swapcontext(&emu_fibers[emu_tid].context, &emu_scheduler);
}

// The fibers barrier ``b`` gathers, [first, last): the block's (0), or warp b - 1's.
inline std::pair<unsigned, unsigned> emu_group(int b, unsigned n) {
    if (b == 0) return {0, n};
    const unsigned first = (b - 1) * 32;
    return {first, std::min(n, first + 32)};
}

// Whether barrier ``b`` is open: every fiber of its group that has not returned waits there.
inline bool emu_open(int b, unsigned n) {
    const auto [first, last] = emu_group(b, n);
    for (unsigned t = first; t < last; ++t)
        if (!emu_fibers[t].done && emu_fibers[t].waiting != b) return false;
    return true;
}

inline void emu_resume(unsigned t, unsigned bx, unsigned by) {
    emu_tid = t;
    threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
    swapcontext(&emu_scheduler, &emu_fibers[t].context);
}

// Runs one block: each fiber in turn until it waits or returns; a barrier that every member has
// reached releases them all. Returns false on a deadlock (a barrier some live thread never reaches).
inline bool emu_run_block(unsigned n, unsigned bx, unsigned by) {
    for (;;) {
        bool all_done = true, moved = false;
        for (unsigned t = 0; t < n; ++t) {
            EmuFiber& f = emu_fibers[t];
            if (f.done) continue;
            all_done = false;
            if (f.waiting >= 0) {
                if (!emu_open(f.waiting, n)) continue;
                const int b = f.waiting;  // open: release every fiber waiting there
                const auto [first, last] = emu_group(b, n);
                for (unsigned u = first; u < last; ++u)
                    if (emu_fibers[u].waiting == b) emu_fibers[u].waiting = -1;
            }
            emu_resume(t, bx, by);
            moved = true;
        }
        if (all_done) return true;
        if (!moved) return false;
    }
}

extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** args) {
    auto found = emu_kernels().find(name);
    if (found == emu_kernels().end()) return 1;
    emu_kernel = &found->second;
    emu_args = args;
    gridDim = {gx, gy, gz};
    blockDim = {bx, by, bz};
    const unsigned n = bx * by * bz, blocks = gx * gy * gz;
    char* stacks = static_cast<char*>(mmap(nullptr, n * EMU_STACK, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (stacks == MAP_FAILED) return 2;
    emu_stacks = {reinterpret_cast<uintptr_t>(stacks), reinterpret_cast<uintptr_t>(stacks) + n * EMU_STACK};
    emu_fibers.assign(n, EmuFiber{});
    emu_misaligned = false;
    int status = 0;
    for (unsigned b = 0; b < blocks && status == 0; ++b) {
        blockIdx = {b % gx, (b / gx) % gy, b / (gx * gy)};
        for (unsigned t = 0; t < n; ++t) {
            EmuFiber& f = emu_fibers[t];
            f.waiting = -1;
            f.done = false;
            getcontext(&f.context);
            f.context.uc_stack.ss_sp = stacks + t * EMU_STACK;
            f.context.uc_stack.ss_size = EMU_STACK;
            f.context.uc_link = nullptr;
            makecontext(&f.context, emu_fiber_main, 0);
        }
        if (!emu_run_block(n, bx, by)) status = 3;  // a deadlock: the kernel's barriers do not match up
        if (emu_misaligned) status = 4;
    }
    munmap(stacks, n * EMU_STACK);
    return status;
}

extern "C" int emu_to_symbol(const char* name, const void* data, size_t bytes) {
    auto found = emu_symbols().find(name);
    if (found == emu_symbols().end() || bytes > found->second.second) return 1;
    std::memcpy(found->second.first, data, bytes);
    return 0;
}

extern "C" long long emu_symbol_bytes(const char* name) {
    auto found = emu_symbols().find(name);
    return found == emu_symbols().end() ? -1 : static_cast<long long>(found->second.second);
}

extern "C" void* emu_dynamic_shared_memory() { return emu_dynamic_shared; }

#ifdef EMU_TRACE
#include "emu_trace.h"
#endif
