// softmax over classes and its backward fused with the mean cross-entropy loss. The input is
// N x C x S (S positions: 1 for a classifier, a 3-D U-Net's voxels), so a row, one position's C
// classes, is strided by S. Forward: y = exp(x - max) / sum over the row. Backward:
// dx = (p - onehot(label)) / (N S), each position with its label; both write each row's loss
// -log p[label] when `loss` is not null.
//
//   global  one thread per row (fwd: max, sum of exp, normalise in three passes; threads of a warp
//           read neighbouring positions, so each pass is coalesced where S > 1) and one thread per
//           element (bwd).
//   shared  one block per row of a classifier (S == 1): the max and the sum are block reductions
//           (warp shuffles, then shared memory); bwd reads the row's label once.
#include "common.cuh"

extern "C" __global__ void softmax_fwd_global(const float* RESTRICT x, float* RESTRICT y, int rows, int C, int S) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const size_t first = (size_t)(r / S) * C * S + r % S;  // the row's class 0
    const float* row = x + first;
    float m = row[0], sum = 0.f;
    for (int c = 1; c < C; ++c) m = fmaxf(m, row[(size_t)c * S]);
    for (int c = 0; c < C; ++c) sum += expf(row[(size_t)c * S] - m);
    for (int c = 0; c < C; ++c) y[first + (size_t)c * S] = expf(row[(size_t)c * S] - m) / sum;
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
                                                   float* RESTRICT dx, float* RESTRICT loss, int N, int C, int S) {
    const size_t count = (size_t)N * C * S;
    const float positions = (float)N * S;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        const size_t n = e / ((size_t)C * S), s = e % S, row = n * S + s;
        const int c = (int)(e / S % C), hit = labels[row] == c;
        dx[e] = (p[e] - (hit ? 1.f : 0.f)) / positions;
        if (hit && loss != nullptr) loss[row] = -logf(p[e]);
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
