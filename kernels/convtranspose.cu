// The transposed convolution's forward where its stride equals its kernel (the U-Nets' 2x2 and
// 2x2x2 stride-2 up-convolutions, tracker/ops/convtranspose.py's `gemm` variant): the windows do
// not overlap, so each output element is one product of gemm.cu's gemm_tn_images,
// col (images x C*taps x positions) = W^T x, plus its channel's bias. This kernel places it:
// one thread per output element, coalesced writes, reads from the taps' rows of col.
//
// Input positions D x H x W (D = 1 in 2-D), kernel kd x k x k (kd = 1 in 2-D), output
// (D kd) x (H k) x (W k); col's row c*taps + (a*k + b)*k + e holds channel c at tap (a, b, e).
#include "common.cuh"

extern "C" __global__ void convtranspose_scatter(const float* RESTRICT col, const float* RESTRICT bias,
                                                 float* RESTRICT y, int N, int C, int D, int H, int W, int kd,
                                                 int k) {
    const size_t Wo = (size_t)W * k, Ho = (size_t)H * k, Do = (size_t)D * kd, taps = (size_t)kd * k * k;
    const size_t positions = (size_t)D * H * W, count = (size_t)N * C * Do * Ho * Wo;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x) {
        const size_t wo = e % Wo, ho = e / Wo % Ho, d_o = e / (Wo * Ho) % Do, c = e / (Wo * Ho * Do) % C;
        const size_t n = e / (Wo * Ho * Do * C);
        const size_t tap = (d_o % kd * k + ho % k) * k + wo % k;
        const size_t position = (d_o / kd * H + ho / k) * W + wo / k;
        y[e] = col[((n * C + c) * taps + tap) * positions + position] + (bias != nullptr ? bias[c] : 0.f);
    }
}
