// conv2d: forward, backward-data and backward-weight, fp32, NCHW input, KCRS filters.
//
//   global   direct convolution, one thread per output (fwd), input (bwd_data) or weight
//            (bwd_weight) element, everything read from global memory: the baseline.
//   constant filters in __constant__ memory, chunked to its 64 KiB (the host copies one chunk of
//            output channels at a time); a block works on one channel, so a warp reads one
//            filter address at a time and the constant cache broadcasts it. bwd_weight writes the
//            filters, so it has no constant kernel: the constant variant runs global there.
//   shared   implicit GEMM: the tiled, register-blocked GEMM of common.cuh reading the input
//            through an on-the-fly im2col view staged in shared memory: no im2col buffer.
//   gemm     explicit im2col / col2im buffers (one image at a time, as Caffe does) and the
//            dense GEMM kernels of gemm.cu (paper 004's GEMM algorithm).
//   fused    shared + bias + ReLU in the forward epilogue; its backward kernels read the
//            output gradient through the ReLU mask (y > 0), so no separate ReLU kernel runs.
//
// The bias gradient of every variant is gemm.cu's bias_grad.
#include "common.cuh"

// --- direct (global) ------------------------------------------------------------------------

extern "C" __global__ void conv2d_fwd_global(const float* RESTRICT x, const float* RESTRICT w,
                                             const float* RESTRICT bias, float* RESTRICT y,
                                             ConvShape s) {
    const int total = s.N * s.K * s.P * s.Q;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int q = i % s.Q, p = (i / s.Q) % s.P, k = (i / (s.Q * s.P)) % s.K, n = i / (s.Q * s.P * s.K);
        float acc = bias != nullptr ? bias[k] : 0.f;
        for (int c = 0; c < s.C; ++c)
            for (int r = 0; r < s.R; ++r) {
                const int h = p * s.stride - s.pad + r;
                if (h < 0 || h >= s.H) continue;
                for (int t = 0; t < s.S; ++t) {
                    const int v = q * s.stride - s.pad + t;
                    if (v < 0 || v >= s.W) continue;
                    acc = fmaf(x[(((size_t)n * s.C + c) * s.H + h) * s.W + v],
                               w[((k * s.C + c) * s.R + r) * s.S + t], acc);
                }
            }
        y[i] = acc;
    }
}

// The output position (p, q) that input row h / column v meets at filter tap (r, t), or -1.
__device__ __forceinline__ int tap(int h, int r, const ConvShape& s, int extent) {
    const int hp = h + s.pad - r;
    if (hp < 0 || hp % s.stride) return -1;
    const int p = hp / s.stride;
    return p < extent ? p : -1;
}

extern "C" __global__ void conv2d_bwd_data_global(const float* RESTRICT dy, const float* RESTRICT w,
                                                  float* RESTRICT dx, ConvShape s) {
    const int total = s.N * s.C * s.H * s.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int v = i % s.W, h = (i / s.W) % s.H, c = (i / (s.W * s.H)) % s.C, n = i / (s.W * s.H * s.C);
        float acc = 0.f;
        for (int k = 0; k < s.K; ++k)
            for (int r = 0; r < s.R; ++r) {
                const int p = tap(h, r, s, s.P);
                if (p < 0) continue;
                for (int t = 0; t < s.S; ++t) {
                    const int q = tap(v, t, s, s.Q);
                    if (q < 0) continue;
                    acc = fmaf(dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q],
                               w[((k * s.C + c) * s.R + r) * s.S + t], acc);
                }
            }
        dx[i] = acc;
    }
}

extern "C" __global__ void conv2d_bwd_weight_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                    float* RESTRICT dw, ConvShape s) {
    const int total = s.K * s.C * s.R * s.S;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int t = i % s.S, r = (i / s.S) % s.R, c = (i / (s.S * s.R)) % s.C, k = i / (s.S * s.R * s.C);
        float acc = 0.f;
        for (int n = 0; n < s.N; ++n)
            for (int p = 0; p < s.P; ++p) {
                const int h = p * s.stride - s.pad + r;
                if (h < 0 || h >= s.H) continue;
                for (int q = 0; q < s.Q; ++q) {
                    const int v = q * s.stride - s.pad + t;
                    if (v < 0 || v >= s.W) continue;
                    acc = fmaf(dy[(((size_t)n * s.K + k) * s.P + p) * s.Q + q],
                               x[(((size_t)n * s.C + c) * s.H + h) * s.W + v], acc);
                }
            }
        dw[i] = acc;
    }
}

// --- constant -------------------------------------------------------------------------------

#ifndef CONSTANT_FLOATS
#error "CONSTANT_FLOATS comes from tracker/ops/conv2d.py as a -D option"
#endif
__constant__ float c_filters[CONSTANT_FLOATS];

// Output channels k0 .. k0 + gridDim.y - 1, whose filters the host copied to c_filters.
// Grid: (ceil(P*Q / blockDim.x), channels in the chunk, N).
extern "C" __global__ void conv2d_fwd_constant(const float* RESTRICT x, const float* RESTRICT bias,
                                               float* RESTRICT y, ConvShape s, int k0) {
    const int pq = blockIdx.x * blockDim.x + threadIdx.x, kl = blockIdx.y, n = blockIdx.z, k = k0 + kl;
    if (pq >= s.P * s.Q) return;
    const int p = pq / s.Q, q = pq % s.Q;
    const float* f = c_filters + kl * s.C * s.R * s.S;  // one address per warp: broadcast
    float acc = bias != nullptr ? bias[k] : 0.f;
    for (int c = 0; c < s.C; ++c)
        for (int r = 0; r < s.R; ++r) {
            const int h = p * s.stride - s.pad + r;
            for (int t = 0; t < s.S; ++t) {
                const int v = q * s.stride - s.pad + t;
                const float xv = (h >= 0 && h < s.H && v >= 0 && v < s.W)
                                     ? x[(((size_t)n * s.C + c) * s.H + h) * s.W + v] : 0.f;
                acc = fmaf(xv, f[(c * s.R + r) * s.S + t], acc);
            }
        }
    y[(((size_t)n * s.K + k) * s.P + p) * s.Q + q] = acc;
}

// Adds the input gradient from output channels k0 .. k0 + kc - 1 (filters in c_filters);
// the first chunk writes (accumulate = 0), later chunks add. Grid: (ceil(H*W / blockDim.x), C, N).
extern "C" __global__ void conv2d_bwd_data_constant(const float* RESTRICT dy, float* RESTRICT dx,
                                                    ConvShape s, int k0, int kc, int accumulate) {
    const int hw = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y, n = blockIdx.z;
    if (hw >= s.H * s.W) return;
    const int h = hw / s.W, v = hw % s.W;
    float acc = 0.f;
    for (int kl = 0; kl < kc; ++kl)
        for (int r = 0; r < s.R; ++r) {
            const int p = tap(h, r, s, s.P);
            for (int t = 0; t < s.S; ++t) {
                const int q = tap(v, t, s, s.Q);
                const float g = (p >= 0 && q >= 0) ? dy[(((size_t)n * s.K + k0 + kl) * s.P + p) * s.Q + q] : 0.f;
                acc = fmaf(g, c_filters[((kl * s.C + c) * s.R + r) * s.S + t], acc);
            }
        }
    float* out = dx + (((size_t)n * s.C + c) * s.H * s.W) + hw;
    *out = accumulate ? *out + acc : acc;
}

// --- implicit GEMM (shared, fused) ----------------------------------------------------------

// B(k = (c, r, t), n = (p, q)) of the forward GEMM: one image's input through its im2col view.
struct Im2col {
    const float* RESTRICT x;  // one image, C x H x W
    ConvShape s;
    static constexpr bool second_contiguous = true;
    __device__ __forceinline__ float operator()(int k, int n) const {
        const int rs = s.R * s.S, c = k / rs, r = (k % rs) / s.S, t = k % s.S;
        const int h = (n / s.Q) * s.stride - s.pad + r, v = (n % s.Q) * s.stride - s.pad + t;
        return (h >= 0 && h < s.H && v >= 0 && v < s.W) ? x[((size_t)c * s.H + h) * s.W + v] : 0.f;
    }
};

// A(m = c, k = (k, r, t)) of the backward-data GEMM: the filters, output channel outermost.
struct FiltersByInput {
    const float* RESTRICT w;
    ConvShape s;
    static constexpr bool second_contiguous = true;
    __device__ __forceinline__ float operator()(int c, int k) const {
        const int rs = s.R * s.S;
        return w[((size_t)(k / rs) * s.C + c) * rs + k % rs];
    }
};

// B(k = (k, r, t), n = (h, v)) of the backward-data GEMM: the output gradient an input meets.
struct GradByInput {
    const float* RESTRICT g;  // one image, K x P x Q
    ConvShape s;
    static constexpr bool second_contiguous = true;
    __device__ __forceinline__ float operator()(int k, int n) const {
        const int rs = s.R * s.S, kk = k / rs, r = (k % rs) / s.S, t = k % s.S;
        const int p = tap(n / s.W, r, s, s.P), q = tap(n % s.W, t, s, s.Q);
        return (p >= 0 && q >= 0) ? g[((size_t)kk * s.P + p) * s.Q + q] : 0.f;
    }
};

// A(m = k, k = (n, p, q)) of the backward-weight GEMM: the output gradient, all images.
struct GradByChannel {
    const float* RESTRICT g;
    ConvShape s;
    static constexpr bool second_contiguous = true;
    __device__ __forceinline__ float operator()(int k, int j) const {
        const int pq = s.P * s.Q;
        return g[((size_t)(j / pq) * s.K + k) * pq + j % pq];
    }
};

// B(k = (n, p, q), n = (c, r, t)) of the backward-weight GEMM: every image's im2col, transposed.
struct Im2colT {
    const float* RESTRICT x;
    ConvShape s;
    static constexpr bool second_contiguous = false;
    __device__ __forceinline__ float operator()(int j, int col) const {
        const int pq = s.P * s.Q, n = j / pq, p = (j % pq) / s.Q, q = j % s.Q;
        const int rs = s.R * s.S, c = col / rs, r = (col % rs) / s.S, t = col % s.S;
        const int h = p * s.stride - s.pad + r, v = q * s.stride - s.pad + t;
        return (h >= 0 && h < s.H && v >= 0 && v < s.W) ? x[(((size_t)n * s.C + c) * s.H + h) * s.W + v] : 0.f;
    }
};

// Grid: (ceil(P*Q / TILE_N), ceil(K / TILE_M), N). relu != 0 is the fused variant's epilogue.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
conv2d_fwd_implicit(const float* RESTRICT x, const float* RESTRICT w, const float* RESTRICT bias,
                    float* RESTRICT y, ConvShape s, int relu) {
    const int n = blockIdx.z, crs = s.C * s.R * s.S, pq = s.P * s.Q;
    gemm_tile(s.K, pq, crs, Mat{w, crs}, Im2col{x + (size_t)n * s.C * s.H * s.W, s},
              Store{y + (size_t)n * s.K * pq, pq, bias, true, relu != 0, false});
}

// Grid: (ceil(H*W / TILE_N), ceil(C / TILE_M), N). relu_y: the fused forward's output, or nullptr.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
conv2d_bwd_data_implicit(const float* RESTRICT dy, const float* RESTRICT w,
                         const float* RESTRICT relu_y, float* RESTRICT dx, ConvShape s) {
    const int n = blockIdx.z, hw = s.H * s.W;
    const size_t image = (size_t)n * s.K * s.P * s.Q;
    const float* mask = relu_y != nullptr ? relu_y + image : nullptr;
    const Masked<GradByInput> grad{GradByInput{dy + image, s}, GradByInput{mask, s}, mask != nullptr};
    gemm_tile(s.C, hw, s.K * s.R * s.S, FiltersByInput{w, s}, grad,
              Store{dx + (size_t)n * s.C * hw, hw, nullptr, false, false, false});
}

// Grid: (ceil(C*R*S / TILE_N), ceil(K / TILE_M), 1); the GEMM's reduction runs over every image.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
conv2d_bwd_weight_implicit(const float* RESTRICT dy, const float* RESTRICT x,
                           const float* RESTRICT relu_y, float* RESTRICT dw, ConvShape s) {
    const int crs = s.C * s.R * s.S;
    const Masked<GradByChannel> grad{GradByChannel{dy, s}, GradByChannel{relu_y, s}, relu_y != nullptr};
    gemm_tile(s.K, crs, s.N * s.P * s.Q, grad, Im2colT{x, s}, Store{dw, crs, nullptr, false, false, false});
}

// --- explicit im2col / col2im (gemm) --------------------------------------------------------

// col[(c, r, t)][(p, q)] of one image.
extern "C" __global__ void im2col(const float* RESTRICT x, float* RESTRICT col, ConvShape s) {
    const int pq = s.P * s.Q, total = s.C * s.R * s.S * pq;
    const Im2col view{x, s};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        col[i] = view(i / pq, i % pq);
}

// dx[c][h][v] of one image = the sum of the col entries that input fed: a gather, no atomics.
extern "C" __global__ void col2im(const float* RESTRICT col, float* RESTRICT dx, ConvShape s) {
    const int pq = s.P * s.Q, total = s.C * s.H * s.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int v = i % s.W, h = (i / s.W) % s.H, c = i / (s.W * s.H);
        float acc = 0.f;
        for (int r = 0; r < s.R; ++r) {
            const int p = tap(h, r, s, s.P);
            if (p < 0) continue;
            for (int t = 0; t < s.S; ++t) {
                const int q = tap(v, t, s, s.Q);
                if (q >= 0) acc += col[(size_t)((c * s.R + r) * s.S + t) * pq + p * s.Q + q];
            }
        }
        dx[i] = acc;
    }
}
