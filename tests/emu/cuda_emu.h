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
inline thread_local dim3 threadIdx, blockIdx;
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

extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, void** args) {
    auto found = emu_kernels().find(name);
    if (found == emu_kernels().end()) return 1;
    const EmuKernel& kernel = found->second;
    gridDim = {gx, gy, gz};
    blockDim = {bx, by, bz};
    const unsigned n = bx * by * bz;
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                std::barrier<> block(n);
                emu_block_barrier = &block;
                emu_warp_barriers.clear();
                for (unsigned w = 0; w * 32 < n; ++w)
                    emu_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - w * 32)));
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < n; ++t)
                    threads.emplace_back([&, t, x, y, z] {
                        emu_tid = t;
                        threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                        blockIdx = {x, y, z};
                        kernel(args);
                        emu_block_barrier->arrive_and_drop();  // an exited thread leaves the barrier
                        emu_warp_barriers[t / 32]->arrive_and_drop();
                    });
                for (auto& thread : threads) thread.join();
            }
    return 0;
}

extern "C" int emu_to_symbol(const char* name, const void* data, size_t bytes) {
    auto found = emu_symbols().find(name);
    if (found == emu_symbols().end() || bytes > found->second.second) return 1;
    std::memcpy(found->second.first, data, bytes);
    return 0;
}

extern "C" void* emu_dynamic_shared_memory() { return emu_dynamic_shared; }
