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
// depth, row, column) once per thread and works out each slot's tap bits (three fields of
// TAP_BITS<3>), next() carries the k index forward by TILE_K's digits.

// B(k = (c, kt, kr, ks), n = (image, o, p, q)) of the forward GEMM: the input through its vol2col view.
template <int L>
struct Vol2col {
    const float* RESTRICT p;  // the input
    Conv3Shape s;
    int corner[L];     // per slot: its window's corner in x (in the padding, maybe)
    unsigned taps[L];  // per slot: the taps (kt, kr, ks) that fall inside x; none past the operand
    int c = 0, kt = 0, kr = 0, ks = 0;      // the current k
    int dc = 0, dkt = 0, dkr = 0, dks = 0;  // TILE_K in those digits
    int tap = 0;                            // the current k's offset from a window's corner
    static constexpr bool k_contiguous = false, padded = true;
    __device__ __forceinline__ void start(int n, int k, unsigned slots) {
        const int pq = s.P * s.Q, opq = s.O * pq, rs = s.R * s.S, trs = s.T * rs;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, image = col / opq, at = col % opq;
            const int d = at / pq * s.stride - s.pad, h = at % pq / s.Q * s.stride - s.pad;
            const int v = at % s.Q * s.stride - s.pad;
            corner[j] = ((image * s.C * s.D + d) * s.H + h) * s.W + v;
            taps[j] = j < slots ? tap_range<3>(-d, s.D - d) << 2 * TAP_BITS<3> |
                                           tap_range<3>(-h, s.H - h) << TAP_BITS<3> | tap_range<3>(-v, s.W - v)
                                     : 0u;
        }
        c = k / trs, kt = k % trs / rs, kr = k % rs / s.S, ks = k % s.S;
        dc = TILE_K / trs, dkt = TILE_K % trs / rs, dkr = TILE_K % rs / s.S, dks = TILE_K % s.S;
        moved();
    }
    __device__ __forceinline__ void moved() { tap = ((c * s.D + kt) * s.H + kr) * s.W + ks; }
    __device__ __forceinline__ unsigned probe(bool k_in) const { return k_in ? tap_bit(kt, kr, ks) : NEVER; }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(probe, taps[j]); }
    __device__ __forceinline__ int at(int j) const { return corner[j] + tap; }
    __device__ __forceinline__ void next() {
        ks += dks;
        kr += dkr + carry(ks, s.S);
        kt += dkt + carry(kr, s.R);
        c += dc + carry(kt, s.T);
        moved();
    }
};

// B(k = (kout, kt, kr, ks), n = (image, d, h, v)) of the backward-data GEMM: the output gradient
// an input element meets at filter tap (kt, kr, ks), zero where no output position lies there;
// its offset split as conv2d.cu's GradByInput's.
template <int L>
struct Grad3ByInput {
    const float* RESTRICT p;  // the output gradient
    Conv3Shape s;
    int base[L];       // per slot: its image's gradient plus its (d, h, v) + pad over the stride
    unsigned taps[L];  // per slot: the taps that meet an output position; none past the operand
    int kout = 0, kt = 0, kr = 0, ks = 0;      // the current k
    int dk = 0, dkt = 0, dkr = 0, dks = 0;     // TILE_K in those digits
    int tap = 0;                               // the current k's part of an offset
    int by_stride = 0;                      // inverse(stride): no division in the k-loop
    static constexpr bool k_contiguous = false, padded = true;
    __device__ __forceinline__ int over(int at) const { return divide(at, by_stride); }
    __device__ __forceinline__ void moved() { tap = ((kout * s.O - over(kt)) * s.P - over(kr)) * s.Q - over(ks); }
    __device__ __forceinline__ void start(int n, int k, unsigned slots) {
        const int hw = s.H * s.W, dhw = s.D * hw, rs = s.R * s.S, trs = s.T * rs;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            const int col = n + LANES * j, at = col % dhw;
            const int d = at / hw + s.pad, h = at % hw / s.W + s.pad, v = col % s.W + s.pad;
            base[j] = col / dhw * s.K * s.O * s.P * s.Q + (d / s.stride * s.P + h / s.stride) * s.Q + v / s.stride;
            taps[j] = j < slots ? meeting(d, s.T, s.O, s.stride) << 2 * TAP_BITS<3> |
                                           meeting(h, s.R, s.P, s.stride) << TAP_BITS<3> | meeting(v, s.S, s.Q, s.stride)
                                     : 0u;
        }
        kout = k / trs, kt = k % trs / rs, kr = k % rs / s.S, ks = k % s.S;
        dk = TILE_K / trs, dkt = TILE_K % trs / rs, dkr = TILE_K % rs / s.S, dks = TILE_K % s.S;
        by_stride = inverse(s.stride);
        moved();
    }
    __device__ __forceinline__ unsigned probe(bool k_in) const { return k_in ? tap_bit(kt, kr, ks) : NEVER; }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(probe, taps[j]); }
    __device__ __forceinline__ int at(int j) const { return base[j] + tap; }
    __device__ __forceinline__ void next() {
        ks += dks;
        kr += dkr + carry(ks, s.S);
        kt += dkt + carry(kr, s.R);
        kout += dk + carry(kt, s.T);
        moved();
    }
};

// B(k = (image, o, p, q), n = (c, kt, kr, ks)) of the backward-weight GEMM: every image's
// vol2col, transposed, walked as conv2d.cu's Im2colT walks its im2col.
template <int L>
struct Vol2colT {
    const float* RESTRICT p;  // the input
    Conv3Shape s;
    int tap[L];       // per slot: where (c, kt, kr, ks) is in an image
    unsigned bit[L];  // per slot: its tap's bit
    // The current k's window as the bit of the tap that lands on x's first position along each
    // axis (common.cuh's taps_inside), in the fields at FD, FH and 0; TILE_K's digits at O, P and Q
    // strides count them down.
    static constexpr int FD = 2 * TAP_BITS<3>, FH = TAP_BITS<3>;
    int first_d = 0, first_h = 0, first_v = 0, dd = 0, dh = 0, dv = 0;
    int window = 0;  // the current window's corner in x (in the padding, maybe)
    int step = 0;    // TILE_K as an offset where no digit carries
    static constexpr bool k_contiguous = true, padded = true;
    __device__ __forceinline__ void start(int n, int k, unsigned) {
        const int rs = s.R * s.S, trs = s.T * rs, pq = s.P * s.Q, opq = s.O * pq;
#pragma unroll
        for (int j = 0; j < L; ++j) {
            // A slot past the operand reads the last column, which no output keeps
            const int col = min(n + LANES * j, s.C * trs - 1), kt = col % trs / rs, kr = col % rs / s.S, ks = col % s.S;
            tap[j] = ((col / trs * s.D + kt) * s.H + kr) * s.W + ks;
            bit[j] = tap_bit(kt, kr, ks);
        }
        const int d = k % opq / pq * s.stride, h = k % pq / s.Q * s.stride, v = k % s.Q * s.stride;
        first_d = FD + s.pad - d, first_h = FH + s.pad - h, first_v = s.pad - v;
        dd = TILE_K % opq / pq * s.stride, dh = TILE_K % pq / s.Q * s.stride, dv = TILE_K % s.Q * s.stride;
        window = ((k / opq * s.C * s.D + d - s.pad) * s.H + h - s.pad) * s.W + v - s.pad;
        step = TILE_K / opq * s.C * s.D * s.H * s.W + (dd * s.H + dh) * s.W + dv;
    }
    __device__ __forceinline__ unsigned probe(bool k_in) const {  // the two lower fields clipped
        return k_in ? taps_inside(first_d, FD, s.D) | (taps_inside(first_h, FH, s.H) & TAP_FIELD<3> << FH) |
                          (taps_inside(first_v, 0, s.W) & TAP_FIELD<3>)
                    : 0u;
    }
    __device__ __forceinline__ bool valid(int j, unsigned probe) const { return within(bit[j], probe); }
    __device__ __forceinline__ int at(int j) const { return window + tap[j]; }
    __device__ __forceinline__ void next() {  // a borrowed digit moves the window a row, a plane or an image on
        first_v -= dv;
        const int row = borrow(first_v, s.pad, s.Q * s.stride);
        first_h -= dh + s.stride * row;
        const int plane = borrow(first_h, FH + s.pad, s.P * s.stride);
        first_d -= dd + s.stride * plane;
        const int image = borrow(first_d, FD + s.pad, s.O * s.stride);
        window += step + row * (s.stride * s.W - s.Q * s.stride) + plane * (s.stride * s.H - s.P * s.stride) * s.W +
                  image * (s.C * s.D - s.O * s.stride) * s.H * s.W;
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
    gemm_tile(s.C, s.N * dhw, s.K * s.T * s.R * s.S, k_chunk, Channels<LOADS_A>{w, s.C, s.T * s.R * s.S},
              Grad3ByInput<LOADS_B>{dy, s},
              split_store(Store{dx, s.C, dhw, bias, true, false, false}, partial, s.C, s.N * dhw));
}

// GEMM M = K, N = C*T*R*S, K = batch * O*P*Q: split-K gives this phase enough CTAs.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
conv3d_bwd_weight_implicit(const float* RESTRICT dy, const float* RESTRICT x, float* RESTRICT dw,
                           float* RESTRICT partial, Conv3Shape s, int k_chunk) {
    const int ctrs = s.C * s.T * s.R * s.S;
    gemm_tile(s.K, ctrs, s.N * s.O * s.P * s.Q, k_chunk, Channels<LOADS_A>{dy, s.K, s.O * s.P * s.Q},
              Vol2colT<LOADS_B>{x, s},
              split_store(Store{dw, s.K, ctrs, nullptr, false, false, false}, partial, s.K, ctrs));
}
