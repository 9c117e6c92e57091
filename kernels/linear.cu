// linear (fully connected): y[n][o] = sum_i x[n][i] w[o][i] + b[o], fp32, row-major.
//
//   global  one thread per output (fwd), input-gradient (bwd_data) or weight-gradient
//           (bwd_weight) element, a dot product read from global memory: the baseline.
//   shared  the tiled, register-blocked GEMM of gemm.cu: fwd gemm_nt(x, w) + bias,
//           bwd_data gemm_nn(dy, w), bwd_weight gemm_tn(dy, x).
//   fused   shared with the ReLU in the forward epilogue; its backward GEMMs read dy through
//           the ReLU mask (gemm.cu's a_mask), so no separate ReLU kernel runs.
//
// Every variant's bias gradient is gemm.cu's bias_grad with L = 1.
#include "common.cuh"

extern "C" __global__ void linear_fwd_global(const float* RESTRICT x, const float* RESTRICT w,
                                             const float* RESTRICT bias, float* RESTRICT y,
                                             int N, int I, int O) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < N * O; e += gridDim.x * blockDim.x) {
        const int n = e / O, o = e % O;
        float acc = bias != nullptr ? bias[o] : 0.f;
        for (int i = 0; i < I; ++i) acc = fmaf(x[(size_t)n * I + i], w[(size_t)o * I + i], acc);
        y[e] = acc;
    }
}

extern "C" __global__ void linear_bwd_data_global(const float* RESTRICT dy, const float* RESTRICT w,
                                                  float* RESTRICT dx, int N, int I, int O) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < N * I; e += gridDim.x * blockDim.x) {
        const int n = e / I, i = e % I;
        float acc = 0.f;
        for (int o = 0; o < O; ++o) acc = fmaf(dy[(size_t)n * O + o], w[(size_t)o * I + i], acc);
        dx[e] = acc;
    }
}

extern "C" __global__ void linear_bwd_weight_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                    float* RESTRICT dw, int N, int I, int O) {
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < O * I; e += gridDim.x * blockDim.x) {
        const int o = e / I, i = e % I;
        float acc = 0.f;
        for (int n = 0; n < N; ++n) acc = fmaf(dy[(size_t)n * O + o], x[(size_t)n * I + i], acc);
        dw[e] = acc;
    }
}
