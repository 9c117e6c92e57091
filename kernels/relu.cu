// ReLU, fp32, any layout (element-wise).
//
//   global  vectorized: each thread moves float4s (16-byte loads and stores), grid-stride; a
//           scalar tail handles n % 4. Base pointers must be 16-byte aligned (CuPy's are).
//           Backward masks the output gradient with the forward output: dx = y > 0 ? dy : 0.
#include "common.cuh"

__device__ __forceinline__ float relu_mask(float g, float y) { return y > 0.f ? g : 0.f; }

extern "C" __global__ void relu_fwd_global(const float* RESTRICT x, float* RESTRICT y, int n) {
    const int stride = gridDim.x * blockDim.x, vectors = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
    }
    for (int i = 4 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = fmaxf(x[i], 0.f);
}

extern "C" __global__ void relu_bwd_global(const float* RESTRICT dy, const float* RESTRICT y,
                                           float* RESTRICT dx, int n) {
    const int stride = gridDim.x * blockDim.x, vectors = n / 4;
    const float4* g4 = reinterpret_cast<const float4*>(dy);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* d4 = reinterpret_cast<float4*>(dx);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const float4 g = g4[i], v = y4[i];
        d4[i] = make_float4(relu_mask(g.x, v.x), relu_mask(g.y, v.y), relu_mask(g.z, v.z), relu_mask(g.w, v.w));
    }
    for (int i = 4 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = relu_mask(dy[i], y[i]);
}
