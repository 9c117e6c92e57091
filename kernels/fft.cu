// conv2d by FFT tiling (paper 004's FFT algorithm; cuDNN's FFT_TILING): a stride-1 convolution
// as one complex product per frequency, summed over channels, of N x N tiles
// that overlap by r - 1 (overlap-save): each tile gives step = N - r + 1 outputs a side. N is
// the power of two up to 32 that holds a whole output row plus the filter's overhang
// (tracker/model/algorithms.py's fft_side).
//
//   fft_filter_nN  Wb[f] = [[Re W, Im W], [-Im W, Re W]] (2M x 2C), W the 2-D DFT of each
//                  filter zero-padded to N x N: the real form of conj(W), since a CNN's
//                  convolution is a correlation
//   fft_input_nN   X[f] = [Re X; Im X] (2C x tiles), X the 2-D DFT of each N x N input tile
//   (gemm.cu)      Y[f] = Wb[f] X[f]: one real GEMM a frequency, (2M x 2C) x (2C x tiles)
//   fft_output_nN  y = the inverse 2-D DFT of each tile's Y (+ bias), its first step x step
//                  values: the rest wrapped around
//
// The weight gradient is the correlation of the input with dy: dy's step x step tiles (zero-
// padded to N) play the filter, so Z[f] = X[f] conj(D[f]) summed over every image's tiles is one
// real GEMM a frequency, [Re X | Im X] (C x 2 tiles) times [[Re D, Im D], [-Im D, Re D]]^T, and
// each channel pair's inverse DFT holds its r x r gradient in its first r x r values.
//
// A real tile's spectrum is Hermitian, so only frequencies (u, v) with v <= N/2 are kept:
// N (N/2 + 1) of them. A block of N threads transforms one tile: each thread one row (a
// radix-2 FFT in registers, N compile-time), then, through shared memory, N/2 + 1 of them one
// column. The twiddles are the host's (tracker/ops/fft.py, in float64): c_twiddle[k] =
// cos(2 pi k / 32), c_twiddle[16 + k] = -sin(2 pi k / 32), k < 16.
// The data gradient is the same algorithm: a stride-1 convolution of dy, padded by r - 1 - pad,
// with each filter turned 180 degrees and its channels swapped (the filter transform's flip).
#include "common.cuh"

constexpr int TWIDDLE_N = 32;  // the largest tile: the table's period
__constant__ float c_twiddle[TWIDDLE_N];

// One stride-1 convolution in N x N tiles: the input (images x C x H x W, padded by pad), the
// output (P x Q) in TH x TW tiles of step x step; the input transform reads extent x extent of
// a tile (N; dy's step-wide tiles in the weight gradient). layout: how a frequency's values lie
// (STACKED: [Re; Im], channels x tiles each; SIDE: [Re | Im]; BLOCK: [[Re, Im], [-Im, Re]]).
struct FftShape {
    int images, C, H, W, P, Q, pad, TH, TW, step, extent, layout;
};
enum Layout { STACKED = 0, SIDE = 1, BLOCK = 2 };

// Where channel c's value of column col lies in a frequency's plane of C x cols complex values,
// and where its imaginary part lies from there.
__device__ __forceinline__ size_t row_at(const FftShape& s, int c, int col, int cols) {
    return (size_t)c * (s.layout == STACKED ? cols : 2 * cols) + col;
}
__device__ __forceinline__ size_t imag_at(const FftShape& s, int C, int cols) {
    return s.layout == STACKED ? (size_t)C * cols : cols;
}

template <int N>
__device__ __forceinline__ constexpr int bit_reversed(int i) {
    int r = 0;
    for (int b = 1; b < N; b <<= 1, i >>= 1) r = (r << 1) | (i & 1);
    return r;
}

// The butterflies of the stages from half-length HALF on (a template a stage, so that every
// loop has constant bounds and unrolls: re and im stay in registers).
template <int N, int HALF>
__device__ __forceinline__ void butterflies(float (&re)[N], float (&im)[N], bool inverse) {
    if constexpr (HALF < N) {
#pragma unroll
        for (int i = 0; i < N; i += 2 * HALF)
#pragma unroll
            for (int k = 0; k < HALF; ++k) {
                constexpr int STEP = TWIDDLE_N / (2 * HALF);  // w = e^(-2 pi i k / (2 HALF)) = c_twiddle at k STEP
                const float c = c_twiddle[k * STEP], s = c_twiddle[TWIDDLE_N / 2 + k * STEP] * (inverse ? -1.f : 1.f);
                const int a = i + k, b = a + HALF;
                const float xr = re[b] * c - im[b] * s, xi = re[b] * s + im[b] * c;
                re[b] = re[a] - xr, im[b] = im[a] - xi;
                re[a] += xr, im[a] += xi;
            }
        butterflies<N, 2 * HALF>(re, im, inverse);
    }
}

// In-place radix-2 FFT of N complex values; inverse: the conjugate twiddles, unscaled.
template <int N>
__device__ __forceinline__ void fft(float (&re)[N], float (&im)[N], bool inverse) {
    static_assert(N >= 2 && N <= TWIDDLE_N && (N & (N - 1)) == 0, "N is a power of two up to the table's");
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int j = bit_reversed<N>(i);
        if (i < j) {
            const float tr = re[i], ti = im[i];
            re[i] = re[j], im[i] = im[j], re[j] = tr, im[j] = ti;
        }
    }
    butterflies<N, 1>(re, im, inverse);
}

// The half spectrum of one real N x N tile, value(row, column) read by the block's N threads:
// thread t transforms row t into shared memory, then threads t <= N/2 transform column t and
// hand each frequency u of it to store(u, v = t, re, im).
template <int N, class Value, class Store>
__device__ __forceinline__ void forward_2d(Value value, Store store) {
    __shared__ float sr[N][N / 2 + 1], si[N][N / 2 + 1];
    const int t = threadIdx.x;
    float re[N], im[N];
#pragma unroll
    for (int j = 0; j < N; ++j) re[j] = value(t, j), im[j] = 0.f;
    fft<N>(re, im, false);
#pragma unroll
    for (int v = 0; v <= N / 2; ++v) sr[t][v] = re[v], si[t][v] = im[v];
    __syncthreads();
    if (t > N / 2) return;
#pragma unroll
    for (int u = 0; u < N; ++u) re[u] = sr[u][t], im[u] = si[u][t];
    fft<N>(re, im, false);
#pragma unroll
    for (int u = 0; u < N; ++u) store(u, t, re[u], im[u]);
}

// Wb[f] for o < M outputs and k < Kc channels, one block a pair. flip 0: g = w[o][k] (w is M x
// Kc x r x r); flip 1, the data gradient: g = w[k][o] turned 180 degrees (w is Kc x M x r x r).
template <int N>
__device__ __forceinline__ void filter_transform(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r,
                                                 int flip) {
    const int o = blockIdx.x / Kc, k = blockIdx.x % Kc;
    const float* g = w + (size_t)(flip ? k * M + o : o * Kc + k) * r * r;
    const size_t plane = (size_t)4 * M * Kc, ld = 2 * Kc;
    forward_2d<N>(
        [&](int a, int b) { return a < r && b < r ? g[flip ? (r - 1 - a) * r + (r - 1 - b) : a * r + b] : 0.f; },
        [&](int u, int v, float re, float im) {
            float* at = Wb + (u * (N / 2 + 1) + v) * plane;
            at[o * ld + k] = re, at[o * ld + Kc + k] = im;
            at[(M + o) * ld + k] = -im, at[(M + o) * ld + Kc + k] = re;
        });
}

// X[f], one block a (tile, channel): grid (images x TH x TW, C).
template <int N>
__device__ __forceinline__ void input_transform(const float* RESTRICT x, float* RESTRICT X, const FftShape& s) {
    const int tiles = s.TH * s.TW, col = blockIdx.x, c = blockIdx.y, cols = gridDim.x;
    const int n = col / tiles, t = col % tiles;
    const int y0 = (t / s.TW) * s.step - s.pad, x0 = (t % s.TW) * s.step - s.pad;
    const float* plane = x + ((size_t)n * s.C + c) * s.H * s.W;
    const size_t frequency = (size_t)(s.layout == BLOCK ? 4 : 2) * s.C * cols, im_at = imag_at(s, s.C, cols);
    const size_t lower = (size_t)s.C * 2 * cols;  // BLOCK: the [-Im, Re] rows
    forward_2d<N>(
        [&](int a, int b) {
            const int h = y0 + a, q = x0 + b;
            return a < s.extent && b < s.extent && h >= 0 && h < s.H && q >= 0 && q < s.W ? plane[h * s.W + q] : 0.f;
        },
        [&](int u, int v, float re, float im) {
            float* at = X + (u * (N / 2 + 1) + v) * frequency + row_at(s, c, col, cols);
            at[0] = re, at[im_at] = im;
            if (s.layout == BLOCK) at[lower] = -im, at[lower + im_at] = re;
        });
}

// y[n][o] over one tile = the real inverse 2-D DFT of its Y / N^2 (+ bias[o]), one block a
// (tile, output): grid (images x TH x TW, M). Threads v <= N/2 invert column v; then thread i
// inverts row i, its upper half the conjugate mirror of the lower (a real tile's symmetry).
template <int N>
__device__ __forceinline__ void output_transform(const float* RESTRICT Y, const float* RESTRICT bias,
                                                 float* RESTRICT y, const FftShape& s, int M) {
    __shared__ float sr[N][N / 2 + 1], si[N][N / 2 + 1];
    const int tiles = s.TH * s.TW, col = blockIdx.x, o = blockIdx.y, cols = gridDim.x, t = threadIdx.x;
    const size_t frequency = (size_t)2 * M * cols, im_at = imag_at(s, M, cols);
    float re[N], im[N];
    if (t <= N / 2) {
#pragma unroll
        for (int u = 0; u < N; ++u) {
            const float* at = Y + (u * (N / 2 + 1) + t) * frequency + row_at(s, o, col, cols);
            re[u] = at[0], im[u] = at[im_at];
        }
        fft<N>(re, im, true);
#pragma unroll
        for (int i = 0; i < N; ++i) sr[i][t] = re[i], si[i][t] = im[i];
    }
    __syncthreads();
#pragma unroll
    for (int v = 0; v < N; ++v) {
        const int from = v <= N / 2 ? v : N - v;
        re[v] = sr[t][from], im[v] = v <= N / 2 ? si[t][from] : -si[t][from];
    }
    fft<N>(re, im, true);
    const int n = col / tiles, tile = col % tiles;
    const int p = (tile / s.TW) * s.step + t, q0 = (tile % s.TW) * s.step;
    if (t >= s.step || p >= s.P) return;
    const float add = bias != nullptr ? bias[o] : 0.f, scale = 1.f / (N * N);
    float* row = y + (((size_t)n * M + o) * s.P + p) * s.Q + q0;
#pragma unroll
    for (int j = 0; j < N; ++j)
        if (j < s.step && q0 + j < s.Q) row[j] = re[j] * scale + add;
}

// The kernels, one set per tile size (written out: the emulation and the compile check find
// kernels by name). Block: N threads.
extern "C" __global__ void fft_filter_n2(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<2>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void fft_input_n2(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<2>(x, X, s);
}
extern "C" __global__ void fft_output_n2(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y,
                                         FftShape s, int M) {
    output_transform<2>(Y, bias, y, s, M);
}

extern "C" __global__ void fft_filter_n4(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<4>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void fft_input_n4(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<4>(x, X, s);
}
extern "C" __global__ void fft_output_n4(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y,
                                         FftShape s, int M) {
    output_transform<4>(Y, bias, y, s, M);
}

extern "C" __global__ void fft_filter_n8(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<8>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void fft_input_n8(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<8>(x, X, s);
}
extern "C" __global__ void fft_output_n8(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y,
                                         FftShape s, int M) {
    output_transform<8>(Y, bias, y, s, M);
}

extern "C" __global__ void fft_filter_n16(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<16>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void fft_input_n16(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<16>(x, X, s);
}
extern "C" __global__ void fft_output_n16(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y,
                                          FftShape s, int M) {
    output_transform<16>(Y, bias, y, s, M);
}

extern "C" __global__ void fft_filter_n32(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<32>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void fft_input_n32(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<32>(x, X, s);
}
extern "C" __global__ void fft_output_n32(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y,
                                          FftShape s, int M) {
    output_transform<32>(Y, bias, y, s, M);
}
