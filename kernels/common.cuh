// Shared device code: the tiled, register-blocked GEMM every matrix-shaped variant uses, the
// loaders that feed it (dense matrices, and implicit im2col views of a convolution), and its
// epilogue (bias, ReLU, accumulate). One GEMM body, many callers: no kernel body is copied.
//
// C[m][n] = sum_k A(m, k) * B(k, n), tiles of TILE_M x TILE_N x TILE_K (64 x 64 x 16), each
// thread a THREAD_M x THREAD_N register block (4 x 4) at rows ty + ROWS i and columns tx + COLS j,
// ROWS x COLS = GEMM_THREADS threads (16 x 16; strided, so shared-memory reads broadcast or hit
// distinct banks and the epilogue's stores coalesce).
//
// The sizes are not written here: tracker/ops/gemm.py hands them to NVRTC as -D options (and
// tracker/ops/*.py the others: CONSTANT_FLOATS, POOL_TILE), so the launch grids computed in
// Python and the kernels compiled from here read the same numbers.
#pragma once

// Kernel pointers are `T* RESTRICT`. By default that is __restrict__, and the compiler, knowing
// that an input aliases no output, loads it through the read-only path (LDG.E.CONSTANT), which
// caches in L1 whatever -dlcm says. The L1-bypass build (-DTRACKER_L1_BYPASS beside -Xptxas
// -dlcm=cg) drops __restrict__, so that every global load is a plain LDG, which -dlcm=cg sends
// around L1. `tracker kernels` shows each build's load mix, read from its SASS.
#ifdef TRACKER_L1_BYPASS
#define RESTRICT
#else
#define RESTRICT __restrict__
#endif

#if !defined(TILE_M) || !defined(TILE_N) || !defined(TILE_K) || !defined(THREAD_M) || !defined(THREAD_N) || \
    !defined(GEMM_THREADS)
#error "the GEMM's sizes come from tracker/ops/gemm.py as -D options (tracker.gpu.kernels.compile_options)"
#endif
static_assert((TILE_M / THREAD_M) * (TILE_N / THREAD_N) == GEMM_THREADS, "one thread per register block");

// Dense row-major matrix: element (r, c) at p[r * ld + c]; consecutive c are contiguous.
struct Mat {
    const float* RESTRICT p;
    int ld;
    static constexpr bool second_contiguous = true;
    __device__ __forceinline__ float operator()(int r, int c) const { return p[(size_t)r * ld + c]; }
};

// Transposed view of a row-major matrix: element (r, c) at p[c * ld + r].
struct MatT {
    const float* RESTRICT p;
    int ld;
    static constexpr bool second_contiguous = false;
    __device__ __forceinline__ float operator()(int r, int c) const { return p[(size_t)c * ld + r]; }
};

// A gradient seen through a ReLU: g(r, c), zero where the ReLU's output y(r, c) is not positive.
// y is read through the same loader type, so it follows g's layout. The fused variants'
// backward kernels use it (masked == false: g as it is).
template <class L>
struct Masked {
    L g;
    L y;
    bool masked;
    static constexpr bool second_contiguous = L::second_contiguous;
    __device__ __forceinline__ float operator()(int r, int c) const {
        const float v = g(r, c);
        return (!masked || y(r, c) > 0.f) ? v : 0.f;
    }
};

// Convolution geometry of one layer (NCHW input, KCRS filters, NKPQ output).
struct ConvShape {
    int N, C, H, W, K, R, S, P, Q, stride, pad;
};

// Epilogue: C[m * ldc + n] = (accumulate ? C : 0) + v + bias, then ReLU if asked.
struct Store {
    float* RESTRICT c;
    int ldc;
    const float* RESTRICT bias;  // nullptr: none
    bool bias_per_row;              // bias[m] (conv: per output channel) or bias[n] (linear)
    bool relu;
    bool accumulate;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        if (bias != nullptr) v += bias[bias_per_row ? m : n];
        if (relu) v = fmaxf(v, 0.f);
        float* dst = c + (size_t)m * ldc + n;
        *dst = accumulate ? *dst + v : v;
    }
};

template <class A, class B, class Epi>
__device__ __forceinline__ void gemm_tile(int M, int N, int K, const A& a, const B& b, const Epi& epi) {
    __shared__ float As[TILE_K][TILE_M + 1];
    __shared__ float Bs[TILE_K][TILE_N + 1];
    constexpr int ROWS = TILE_M / THREAD_M, COLS = TILE_N / THREAD_N;
    const int tx = threadIdx.x % COLS, ty = threadIdx.x / COLS;
    const int m0 = blockIdx.y * TILE_M, n0 = blockIdx.x * TILE_N;
    float acc[THREAD_M][THREAD_N] = {};
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        // Consecutive threads walk the loader's contiguous index, so global loads coalesce.
        for (int i = threadIdx.x; i < TILE_M * TILE_K; i += GEMM_THREADS) {
            const int mm = A::second_contiguous ? i / TILE_K : i % TILE_M;
            const int kk = A::second_contiguous ? i % TILE_K : i / TILE_M;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? a(m, k) : 0.f;
        }
        for (int i = threadIdx.x; i < TILE_N * TILE_K; i += GEMM_THREADS) {
            const int nn = B::second_contiguous ? i % TILE_N : i / TILE_K;
            const int kk = B::second_contiguous ? i / TILE_N : i % TILE_K;
            const int n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? b(k, n) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE_K; ++kk) {
            float ar[THREAD_M], br[THREAD_N];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i) ar[i] = As[kk][ty + ROWS * i];
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j) br[j] = Bs[kk][tx + COLS * j];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) {
            const int m = m0 + ty + ROWS * i, n = n0 + tx + COLS * j;
            if (m < M && n < N) epi(m, n, acc[i][j]);
        }
}

// Block-wide sum or max of one value per thread (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v) {
    __shared__ float partial[32];
    __shared__ float result;
    v = MAX ? warp_max(v) : warp_sum(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? partial[lane] : (MAX ? __int_as_float(0xff800000) : 0.f);
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) result = v;
    }
    __syncthreads();
    const float out = result;
    __syncthreads();  // the shared slots are reused by the next call
    return out;
}
