// Gradient accumulation, fp32 (element-wise): dst += src.
//
// An activation that several layers read (a U-Net's skip: the encoder block's output feeds its
// max-pool and, later, the decoder's concatenation) gets one gradient from each reader. The
// first reader in forward order writes the activation's own gradient buffer; every other writes
// a buffer of its own, which this kernel adds in before the first backward phase that reads the
// sum (tracker/gpu/network.py). As PyTorch's autograd does, but inside that phase's range.
//
//   global  vectorized: float4 loads and stores, grid-stride, a scalar tail for n % 4. Base
//           pointers must be 16-byte aligned (CuPy's are).
#include "common.cuh"

extern "C" __global__ void grad_accumulate(const float* RESTRICT src, float* RESTRICT dst, int n) {
    const int stride = gridDim.x * blockDim.x, vectors = n / 4;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const float4 s = s4[i], d = d4[i];
        d4[i] = make_float4(d.x + s.x, d.y + s.y, d.z + s.z, d.w + s.w);
    }
    for (int i = 4 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] += src[i];
}
