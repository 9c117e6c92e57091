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
//   bias_grad  db[k] = sum over n and j of dy[n][k][j] (where relu_y > 0, when given), over blocks of
//            (channels, a run of images): each block adds its images' contiguous rows of dy (float4s
//            between each row's 16-byte boundaries; a linear layer's L = 1: threads along k, down
//            the images), no division by a runtime value. With one run it writes db; with more,
//            partial (runs x K), which splitk_reduce adds in run order: deterministic, no atomics.
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

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS) gemm_nn(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, true>>{{a, lda}, a_mask}, Dense<LOADS_B, false>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS) gemm_tn(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, false>>{{a, lda}, a_mask}, Dense<LOADS_B, false>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS) gemm_nt(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Masked<Dense<LOADS_A, true>>{{a, lda}, a_mask}, Dense<LOADS_B, true>{b, ldb},
              GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS) gemm_tn_images(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Dense<LOADS_A, false>{a, lda}, Images<LOADS_B, false>{b, ldb, K}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS) gemm_nt_images(GEMM_ARGS) {
    gemm_tile(M, N, K, k_chunk, Images<LOADS_A, true>{a, lda, M}, Dense<LOADS_B, true>{b, ldb}, GEMM_EPILOGUE);
}

// One batched GEMM's item: its operands, its output and its partials.
#define BATCH_ITEM                                                                   \
    const size_t item = blockIdx.y / tiles_of(M, TILE_M);                            \
    a += item * stride_a;                                                            \
    b += item * stride_b;                                                            \
    c += item * stride_c;                                                            \
    if (partial != nullptr) partial += item * gridDim.z * M * N;

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
    gemm_nn_batched(GEMM_ARGS, int stride_a, int stride_b, int stride_c) {
    BATCH_ITEM
    gemm_tile(M, N, K, k_chunk, Dense<LOADS_A, true>{a, lda}, Dense<LOADS_B, false>{b, ldb}, GEMM_EPILOGUE);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_CTAS)
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

// dy's element j of a row, or 0 where the ReLU's output (the same row of relu_y) is not positive.
template <bool MASK>
__device__ __forceinline__ float masked(const float* RESTRICT p, const float* RESTRICT m, size_t j) {
    return !MASK || m[j] > 0.f ? p[j] : 0.f;
}

// Lane `lane`'s share of one row of L floats, p[0..L) (masked by m[0..L)): scalars up to p's
// first 16-byte boundary, float4s, scalars past the last. `vector` false: scalars throughout.
template <bool MASK>
__device__ __forceinline__ void add_row(float4& acc, const float* RESTRICT p, const float* RESTRICT m, int L,
                                        int lane, bool vector) {
    const int head = vector ? min(L, (int)((16 - (reinterpret_cast<size_t>(p) & 15)) & 15) >> 2) : L;
    const int quads = (L - head) >> 2;
#pragma unroll 4
    for (int j = lane; j < head; j += 32) acc.x += masked<MASK>(p, m, j);
    const float4* RESTRICT p4 = reinterpret_cast<const float4*>(p + head);
    const float4* RESTRICT m4 = MASK ? reinterpret_cast<const float4*>(m + head) : nullptr;
#pragma unroll 4
    for (int i = lane; i < quads; i += 32) {
        float4 v = p4[i];
        if (MASK) {
            const float4 y = m4[i];
            v = make_float4(y.x > 0.f ? v.x : 0.f, y.y > 0.f ? v.y : 0.f, y.z > 0.f ? v.z : 0.f, y.w > 0.f ? v.w : 0.f);
        }
        acc = make_float4(acc.x + v.x, acc.y + v.y, acc.z + v.z, acc.w + v.w);
    }
    for (int j = head + 4 * quads + lane; j < L; j += 32) acc.y += masked<MASK>(p, m, j);
}

// L > 1: block (k, y); warp w adds the rows of images n0 + w, n0 + w + warps, ..., its lanes along
// each row; the block's sum goes to out[y * K + k]. float4s where relu_y's rows share dy's alignment.
template <bool MASK>
__device__ __forceinline__ void bias_rows(const float* RESTRICT dy, const float* RESTRICT relu_y, float* RESTRICT out,
                                          int n0, int n1, int K, int L) {
    const int k = blockIdx.x, lane = threadIdx.x % 32;
    const bool vector = !MASK || ((reinterpret_cast<size_t>(dy) ^ reinterpret_cast<size_t>(relu_y)) & 15) == 0;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int n = n0 + threadIdx.x / 32; n < n1; n += blockDim.x / 32) {
        const size_t row = ((size_t)n * K + k) * L;
        add_row<MASK>(acc, dy + row, MASK ? relu_y + row : nullptr, L, lane, vector);
    }
    const float sum = block_reduce<false>((acc.x + acc.y) + (acc.z + acc.w));
    if (threadIdx.x == 0) out[(size_t)blockIdx.y * K + k] = sum;
}

// L = 1 (dy is N x K): thread k of grid x adds column k of images [n0, n1), coalesced along k.
template <bool MASK>
__device__ __forceinline__ void bias_columns(const float* RESTRICT dy, const float* RESTRICT relu_y,
                                             float* RESTRICT out, int n0, int n1, int K) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    float acc = 0.f;
#pragma unroll 4
    for (int n = n0; n < n1; ++n) acc += masked<MASK>(dy, relu_y, (size_t)n * K + k);
    out[(size_t)blockIdx.y * K + k] = acc;
}

// dy is N x K x L (conv: L = P*Q; linear: L = 1). Block y adds images [y * rows, (y + 1) * rows)
// into out[y * K + k]: db itself with one block along y, else the partials. Grid: (K, runs) for
// L > 1, (ceil(K / blockDim.x), runs) for L = 1; any multiple of 32 threads.
extern "C" __global__ void bias_grad(const float* RESTRICT dy, const float* RESTRICT relu_y, float* RESTRICT out,
                                     int N, int K, int L, int rows) {
    const int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
    if (L == 1) {
        if (relu_y == nullptr) bias_columns<false>(dy, relu_y, out, n0, n1, K);
        else bias_columns<true>(dy, relu_y, out, n0, n1, K);
    } else if (relu_y == nullptr) {
        bias_rows<false>(dy, relu_y, out, n0, n1, K, L);
    } else {
        bias_rows<true>(dy, relu_y, out, n0, n1, K, L);
    }
}
