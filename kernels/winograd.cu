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
// alpha^2 GEMMs reduce over every image's tiles (outputs x tiles times tiles x channels, split-K),
// and the output transform writes each channel pair's r x r gradient: one image of K*C planes,
// dW's own order.
//
// The input and output transforms are memory-bound: a block stages the image rows its tiles
// read (or write) in shared memory, so that its global loads and stores run along whole rows
// (whole 32-byte sectors, counted by tests/test_memory_access.py), while each thread transforms
// one tile and reads (writes) V (the products) with consecutive lanes on consecutive columns.
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
// c_wino[matrix] (0: B^T; alpha^2: G). planes and band: how the transforms' blocks cut the work
// (WinoBlock).
struct WinoShape {
    int N, C, H, W, P, Q, pad, TH, TW, m, r, extent, matrix, planes, band;
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

// A block's share of a transform: `planes` consecutive planes from plane0 (in the transformed
// array's order: V's (channel, image), the products' (output, image)), tile rows th0 .. th0 +
// rows - 1 of each. The host picks s.planes and s.band (tracker/ops/winograd.py): a band of
// tile rows of one plane, or whole planes (band == TH) where a plane has few tiles, so that the
// block's tiles are consecutive columns of V (or of the products) and its rows of the image one
// contiguous run a plane. Grid: ceil(planes / s.planes) * ceil(TH / s.band) blocks.
struct WinoBlock {
    int plane0, planes, th0, rows;
};

__device__ __forceinline__ WinoBlock wino_block(const WinoShape& s, int planes) {
    const int bands = (s.TH + s.band - 1) / s.band;
    const int plane0 = blockIdx.x / bands * s.planes, th0 = blockIdx.x % bands * s.band;
    return {plane0, min(s.planes, planes - plane0), th0, min(s.band, s.TH - th0)};
}

// V[xi][c][n*T + t], a thread per tile of a block's (see WinoBlock): the extent x extent patch at
// (m*th - pad, m*tw - pad), zero outside the input and past extent, times the matrix each side.
// The block first copies the input rows its tiles read (the patches of a row of tiles overlap by
// extent - m rows) into shared memory with cp.async, each plane's rows one contiguous run of the
// input, so that a warp's loads are whole sectors; then each thread reads its patch there and
// stores its alpha^2 values, consecutive lanes on consecutive columns of V. A warp's patch reads,
// m columns apart lane to lane, meet up to m in a bank: shared memory, not DRAM, pays for the
// patches' overlap. Dynamic shared memory: s.planes x (s.band * m + extent - m) rows of W floats.
template <int A>
__device__ __forceinline__ void input_transform(const float* RESTRICT x, float* RESTRICT V, const WinoShape& s) {
    extern __shared__ float staged[];
    const WinoBlock blk = wino_block(s, s.C * s.N);
    const int plane_floats = (s.band * s.m + s.extent - s.m) * s.W;
    const int h0 = blk.th0 * s.m - s.pad;  // the band's first input row (< 0: padding)
    const int lo = max(h0, 0), hi = min(h0 + blk.rows * s.m + s.extent - s.m, s.H);  // its rows inside the input
    const int run = max(hi - lo, 0) * s.W;
    for (int e = threadIdx.x; e < blk.planes * run; e += blockDim.x) {
        const int p = e / run, pl = blk.plane0 + p;
        const float* plane = x + ((size_t)(pl % s.N) * s.C + pl / s.N) * s.H * s.W;  // V's (c, n): x's n*C + c
        copy_async(staged + p * plane_floats + e % run, plane + (size_t)lo * s.W + e % run, true);
    }
    wait_copies();
    __syncthreads();

    const int tiles = s.TH * s.TW, count = blk.rows * s.TW;
    const size_t step = (size_t)s.C * s.N * tiles;
    for (int j = threadIdx.x; j < blk.planes * count; j += blockDim.x) {
        const int p = j / count, y0 = h0 + j % count / s.TW * s.m, x0 = j % s.TW * s.m - s.pad;
        const float* rows = staged + p * plane_floats;  // input row h at rows + (h - lo) * W
        float d[A][A], v[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) {
                const int h = y0 + a, q = x0 + b;
                const bool inside = a < s.extent && b < s.extent && h >= lo && h < hi && q >= 0 && q < s.W;
                d[a][b] = inside ? rows[(h - lo) * s.W + q] : 0.f;
            }
        sandwich<A>(d, v, s.matrix, s.matrix);  // B^T d B, or G t G^T
        float* out = V + (size_t)(blk.plane0 + p) * tiles + blk.th0 * s.TW + j % count;
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) out[(a * A + b) * step] = v[a][b];
    }
}

// y[n][o] over tile t = A^T m A (+ bias[o]), a thread per tile of a block's (see WinoBlock), the
// products read as V is written (consecutive lanes on consecutive columns). Each thread puts its
// m x m outputs where they lie in the block's rows of y, staged in shared memory (those past Q
// left out, those past P staged and never copied), and the block then copies each plane's rows to
// y as one contiguous run, so that a warp's stores are whole sectors. Dynamic shared memory:
// s.planes x s.band * m rows of Q floats.
template <int A>
__device__ __forceinline__ void output_transform(const float* RESTRICT Mp, const float* RESTRICT bias,
                                                 float* RESTRICT y, const WinoShape& s, int M) {
    extern __shared__ float staged[];
    const WinoBlock blk = wino_block(s, M * s.N);
    const int plane_floats = s.band * s.m * s.Q, p0 = blk.th0 * s.m;  // the band's first row of y
    const int tiles = s.TH * s.TW, count = blk.rows * s.TW;
    const size_t step = (size_t)M * s.N * tiles;
    for (int j = threadIdx.x; j < blk.planes * count; j += blockDim.x) {
        const int p = j / count, r0 = j % count / s.TW * s.m, q0 = j % s.TW * s.m;
        const float* in = Mp + (size_t)(blk.plane0 + p) * tiles + blk.th0 * s.TW + j % count;
        float m[A][A], out[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) m[a][b] = in[(a * A + b) * step];
        sandwich<A>(m, out, 2 * A * A, 2 * A * A);  // A^T m A (rows past m are zero)
        const float bb = bias != nullptr ? bias[(blk.plane0 + p) / s.N] : 0.f;
        float* rows = staged + p * plane_floats;  // row p0 + r of y at rows + r * Q
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b)
                if (a < s.m && b < s.m && q0 + b < s.Q)
                    rows[(r0 + a) * s.Q + q0 + b] = out[a][b] + bb;
    }
    __syncthreads();

    const int run = min(blk.rows * s.m, s.P - p0) * s.Q;
    for (int e = threadIdx.x; e < blk.planes * run; e += blockDim.x) {
        const int p = e / run, pl = blk.plane0 + p;
        float* plane = y + ((size_t)(pl % s.N) * M + pl / s.N) * s.P * s.Q;  // the products' (o, n): y's n*M + o
        plane[(size_t)p0 * s.Q + e % run] = staged[p * plane_floats + e % run];
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
