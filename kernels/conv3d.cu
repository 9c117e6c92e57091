// conv3d: forward, backward-data and backward-weight of a 3-D convolution (the 3-D U-Net's
// 3x3x3 and 1x1x1), fp32, NCDHW input, KCTRS filters, one stride and one padding in every
// dimension. conv2d.cu's 2-D kernels are left as they are (tuned, and verified on the GPU); these
// are their 3-D counterparts:
//
//   global   direct convolution, one thread per output (fwd), input (bwd_data) or weight
//            (bwd_weight) element, everything read from global memory: the baseline.
//   shared   implicit GEMM: common.cuh's tiled GEMM over the whole batch, reading the input
//            through an on-the-fly vol2col view staged in shared memory: no vol2col buffer; the
//            weight gradient splits its long reduction (split-K) to fill the GPU.
//
// The data-gradient kernels take a bias (nullptr: none): the transposed convolution
// (tracker/ops/convtranspose.py) is this data gradient run forward, plus its bias. The bias
// gradient of every variant is gemm.cu's bias_grad.
#include "common.cuh"

// Convolution geometry of one 3-D layer: input N x C x D x H x W, filters K x C x T x R x S,
// output N x K x O x P x Q.
struct Conv3Shape {
    int N, C, D, H, W, K, T, R, S, O, P, Q, stride, pad;
};

// --- direct (global) ------------------------------------------------------------------------

extern "C" __global__ void conv3d_fwd_global(const float* RESTRICT x, const float* RESTRICT w,
                                             const float* RESTRICT bias, float* RESTRICT y, Conv3Shape s) {
    const int total = s.N * s.K * s.O * s.P * s.Q;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int q = i % s.Q, p = i / s.Q % s.P, o = i / (s.Q * s.P) % s.O, k = i / (s.Q * s.P * s.O) % s.K;
        const int n = i / (s.Q * s.P * s.O * s.K);
        float acc = bias != nullptr ? bias[k] : 0.f;
        for (int c = 0; c < s.C; ++c)
            for (int kt = 0; kt < s.T; ++kt) {
                const int d = o * s.stride - s.pad + kt;
                if (d < 0 || d >= s.D) continue;
                for (int kr = 0; kr < s.R; ++kr) {
                    const int h = p * s.stride - s.pad + kr;
                    if (h < 0 || h >= s.H) continue;
                    for (int ks = 0; ks < s.S; ++ks) {
                        const int v = q * s.stride - s.pad + ks;
                        if (v < 0 || v >= s.W) continue;
                        acc = fmaf(x[((((size_t)n * s.C + c) * s.D + d) * s.H + h) * s.W + v],
                                   w[(((k * s.C + c) * s.T + kt) * s.R + kr) * s.S + ks], acc);
                    }
                }
            }
        y[i] = acc;
    }
}

// The output position that input index h meets at filter tap r along an axis of `extent`
// outputs, or -1.
__device__ __forceinline__ int tap3(int h, int r, const Conv3Shape& s, int extent) {
    const int hp = h + s.pad - r;
    if (hp < 0 || hp % s.stride) return -1;
    const int p = hp / s.stride;
    return p < extent ? p : -1;
}

extern "C" __global__ void conv3d_bwd_data_global(const float* RESTRICT dy, const float* RESTRICT w,
                                                  const float* RESTRICT bias, float* RESTRICT dx, Conv3Shape s) {
    const int total = s.N * s.C * s.D * s.H * s.W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int v = i % s.W, h = i / s.W % s.H, d = i / (s.W * s.H) % s.D, c = i / (s.W * s.H * s.D) % s.C;
        const int n = i / (s.W * s.H * s.D * s.C);
        float acc = bias != nullptr ? bias[c] : 0.f;
        for (int k = 0; k < s.K; ++k)
            for (int kt = 0; kt < s.T; ++kt) {
                const int o = tap3(d, kt, s, s.O);
                if (o < 0) continue;
                for (int kr = 0; kr < s.R; ++kr) {
                    const int p = tap3(h, kr, s, s.P);
                    if (p < 0) continue;
                    for (int ks = 0; ks < s.S; ++ks) {
                        const int q = tap3(v, ks, s, s.Q);
                        if (q < 0) continue;
                        acc = fmaf(dy[((((size_t)n * s.K + k) * s.O + o) * s.P + p) * s.Q + q],
                                   w[(((k * s.C + c) * s.T + kt) * s.R + kr) * s.S + ks], acc);
                    }
                }
            }
        dx[i] = acc;
    }
}

extern "C" __global__ void conv3d_bwd_weight_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                    float* RESTRICT dw, Conv3Shape s) {
    const int total = s.K * s.C * s.T * s.R * s.S;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int ks = i % s.S, kr = i / s.S % s.R, kt = i / (s.S * s.R) % s.T, c = i / (s.S * s.R * s.T) % s.C;
        const int k = i / (s.S * s.R * s.T * s.C);
        float acc = 0.f;
        for (int n = 0; n < s.N; ++n)
            for (int o = 0; o < s.O; ++o) {
                const int d = o * s.stride - s.pad + kt;
                if (d < 0 || d >= s.D) continue;
                for (int p = 0; p < s.P; ++p) {
                    const int h = p * s.stride - s.pad + kr;
                    if (h < 0 || h >= s.H) continue;
                    for (int q = 0; q < s.Q; ++q) {
                        const int v = q * s.stride - s.pad + ks;
                        if (v < 0 || v >= s.W) continue;
                        acc = fmaf(dy[((((size_t)n * s.K + k) * s.O + o) * s.P + p) * s.Q + q],
                                   x[((((size_t)n * s.C + c) * s.D + d) * s.H + h) * s.W + v], acc);
                    }
                }
            }
        dw[i] = acc;
    }
}

// --- implicit GEMM (shared) -----------------------------------------------------------------
//
// conv2d.cu's loaders with a depth axis: start() splits a GEMM index into (image, channel,
// depth, row, column) once per thread, next() carries the k index forward by TILE_K.

// Three non-negative coordinates below 1024 in one int (tracker/ops/conv2d.py's check_packed):
// the loaders keep a slot's position in one register, not three, so that the fragments' double
// buffer leaves the 2 CTAs/SM build room without spills. Each at() adds the current k's packed
// offset before taking the fields apart (no field overflows), so that ptxas cannot hoist the
// unpacked fields out of the k-loop into registers of their own.
__device__ __forceinline__ int pack3(int a, int b, int c) { return a << 20 | b << 10 | c; }
__device__ __forceinline__ int field(int packed, int at) { return packed >> (10 * at) & 1023; }

// B(k = (c, kt, kr, ks), n = (image, o, p, q)) of the forward GEMM: the input through its vol2col view.
template <int L>
struct Vol2col {
    const float* RESTRICT p;  // the input
    Conv3Shape s;
    int corner[L], dhv[L];              // per slot: its window's corner in x, and that corner plus the padding, packed
    int c = 0, kt = 0, kr = 0, ks = 0;  // the current k
    static constexpr bool k_contiguous = false;
    __device__ __forceinline__ void start(int n, int k) {
        const int pq = s.P * s.Q, opq = s.O * pq;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, image = col / opq, at = col % opq;
            const int d = at / pq * s.stride, h = at % pq / s.Q * s.stride, v = at % s.Q * s.stride;
            dhv[j] = pack3(d, h, v);
            corner[j] = ((image * s.C * s.D + d - s.pad) * s.H + h - s.pad) * s.W + v - s.pad;
        }
        const int rs = s.R * s.S, trs = s.T * rs;
        c = k / trs, kt = k % trs / rs, kr = k % rs / s.S, ks = k % s.S;
    }
    __device__ __forceinline__ int at(int j) const {
        const int at_tap = dhv[j] + pack3(kt, kr, ks);
        const int d = field(at_tap, 2) - s.pad, h = field(at_tap, 1) - s.pad, v = field(at_tap, 0) - s.pad;
        return ((unsigned)d < (unsigned)s.D && (unsigned)h < (unsigned)s.H && (unsigned)v < (unsigned)s.W)
                   ? corner[j] + ((c * s.D + kt) * s.H + kr) * s.W + ks
                   : -1;
    }
    __device__ __forceinline__ void next() {
        for (ks += TILE_K; ks >= s.S; ks -= s.S) ++kr;
        for (; kr >= s.R; kr -= s.R) ++kt;
        for (; kt >= s.T; kt -= s.T) ++c;
    }
};

// A(m = c, k = (kout, tap)) of the backward-data GEMM: the filters, output channel outermost.
template <int L>
struct Filters3ByInput {
    const float* RESTRICT p;  // the filters
    Conv3Shape s;
    int channel = 0;        // the slot-0 channel's offset in a filter
    int kout = 0, tap = 0;  // the current k
    static constexpr bool k_contiguous = true;
    __device__ __forceinline__ int taps() const { return s.T * s.R * s.S; }
    __device__ __forceinline__ void start(int c, int k) {
        channel = c * taps();
        kout = k / taps(), tap = k % taps();
    }
    __device__ __forceinline__ int at(int j) const { return (kout * s.C + LANES * j) * taps() + channel + tap; }
    __device__ __forceinline__ void next() {
        for (tap += TILE_K; tap >= taps(); tap -= taps()) ++kout;
    }
};

// B(k = (kout, kt, kr, ks), n = (image, d, h, v)) of the backward-data GEMM: the output gradient
// an input element meets at filter tap (kt, kr, ks), zero where no output position lies there.
template <int L>
struct Grad3ByInput {
    const float* RESTRICT p;  // the output gradient
    Conv3Shape s;
    // Per slot: its image in the gradient, and its depth, row and column plus the padding, packed.
    int image[L], dhv[L];
    int kout = 0, kt = 0, kr = 0, ks = 0;
    unsigned by_stride = 0;  // inverse(stride): no division in the k-loop
    static constexpr bool k_contiguous = false;
    __device__ __forceinline__ void start(int n, int k) {
        const int hw = s.H * s.W, dhw = s.D * hw;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, at = col % dhw;
            dhv[j] = pack3(at / hw + s.pad, at % hw / s.W + s.pad, col % s.W + s.pad);
            image[j] = col / dhw * s.K * s.O * s.P * s.Q;
        }
        const int rs = s.R * s.S, trs = s.T * rs;
        kout = k / trs, kt = k % trs / rs, kr = k % rs / s.S, ks = k % s.S;
        if (s.stride != 1) by_stride = inverse(s.stride);
    }
    __device__ __forceinline__ int at(int j) const {
        // the output depth, row and column, times the stride
        const int at_tap = dhv[j] + pack3(s.T - 1 - kt, s.R - 1 - kr, s.S - 1 - ks);
        int z = field(at_tap, 2) - (s.T - 1), y = field(at_tap, 1) - (s.R - 1), x = field(at_tap, 0) - (s.S - 1);
        if (z < 0 || y < 0 || x < 0) return -1;
        if (s.stride != 1) {
            const int zq = divide(z, by_stride), yq = divide(y, by_stride), xq = divide(x, by_stride);
            if (z != zq * s.stride || y != yq * s.stride || x != xq * s.stride) return -1;
            z = zq, y = yq, x = xq;
        }
        return (z < s.O && y < s.P && x < s.Q) ? image[j] + ((kout * s.O + z) * s.P + y) * s.Q + x : -1;
    }
    __device__ __forceinline__ void next() {
        for (ks += TILE_K; ks >= s.S; ks -= s.S) ++kr;
        for (; kr >= s.R; kr -= s.R) ++kt;
        for (; kt >= s.T; kt -= s.T) ++kout;
    }
};

// A(m = kout, k = (image, opq)) of the backward-weight GEMM: the output gradient, all images.
template <int L>
struct Grad3ByChannel {
    const float* RESTRICT p;  // the output gradient
    Conv3Shape s;
    int kout0 = 0;
    int image = 0, opq = 0;  // the current k
    static constexpr bool k_contiguous = true;
    __device__ __forceinline__ int volume() const { return s.O * s.P * s.Q; }
    __device__ __forceinline__ void start(int kout, int k) {
        kout0 = kout;
        image = k / volume(), opq = k % volume();
    }
    __device__ __forceinline__ int at(int j) const { return (image * s.K + kout0 + LANES * j) * volume() + opq; }
    __device__ __forceinline__ void next() {
        for (opq += TILE_K; opq >= volume(); opq -= volume()) ++image;
    }
};

// B(k = (image, o, p, q), n = (c, kt, kr, ks)) of the backward-weight GEMM: every image's
// vol2col, transposed.
template <int L>
struct Vol2colT {
    const float* RESTRICT p;  // the input
    Conv3Shape s;
    int tap[L], taps[L];                 // per slot: where (c, kt, kr, ks) is in an image, and (kt, kr, ks) packed
    int image = 0, z = 0, y = 0, x = 0;  // the current k: an image and an output position
    static constexpr bool k_contiguous = true;
    __device__ __forceinline__ void start(int n, int k) {
        const int rs = s.R * s.S, trs = s.T * rs;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, c = col / trs, kt = col % trs / rs, kr = col % rs / s.S, ks = col % s.S;
            taps[j] = pack3(kt, kr, ks);
            tap[j] = ((c * s.D + kt) * s.H + kr) * s.W + ks;
        }
        const int pq = s.P * s.Q, opq = s.O * pq;
        image = k / opq, z = k % opq / pq, y = k % pq / s.Q, x = k % s.Q;
    }
    __device__ __forceinline__ int at(int j) const {
        const int d0 = z * s.stride - s.pad, h0 = y * s.stride - s.pad, v0 = x * s.stride - s.pad;
        const int at_tap = taps[j] + pack3(z * s.stride, y * s.stride, x * s.stride);
        const int d = field(at_tap, 2) - s.pad, h = field(at_tap, 1) - s.pad, v = field(at_tap, 0) - s.pad;
        return ((unsigned)d < (unsigned)s.D && (unsigned)h < (unsigned)s.H && (unsigned)v < (unsigned)s.W)
                   ? ((image * s.C * s.D + d0) * s.H + h0) * s.W + v0 + tap[j]
                   : -1;
    }
    __device__ __forceinline__ void next() {
        for (x += TILE_K; x >= s.Q; x -= s.Q) ++y;
        for (; y >= s.P; y -= s.P) ++z;
        for (; z >= s.O; z -= s.O) ++image;
    }
};

// GEMM M = K, N = batch * O*P*Q, K = C*T*R*S. Grid: (ceil(N / TILE_N), ceil(M / TILE_M), splits).
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv3d_fwd_implicit(const float* RESTRICT x, const float* RESTRICT w, const float* RESTRICT bias,
                    float* RESTRICT y, float* RESTRICT partial, Conv3Shape s, int k_chunk) {
    const int ctrs = s.C * s.T * s.R * s.S, opq = s.O * s.P * s.Q;
    gemm_tile(s.K, s.N * opq, ctrs, k_chunk, Dense<LOADS_A, true>{w, ctrs}, Vol2col<LOADS_B>{x, s},
              split_store(Store{y, s.K, opq, bias, true, false, false}, partial, s.K, s.N * opq));
}

// GEMM M = C, N = batch * D*H*W, K = K*T*R*S; bias: the transposed convolution's, or nullptr.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv3d_bwd_data_implicit(const float* RESTRICT dy, const float* RESTRICT w, const float* RESTRICT bias,
                         float* RESTRICT dx, float* RESTRICT partial, Conv3Shape s, int k_chunk) {
    const int dhw = s.D * s.H * s.W;
    gemm_tile(s.C, s.N * dhw, s.K * s.T * s.R * s.S, k_chunk, Filters3ByInput<LOADS_A>{w, s}, Grad3ByInput<LOADS_B>{dy, s},
              split_store(Store{dx, s.C, dhw, bias, true, false, false}, partial, s.C, s.N * dhw));
}

// GEMM M = K, N = C*T*R*S, K = batch * O*P*Q: split-K gives this phase enough CTAs.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv3d_bwd_weight_implicit(const float* RESTRICT dy, const float* RESTRICT x, float* RESTRICT dw,
                           float* RESTRICT partial, Conv3Shape s, int k_chunk) {
    const int ctrs = s.C * s.T * s.R * s.S;
    gemm_tile(s.K, ctrs, s.N * s.O * s.P * s.Q, k_chunk, Grad3ByChannel<LOADS_A>{dy, s}, Vol2colT<LOADS_B>{x, s},
              split_store(Store{dw, s.K, ctrs, nullptr, false, false, false}, partial, s.K, ctrs));
}
