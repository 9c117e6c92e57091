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
// The data gradient is the same algorithm: a stride-1 convolution of dy, padded by r - 1 - pad,
// with each filter turned 180 degrees and its channels swapped (the filter transform's flip).
//
// A real tile's spectrum is Hermitian, so only frequencies (u, v) with v <= N/2 are kept:
// N (N/2 + 1) of them, each a plane of channels x tiles. A block transforms T consecutive tiles
// (columns of those planes) of one channel, or T consecutive (output, channel) pairs of filters,
// with N/2 threads a tile and a warp's lanes on consecutive tiles. It stages its tiles in shared
// memory with lanes along image rows; each thread transforms two rows of its tile as one complex
// FFT of x + i y (both rows' half spectra follow from it), in place, then one column of those
// (column 0 with column N/2, both real, as one FFT too), and stores each frequency from its
// registers: a warp stores one frequency of 32 consecutive tiles, whole 128-byte lines, where one
// tile a block put each value in a 32-byte sector of its own. The output transform runs the same
// backwards: a warp loads one frequency of consecutive tiles, columns then rows are inverted, and
// the tiles leave shared memory along image rows. N FFTs of N points a tile, where a row then a
// column at a time took 3N/2 + 1. T is FFT_TILES_N<N> (tracker/ops/fft.py): 32 or more at every N.
// The tiles and their windows lie in dynamic shared memory, which the launch sizes
// (tracker/ops/fft.py's shared_bytes): 32 tiles of 32 x 32 floats are 128 KB, past the 48 KB of
// static shared memory a block may have, within the 227 KB an H100's block may opt in to (163 KB
// on an A100), one such block an SM. A tile's half spectrum takes as many floats as the tile, so
// whole tiles take no less; keeping half of them in registers would hold a thread's column (64
// floats) beside the rows it transforms (64 more), past the 128 registers a thread of 512 may have.
// The twiddles are the host's (tracker/ops/fft.py, in float64): c_twiddle[k] = cos(2 pi k / 32),
// c_twiddle[16 + k] = -sin(2 pi k / 32), k < 16.
#include "common.cuh"

#if !defined(FFT_TILES_N2) || !defined(FFT_TILES_N4) || !defined(FFT_TILES_N8) || !defined(FFT_TILES_N16) || \
    !defined(FFT_TILES_N32)
#error "the tiles a block come from tracker/ops/fft.py as -D options (tracker.gpu.kernels.compile_options)"
#endif

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

// A block's T tiles in shared memory and its T N/2 threads. Thread t works on tile t % T (a warp's
// lanes on 32 consecutive tiles) and, of it, on rows `slot` and slot + N/2, then on column `slot`.
// Tiles lie TILE floats apart, odd, so that 32 lanes on 32 tiles touch 32 banks.
template <int N, int T>
struct Tiles {
    static constexpr int HALF = N / 2;
    static constexpr int THREADS = T * HALF;
    static constexpr int TILE = N * N + 1;
    static_assert(T >= 32 && (T & (T - 1)) == 0, "a power of two of tiles, 32 or more: a warp's stores whole lines");

    __device__ static int tile() { return threadIdx.x % T; }
    __device__ static int slot() { return threadIdx.x / T; }
};

// Where a tile's N x N values lie in global memory: (a, b) at at + a row + b col, for a in
// [a0, a1) and b in [b0, b1); nothing elsewhere (the padding, past an edge, past a filter).
struct Window {
    long long at;
    int row, col, a0, a1, b0, b1;
    __device__ bool holds(int a, int b) const { return a >= a0 && a < a1 && b >= b0 && b < b1; }
    __device__ long long of(int a, int b) const { return at + a * row + b * col; }
};

// A block's dynamic shared memory, which tracker/ops/fft.py's shared_bytes sizes: the windows of
// its T tiles first (where it starts, aligned for their 8-byte offsets: these kernels have no static
// shared memory), then the tiles, Tiles<N, T>::TILE floats apart.
struct Staging {
    Window* windows;
    float* buf;
};
template <int T>
__device__ __forceinline__ Staging staging() {
    extern __shared__ float dynamic[];
    return {reinterpret_cast<Window*>(dynamic), dynamic + T * sizeof(Window) / sizeof(float)};
}

// The block's tiles from `from` into shared memory, zero outside their windows: lanes along rows
// (consecutive b), so that a warp reads runs of a row, one a tile row at N = 32.
template <int N, int T>
__device__ __forceinline__ void stage(float* buf, const Window* windows, const float* RESTRICT from) {
    using L = Tiles<N, T>;
#pragma unroll
    for (int i = 0; i < T * N * N / L::THREADS; ++i) {
        const int e = i * L::THREADS + threadIdx.x, tile = e / (N * N), a = e / N % N, b = e % N;
        const Window& w = windows[tile];
        buf[tile * L::TILE + a * N + b] = w.holds(a, b) ? from[w.of(a, b)] : 0.f;
    }
}

// The block's real tiles from shared memory to `to` (times scale, plus add), inside their
// windows, lanes along rows as stage's.
template <int N, int T>
__device__ __forceinline__ void unstage(const float* buf, const Window* windows, float* RESTRICT to, float scale,
                                        float add) {
    using L = Tiles<N, T>;
#pragma unroll
    for (int i = 0; i < T * N * N / L::THREADS; ++i) {
        const int e = i * L::THREADS + threadIdx.x, tile = e / (N * N), a = e / N % N, b = e % N;
        const Window& w = windows[tile];
        if (w.holds(a, b)) to[w.of(a, b)] = buf[tile * L::TILE + a * N + b] * scale + add;
    }
}

// Two real rows x and y of a tile, in place: their N values each become their packed half
// spectrum, [R(0), R(N/2)] (both real), then Re and Im of R(v), 0 < v < N/2: N floats. One complex
// FFT Z of x + i y gives both: R_x(v) = (Z(v) + conj Z(N-v)) / 2, R_y(v) = (Z(v) - conj Z(N-v)) / 2i.
template <int N>
__device__ __forceinline__ void forward_rows(float* x, float* y) {
    float re[N], im[N];
#pragma unroll
    for (int b = 0; b < N; ++b) re[b] = x[b], im[b] = y[b];
    fft<N>(re, im, false);
    x[0] = re[0], x[1] = re[N / 2], y[0] = im[0], y[1] = im[N / 2];
#pragma unroll
    for (int v = 1; v < N / 2; ++v) {
        const int w = N - v;
        x[2 * v] = 0.5f * (re[v] + re[w]), x[2 * v + 1] = 0.5f * (im[v] - im[w]);
        y[2 * v] = 0.5f * (im[v] + im[w]), y[2 * v + 1] = 0.5f * (re[w] - re[v]);
    }
}

// forward_rows' inverse, unscaled: packed half spectra back to two real rows, as the real and
// imaginary parts of one inverse FFT of R_x + i R_y over all N frequencies (R(N - v) = conj R(v)).
template <int N>
__device__ __forceinline__ void inverse_rows(float* x, float* y) {
    float re[N], im[N];
    re[0] = x[0], im[0] = y[0], re[N / 2] = x[1], im[N / 2] = y[1];
#pragma unroll
    for (int v = 1; v < N / 2; ++v) {
        const float ar = x[2 * v], ai = x[2 * v + 1], br = y[2 * v], bi = y[2 * v + 1];
        re[v] = ar - bi, im[v] = ai + br;
        re[N - v] = ar + bi, im[N - v] = br - ai;
    }
    fft<N>(re, im, true);
#pragma unroll
    for (int b = 0; b < N; ++b) x[b] = re[b], y[b] = im[b];
}

// The half spectrum of the thread's staged tile: its two rows (forward_rows), then column `slot` of
// the packed rows, which slot 0 holds as R(a, 0) + i R(a, N/2), two real columns split as the rows
// are. Each frequency (u, v) goes to store(u, v, re, im): a warp's lanes store one frequency of
// consecutive tiles, so each store is whole lines (whole sectors where fewer than 32 tiles).
template <int N, int T, class Store>
__device__ __forceinline__ void forward_tiles(float* buf, Store store) {
    using L = Tiles<N, T>;
    const int slot = L::slot();
    float* own = buf + L::tile() * L::TILE;
    forward_rows<N>(own + slot * N, own + (slot + N / 2) * N);
    __syncthreads();
    float re[N], im[N];
#pragma unroll
    for (int a = 0; a < N; ++a) re[a] = own[a * N + 2 * slot], im[a] = own[a * N + 2 * slot + 1];
    fft<N>(re, im, false);
    if (slot > 0) {
#pragma unroll
        for (int u = 0; u < N; ++u) store(u, slot, re[u], im[u]);
        return;
    }
#pragma unroll
    for (int u = 0; u <= N / 2; ++u) {  // u and N - u together: each column's values there are conjugates
        const int w = (N - u) % N;
        const float r0 = 0.5f * (re[u] + re[w]), i0 = 0.5f * (im[u] - im[w]);
        const float rh = 0.5f * (im[u] + im[w]), ih = 0.5f * (re[w] - re[u]);
        store(u, 0, r0, i0), store(u, N / 2, rh, ih);
        if (w != u) store(w, 0, r0, -i0), store(w, N / 2, rh, -ih);
    }
}

// The inverse, unscaled, into the thread's tile in shared memory: load(u, v, re, im) reads a
// frequency (a warp's lanes one frequency of consecutive tiles), the thread inverts column `slot`
// (slot 0: Y(u, 0) + i Y(u, N/2), whose inverse is two real columns, the packed rows' first
// value), then its two rows (inverse_rows).
template <int N, int T, class Load>
__device__ __forceinline__ void inverse_tiles(float* buf, Load load) {
    using L = Tiles<N, T>;
    const int slot = L::slot();
    float* own = buf + L::tile() * L::TILE;
    float re[N], im[N];
#pragma unroll
    for (int u = 0; u < N; ++u) {
        load(u, slot, re[u], im[u]);
        if (slot == 0) {
            float hr, hi;
            load(u, N / 2, hr, hi);
            re[u] -= hi, im[u] += hr;
        }
    }
    fft<N>(re, im, true);
#pragma unroll
    for (int a = 0; a < N; ++a) own[a * N + 2 * slot] = re[a], own[a * N + 2 * slot + 1] = im[a];
    __syncthreads();
    inverse_rows<N>(own + slot * N, own + (slot + N / 2) * N);
    __syncthreads();
}

// Wb[f] for o < M outputs and k < Kc channels, T (o, k) pairs a block, k fastest (consecutive
// columns of Wb): grid ceil(M Kc / T). flip 0: g = w[o][k] (w is M x Kc x r x r); flip 1, the
// data gradient: g = w[k][o] turned 180 degrees (w is Kc x M x r x r).
template <int N, int T>
__device__ __forceinline__ void filter_transform(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r,
                                                 int flip) {
    using L = Tiles<N, T>;
    const Staging staged = staging<T>();
    const int first = blockIdx.x * T, pairs = M * Kc;
    if (threadIdx.x < T) {
        const int pair = first + threadIdx.x, o = pair / Kc, k = pair % Kc, side = pair < pairs ? r : 0;
        const long long g = (long long)(flip ? k * M + o : o * Kc + k) * r * r;
        const int way = flip ? -1 : 1;  // flip: g's last value first
        staged.windows[threadIdx.x] = Window{flip ? g + r * r - 1 : g, way * r, way, 0, side, 0, side};
    }
    __syncthreads();
    stage<N, T>(staged.buf, staged.windows, w);
    __syncthreads();
    const int pair = first + L::tile(), o = pair / Kc, k = pair % Kc;
    const size_t plane = (size_t)4 * M * Kc, ld = 2 * Kc;
    forward_tiles<N, T>(staged.buf, [&](int u, int v, float re, float im) {
        if (pair >= pairs) return;
        float* at = Wb + (u * (N / 2 + 1) + v) * plane;
        at[o * ld + k] = re, at[o * ld + Kc + k] = im;
        at[(M + o) * ld + k] = -im, at[(M + o) * ld + Kc + k] = re;
    });
}

// X[f], T consecutive columns (tiles) of one channel a block: grid (ceil(tiles / T), C).
template <int N, int T>
__device__ __forceinline__ void input_transform(const float* RESTRICT x, float* RESTRICT X, const FftShape& s) {
    using L = Tiles<N, T>;
    const Staging staged = staging<T>();
    const int tiles = s.TH * s.TW, cols = s.images * tiles, c = blockIdx.y, first = blockIdx.x * T;
    if (threadIdx.x < T) {
        const int col = first + threadIdx.x, n = col / tiles, t = col % tiles;
        const int y0 = (t / s.TW) * s.step - s.pad, x0 = (t % s.TW) * s.step - s.pad;
        const int extent = col < cols ? s.extent : 0;
        const long long plane = ((long long)n * s.C + c) * s.H * s.W;
        staged.windows[threadIdx.x] = Window{plane + (long long)y0 * s.W + x0, s.W, 1, max(0, -y0),
                                             min(extent, s.H - y0), max(0, -x0), min(extent, s.W - x0)};
    }
    __syncthreads();
    stage<N, T>(staged.buf, staged.windows, x);
    __syncthreads();
    const int col = first + L::tile();
    const size_t frequency = (size_t)(s.layout == BLOCK ? 4 : 2) * s.C * cols, im_at = imag_at(s, s.C, cols);
    const size_t lower = (size_t)s.C * 2 * cols;  // BLOCK: the [-Im, Re] rows
    float* at = X + row_at(s, c, col, cols);
    forward_tiles<N, T>(staged.buf, [&](int u, int v, float re, float im) {
        if (col >= cols) return;
        float* f = at + (u * (N / 2 + 1) + v) * frequency;
        f[0] = re, f[im_at] = im;
        if (s.layout == BLOCK) f[lower] = -im, f[lower + im_at] = re;
    });
}

// y[n][o] over T consecutive tiles of one output o = the real inverse 2-D DFT of each tile's Y /
// N^2 (+ bias[o]), its first step x step values: grid (ceil(tiles / T), M).
template <int N, int T>
__device__ __forceinline__ void output_transform(const float* RESTRICT Y, const float* RESTRICT bias,
                                                 float* RESTRICT y, const FftShape& s, int M) {
    using L = Tiles<N, T>;
    const Staging staged = staging<T>();
    const int tiles = s.TH * s.TW, cols = s.images * tiles, o = blockIdx.y, first = blockIdx.x * T;
    if (threadIdx.x < T) {  // read after inverse_tiles' barriers
        const int col = first + threadIdx.x, n = col / tiles, t = col % tiles;
        const int p0 = (t / s.TW) * s.step, q0 = (t % s.TW) * s.step;
        staged.windows[threadIdx.x] = Window{(((long long)n * M + o) * s.P + p0) * s.Q + q0, s.Q, 1, 0,
                                             col < cols ? min(s.step, s.P - p0) : 0, 0, min(s.step, s.Q - q0)};
    }
    const int col = first + L::tile();
    const size_t frequency = (size_t)2 * M * cols, im_at = imag_at(s, M, cols);
    const float* at = Y + row_at(s, o, col, cols);
    inverse_tiles<N, T>(staged.buf, [&](int u, int v, float& re, float& im) {
        const float* f = at + (u * (N / 2 + 1) + v) * frequency;
        re = col < cols ? f[0] : 0.f, im = col < cols ? f[im_at] : 0.f;
    });
    unstage<N, T>(staged.buf, staged.windows, y, 1.f / (N * N), bias != nullptr ? bias[o] : 0.f);
}

// The kernels, one set per tile size (written out: the emulation and the compile check find
// kernels by name). Block: FFT_TILES_Nn tiles of N/2 threads (tracker/ops/fft.py), its
// __launch_bounds__, so that ptxas keeps to the registers such a block may have (128 a thread at
// 512, N = 32), spilling, which the compile check refuses, rather than building a kernel whose
// launch a GPU would refuse.
constexpr int THREADS_N2 = Tiles<2, FFT_TILES_N2>::THREADS, THREADS_N4 = Tiles<4, FFT_TILES_N4>::THREADS,
              THREADS_N8 = Tiles<8, FFT_TILES_N8>::THREADS, THREADS_N16 = Tiles<16, FFT_TILES_N16>::THREADS,
              THREADS_N32 = Tiles<32, FFT_TILES_N32>::THREADS;

extern "C" __global__ void __launch_bounds__(THREADS_N2)
fft_filter_n2(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<2, FFT_TILES_N2>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void __launch_bounds__(THREADS_N2)
fft_input_n2(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<2, FFT_TILES_N2>(x, X, s);
}
extern "C" __global__ void __launch_bounds__(THREADS_N2)
fft_output_n2(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y, FftShape s, int M) {
    output_transform<2, FFT_TILES_N2>(Y, bias, y, s, M);
}
extern "C" __global__ void __launch_bounds__(THREADS_N4)
fft_filter_n4(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<4, FFT_TILES_N4>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void __launch_bounds__(THREADS_N4)
fft_input_n4(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<4, FFT_TILES_N4>(x, X, s);
}
extern "C" __global__ void __launch_bounds__(THREADS_N4)
fft_output_n4(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y, FftShape s, int M) {
    output_transform<4, FFT_TILES_N4>(Y, bias, y, s, M);
}
extern "C" __global__ void __launch_bounds__(THREADS_N8)
fft_filter_n8(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<8, FFT_TILES_N8>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void __launch_bounds__(THREADS_N8)
fft_input_n8(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<8, FFT_TILES_N8>(x, X, s);
}
extern "C" __global__ void __launch_bounds__(THREADS_N8)
fft_output_n8(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y, FftShape s, int M) {
    output_transform<8, FFT_TILES_N8>(Y, bias, y, s, M);
}
extern "C" __global__ void __launch_bounds__(THREADS_N16)
fft_filter_n16(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<16, FFT_TILES_N16>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void __launch_bounds__(THREADS_N16)
fft_input_n16(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<16, FFT_TILES_N16>(x, X, s);
}
extern "C" __global__ void __launch_bounds__(THREADS_N16)
fft_output_n16(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y, FftShape s, int M) {
    output_transform<16, FFT_TILES_N16>(Y, bias, y, s, M);
}
extern "C" __global__ void __launch_bounds__(THREADS_N32)
fft_filter_n32(const float* RESTRICT w, float* RESTRICT Wb, int M, int Kc, int r, int flip) {
    filter_transform<32, FFT_TILES_N32>(w, Wb, M, Kc, r, flip);
}
extern "C" __global__ void __launch_bounds__(THREADS_N32)
fft_input_n32(const float* RESTRICT x, float* RESTRICT X, FftShape s) {
    input_transform<32, FFT_TILES_N32>(x, X, s);
}
extern "C" __global__ void __launch_bounds__(THREADS_N32)
fft_output_n32(const float* RESTRICT Y, const float* RESTRICT bias, float* RESTRICT y, FftShape s, int M) {
    output_transform<32, FFT_TILES_N32>(Y, bias, y, s, M);
}
