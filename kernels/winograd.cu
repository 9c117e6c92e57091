// conv2d by Winograd F(2x2, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks"), non-fused: a stride-1 3x3 convolution as 16 independent GEMMs in the transformed
// domain, each 2x2 output tile from a 4x4 input tile with 16 multiplies instead of 36.
//
//   winograd_filter  U[xi][m][k] = (G g G^T)[xi], g the 3x3 filter from channel k to output m
//   winograd_input   V[xi][k][n*T + t] = (B^T d B)[xi], d the 4x4 input patch of tile t
//   (gemm.cu)        M[xi] = U[xi] V[xi], 16 GEMMs of (outputs x channels) x (channels x tiles)
//   winograd_output  y = A^T m A (+ bias), m the 16 products of one tile, 2x2 outputs each
//
// The data gradient is the same algorithm: a stride-1 convolution of dy, padded by 2 - pad, with
// each filter turned 180 degrees and its channels swapped (winograd_filter's flip). The transforms
// are tracker/ops/winograd.py's; the weight gradient runs the shared variant's implicit GEMM.
#include "common.cuh"

// One stride-1 3x3 convolution as the transforms see it: the input (N x C x H x W), padded by
// pad, and the output (P x Q), in TH x TW tiles of 2 x 2.
struct WinoShape {
    int N, C, H, W, P, Q, pad, TH, TW;
};

// U[xi][m][k] for m < M outputs and k < Kc channels. flip 0: g = w[m][k] (w is M x Kc x 3 x 3);
// flip 1, the data gradient: g = w[k][m] turned 180 degrees (w is Kc x M x 3 x 3).
extern "C" __global__ void winograd_filter(const float* RESTRICT w, float* RESTRICT U, int M, int Kc, int flip) {
    const int total = M * Kc;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int m = i / Kc, k = i % Kc;
        const float* f = w + (size_t)(flip ? k * M + m : m * Kc + k) * 9;
        float g[3][3];
#pragma unroll
        for (int r = 0; r < 3; ++r)
#pragma unroll
            for (int q = 0; q < 3; ++q) g[r][q] = flip ? f[(2 - r) * 3 + (2 - q)] : f[r * 3 + q];
        float gg[4][3];  // G g
#pragma unroll
        for (int q = 0; q < 3; ++q) {
            gg[0][q] = g[0][q];
            gg[1][q] = 0.5f * (g[0][q] + g[1][q] + g[2][q]);
            gg[2][q] = 0.5f * (g[0][q] - g[1][q] + g[2][q]);
            gg[3][q] = g[2][q];
        }
        float* out = U + (size_t)m * Kc + k;
        const size_t step = (size_t)M * Kc;
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // (G g) G^T
            out[(r * 4 + 0) * step] = gg[r][0];
            out[(r * 4 + 1) * step] = 0.5f * (gg[r][0] + gg[r][1] + gg[r][2]);
            out[(r * 4 + 2) * step] = 0.5f * (gg[r][0] - gg[r][1] + gg[r][2]);
            out[(r * 4 + 3) * step] = gg[r][2];
        }
    }
}

// V[xi][c][n*T + t], one thread per (channel, image, tile): the 4x4 patch at (2*th - pad,
// 2*tw - pad), zero outside the input.
extern "C" __global__ void winograd_input(const float* RESTRICT x, float* RESTRICT V, WinoShape s) {
    const int tiles = s.TH * s.TW;
    const long long cols = (long long)s.N * tiles, total = cols * s.C;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i / cols);
        const long long col = i % cols;
        const int n = (int)(col / tiles), t = (int)(col % tiles);
        const int y0 = (t / s.TW) * 2 - s.pad, x0 = (t % s.TW) * 2 - s.pad;
        const float* plane = x + ((size_t)n * s.C + c) * s.H * s.W;
        float d[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int h = y0 + r, v = x0 + q;
                d[r][q] = h >= 0 && h < s.H && v >= 0 && v < s.W ? plane[h * s.W + v] : 0.f;
            }
        float bd[4][4];  // B^T d
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            bd[0][q] = d[0][q] - d[2][q];
            bd[1][q] = d[1][q] + d[2][q];
            bd[2][q] = d[2][q] - d[1][q];
            bd[3][q] = d[1][q] - d[3][q];
        }
        float* out = V + (size_t)c * cols + col;
        const size_t step = (size_t)s.C * cols;
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // (B^T d) B
            out[(r * 4 + 0) * step] = bd[r][0] - bd[r][2];
            out[(r * 4 + 1) * step] = bd[r][1] + bd[r][2];
            out[(r * 4 + 2) * step] = bd[r][2] - bd[r][1];
            out[(r * 4 + 3) * step] = bd[r][1] - bd[r][3];
        }
    }
}

// y[n][m] over tile t = A^T m A (+ bias[m]): 2x2 outputs, those inside P x Q written.
extern "C" __global__ void winograd_output(const float* RESTRICT Mp, const float* RESTRICT bias,
                                           float* RESTRICT y, WinoShape s, int M) {
    const int tiles = s.TH * s.TW;
    const long long cols = (long long)s.N * tiles, total = cols * M;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int m = (int)(i / cols);
        const long long col = i % cols;
        const int n = (int)(col / tiles), t = (int)(col % tiles);
        const float* in = Mp + (size_t)m * cols + col;
        const size_t step = (size_t)M * cols;
        float a[2][4];  // A^T m
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float m0 = in[q * step], m1 = in[(4 + q) * step], m2 = in[(8 + q) * step], m3 = in[(12 + q) * step];
            a[0][q] = m0 + m1 + m2;
            a[1][q] = m1 - m2 - m3;
        }
        const float b = bias != nullptr ? bias[m] : 0.f;
        const int p0 = (t / s.TW) * 2, q0 = (t % s.TW) * 2;
        float* plane = y + ((size_t)n * M + m) * s.P * s.Q;
#pragma unroll
        for (int r = 0; r < 2; ++r) {  // (A^T m) A
            const float o[2] = {a[r][0] + a[r][1] + a[r][2], a[r][1] - a[r][2] - a[r][3]};
#pragma unroll
            for (int q = 0; q < 2; ++q)
                if (p0 + r < s.P && q0 + q < s.Q) plane[(p0 + r) * s.Q + q0 + q] = o[q] + b;
        }
    }
}
