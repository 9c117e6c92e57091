// Dense GEMM and bias gradient: the matrix kernels of the conv2d `gemm` variant and of the
// linear `shared` and `fused` variants. C = op(A) op(B) (+ bias) (ReLU) (+= C), row-major,
// through common.cuh's tiled, register-blocked gemm_tile.
//
//   gemm_nn  C[M,N] = A[M,K]   B[K,N]
//   gemm_tn  C[M,N] = A[K,M]^T B[K,N]
//   gemm_nt  C[M,N] = A[M,K]   B[N,K]^T
//   a_mask   when not null, A is read through a ReLU mask (A where a_mask > 0): the fused
//            variants' backward, whose output gradient passes the ReLU inside the GEMM.
//   bias_grad  db[k] = sum over n and j of dy[n][k][j] (masked likewise): one block per channel.
//
// Grid for the GEMMs: (ceil(N / TILE_N), ceil(M / TILE_M)), GEMM_THREADS threads.
#include "common.cuh"

#define GEMM_ARGS                                                                                   \
    const float *RESTRICT a, const float *RESTRICT a_mask, const float *RESTRICT b,      \
        float *RESTRICT c, int M, int N, int K, int lda, int ldb, const float *RESTRICT bias, \
        int bias_per_row, int relu, int accumulate

#define GEMM_EPILOGUE Store{c, N, bias, bias_per_row != 0, relu != 0, accumulate != 0}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS) gemm_nn(GEMM_ARGS) {
    gemm_tile(M, N, K, Masked<Mat>{Mat{a, lda}, Mat{a_mask, lda}, a_mask != nullptr}, Mat{b, ldb}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS) gemm_tn(GEMM_ARGS) {
    gemm_tile(M, N, K, Masked<MatT>{MatT{a, lda}, MatT{a_mask, lda}, a_mask != nullptr}, Mat{b, ldb}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS) gemm_nt(GEMM_ARGS) {
    gemm_tile(M, N, K, Masked<Mat>{Mat{a, lda}, Mat{a_mask, lda}, a_mask != nullptr}, MatT{b, ldb}, GEMM_EPILOGUE);
}

// dy is N x K x L (conv: L = P*Q; linear: L = 1). Grid: (K), any multiple of 32 threads.
extern "C" __global__ void bias_grad(const float* RESTRICT dy, const float* RESTRICT relu_y,
                                     float* RESTRICT db, int N, int K, int L) {
    const int k = blockIdx.x;
    float acc = 0.f;
    for (int i = threadIdx.x; i < N * L; i += blockDim.x) {
        const size_t at = ((size_t)(i / L) * K + k) * L + i % L;
        if (relu_y == nullptr || relu_y[at] > 0.f) acc += dy[at];
    }
    acc = block_reduce<false>(acc);
    if (threadIdx.x == 0) db[k] = acc;
}
