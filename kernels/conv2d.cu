// conv2d: forward, backward-data and backward-weight, fp32, NCHW input, KCRS filters.
//
//   global   direct convolution, one thread per output (fwd), input (bwd_data) or weight
//            (bwd_weight) element, everything read from global memory: the baseline.
//   constant filters in __constant__ memory, chunked to its 64 KiB (the host copies one chunk of
//            output channels at a time); a block works on one channel, so a warp reads one
//            filter address at a time and the constant cache broadcasts it. bwd_weight writes the
//            filters, so it has no constant kernel: the constant variant runs global there.
//   shared   implicit GEMM: common.cuh's tiled GEMM over the whole batch, reading the input
//            through an on-the-fly im2col view staged in shared memory: no im2col buffer; the
//            weight gradient splits its long reduction (split-K) to fill the GPU.
//   gemm     explicit im2col / col2im buffers and the dense GEMM kernels of gemm.cu (paper
//            004's GEMM algorithm), a chunk of images at a time (Caffe went one image at a
//            time): as many as fit the buffer (tracker/model/memory.py), one GEMM per chunk.
//   fused    shared + bias + ReLU in the forward epilogue; its backward kernels read the
//            output gradient through the ReLU mask (y > 0), so no separate ReLU kernel runs.
//
// The bias gradient of every variant is gemm.cu's bias_grad. The global and shared data-gradient
// kernels take a bias (nullptr: none): the 2-D transposed convolution (tracker/ops/convtranspose.py)
// is this data gradient run forward, plus its bias.
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
                                                  const float* RESTRICT bias, float* RESTRICT dx, ConvShape s) {
    const int total = s.N * s.C * s.H * s.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int v = i % s.W, h = (i / s.W) % s.H, c = (i / (s.W * s.H)) % s.C, n = i / (s.W * s.H * s.C);
        float acc = bias != nullptr ? bias[c] : 0.f;
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
//
// Each phase is one GEMM over the whole batch (the images folded into the GEMM's columns or its
// reduction), its operands read through the loaders below: no im2col buffer. A loader's start()
// does the divisions that split a GEMM index into (image, channel, row, column) once per thread,
// and works out which filter taps each of its slots meets inside the data (tap bits); next()
// carries the k index forward by TILE_K's digits. In the k-loop a gathered slot costs its
// offset's addition and one bitwise test (common.cuh's within).

// B(k = (c, r, t), n = (image, p, q)) of the forward GEMM: the input through its im2col view.
template <int L>
struct Im2col {
    const float* RESTRICT p;  // the input
    ConvShape s;
    int corner[L];     // per slot: its window's top-left corner in x (in the padding, maybe)
    unsigned taps[L];  // per slot: the taps (r, t) that fall inside x; none past the operand
    int c = 0, r = 0, t = 0;     // the current k
    int dc = 0, dr = 0, dt = 0;  // TILE_K in those digits
    int tap = 0;                 // the current k's offset from a window's corner
    static constexpr bool k_contiguous = false, padded = true;
    __device__ __forceinline__ void start(int n, int k, unsigned slots) {
        const int pq = s.P * s.Q, rs = s.R * s.S;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, image = col / pq;
            const int h = col % pq / s.Q * s.stride - s.pad, v = col % s.Q * s.stride - s.pad;
            corner[j] = (image * s.C * s.H + h) * s.W + v;
            taps[j] = j < slots ? tap_range<2>(-h, s.H - h) << TAP_BITS<2> | tap_range<2>(-v, s.W - v) : 0u;
        }
        c = k / rs, r = k % rs / s.S, t = k % s.S;
        dc = TILE_K / rs, dr = TILE_K % rs / s.S, dt = TILE_K % s.S;
        moved();
    }
    __device__ __forceinline__ void moved() { tap = (c * s.H + r) * s.W + t; }
    __device__ __forceinline__ unsigned probe(bool k_in) const { return k_in ? tap_bit(r, t) : NEVER; }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(probe, taps[j]); }
    __device__ __forceinline__ int at(int j) const { return corner[j] + tap; }
    __device__ __forceinline__ void next() {
        t += dt;
        r += dr + carry(t, s.S);
        c += dc + carry(r, s.R);
        moved();
    }
};

// B(k = (kout, r, t), n = (image, h, v)) of the backward-data GEMM: the output gradient an input
// element meets at filter tap (r, t), zero where no output position lies there. Input row h meets
// output row y = (h + pad - r) / stride at tap r where that divides and lies in the gradient; as
// h + pad - r is then a multiple of the stride, y = (h + pad) / stride - r / stride (rounded
// down), so that a slot's offset is its own part plus the k's, as in Im2col.
template <int L>
struct GradByInput {
    const float* RESTRICT p;  // the output gradient
    ConvShape s;
    int base[L];       // per slot: its image's gradient plus its (h + pad) / stride, (v + pad) / stride
    unsigned taps[L];  // per slot: the taps (r, t) that meet an output position; none past the operand
    int kout = 0, r = 0, t = 0;  // the current k
    int dk = 0, dr = 0, dt = 0;  // TILE_K in those digits
    int tap = 0;                 // the current k's part of an offset
    int by_stride = 0;        // inverse(stride): no division in the k-loop
    static constexpr bool k_contiguous = false, padded = true;
    __device__ __forceinline__ int over(int at) const { return divide(at, by_stride); }
    __device__ __forceinline__ void moved() { tap = (kout * s.P - over(r)) * s.Q - over(t); }
    __device__ __forceinline__ void start(int n, int k, unsigned slots) {
        const int hw = s.H * s.W, rs = s.R * s.S;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, h = col % hw / s.W + s.pad, v = col % s.W + s.pad;
            base[j] = col / hw * s.K * s.P * s.Q + h / s.stride * s.Q + v / s.stride;
            taps[j] = j < slots ? meeting(h, s.R, s.P, s.stride) << TAP_BITS<2> | meeting(v, s.S, s.Q, s.stride) : 0u;
        }
        kout = k / rs, r = k % rs / s.S, t = k % s.S;
        dk = TILE_K / rs, dr = TILE_K % rs / s.S, dt = TILE_K % s.S;
        by_stride = inverse(s.stride);
        moved();
    }
    __device__ __forceinline__ unsigned probe(bool k_in) const { return k_in ? tap_bit(r, t) : NEVER; }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(probe, taps[j]); }
    __device__ __forceinline__ int at(int j) const { return base[j] + tap; }
    __device__ __forceinline__ void next() {
        t += dt;
        r += dr + carry(t, s.S);
        kout += dk + carry(r, s.R);
        moved();
    }
};

// B(k = (image, p, q), n = (c, r, t)) of the backward-weight GEMM: every image's im2col,
// transposed. Here the slot holds the tap and the k the window: a slot's tap bit is tested
// against the taps the current window has inside x.
template <int L>
struct Im2colT {
    const float* RESTRICT p;  // the input
    ConvShape s;
    int tap[L];                         // per slot: where (c, r, t) is in an image
    unsigned bit[L];                    // per slot: its tap's bit; NEVER past the operand
    // The current k's window as the bit of the tap that lands on x's first row and column
    // (common.cuh's taps_inside), in the fields at FH and 0; TILE_K's digits at P and Q strides
    // count them down.
    static constexpr int FH = TAP_BITS<2>;
    int first_h = 0, first_v = 0, dh = 0, dv = 0;
    int window = 0;  // the current window's corner in x (in the padding, maybe)
    int step = 0;    // TILE_K as an offset where no digit carries
    static constexpr bool k_contiguous = true, padded = true;
    __device__ __forceinline__ void start(int n, int k, unsigned) {
        const int rs = s.R * s.S, plane = s.P * s.Q;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            // A slot past the operand reads the last column, which no output keeps
            const int col = min(n + LANES * j, s.C * rs - 1), r = col % rs / s.S, t = col % s.S;
            tap[j] = (col / rs * s.H + r) * s.W + t;
            bit[j] = tap_bit(r, t);
        }
        const int h = k % plane / s.Q * s.stride, v = k % s.Q * s.stride;
        first_h = FH + s.pad - h, first_v = s.pad - v;
        dh = TILE_K % plane / s.Q * s.stride, dv = TILE_K % s.Q * s.stride;
        window = (k / plane * s.C * s.H + h - s.pad) * s.W + v - s.pad;
        step = TILE_K / plane * s.C * s.H * s.W + dh * s.W + dv;
    }
    __device__ __forceinline__ unsigned probe(bool k_in) const {  // the columns' field clipped
        return k_in ? taps_inside(first_h, FH, s.H) | (taps_inside(first_v, 0, s.W) & TAP_FIELD<2>) : 0u;
    }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(bit[j], probe); }
    __device__ __forceinline__ int at(int j) const { return window + tap[j]; }
    __device__ __forceinline__ void next() {  // a borrowed digit moves the window a row on, or an image
        first_v -= dv;
        const int row = borrow(first_v, s.pad, s.Q * s.stride);
        first_h -= dh + s.stride * row;
        const int image = borrow(first_h, FH + s.pad, s.P * s.stride);
        window += step + row * (s.stride * s.W - s.Q * s.stride) + image * (s.C * s.H - s.P * s.stride) * s.W;
    }
};

// GEMM M = K, N = batch * P*Q, K = C*R*S. Grid: (ceil(N / TILE_N), ceil(M / TILE_M), splits).
// relu != 0 is the fused variant's epilogue.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv2d_fwd_implicit(const float* RESTRICT x, const float* RESTRICT w, const float* RESTRICT bias,
                    float* RESTRICT y, float* RESTRICT partial, ConvShape s, int k_chunk, int relu) {
    const int crs = s.C * s.R * s.S, pq = s.P * s.Q;
    gemm_tile(s.K, s.N * pq, crs, k_chunk, Dense<LOADS_A, true>{w, crs}, Im2col<LOADS_B>{x, s},
              split_store(Store{y, s.K, pq, bias, true, relu != 0, false}, partial, s.K, s.N * pq));
}

// GEMM M = C, N = batch * H*W, K = K*R*S. relu_y: the fused forward's output, or nullptr;
// bias: the transposed convolution's, or nullptr.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv2d_bwd_data_implicit(const float* RESTRICT dy, const float* RESTRICT w, const float* RESTRICT relu_y,
                         const float* RESTRICT bias, float* RESTRICT dx, float* RESTRICT partial, ConvShape s,
                         int k_chunk) {
    const int hw = s.H * s.W;
    gemm_tile(s.C, s.N * hw, s.K * s.R * s.S, k_chunk, Channels<LOADS_A>{w, s.C, s.R * s.S},
              Masked<GradByInput<LOADS_B>>{{dy, s}, relu_y},
              split_store(Store{dx, s.C, hw, bias, true, false, false}, partial, s.C, s.N * hw));
}

// GEMM M = K, N = C*R*S, K = batch * P*Q: the reduction runs over every image, so split-K is
// what gives this phase enough CTAs.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv2d_bwd_weight_implicit(const float* RESTRICT dy, const float* RESTRICT x, const float* RESTRICT relu_y,
                           float* RESTRICT dw, float* RESTRICT partial, ConvShape s, int k_chunk) {
    const int crs = s.C * s.R * s.S;
    gemm_tile(s.K, crs, s.N * s.P * s.Q, k_chunk, Masked<Channels<LOADS_A>>{{dy, s.K, s.P * s.Q}, relu_y},
              Im2colT<LOADS_B>{x, s}, split_store(Store{dw, s.K, crs, nullptr, false, false, false}, partial, s.K, crs));
}

// --- explicit im2col / col2im (gemm) --------------------------------------------------------

// col[(c, r, t)][image * P*Q + (p, q)] of `images` images from x (the first of them): the batch
// folded into the columns, so one GEMM covers them all.
extern "C" __global__ void im2col(const float* RESTRICT x, float* RESTRICT col, ConvShape s, int images) {
    const int pq = s.P * s.Q, rs = s.R * s.S, cols = images * pq, total = s.C * rs * cols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int k = i / cols, n = i % cols, image = n / pq, j = n % pq, c = k / rs, r = k % rs / s.S, t = k % s.S;
        const int h = j / s.Q * s.stride - s.pad + r, v = j % s.Q * s.stride - s.pad + t;
        col[i] = ((unsigned)h < (unsigned)s.H && (unsigned)v < (unsigned)s.W)
                     ? x[(((size_t)image * s.C + c) * s.H + h) * s.W + v]
                     : 0.f;
    }
}

// dx[image][c][h][v] of `images` images = the sum of the col entries that input fed: a gather, no atomics.
extern "C" __global__ void col2im(const float* RESTRICT col, float* RESTRICT dx, ConvShape s, int images) {
    const int pq = s.P * s.Q, cols = images * pq, total = images * s.C * s.H * s.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int v = i % s.W, h = (i / s.W) % s.H, c = (i / (s.W * s.H)) % s.C, image = i / (s.W * s.H * s.C);
        float acc = 0.f;
        for (int r = 0; r < s.R; ++r) {
            const int p = tap(h, r, s, s.P);
            if (p < 0) continue;
            for (int t = 0; t < s.S; ++t) {
                const int q = tap(v, t, s, s.Q);
                if (q >= 0) acc += col[(size_t)((c * s.R + r) * s.S + t) * cols + image * pq + p * s.Q + q];
            }
        }
        dx[i] = acc;
    }
}
