// softmax over classes (rows of an N x C row-major matrix) and its backward fused with the
// mean cross-entropy loss: dx = (p - onehot(label)) / N. Both also write each row's loss
// -log p[label] when `loss` is not null.
//
//   global  one thread per row (fwd: max, sum of exp, normalise in three passes) and one thread
//           per element (bwd).
//   shared  one block per row: the max and the sum are block reductions (warp shuffles, then
//           shared memory); bwd reads the row's label once.
#include "common.cuh"

extern "C" __global__ void softmax_fwd_global(const float* RESTRICT x, float* RESTRICT y, int N, int C) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* row = x + (size_t)n * C;
    float m = row[0], sum = 0.f;
    for (int c = 1; c < C; ++c) m = fmaxf(m, row[c]);
    for (int c = 0; c < C; ++c) sum += expf(row[c] - m);
    for (int c = 0; c < C; ++c) y[(size_t)n * C + c] = expf(row[c] - m) / sum;
}

extern "C" __global__ void softmax_fwd_shared(const float* RESTRICT x, float* RESTRICT y, int N, int C) {
    const float* row = x + (size_t)blockIdx.x * C;
    float m = __int_as_float(0xff800000);
    for (int c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce<true>(m);
    float sum = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sum += expf(row[c] - m);
    sum = block_reduce<false>(sum);
    for (int c = threadIdx.x; c < C; c += blockDim.x) y[(size_t)blockIdx.x * C + c] = expf(row[c] - m) / sum;
}

extern "C" __global__ void softmax_xent_bwd_global(const float* RESTRICT p, const int* RESTRICT labels,
                                                   float* RESTRICT dx, float* RESTRICT loss, int N, int C) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < N * C; e += gridDim.x * blockDim.x) {
        const int n = e / C, c = e % C, hit = labels[n] == c;
        dx[e] = (p[e] - (hit ? 1.f : 0.f)) / N;
        if (hit && loss != nullptr) loss[n] = -logf(p[e]);
    }
}

extern "C" __global__ void softmax_xent_bwd_shared(const float* RESTRICT p, const int* RESTRICT labels,
                                                   float* RESTRICT dx, float* RESTRICT loss, int N, int C) {
    __shared__ int label;
    const size_t row = (size_t)blockIdx.x * C;
    if (threadIdx.x == 0) label = labels[blockIdx.x];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) dx[row + c] = (p[row + c] - (c == label ? 1.f : 0.f)) / N;
    if (threadIdx.x == 0 && loss != nullptr) loss[blockIdx.x] = -logf(p[row + label]);
}
