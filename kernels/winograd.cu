// conv2d by Winograd F(m x m, r x r) (Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks"), non-fused: a stride-1 r x r convolution as alpha^2 independent GEMMs in the
// transformed domain (alpha = m + r - 1), each m x m output tile from an alpha x alpha input
// tile with alpha^2 multiplies per channel pair instead of m^2 r^2.
//
//   winograd_filter_aA  U[xi][o][k] = (G g G^T)[xi], g the r x r filter from channel k to output o
//   winograd_input_aA   V[xi][k][n*T + t] = (B^T d B)[xi], d the alpha x alpha input patch of tile t
//   (gemm.cu)           M[xi] = U[xi] V[xi], alpha^2 GEMMs of (outputs x channels) x (channels x tiles)
//   winograd_output_aA  y = A^T m A (+ bias), m the alpha^2 products of one tile, m x m outputs
//
// The weight gradient is F(r x r, m x m) (Lavin & Gray): dW, r x r, is the correlation of the
// input with dy, whose m x m tiles play the filter: the input transform reads dy's tiles with G
// (G t G^T, t an m x m tile: `extent` m), the input's alpha x alpha patches with B^T as above,
// alpha^2 GEMMs reduce over every image's tiles (channels x tiles times tiles x outputs, split-K),
// and the output transform writes each channel pair's r x r gradient.
//
// A = alpha is a compile-time size (4: F(2x2,3x3); 6: F(2x2,5x5), F(4x4,3x3); 8: F(4x4,5x5)), so every array
// lives in registers; m, r and the matrices are the host's (tracker/ops/winograd.py derives them
// by Cook-Toom and writes them to c_wino: B^T, then G and A^T, each alpha x alpha, zero-padded).
// The data gradient is the same algorithm: a stride-1 convolution of dy, padded by r - 1 - pad,
// with each filter turned 180 degrees and its channels swapped (the filter transform's flip).
#include "common.cuh"

__constant__ float c_wino[3 * 8 * 8];  // B^T, G, A^T: alpha x alpha each, row-major, zero-padded

// One stride-1 convolution as the transforms see it: the input (N x C x H x W), padded by pad,
// and the output (P x Q), in TH x TW tiles of m x m. The input transform reads extent x extent
// values of a tile (alpha: an input patch; m: a tile of dy) and multiplies by the matrix at
// c_wino[matrix] (0: B^T; alpha^2: G).
struct WinoShape {
    int N, C, H, W, P, Q, pad, TH, TW, m, r, extent, matrix;
};

// out = L in R^T for alpha x alpha matrices (L and R from c_wino at the given offsets).
template <int A>
__device__ __forceinline__ void sandwich(const float (&in)[A][A], float (&out)[A][A], int left, int right) {
    float t[A][A];
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < A; ++j) {
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < A; ++k) acc = fmaf(c_wino[left + i * A + k], in[k][j], acc);
            t[i][j] = acc;
        }
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < A; ++j) {
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < A; ++k) acc = fmaf(t[i][k], c_wino[right + j * A + k], acc);
            out[i][j] = acc;
        }
}

// U[xi][o][k] for o < M outputs and k < Kc channels. flip 0: g = w[o][k] (w is M x Kc x r x r);
// flip 1, the data gradient: g = w[k][o] turned 180 degrees (w is Kc x M x r x r).
template <int A>
__device__ __forceinline__ void filter_transform(const float* RESTRICT w, float* RESTRICT U, int M, int Kc, int r,
                                                 int flip) {
    const int total = M * Kc;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int o = i / Kc, k = i % Kc;
        const float* f = w + (size_t)(flip ? k * M + o : o * Kc + k) * r * r;
        float g[A][A], u[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b)
                g[a][b] = a < r && b < r ? f[flip ? (r - 1 - a) * r + (r - 1 - b) : a * r + b] : 0.f;
        sandwich<A>(g, u, A * A, A * A);  // G g G^T
        float* out = U + (size_t)o * Kc + k;
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) out[(size_t)(a * A + b) * total] = u[a][b];
    }
}

// V[xi][c][n*T + t], one thread per (channel, image, tile): the extent x extent patch at
// (m*th - pad, m*tw - pad), zero outside the input and past extent, times the matrix each side.
template <int A>
__device__ __forceinline__ void input_transform(const float* RESTRICT x, float* RESTRICT V, const WinoShape& s) {
    const int tiles = s.TH * s.TW;
    const long long cols = (long long)s.N * tiles, total = cols * s.C;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i / cols);
        const long long col = i % cols;
        const int n = (int)(col / tiles), t = (int)(col % tiles);
        const int y0 = (t / s.TW) * s.m - s.pad, x0 = (t % s.TW) * s.m - s.pad;
        const float* plane = x + ((size_t)n * s.C + c) * s.H * s.W;
        float d[A][A], v[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) {
                const int h = y0 + a, q = x0 + b;
                d[a][b] = a < s.extent && b < s.extent && h >= 0 && h < s.H && q >= 0 && q < s.W ? plane[h * s.W + q]
                                                                                                 : 0.f;
            }
        sandwich<A>(d, v, s.matrix, s.matrix);  // B^T d B, or G t G^T
        float* out = V + (size_t)c * cols + col;
        const size_t step = (size_t)s.C * cols;
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) out[(a * A + b) * step] = v[a][b];
    }
}

// y[n][o] over tile t = A^T m A (+ bias[o]): m x m outputs, those inside P x Q written.
template <int A>
__device__ __forceinline__ void output_transform(const float* RESTRICT Mp, const float* RESTRICT bias,
                                                 float* RESTRICT y, const WinoShape& s, int M) {
    const int tiles = s.TH * s.TW;
    const long long cols = (long long)s.N * tiles, total = cols * M;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int o = (int)(i / cols);
        const long long col = i % cols;
        const int n = (int)(col / tiles), t = (int)(col % tiles);
        const float* in = Mp + (size_t)o * cols + col;
        const size_t step = (size_t)M * cols;
        float p[A][A], out[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) p[a][b] = in[(a * A + b) * step];
        sandwich<A>(p, out, 2 * A * A, 2 * A * A);  // A^T m A (rows past m are zero)
        const float bb = bias != nullptr ? bias[o] : 0.f;
        const int p0 = (t / s.TW) * s.m, q0 = (t % s.TW) * s.m;
        float* plane = y + ((size_t)n * M + o) * s.P * s.Q;
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b)
                if (a < s.m && b < s.m && p0 + a < s.P && q0 + b < s.Q) plane[(p0 + a) * s.Q + q0 + b] = out[a][b] + bb;
    }
}

// The kernels, one set per alpha (written out: the emulation and the compile check find kernels by name).
extern "C" __global__ void winograd_filter_a4(const float* RESTRICT w, float* RESTRICT U, int M, int Kc, int r,
                                             int flip) {
    filter_transform<4>(w, U, M, Kc, r, flip);
}
extern "C" __global__ void winograd_input_a4(const float* RESTRICT x, float* RESTRICT V, WinoShape s) {
    input_transform<4>(x, V, s);
}
extern "C" __global__ void winograd_output_a4(const float* RESTRICT Mp, const float* RESTRICT bias, float* RESTRICT y,
                                             WinoShape s, int M) {
    output_transform<4>(Mp, bias, y, s, M);
}

extern "C" __global__ void winograd_filter_a6(const float* RESTRICT w, float* RESTRICT U, int M, int Kc, int r,
                                             int flip) {
    filter_transform<6>(w, U, M, Kc, r, flip);
}
extern "C" __global__ void winograd_input_a6(const float* RESTRICT x, float* RESTRICT V, WinoShape s) {
    input_transform<6>(x, V, s);
}
extern "C" __global__ void winograd_output_a6(const float* RESTRICT Mp, const float* RESTRICT bias, float* RESTRICT y,
                                             WinoShape s, int M) {
    output_transform<6>(Mp, bias, y, s, M);
}

extern "C" __global__ void winograd_filter_a8(const float* RESTRICT w, float* RESTRICT U, int M, int Kc, int r,
                                             int flip) {
    filter_transform<8>(w, U, M, Kc, r, flip);
}
extern "C" __global__ void winograd_input_a8(const float* RESTRICT x, float* RESTRICT V, WinoShape s) {
    input_transform<8>(x, V, s);
}
extern "C" __global__ void winograd_output_a8(const float* RESTRICT Mp, const float* RESTRICT bias, float* RESTRICT y,
                                             WinoShape s, int M) {
    output_transform<8>(Mp, bias, y, s, M);
}
