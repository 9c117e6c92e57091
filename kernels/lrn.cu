// LRN across channels, fp32, NCHW: y = x / s^beta, s = k + alpha/n * sum of x^2 over the
// channel window [c - n/2, c + n/2] clipped at the edges (cuDNN's and PyTorch's convention).
// Backward: dx_c = dy_c s_c^-beta - 2 alpha beta / n * x_c * sum over the window of dy y / s.
//
//   global  one thread per element; every window read from global memory (channels are H*W
//           apart), and the backward recomputes each neighbour's s.
//   shared  one block per (image, strip of blockDim.x positions), all channels: the strip's
//           x (and for bwd dy) staged in shared memory with cp.async, every load of a thread in
//           flight at once; s and dy*y/s computed once per element there, windows summed from
//           shared memory. Dynamic shared memory: fwd C*strip floats, bwd 3*C*strip floats
//           (tracker/ops/lrn.py sizes it).
#include "common.cuh"

struct LrnShape {
    int N, C, HW, size;
    float alpha, beta, k;
};

// s at channel c, reading channel j's value through at(j).
template <class At>
__device__ __forceinline__ float lrn_scale(const At& at, int c, const LrnShape& s) {
    const int half = s.size / 2, lo = max(c - half, 0), hi = min(c + half, s.C - 1);
    float sum = 0.f;
    for (int j = lo; j <= hi; ++j) {
        const float v = at(j);
        sum = fmaf(v, v, sum);
    }
    return s.k + s.alpha / s.size * sum;
}

struct Strided {  // channel j of one position in global memory
    const float* RESTRICT p;
    int HW;
    __device__ __forceinline__ float operator()(int j) const { return p[(size_t)j * HW]; }
};

struct Column {  // channel j of one position in shared memory, [C][strip] layout
    const float* p;
    int strip;
    __device__ __forceinline__ float operator()(int j) const { return p[j * strip]; }
};

extern "C" __global__ void lrn_fwd_global(const float* RESTRICT x, float* RESTRICT y, LrnShape s) {
    const int total = s.N * s.C * s.HW;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int hw = e % s.HW, c = (e / s.HW) % s.C, n = e / (s.HW * s.C);
        const Strided col{x + (size_t)n * s.C * s.HW + hw, s.HW};
        y[e] = x[e] * powf(lrn_scale(col, c, s), -s.beta);
    }
}

extern "C" __global__ void lrn_bwd_global(const float* RESTRICT dy, const float* RESTRICT x,
                                          const float* RESTRICT y, float* RESTRICT dx, LrnShape s) {
    const int total = s.N * s.C * s.HW, half = s.size / 2;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int hw = e % s.HW, c = (e / s.HW) % s.C, n = e / (s.HW * s.C);
        const size_t base = (size_t)n * s.C * s.HW + hw;
        const Strided col{x + base, s.HW};
        float sum = 0.f;
        for (int j = max(c - half, 0); j <= min(c + half, s.C - 1); ++j) {
            const size_t at = base + (size_t)j * s.HW;
            sum += dy[at] * y[at] / lrn_scale(col, j, s);
        }
        dx[e] = dy[e] * powf(lrn_scale(col, c, s), -s.beta) - 2.f * s.alpha * s.beta / s.size * x[e] * sum;
    }
}

// Block (strip, rows): thread (t, r) handles position hw0 + t, channels r, r + rows, ...
// Grid: (ceil(HW / strip), N). Stages channels [C][strip] of `src` (zeros past the last position).
__device__ __forceinline__ void stage_strip(float* dst, const float* RESTRICT src, const LrnShape& s) {
    const int t = threadIdx.x, hw = blockIdx.x * blockDim.x + t;
    for (int c = threadIdx.y; c < s.C; c += blockDim.y)
        copy_async(dst + c * blockDim.x + t, src + (size_t)c * s.HW + hw, hw < s.HW);
    wait_copies();
}

extern "C" __global__ void lrn_fwd_shared(const float* RESTRICT x, float* RESTRICT y, LrnShape s) {
    extern __shared__ float xs[];  // [C][strip]
    const int strip = blockDim.x, t = threadIdx.x, hw = blockIdx.x * strip + t;
    const size_t base = (size_t)blockIdx.y * s.C * s.HW;
    stage_strip(xs, x + base, s);
    __syncthreads();
    if (hw >= s.HW) return;
    const Column col{xs + t, strip};
    for (int c = threadIdx.y; c < s.C; c += blockDim.y)
        y[base + (size_t)c * s.HW + hw] = xs[c * strip + t] * powf(lrn_scale(col, c, s), -s.beta);
}

// dx_c = dy_c s_c^-beta - 2 alpha beta / n * x_c * sum of t_j, t_j = dy_j y_j / s_j: the second
// pass turns each staged dy_c into dy_c s_c^-beta in place (only its own element), beside t_c.
extern "C" __global__ void lrn_bwd_shared(const float* RESTRICT dy, const float* RESTRICT x,
                                          const float* RESTRICT y, float* RESTRICT dx, LrnShape s) {
    extern __shared__ float smem[];  // x, dy (then dy s^-beta), dy*y/s: [C][strip] each
    const int strip = blockDim.x, t = threadIdx.x, hw = blockIdx.x * strip + t, half = s.size / 2;
    const int plane = s.C * strip;
    float *xs = smem, *gs = smem + plane, *ts = smem + 2 * plane;
    const size_t base = (size_t)blockIdx.y * s.C * s.HW;
    stage_strip(xs, x + base, s);
    stage_strip(gs, dy + base, s);
    __syncthreads();
    const Column col{xs + t, strip};
    for (int c = threadIdx.y; c < s.C; c += blockDim.y) {
        const float sc = lrn_scale(col, c, s), yv = hw < s.HW ? y[base + (size_t)c * s.HW + hw] : 0.f;
        const float g = gs[c * strip + t];
        ts[c * strip + t] = g * yv / sc;
        gs[c * strip + t] = g * powf(sc, -s.beta);
    }
    __syncthreads();
    if (hw >= s.HW) return;
    for (int c = threadIdx.y; c < s.C; c += blockDim.y) {
        float sum = 0.f;
        for (int j = max(c - half, 0); j <= min(c + half, s.C - 1); ++j) sum += ts[j * strip + t];
        dx[base + (size_t)c * s.HW + hw] = gs[c * strip + t] - 2.f * s.alpha * s.beta / s.size * xs[c * strip + t] * sum;
    }
}
