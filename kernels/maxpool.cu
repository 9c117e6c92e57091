// max-pool, fp32, NCHW, no padding; windows may overlap (AlexNet: 3x3, stride 2). The backward
// gives each output's gradient to the first maximum of its window (row-major order), and
// overlapping windows add: both kernels gather per input element, so no two threads write one
// address and no atomics are needed.
//
//   global  one thread per output (fwd) or input (bwd), every read from global memory.
//   shared  one block per POOL_TILE x POOL_TILE tile of a plane: the input rows and columns the tile's windows
//           cover (the halo included) are staged in shared memory first (dynamic shared memory:
//           the host sizes it, see maxpool_*_shared_bytes in tracker/gpu). bwd stages the input
//           region and the output gradients that meet the tile.
#include "common.cuh"

struct PoolShape {
    int N, C, H, W, P, Q, size, stride;
};

// Index in the window (row-major) of the first maximum of output (p, q), reading x(h, v).
template <class X>
__device__ __forceinline__ int first_max(const X& x, int p, int q, const PoolShape& s) {
    int best = 0;
    float m = x(p * s.stride, q * s.stride);
    for (int i = 0; i < s.size * s.size; ++i) {
        const float v = x(p * s.stride + i / s.size, q * s.stride + i % s.size);
        if (v > m) m = v, best = i;
    }
    return best;
}

extern "C" __global__ void maxpool_fwd_global(const float* RESTRICT x, float* RESTRICT y, PoolShape s) {
    const int total = s.N * s.C * s.P * s.Q;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int q = e % s.Q, p = (e / s.Q) % s.P, plane = e / (s.Q * s.P);
        const float* in = x + (size_t)plane * s.H * s.W;
        float m = in[(p * s.stride) * s.W + q * s.stride];
        for (int r = 0; r < s.size; ++r)
            for (int t = 0; t < s.size; ++t) m = fmaxf(m, in[(p * s.stride + r) * s.W + q * s.stride + t]);
        y[e] = m;
    }
}

// The outputs whose windows cover input row h: p_lo .. p_hi.
__device__ __forceinline__ void covering(int h, int size, int stride, int extent, int& lo, int& hi) {
    lo = h - size + 1 <= 0 ? 0 : (h - size + stride) / stride;
    hi = min(h / stride, extent - 1);
}

struct Plane {
    const float* RESTRICT p;
    int W;
    __device__ __forceinline__ float operator()(int h, int v) const { return p[h * W + v]; }
};

extern "C" __global__ void maxpool_bwd_global(const float* RESTRICT dy, const float* RESTRICT x,
                                              float* RESTRICT dx, PoolShape s) {
    const int total = s.N * s.C * s.H * s.W;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int v = e % s.W, h = (e / s.W) % s.H, plane = e / (s.W * s.H);
        const Plane in{x + (size_t)plane * s.H * s.W, s.W};
        int p0, p1, q0, q1;
        covering(h, s.size, s.stride, s.P, p0, p1);
        covering(v, s.size, s.stride, s.Q, q0, q1);
        float acc = 0.f;
        for (int p = p0; p <= p1; ++p)
            for (int q = q0; q <= q1; ++q) {
                const int i = first_max(in, p, q, s);
                if (p * s.stride + i / s.size == h && q * s.stride + i % s.size == v)
                    acc += dy[((size_t)plane * s.P + p) * s.Q + q];
            }
        dx[e] = acc;
    }
}

#ifndef POOL_TILE
#error "POOL_TILE comes from tracker/ops/maxpool.py as a -D option"
#endif

// Input staged in shared memory as a tile of `span` columns whose corner is input (h0, v0).
struct SharedPlane {
    const float* tile;
    int h0, v0, span;
    __device__ __forceinline__ float operator()(int h, int v) const { return tile[(h - h0) * span + (v - v0)]; }
};

// Block (POOL_TILE, POOL_TILE) per tile of outputs; grid (ceil(Q/POOL_TILE), ceil(P/POOL_TILE), N*C);
// dynamic shared memory: span^2 floats, span = 15 * stride + size.
extern "C" __global__ void maxpool_fwd_shared(const float* RESTRICT x, float* RESTRICT y, PoolShape s) {
    extern __shared__ float tile[];
    const int plane = blockIdx.z, p0 = blockIdx.y * POOL_TILE, q0 = blockIdx.x * POOL_TILE;
    const int span = (POOL_TILE - 1) * s.stride + s.size, h0 = p0 * s.stride, v0 = q0 * s.stride;
    const float* in = x + (size_t)plane * s.H * s.W;
    for (int i = threadIdx.y * POOL_TILE + threadIdx.x; i < span * span; i += POOL_TILE * POOL_TILE) {
        const int h = h0 + i / span, v = v0 + i % span;
        tile[i] = (h < s.H && v < s.W) ? in[h * s.W + v] : 0.f;
    }
    __syncthreads();
    const int p = p0 + threadIdx.y, q = q0 + threadIdx.x;
    if (p >= s.P || q >= s.Q) return;
    const SharedPlane sp{tile, h0, v0, span};
    const int i = first_max(sp, p, q, s);
    y[((size_t)plane * s.P + p) * s.Q + q] = sp(p * s.stride + i / s.size, q * s.stride + i % s.size);
}

// Block (POOL_TILE, POOL_TILE) per tile of inputs; grid (ceil(W/POOL_TILE), ceil(H/POOL_TILE), N*C). Stages the outputs
// whose windows meet the tile (at most n = (14 + size) / stride + 1 per side) and the input
// region those windows read (span = (n - 1) * stride + size per side): dynamic shared memory
// of span^2 + n^2 floats.
extern "C" __global__ void maxpool_bwd_shared(const float* RESTRICT dy, const float* RESTRICT x,
                                              float* RESTRICT dx, PoolShape s) {
    extern __shared__ float smem[];
    const int plane = blockIdx.z, h_first = blockIdx.y * POOL_TILE, v_first = blockIdx.x * POOL_TILE;
    const int h_last = min(h_first + POOL_TILE, s.H) - 1, v_last = min(v_first + POOL_TILE, s.W) - 1;
    int p0, p1, q0, q1, unused;
    covering(h_first, s.size, s.stride, s.P, p0, unused);
    covering(h_last, s.size, s.stride, s.P, unused, p1);
    covering(v_first, s.size, s.stride, s.Q, q0, unused);
    covering(v_last, s.size, s.stride, s.Q, unused, q1);
    const int np = max(p1 - p0 + 1, 0), nq = max(q1 - q0 + 1, 0);
    const int span_h = np ? (np - 1) * s.stride + s.size : 0, span_w = nq ? (nq - 1) * s.stride + s.size : 0;
    const int h0 = p0 * s.stride, v0 = q0 * s.stride, tid = threadIdx.y * POOL_TILE + threadIdx.x;
    float* xs = smem;
    float* gs = smem + span_h * span_w;
    const float* in = x + (size_t)plane * s.H * s.W;
    for (int i = tid; i < span_h * span_w; i += POOL_TILE * POOL_TILE) {
        const int h = h0 + i / span_w, v = v0 + i % span_w;
        xs[i] = (h < s.H && v < s.W) ? in[h * s.W + v] : 0.f;
    }
    for (int i = tid; i < np * nq; i += POOL_TILE * POOL_TILE)
        gs[i] = dy[((size_t)plane * s.P + p0 + i / nq) * s.Q + q0 + i % nq];
    __syncthreads();
    const int h = h_first + threadIdx.y, v = v_first + threadIdx.x;
    if (h > h_last || v > v_last) return;
    const SharedPlane sp{xs, h0, v0, span_w};
    int a0, a1, b0, b1;
    covering(h, s.size, s.stride, s.P, a0, a1);
    covering(v, s.size, s.stride, s.Q, b0, b1);
    float acc = 0.f;
    for (int p = a0; p <= a1; ++p)
        for (int q = b0; q <= b1; ++q) {
            const int i = first_max(sp, p, q, s);
            if (p * s.stride + i / s.size == h && q * s.stride + i % s.size == v)
                acc += gs[(p - p0) * nq + (q - q0)];
        }
    dx[((size_t)plane * s.H + h) * s.W + v] = acc;
}
