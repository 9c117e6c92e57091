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

// F(2x2,3x3) fused (the algorithm of the kernels above in one launch, as openCNN fuses it): a
// CTA computes WF_M outputs x WF_N tiles at all 16 points. Each stage's load transforms WF_K
// channels of its tiles' 4x4 input patches (B^T d B) straight into shared memory beside the
// filter's transformed chunk (U, from winograd_filter_a4), the 16 products accumulate in
// registers, and the epilogue's output transform (A^T m A, + bias) writes y: no transformed
// input and no product ever reaches global memory. Each thread transforms one (channel, tile) a
// stage and owns outputs oo, oo + 16 and tiles tt, tt + 16 at every point: 64 accumulators.
// Its transforms are F(2x2,3x3)'s own (input_f2x3, output_f2x3); the filter's come from c_wino.
// NVRTC 13.5 for sm_90 gives it 254 registers and no spills (one CTA of 8 warps an SM); capped at
// 128 (__launch_bounds__(256, 2)) it spilled 944 bytes. Its speed is a GPU's to measure (stage 9).
#define WF_M 32  // output channels per CTA
#define WF_N 32  // tiles per CTA
#define WF_K 8   // channels per stage: WF_K * WF_N = 256 patches, one a thread
#define WF_THREADS 256

// F(2x2,3x3)'s B^T and A^T by Cook-Toom at 0, 1, -1 and infinity (tracker/ops/winograd.py's
// matrices(2, 3); tests/test_winograd.py checks they are these), written out: their entries are
// 0 and +-1, so each transform is additions, and its values need no registers of their own.
//   B^T = [-1 0 1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1]     A^T = [1 1 1 0; 0 1 -1 1]
__device__ __forceinline__ void bt_4(float a, float b, float c, float d, float (&out)[4]) {
    out[0] = c - a;
    out[1] = b + c;
    out[2] = c - b;
    out[3] = d - b;
}

__device__ __forceinline__ void input_f2x3(const float (&d)[4][4], float (&v)[4][4]) {  // B^T d B
    float t[4][4], row[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        bt_4(d[0][j], d[1][j], d[2][j], d[3][j], row);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][j] = row[i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) bt_4(t[i][0], t[i][1], t[i][2], t[i][3], v[i]);
}

__device__ __forceinline__ void output_f2x3(const float (&m)[4][4], float (&y)[2][2]) {  // A^T m A
    float t[2][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        t[0][j] = m[0][j] + m[1][j] + m[2][j];
        t[1][j] = m[1][j] - m[2][j] + m[3][j];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        y[i][0] = t[i][0] + t[i][1] + t[i][2];
        y[i][1] = t[i][1] - t[i][2] + t[i][3];
    }
}

extern "C" __global__ void __launch_bounds__(WF_THREADS) winograd_fused_a4(const float* RESTRICT x,
                                                                          const float* RESTRICT U,
                                                                          const float* RESTRICT bias,
                                                                          float* RESTRICT y, WinoShape s, int M) {
    __shared__ float Vs[16][WF_K][WF_N];  // the stage's transformed patches
    __shared__ float Us[16][WF_M][WF_K];  // the stage's transformed filters (output-major: no bank conflict)
    const int tid = threadIdx.x, tiles = s.TH * s.TW;
    const long long cols = (long long)s.N * tiles, col0 = (long long)blockIdx.x * WF_N;
    const int o0 = blockIdx.y * WF_M, oo = tid / 16, tt = tid % 16;

    // the patch this thread transforms every stage: channel c0 + lk of tile col0 + lt
    const int lk = tid / WF_N, lt = tid % WF_N;
    const long long lcol = col0 + lt;
    const bool live = lcol < cols;
    const int n = live ? (int)(lcol / tiles) : 0, t = live ? (int)(lcol % tiles) : 0;
    const int y0 = (t / s.TW) * 2 - s.pad, x0 = (t % s.TW) * 2 - s.pad;
    const float* image = x + (size_t)n * s.C * s.H * s.W;

    float acc[16][2][2];
#pragma unroll
    for (int p = 0; p < 16; ++p)
        acc[p][0][0] = acc[p][0][1] = acc[p][1][0] = acc[p][1][1] = 0.f;

    for (int c0 = 0; c0 < s.C; c0 += WF_K) {
        const int c = c0 + lk;
        float d[4][4], v[4][4];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int h = y0 + a, q = x0 + b;
                d[a][b] = live && c < s.C && h >= 0 && h < s.H && q >= 0 && q < s.W
                              ? image[((size_t)c * s.H + h) * s.W + q] : 0.f;
            }
        input_f2x3(d, v);
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) Vs[a * 4 + b][lk][lt] = v[a][b];
#pragma unroll
        for (int i = 0; i < 16 * WF_M * WF_K / WF_THREADS; ++i) {
            const int at = tid + i * WF_THREADS, p = at / (WF_M * WF_K), o = at / WF_K % WF_M, k = at % WF_K;
            Us[p][o][k] = o0 + o < M && c0 + k < s.C ? U[((size_t)p * M + o0 + o) * s.C + c0 + k] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p)
#pragma unroll
            for (int k = 0; k < WF_K; ++k) {
                const float u0 = Us[p][oo][k], u1 = Us[p][oo + 16][k], v0 = Vs[p][k][tt], v1 = Vs[p][k][tt + 16];
                acc[p][0][0] = fmaf(u0, v0, acc[p][0][0]);
                acc[p][0][1] = fmaf(u0, v1, acc[p][0][1]);
                acc[p][1][0] = fmaf(u1, v0, acc[p][1][0]);
                acc[p][1][1] = fmaf(u1, v1, acc[p][1][1]);
            }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int o = o0 + oo + 16 * i;
            const long long col = col0 + tt + 16 * j;
            if (o >= M || col >= cols) continue;
            float m[4][4], out[2][2];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) m[a][b] = acc[a * 4 + b][i][j];
            output_f2x3(m, out);
            const int im = (int)(col / tiles), tile = (int)(col % tiles);
            const int p0 = (tile / s.TW) * 2, q0 = (tile % s.TW) * 2;
            const float bb = bias != nullptr ? bias[o] : 0.f;
            float* plane = y + ((size_t)im * M + o) * s.P * s.Q;
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int b = 0; b < 2; ++b)
                    if (p0 + a < s.P && q0 + b < s.Q) plane[(p0 + a) * s.Q + q0 + b] = out[a][b] + bb;
        }
}
