// Dense GEMM, its split-K reduction and the bias gradient: the matrix kernels of the conv2d
// `gemm` variant and of the linear `shared` and `fused` variants. C = op(A) op(B) (+ bias)
// (ReLU) (+= C), row-major, through common.cuh's gemm_tile.
//
//   gemm_nn  C[M,N] = A[M,K]   B[K,N]
//   gemm_tn  C[M,N] = A[K,M]^T B[K,N]
//   gemm_nt  C[M,N] = A[M,K]   B[N,K]^T
//   gemm_tn_images  gemm_tn whose B is images of K x ldb (N = images x ldb): the conv gemm
//            variant's data gradient, col = W^T dy over a chunk of images.
//   gemm_nt_images  gemm_nt whose A is images of M x lda (K = images x lda): its weight
//            gradient, dw += dy col^T over a chunk of images.
//   a_mask   when not null, A is read through a ReLU mask (A where a_mask > 0): the fused
//            variants' backward, whose output gradient passes the ReLU inside the GEMM. The
//            _images kernels (the gemm variant's, which has no fused ReLU) ignore it.
//   per_image  C's columns per image (the conv `gemm` variant's batched output); N for a matrix.
//   gemm_nn_batched, gemm_nt_batched  `batch` independent GEMMs of one shape in one launch (a
//            Winograd variant's transformed points, the FFT's frequencies): item i reads A + i
//            stride_a, B + i stride_b and writes C + i stride_c (its partials: partial + i x splits
//            x M x N); grid y holds the items' row tiles in turn (common.cuh's gemm_tile).
//   splitk_reduce  C = the sum of the split-K partials, in split order, through the epilogue; for
//            a batch, each item's (partial: batch x splits x M x N; C + i stride_c).
//   bias_grad  db[k] = sum over n and j of dy[n][k][j] (masked likewise): one block per channel.
//
// Grid for the GEMMs: (ceil(N / TILE_N), ceil(M / TILE_M) x batch, splits), GEMM_THREADS threads;
// with more than one split, `partial` holds batch x splits x M x N floats.
#include "common.cuh"

#define GEMM_ARGS                                                                                 \
    const float *RESTRICT a, const float *RESTRICT a_mask, const float *RESTRICT b, float *RESTRICT c, \
        float *RESTRICT partial, int M, int N, int K, int lda, int ldb, int k_chunk, int per_image,   \
        const float *RESTRICT bias, int bias_per_row, int relu, int accumulate

#define GEMM_EPILOGUE                                                                                   \
    split_store(Store{c, M, per_image, bias, bias_per_row != 0, relu != 0, accumulate != 0}, partial, M, N)

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS) gemm_nn(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, true>>{{a, lda}, a_mask}, Dense<LOADS_B, false>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS) gemm_tn(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, false>>{{a, lda}, a_mask}, Dense<LOADS_B, false>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS) gemm_nt(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, true>>{{a, lda}, a_mask}, Dense<LOADS_B, true>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS) gemm_tn_images(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Dense<LOADS_A, false>{a, lda}, Images<LOADS_B, false>{b, ldb, K}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS) gemm_nt_images(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Images<LOADS_A, true>{a, lda, M}, Dense<LOADS_B, true>{b, ldb}, GEMM_EPILOGUE);
}

// One batched GEMM's item: its operands, its output and its partials.
#define BATCH_ITEM                                                                   \
    const size_t item = blockIdx.y / tiles_of(M, TILE_M);                            \
    a += item * stride_a;                                                            \
    b += item * stride_b;                                                            \
    c += item * stride_c;                                                            \
    if (partial != nullptr) partial += item * gridDim.z * M * N;

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS)
    gemm_nn_batched(GEMM_ARGS, int stride_a, int stride_b, int stride_c) {
    BATCH_ITEM
    gemm_tile(M, N, K, k_chunk, Dense<LOADS_A, true>{a, lda}, Dense<LOADS_B, false>{b, ldb}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, MIN_CTAS)
    gemm_nt_batched(GEMM_ARGS, int stride_a, int stride_b, int stride_c) {
    BATCH_ITEM
    gemm_tile(M, N, K, k_chunk, Dense<LOADS_A, true>{a, lda}, Dense<LOADS_B, true>{b, ldb}, GEMM_EPILOGUE);
}

// Grid-stride over the batch x M x N outputs, any block size.
extern "C" __global__ void splitk_reduce(const float* RESTRICT partial, int splits, float* RESTRICT c, int M,
                                         int N, int per_image, const float* RESTRICT bias, int bias_per_row,
                                         int relu, int accumulate, int batch, int stride_c) {
    const size_t plane = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < batch * plane; i += (size_t)gridDim.x * blockDim.x) {
        const size_t item = i / plane, at = i % plane;
        const Store out{c + item * stride_c, M, per_image, bias, bias_per_row != 0, relu != 0, accumulate != 0};
        float v = 0.f;
        for (int z = 0; z < splits; ++z) v += partial[(item * splits + z) * plane + at];
        out((int)(at / N), (int)(at % N), v);
    }
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
