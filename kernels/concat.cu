// Channel concatenation of two inputs, fp32, NC(D)HW: image n of y is image n of x (A = C1 x
// spatial floats) followed by image n of x2 (B = C2 x spatial floats); the backward splits dy
// back into dx and dx2 (either may be null: that input needs no gradient). A pure copy: every
// element is read once and written once.
//
//   global  one thread per float4 (where A and B are whole float4s, so that no vector straddles
//           an image or the seam between the inputs), else per element, grid-stride.
//   shared  blocks take tiles of y (fwd) or dy (bwd) in turn: fwd copies the tile's sources from
//           both inputs into shared memory with cp.async (LDGSTS; a plain copy in the L1-bypass
//           build), then writes the tile out from there; bwd stages the tile of dy likewise and
//           scatters it to dx and dx2. A copy reuses nothing, so shared memory saves no global
//           traffic: what it buys is all of a thread's loads in flight at once without holding
//           registers; it costs a store to and a load from shared memory an element, and 4-byte
//           accesses where the global variant moves float4s. Each thread reads back only the
//           elements it copied, so no barrier is needed.
#include "common.cuh"

// Element o of the joined tensor (y, dy) lies in the first input (x, dx) or in the second (x2,
// dx2), at offset `at` there.
struct Seam {
    int A, B;
    __device__ __forceinline__ bool first(int o, size_t& at) const {
        const int n = o / (A + B), j = o - n * (A + B);
        at = j < A ? (size_t)n * A + j : (size_t)n * B + (j - A);
        return j < A;
    }
};

template <int V>
__device__ __forceinline__ void copy(float* RESTRICT dst, const float* RESTRICT src) {
    if constexpr (V == 4)
        *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
    else
        *dst = *src;
}

template <int V>
__device__ __forceinline__ void join(const float* RESTRICT x, const float* RESTRICT x2, float* RESTRICT y, int N,
                                     Seam seam) {
    const int total = N * (seam.A + seam.B) / V;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        size_t at;
        const bool first = seam.first(e * V, at);
        copy<V>(y + (size_t)e * V, (first ? x : x2) + at);
    }
}

template <int V>
__device__ __forceinline__ void split(const float* RESTRICT dy, float* RESTRICT dx, float* RESTRICT dx2, int N,
                                      Seam seam) {
    const int total = N * (seam.A + seam.B) / V;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        size_t at;
        float* part = seam.first(e * V, at) ? dx : dx2;
        if (part != nullptr) copy<V>(part + at, dy + (size_t)e * V);
    }
}

extern "C" __global__ void concat_fwd_global(const float* RESTRICT x, const float* RESTRICT x2, float* RESTRICT y,
                                             int N, int A, int B) {
    if (A % 4 == 0 && B % 4 == 0)
        join<4>(x, x2, y, N, Seam{A, B});
    else
        join<1>(x, x2, y, N, Seam{A, B});
}

extern "C" __global__ void concat_bwd_global(const float* RESTRICT dy, float* RESTRICT dx, float* RESTRICT dx2,
                                             int N, int A, int B) {
    if (A % 4 == 0 && B % 4 == 0)
        split<4>(dy, dx, dx2, N, Seam{A, B});
    else
        split<1>(dy, dx, dx2, N, Seam{A, B});
}

// Tiles of `tile` elements of y, grid-stride; dynamic shared memory: one tile.
extern "C" __global__ void concat_fwd_shared(const float* RESTRICT x, const float* RESTRICT x2, float* RESTRICT y,
                                             int N, int A, int B, int tile) {
    extern __shared__ float staged[];
    const Seam seam{A, B};
    const int total = N * (A + B);
    for (int start = blockIdx.x * tile; start < total; start += gridDim.x * tile) {
        const int count = min(tile, total - start);
        for (int i = threadIdx.x; i < count; i += blockDim.x) {
            size_t at;
            const bool first = seam.first(start + i, at);
            copy_async(staged + i, (first ? x : x2) + at, true);
        }
        wait_copies();
        for (int i = threadIdx.x; i < count; i += blockDim.x) y[start + i] = staged[i];
    }
}

// Tiles of `tile` elements of dy, grid-stride; dynamic shared memory: one tile.
extern "C" __global__ void concat_bwd_shared(const float* RESTRICT dy, float* RESTRICT dx, float* RESTRICT dx2,
                                             int N, int A, int B, int tile) {
    extern __shared__ float staged[];
    const Seam seam{A, B};
    const int total = N * (A + B);
    for (int start = blockIdx.x * tile; start < total; start += gridDim.x * tile) {
        const int count = min(tile, total - start);
        stage(staged, dy + start, count, threadIdx.x, blockDim.x);  // waits for this thread's own copies
        for (int i = threadIdx.x; i < count; i += blockDim.x) {
            size_t at;
            float* part = seam.first(start + i, at) ? dx : dx2;
            if (part != nullptr) part[at] = staged[i];
        }
    }
}
