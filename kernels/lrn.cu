// LRN across channels, fp32, NCHW: y = x / s^beta, s = k + alpha/n * sum of x^2 over the channel
// window [c - n/2, c + n/2] clipped at the edges (cuDNN's and PyTorch's convention; n odd).
// Backward: dx_c = dy_c s_c^-beta - 2 alpha beta / n * x_c * sum over the window of dy y / s.
//
//   global  one thread per element; every window read from global memory (channels are H*W
//           apart), and the backward recomputes each neighbour's s.
//   shared  (the name of the variant since it staged all channels in shared memory) the window
//           kernels: one thread per (image, position), consecutive threads at consecutive
//           positions, walks a run of channels in order, holding the window's LRN_WINDOW values
//           in registers as a ring shifted one channel a step: each x (and dy, y) is read from
//           memory once, and each window is summed again from the ring, exactly (no running
//           subtraction to drift). The backward's walk leads by n/2 channels: its rings
//           hold the lead's x window, the t = dy y / s of the output channel's window, and
//           dy s^-beta of the channels between. s^-beta is rsqrt(s)^2 rsqrt(rsqrt(s)) for
//           beta = 0.75 (AlexNet's), exp2(-beta log2 s) for any other; 1/s is rsqrt(s)^2. A run
//           shorter than C (where the positions alone make few blocks) reads its window's
//           halo again. A window of another width runs global's kernels (tracker/ops/lrn.py).
#include "common.cuh"

#ifndef LRN_WINDOW
#error "the window kernels' width comes from tracker/ops/lrn.py as a -D option (tracker.gpu.kernels.compile_options)"
#endif
static_assert(LRN_WINDOW % 2 == 1, "the window is centred on its channel");
constexpr int HALF = LRN_WINDOW / 2;  // channels on either side of c

#ifndef __CUDA_ARCH__  // the CPU emulation: rsqrtf is CUDA's, not C's
__device__ __forceinline__ float rsqrtf(float v) { return 1.f / sqrtf(v); }
#endif

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

// The window kernels. Block (x, y, z): thread x at position blockIdx.x * blockDim.x + x of image
// y walks channels [z * run, min(C, (z + 1) * run)). Grid: (ceil(HW / blockDim.x), N, ceil(C / run)).
// A walk keeps the channel j that enters its ring next and j's offset from the position's channel
// 0, moving both on by one channel a step: no index arithmetic beyond an add a step.

// The ring's values move down one place; v enters at the top.
template <int N>
__device__ __forceinline__ void push(float (&ring)[N], float v) {
#pragma unroll
    for (int i = 0; i + 1 < N; ++i) ring[i] = ring[i + 1];
    ring[N - 1] = v;
}

template <int N>
__device__ __forceinline__ float ring_sum(const float (&ring)[N], bool squares) {
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) total = squares ? fmaf(ring[i], ring[i], total) : total + ring[i];
    return total;
}

struct Powers {
    float neg_beta, inverse;  // s^-beta, 1/s
};

// From q = s^-1/2, one MUFU.RSQ: 1/s = q^2 and, for beta = 0.75, s^-3/4 = q^2 q^-1/2; no powf.
template <bool THREE_QUARTERS>
__device__ __forceinline__ Powers powers(float s, float beta) {
    const float q = rsqrtf(s), inverse = q * q;
    return {THREE_QUARTERS ? inverse * rsqrtf(q) : exp2f(-beta * log2f(s)), inverse};
}

// Channel j of a position at offset `at` from its channel 0, or 0 outside [0, C) (clipped windows).
__device__ __forceinline__ float channel(const float* RESTRICT p, long long at, int j, int C) {
    return j >= 0 && j < C ? p[at] : 0.f;
}

template <bool THREE_QUARTERS>
__device__ __forceinline__ void lrn_fwd_walk(const float* RESTRICT x, float* RESTRICT y, const LrnShape& s, int c0,
                                             int c1) {
    const float scale = s.alpha / s.size;
    const long long lag = (long long)HALF * s.HW;  // from channel j to c = j - HALF
    float ring[LRN_WINDOW] = {};                    // x of channels c - HALF .. c + HALF
    int j = c0 - HALF;
    long long at = (long long)j * s.HW;
#pragma unroll
    for (int i = 0; i + 1 < LRN_WINDOW; ++i, ++j, at += s.HW) push(ring, channel(x, at, j, s.C));
#pragma unroll 4
    for (; j - HALF < c1; ++j, at += s.HW) {
        push(ring, channel(x, at, j, s.C));
        y[at - lag] = ring[HALF] * powers<THREE_QUARTERS>(fmaf(scale, ring_sum(ring, true), s.k), s.beta).neg_beta;
    }
}

extern "C" __global__ void lrn_fwd_window(const float* RESTRICT x, float* RESTRICT y, LrnShape s, int run) {
    const int hw = blockIdx.x * blockDim.x + threadIdx.x, c0 = blockIdx.z * run, c1 = min(s.C, c0 + run);
    if (hw >= s.HW) return;
    const size_t at = (size_t)blockIdx.y * s.C * s.HW + hw;
    if (s.beta == 0.75f) {
        lrn_fwd_walk<true>(x + at, y + at, s, c0, c1);
    } else {
        lrn_fwd_walk<false>(x + at, y + at, s, c0, c1);
    }
}

// The backward's walk. Its lead l = j - HALF: x of channel j completes l's window, whose s gives
// t_l = dy_l y_l / s_l and dy_l s_l^-beta; then dx of channel c = l - HALF has all it needs.
template <bool THREE_QUARTERS>
struct BwdWalk {
    const float *RESTRICT dy, *RESTRICT x, *RESTRICT y;
    LrnShape s;
    float scale, coef;          // alpha / n, 2 alpha beta / n
    long long lag;              // HALF channels of offset
    int j;                      // the channel whose x enters next
    long long at;               // j's offset
    float xs[LRN_WINDOW] = {};  // x of the lead's window: channels l - HALF .. l + HALF
    float ts[LRN_WINDOW] = {};  // t of c's window: channels c - HALF .. l
    float gs[HALF + 1] = {};    // dy s^-beta of channels c .. l

    __device__ __forceinline__ void enter() {
        push(xs, channel(x, at, j, s.C));
        ++j;
        at += s.HW;
    }
    // x of channel j enters; the lead moves on to l = j - HALF: its t and dy s^-beta join the rings.
    __device__ __forceinline__ void lead() {
        const int l = j - HALF;
        const long long al = at - lag;
        enter();
        const Powers p = powers<THREE_QUARTERS>(fmaf(scale, ring_sum(xs, true), s.k), s.beta);
        const float g = channel(dy, al, l, s.C);
        push(ts, l >= 0 && l < s.C ? g * y[al] * p.inverse : 0.f);  // 0 past the edges, where 1/s may be inf
        push(gs, g * p.neg_beta);
    }
    // dx of channel c = l - HALF, once the lead is at l.
    __device__ __forceinline__ float dx() const { return gs[0] - coef * xs[0] * ring_sum(ts, false); }
};

template <bool THREE_QUARTERS>
__device__ __forceinline__ void lrn_bwd_walk(BwdWalk<THREE_QUARTERS> w, float* RESTRICT dx, int c0, int c1) {
#pragma unroll
    for (int i = 0; i + 1 < LRN_WINDOW; ++i) w.enter();  // x of the first lead's window, c0 - HALF's
#pragma unroll
    for (int i = 0; i + 1 < LRN_WINDOW; ++i) w.lead();  // t of c0's window up to c0 + HALF - 1
#pragma unroll 2
    for (int c = c0; c < c1; ++c) {
        w.lead();
        dx[w.at - 2 * w.lag - w.s.HW] = w.dx();  // channel c = j - 1 - 2 HALF
    }
}

extern "C" __global__ void lrn_bwd_window(const float* RESTRICT dy, const float* RESTRICT x,
                                          const float* RESTRICT y, float* RESTRICT dx, LrnShape s, int run) {
    const int hw = blockIdx.x * blockDim.x + threadIdx.x, c0 = blockIdx.z * run, c1 = min(s.C, c0 + run);
    if (hw >= s.HW) return;
    const size_t at = (size_t)blockIdx.y * s.C * s.HW + hw;
    const float scale = s.alpha / s.size, coef = 2.f * s.alpha * s.beta / s.size;
    const long long lag = (long long)HALF * s.HW;
    const int j = c0 - 2 * HALF;  // the first lead's window begins there
    if (s.beta == 0.75f) {
        lrn_bwd_walk(BwdWalk<true>{dy + at, x + at, y + at, s, scale, coef, lag, j, j * (long long)s.HW}, dx + at, c0, c1);
    } else {
        lrn_bwd_walk(BwdWalk<false>{dy + at, x + at, y + at, s, scale, coef, lag, j, j * (long long)s.HW}, dx + at, c0,
                     c1);
    }
}
