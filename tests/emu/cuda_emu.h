// A CPU stand-in for the CUDA features tracker's kernels use, for tests only: every thread of a
// block is an OS thread, __syncthreads is a std::barrier, __shared__ variables are statics (one
// block runs at a time), warp shuffles exchange through an array under a per-warp barrier.
// It checks the kernels' index arithmetic and launch logic against the NumPy reference; it says
// nothing about speed, the memory model or anything only a GPU shows.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx;
inline dim3 blockIdx;  // one block runs at a time
inline dim3 blockDim, gridDim;
inline thread_local unsigned emu_tid;
inline std::barrier<>* emu_block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> emu_warp_barriers;
inline float emu_lanes[1024];
alignas(16) inline char emu_dynamic_shared[256 * 1024];

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

inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    std::barrier<>& warp = *emu_warp_barriers[emu_tid / 32];
    emu_lanes[emu_tid] = v;
    warp.arrive_and_wait();
    const float other = emu_lanes[emu_tid ^ lane_mask];
    warp.arrive_and_wait();
    return other;
}

inline float __int_as_float(unsigned i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

struct float4 {
    float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

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

template <class... A, size_t... I>
void emu_apply(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<emu_arg_t<A>*>(args[I])...);
}

template <class... A>
bool emu_register(const char* name, void (*kernel)(A...)) {
    emu_kernels()[name] = [kernel](void** args) { emu_apply(kernel, args, std::index_sequence_for<A...>{}); };
    return true;
}

// One OS thread per thread of a block, made once per launch and reused for every block of the
// grid (making them per block cost more than the kernels): between blocks they wait at `gate`
// with the launching thread, which sets blockIdx and fresh barriers (a thread that returns early
// drops out of its block's barriers for good, so they cannot be reused).
extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** args) {
    auto found = emu_kernels().find(name);
    if (found == emu_kernels().end()) return 1;
    const EmuKernel& kernel = found->second;
    gridDim = {gx, gy, gz};
    blockDim = {bx, by, bz};
    const unsigned n = bx * by * bz, blocks = gx * gy * gz;
    std::barrier<> gate(n + 1);
    std::unique_ptr<std::barrier<>> block;
    auto start = [&](unsigned b) {  // block b's index and barriers, before its threads pass the gate
        blockIdx = {b % gx, (b / gx) % gy, b / (gx * gy)};
        block = std::make_unique<std::barrier<>>(n);
        emu_block_barrier = block.get();
        emu_warp_barriers.clear();
        for (unsigned w = 0; w * 32 < n; ++w)
            emu_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - w * 32)));
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; ++t)
        threads.emplace_back([&, t] {
            emu_tid = t;
            threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
            for (unsigned b = 0; b < blocks; ++b) {
                gate.arrive_and_wait();  // block b is set up
                kernel(args);
                emu_block_barrier->arrive_and_drop();  // an exited thread leaves the barrier
                emu_warp_barriers[t / 32]->arrive_and_drop();
                gate.arrive_and_wait();  // every thread is done with block b
            }
        });
    for (unsigned b = 0; b < blocks; ++b) {
        start(b);
        gate.arrive_and_wait();
        gate.arrive_and_wait();
    }
    for (auto& thread : threads) thread.join();
    return 0;
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
