// sigmoid, fp32, any layout (element-wise): y = 1 / (1 + exp(-x)), the U-Nets' output layer. Its
// backward is fused with the mean binary cross-entropy over the N images of E elements each,
// against float targets t of the output's shape (0 or 1): dx = (y - t) / (N * E), and, where
// `loss` is not null, loss[n] = image n's mean of max(x, 0) - x t + log1p(exp(-|x|)), each term
// computed from the logit x, so that no log ever sees 0 (the mean of loss is the batch's loss).
//
//   global  fwd: vectorized, each thread moves float4s, grid-stride, a scalar tail for n % 4 (as
//           relu.cu). bwd: a grid of (blocks, N), each thread walking its image's elements,
//           writing dx and summing its loss terms in a register; each warp adds its 32 sums with
//           shuffles (registers, no shared memory) and writes one partial to global memory, and
//           sigmoid_bce_loss_global adds each image's partials in order: deterministic, no atomics,
//           every SM busy at any batch; the cost is a second launch and the partials' round trip
//           through global memory.
//   shared  fwd: each block stages a tile of x in shared memory with cp.async (LDGSTS; a plain copy
//           in the L1-bypass build), then computes from it. No element is read twice, so shared
//           memory saves no global traffic: what it buys is all of a thread's tile loads in flight
//           at once without holding registers; it costs a store to and a load from shared memory
//           an element. Each thread reads back only what it copied, so no barrier is needed.
//           bwd: one block of IMAGE_THREADS per image, the image's loss a block reduction (warp
//           shuffles, then shared memory across warps): one launch, no partials in global memory,
//           but only N blocks run, each on one SM (a U-Net trains at small batches).
#include "common.cuh"

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// One element's binary cross-entropy of sigmoid(x) against t, from the logit.
__device__ __forceinline__ float bce_term(float x, float t) { return fmaxf(x, 0.f) - x * t + log1pf(expf(-fabsf(x))); }

extern "C" __global__ void sigmoid_fwd_global(const float* RESTRICT x, float* RESTRICT y, int n) {
    const int stride = gridDim.x * blockDim.x, vectors = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(sigmoid(v.x), sigmoid(v.y), sigmoid(v.z), sigmoid(v.w));
    }
    for (int i = 4 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = sigmoid(x[i]);
}

// Blocks take tiles of `tile` elements, grid-stride; dynamic shared memory: one tile.
extern "C" __global__ void sigmoid_fwd_shared(const float* RESTRICT x, float* RESTRICT y, int n, int tile) {
    extern __shared__ float staged[];
    for (int start = blockIdx.x * tile; start < n; start += gridDim.x * tile) {
        const int count = min(tile, n - start);
        stage(staged, x + start, count, threadIdx.x, blockDim.x);  // waits for this thread's own copies
        for (int i = threadIdx.x; i < count; i += blockDim.x) y[start + i] = sigmoid(staged[i]);
    }
}

// Grid (blocks per image, N). partial: N x (gridDim.x * warps) sums, or null (no loss wanted).
extern "C" __global__ void sigmoid_bce_bwd_global(const float* RESTRICT x, const float* RESTRICT y,
                                                  const float* RESTRICT t, float* RESTRICT dx,
                                                  float* RESTRICT partial, int N, int E) {
    const size_t base = (size_t)blockIdx.y * E;
    const float scale = 1.f / ((float)N * (float)E);
    float sum = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < E; i += gridDim.x * blockDim.x) {
        const float target = t[base + i];
        dx[base + i] = (y[base + i] - target) * scale;
        sum += bce_term(x[base + i], target);
    }
    sum = warp_sum(sum);  // every lane takes part, those with no element too
    const int warps = blockDim.x / 32;
    if (partial != nullptr && threadIdx.x % 32 == 0)
        partial[((size_t)blockIdx.y * gridDim.x + blockIdx.x) * warps + threadIdx.x / 32] = sum;
}

// One thread per image: its `parts` partial sums added in order, over E.
extern "C" __global__ void sigmoid_bce_loss_global(const float* RESTRICT partial, float* RESTRICT loss, int N,
                                                   int parts, int E) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float sum = 0.f;
    for (int p = 0; p < parts; ++p) sum += partial[(size_t)n * parts + p];
    loss[n] = sum / E;
}

// Grid (N,): one block per image.
extern "C" __global__ void sigmoid_bce_bwd_shared(const float* RESTRICT x, const float* RESTRICT y,
                                                  const float* RESTRICT t, float* RESTRICT dx,
                                                  float* RESTRICT loss, int N, int E) {
    const size_t base = (size_t)blockIdx.x * E;
    const float scale = 1.f / ((float)N * (float)E);
    float sum = 0.f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) {
        const float target = t[base + i];
        dx[base + i] = (y[base + i] - target) * scale;
        sum += bce_term(x[base + i], target);
    }
    sum = block_reduce<false>(sum);
    if (threadIdx.x == 0 && loss != nullptr) loss[blockIdx.x] = sum / E;
}
