// Nearest-neighbour up-sampling by an integer scale s in every spatial dimension, fp32, NC(D)HW:
// y[n, c, (d s + a,) h s + b, w s + e] = x[n, c, (d,) h, w]; the backward gives each input the sum
// of the s^2 (2-D) or s^3 (3-D) output gradients of its block. Both backward kernels gather per
// input element, so no two threads write one address and no atomics are needed.
//
// The shapes are seen as `slabs` H x W input planes (N C for 2-D, N C D for 3-D): slab k's output
// is the `depth` (1 for 2-D, s for 3-D) consecutive output planes k depth + a, each Hs x Ws.
//
//   global  one thread per output float4 (fwd, where a row of Ws outputs is whole float4s, else
//           per output) or per input (bwd), every read from global memory: the fwd reads each
//           input s^d times (L1 and L2 absorb most of it), the bwd reads its s x s x depth
//           gradients as s runs of s floats, which a warp's threads read as contiguous rows.
//   shared  one block per band of input rows of one slab, full width (the host sizes the bands,
//           see tracker/ops/upsample.py). fwd: the band's input rows (one contiguous run) are
//           staged in shared memory with cp.async, and the block writes its s rows x depth planes
//           of outputs from there: each input is read from global memory once, but a pure copy
//           gains little from that beyond what L1 gives the global variant, and pays a barrier.
//           bwd: the band's output gradients (depth contiguous runs of band s rows) are staged
//           with cp.async in full coalesced rows, then each thread sums its block from shared
//           memory: the strided s x s gather hits shared memory instead of L1 (a 2-way bank
//           conflict at s = 2), at the price of staging every gradient and a barrier.
//
// The common scale 2 is compiled as a constant, so that dividing by it is a shift.
#include "common.cuh"

struct UpShape {
    int slabs, H, W, depth, scale;  // the input's planes and their size; output planes a slab; s
};

// The scale: a template argument where it is known (> 0), else run-time.
template <int S>
struct Scale {
    int s_;
    __device__ __forceinline__ int s() const { return S ? S : s_; }
};

// Calls Body::run(scale, args...) with the scale compiled in where it is 2. A struct's member
// template, not a generic lambda (see maxpool.cu's with_window).
template <class Body, class... Args>
__device__ __forceinline__ void with_scale(const UpShape& u, Args... args) {
    if (u.scale == 2)
        Body::run(Scale<2>{2}, args...);
    else
        Body::run(Scale<0>{u.scale}, args...);
}

// V consecutive outputs starting at column `col` of the input row `in`, stored at out.
template <int V, class Sc>
__device__ __forceinline__ void put_row(float* out, const float* in, int col, Sc sc) {
    const int s = sc.s();
    if constexpr (V == 4)
        *reinterpret_cast<float4*>(out) =
            make_float4(in[col / s], in[(col + 1) / s], in[(col + 2) / s], in[(col + 3) / s]);
    else
        *out = in[col / s];
}

template <int V, class Sc>
__device__ __forceinline__ void fwd_global(Sc sc, const float* RESTRICT x, float* RESTRICT y, const UpShape& u) {
    const int s = sc.s(), Ho = u.H * s, per_row = u.W * s / V;
    const int total = u.slabs * u.depth * Ho * per_row;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int row = e / per_row, col = (e - row * per_row) * V;  // an output row of every plane
        const int plane = row / Ho, ho = row - plane * Ho;
        put_row<V>(y + (size_t)e * V, x + ((size_t)(plane / u.depth) * u.H + ho / s) * u.W, col, sc);
    }
}

struct FwdGlobal {
    template <class Sc>
    __device__ static __forceinline__ void run(Sc sc, const float* RESTRICT x, float* RESTRICT y, const UpShape& u) {
        if (u.W * sc.s() % 4 == 0)
            fwd_global<4>(sc, x, y, u);
        else
            fwd_global<1>(sc, x, y, u);
    }
};

extern "C" __global__ void upsample_fwd_global(const float* RESTRICT x, float* RESTRICT y, UpShape u) {
    with_scale<FwdGlobal>(u, x, y, u);
}

struct BwdGlobal {
    template <class Sc>
    __device__ static __forceinline__ void run(Sc sc, const float* RESTRICT dy, float* RESTRICT dx, const UpShape& u) {
        const int s = sc.s(), Ho = u.H * s, Wo = u.W * s, total = u.slabs * u.H * u.W;
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
            const int r = e / u.W, w = e - r * u.W, slab = r / u.H, h = r - slab * u.H;
            float acc = 0.f;
            for (int a = 0; a < u.depth; ++a)
                for (int b = 0; b < s; ++b) {
                    const float* g = dy + ((size_t)(slab * u.depth + a) * Ho + h * s + b) * Wo + w * s;
                    for (int c = 0; c < s; ++c) acc += g[c];
                }
            dx[e] = acc;
        }
    }
};

extern "C" __global__ void upsample_bwd_global(const float* RESTRICT dy, float* RESTRICT dx, UpShape u) {
    with_scale<BwdGlobal>(u, dy, dx, u);
}

// The band of block blockIdx.x: grid (ceil(H / band) * slabs); its slab, first row and rows.
struct Band {
    int slab, h0, rows;
    __device__ __forceinline__ Band(const UpShape& u, int band) {
        const int bands = (u.H + band - 1) / band;
        slab = blockIdx.x / bands;
        h0 = (blockIdx.x - slab * bands) * band;
        rows = min(band, u.H - h0);
    }
};

// The band's outputs, `run` = rows s Wo a plane (contiguous), from its input rows in shared memory.
template <int V, class Sc>
__device__ __forceinline__ void fwd_band(Sc sc, const float* rows, float* RESTRICT y, const UpShape& u,
                                         const Band& band) {
    const int s = sc.s(), Ho = u.H * s, Wo = u.W * s, run = band.rows * s * Wo;
    for (int j = threadIdx.x * V; j < u.depth * run; j += blockDim.x * V) {
        const int a = j / run, k = j - a * run, ho = k / Wo, col = k - ho * Wo;
        put_row<V>(y + ((size_t)(band.slab * u.depth + a) * Ho + band.h0 * s) * Wo + k, rows + ho / s * u.W, col, sc);
    }
}

// Dynamic shared memory: the band's input rows, band * W floats.
struct FwdShared {
    template <class Sc>
    __device__ static __forceinline__ void run(Sc sc, const float* RESTRICT x, float* RESTRICT y, const UpShape& u,
                                               int band_rows, float* rows) {
        const Band band(u, band_rows);
        stage(rows, x + ((size_t)band.slab * u.H + band.h0) * u.W, band.rows * u.W, threadIdx.x, blockDim.x);
        __syncthreads();
        if (u.W * sc.s() % 4 == 0)
            fwd_band<4>(sc, rows, y, u, band);
        else
            fwd_band<1>(sc, rows, y, u, band);
    }
};

extern "C" __global__ void upsample_fwd_shared(const float* RESTRICT x, float* RESTRICT y, UpShape u, int band) {
    extern __shared__ float rows[];
    with_scale<FwdShared>(u, x, y, u, band, rows);
}

// Dynamic shared memory: the band's output gradients, depth * band * s * Ws floats.
struct BwdShared {
    template <class Sc>
    __device__ static __forceinline__ void run(Sc sc, const float* RESTRICT dy, float* RESTRICT dx, const UpShape& u,
                                               int band_rows, float* grads) {
        const Band band(u, band_rows);
        const int s = sc.s(), Ho = u.H * s, Wo = u.W * s, run = band.rows * s * Wo;
        for (int a = 0; a < u.depth; ++a) {  // all the copies in flight before one wait
            const float* from = dy + ((size_t)(band.slab * u.depth + a) * Ho + band.h0 * s) * Wo;
            for (int i = threadIdx.x; i < run; i += blockDim.x) copy_async(grads + a * run + i, from + i, true);
        }
        wait_copies();
        __syncthreads();
        float* out = dx + ((size_t)band.slab * u.H + band.h0) * u.W;
        for (int i = threadIdx.x; i < band.rows * u.W; i += blockDim.x) {
            const int hl = i / u.W, w = i - hl * u.W;
            float acc = 0.f;
            for (int a = 0; a < u.depth; ++a)
                for (int b = 0; b < s; ++b) {
                    const float* g = grads + a * run + (hl * s + b) * Wo + w * s;
                    for (int c = 0; c < s; ++c) acc += g[c];
                }
            out[i] = acc;
        }
    }
};

extern "C" __global__ void upsample_bwd_shared(const float* RESTRICT dy, float* RESTRICT dx, UpShape u, int band) {
    extern __shared__ float grads[];
    with_scale<BwdShared>(u, dy, dx, u, band, grads);
}
