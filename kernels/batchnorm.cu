// Batch normalization in training mode, fp32, NCHW or NCDHW: x is read as (N, C, S), S the
// positions of an image (H*W or D*H*W), and channel c's statistics run over its M = N*S elements.
// Forward: mean, biased variance var, invstd = 1 / sqrt(var + eps), y = (x - mean) * invstd * w + b;
// mean and invstd are saved for the backward, and the running statistics move by `momentum` towards
// mean and the unbiased variance var * M / (M - 1) (PyTorch's F.batch_norm with training=True).
// Backward, with xhat = (x - mean) * invstd: dw = sum dy xhat, db = sum dy (bwd_weight), and
// dx = w invstd / M (M dy - sum dy - xhat sum dy xhat) (bwd_data; it sums for itself, so that each
// phase runs alone). The statistics are Welford's: each thread keeps a running (count, mean, M2) and
// those are merged pairwise (Chan et al.), so a channel far from zero loses no digits to a sum of
// squares. Every sum is added in a fixed order: deterministic, no atomics.
//
//   global  every reduction over global memory, no shared memory: a grid of (parts, C) blocks whose
//           threads walk their share of the channel in registers, each warp merging its 32 with
//           shuffles and writing one partial to global memory; one thread per channel merges the
//           channel's partials in order; then an element-wise grid-stride launch normalizes (or
//           writes dx). Every SM is busy whatever C is. The cost: three launches a phase (two for
//           bwd_weight), the partials' round trip through global memory, and a second read of x
//           (and dy) by the element-wise launch, which no block can start before the last
//           partial is merged.
//   shared  one block per channel does the whole phase in one launch: its threads walk the
//           channel, the block merges their statistics through shared memory (warp shuffles, then
//           one slot a warp), and the result, broadcast through shared memory, normalizes the
//           channel (or writes its dx) in the same launch. Shared memory buys the cross-thread
//           reduction without a partial in global memory, a second launch or a grid-wide wait; it
//           costs parallelism: only C blocks run (a 32-channel layer keeps 32 of an H100's 132 SMs
//           busy), each walking its M elements twice, the second time from L2 at best.
#include "common.cuh"

struct BnShape {
    int N, C, S;
    float eps, momentum;
};

// A running count, mean and sum of squared deviations (M2).
struct Moments {
    float n, mean, m2;
    __device__ __forceinline__ void push(float v) {
        n += 1.f;
        const float d = v - mean;
        mean += d / n;
        m2 = fmaf(d, v - mean, m2);
    }
    // Chan et al.'s pairwise merge; either side may be empty.
    __device__ __forceinline__ void merge(float on, float omean, float om2) {
        const float total = n + on;
        if (total == 0.f) return;
        const float d = omean - mean, share = on / total;
        mean = fmaf(d, share, mean);
        m2 += om2 + d * d * n * share;
        n = total;
    }
};

// Every lane's moments merged across its warp (registers only); every lane of the warp calls it.
__device__ __forceinline__ Moments warp_moments(Moments m) {
    for (int o = 16; o > 0; o >>= 1) {
        const float n = __shfl_xor_sync(0xffffffffu, m.n, o), mean = __shfl_xor_sync(0xffffffffu, m.mean, o),
                    m2 = __shfl_xor_sync(0xffffffffu, m.m2, o);
        m.merge(n, mean, m2);
    }
    return m;
}

// The block's moments, in every thread: each warp's through shuffles, then the warps' through one
// shared slot each, merged by warp 0 and broadcast through shared memory (blockDim.x a multiple of
// 32). Called once per launch.
__device__ __forceinline__ Moments block_moments(Moments m) {
    __shared__ float slots[3][32];
    __shared__ float result[3];
    m = warp_moments(m);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) {
        slots[0][warp] = m.n;
        slots[1][warp] = m.mean;
        slots[2][warp] = m.m2;
    }
    __syncthreads();
    if (warp == 0) {
        Moments t{0.f, 0.f, 0.f};
        if (lane < warps) t = Moments{slots[0][lane], slots[1][lane], slots[2][lane]};
        t = warp_moments(t);
        if (lane == 0) {
            result[0] = t.n;
            result[1] = t.mean;
            result[2] = t.m2;
        }
    }
    __syncthreads();
    return Moments{result[0], result[1], result[2]};
}

// f(offset) for each element of channel c at flat indices first, first + stride, ... below M
// (index j: image j / S, position j % S), carrying image and position rather than dividing.
template <class F>
__device__ __forceinline__ void walk_channel(int c, int first, int stride, const BnShape& s, F f) {
    const int q = stride / s.S, r = stride % s.S;
    int n = first / s.S, p = first % s.S;
    while (n < s.N) {
        f(((size_t)n * s.C + c) * s.S + p);
        n += q;
        p += r;
        if (p >= s.S) {
            p -= s.S;
            ++n;
        }
    }
}

// Channel c's statistics from its moments over all M elements: saves mean and invstd, moves the
// running statistics (null: none kept); returns invstd.
__device__ __forceinline__ float save_stats(int c, const Moments& m, float* RESTRICT mean, float* RESTRICT invstd,
                                            float* RESTRICT running_mean, float* RESTRICT running_var,
                                            const BnShape& s) {
    const float M = (float)s.N * (float)s.S, inv = 1.f / sqrtf(m.m2 / M + s.eps);
    mean[c] = m.mean;
    invstd[c] = inv;
    if (running_mean != nullptr) running_mean[c] = (1.f - s.momentum) * running_mean[c] + s.momentum * m.mean;
    if (running_var != nullptr)
        running_var[c] = (1.f - s.momentum) * running_var[c] + s.momentum * (m.m2 / (M - 1.f));
    return inv;
}

// dx of one element from its channel's scale a = w invstd and sums as means (g: sum dy / M,
// gx: sum dy xhat / M).
__device__ __forceinline__ float bn_dx(float dy, float xhat, float a, float g, float gx) {
    return a * (dy - g - xhat * gx);
}

// ---- global ------------------------------------------------------------------------------------

// Grid (parts, C). partial: C x (parts * warps) x 3 (count, mean, M2), one a warp.
extern "C" __global__ void batchnorm_moments_global(const float* RESTRICT x, float* RESTRICT partial, BnShape s) {
    const int c = blockIdx.y;
    Moments m{0.f, 0.f, 0.f};
    walk_channel(c, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x, s,
                 [&](size_t at) { m.push(x[at]); });
    m = warp_moments(m);  // every lane takes part, those with no element too
    if (threadIdx.x % 32 == 0) {
        float* out = partial + 3 * (((size_t)c * gridDim.x + blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32);
        out[0] = m.n;
        out[1] = m.mean;
        out[2] = m.m2;
    }
}

// One thread per channel: its `parts` partial moments merged in order.
extern "C" __global__ void batchnorm_stats_global(const float* RESTRICT partial, float* RESTRICT mean,
                                                  float* RESTRICT invstd, float* RESTRICT running_mean,
                                                  float* RESTRICT running_var, int parts, BnShape s) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= s.C) return;
    Moments m{0.f, 0.f, 0.f};
    for (int p = 0; p < parts; ++p) {
        const float* in = partial + 3 * ((size_t)c * parts + p);
        m.merge(in[0], in[1], in[2]);
    }
    save_stats(c, m, mean, invstd, running_mean, running_var, s);
}

// Grid-stride over every element: y = (x - mean) * invstd * w + b.
extern "C" __global__ void batchnorm_fwd_global(const float* RESTRICT x, const float* RESTRICT mean,
                                                const float* RESTRICT invstd, const float* RESTRICT w,
                                                const float* RESTRICT b, float* RESTRICT y, BnShape s) {
    const int total = s.N * s.C * s.S;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int c = (e / s.S) % s.C;
        y[e] = fmaf(x[e] - mean[c], invstd[c] * w[c], b[c]);
    }
}

// Grid (parts, C). partial: C x (parts * warps) x 2 (sum dy, sum dy (x - mean)), one a warp.
extern "C" __global__ void batchnorm_sums_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                 const float* RESTRICT mean, float* RESTRICT partial, BnShape s) {
    const int c = blockIdx.y;
    const float mu = mean[c];
    float g = 0.f, gx = 0.f;
    walk_channel(c, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x, s, [&](size_t at) {
        const float d = dy[at];
        g += d;
        gx = fmaf(d, x[at] - mu, gx);
    });
    g = warp_sum(g);
    gx = warp_sum(gx);
    if (threadIdx.x % 32 == 0) {
        float* out = partial + 2 * (((size_t)c * gridDim.x + blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32);
        out[0] = g;
        out[1] = gx;
    }
}

// One thread per channel: its `parts` partial sums added in order; dw = sum dy xhat, db = sum dy
// (bwd_weight's outputs, or bwd_data's sums).
extern "C" __global__ void batchnorm_sums_finish_global(const float* RESTRICT partial, const float* RESTRICT invstd,
                                                        float* RESTRICT dw, float* RESTRICT db, int parts, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float g = 0.f, gx = 0.f;
    for (int p = 0; p < parts; ++p) {
        const float* in = partial + 2 * ((size_t)c * parts + p);
        g += in[0];
        gx += in[1];
    }
    dw[c] = gx * invstd[c];
    db[c] = g;
}

// Grid-stride over every element: dx from the channel's sums (dw: sum dy xhat, db: sum dy).
extern "C" __global__ void batchnorm_bwd_data_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                     const float* RESTRICT mean, const float* RESTRICT invstd,
                                                     const float* RESTRICT w, const float* RESTRICT dw,
                                                     const float* RESTRICT db, float* RESTRICT dx, BnShape s) {
    const int total = s.N * s.C * s.S;
    const float per = 1.f / ((float)s.N * (float)s.S);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int c = (e / s.S) % s.C;
        const float inv = invstd[c];
        dx[e] = bn_dx(dy[e], (x[e] - mean[c]) * inv, w[c] * inv, db[c] * per, dw[c] * per);
    }
}

// ---- shared ------------------------------------------------------------------------------------
// Grid (C,): one block per channel, blockDim.x a multiple of 32.

extern "C" __global__ void batchnorm_fwd_shared(const float* RESTRICT x, const float* RESTRICT w,
                                                const float* RESTRICT b, float* RESTRICT y, float* RESTRICT mean,
                                                float* RESTRICT invstd, float* RESTRICT running_mean,
                                                float* RESTRICT running_var, BnShape s) {
    const int c = blockIdx.x;
    Moments m{0.f, 0.f, 0.f};
    walk_channel(c, threadIdx.x, blockDim.x, s, [&](size_t at) { m.push(x[at]); });
    m = block_moments(m);
    const float M = (float)s.N * (float)s.S, inv = 1.f / sqrtf(m.m2 / M + s.eps);
    if (threadIdx.x == 0) save_stats(c, m, mean, invstd, running_mean, running_var, s);
    const float mu = m.mean, scale = inv * w[c], shift = b[c];
    walk_channel(c, threadIdx.x, blockDim.x, s, [&](size_t at) { y[at] = fmaf(x[at] - mu, scale, shift); });
}

// The channel's sum dy (g) and sum dy (x - mean) (gx), in every thread of its block.
struct Sums {
    float g, gx;
};
__device__ __forceinline__ Sums channel_sums(const float* RESTRICT dy, const float* RESTRICT x, float mu, int c,
                                               const BnShape& s) {
    float g = 0.f, gx = 0.f;
    walk_channel(c, threadIdx.x, blockDim.x, s, [&](size_t at) {
        const float d = dy[at];
        g += d;
        gx = fmaf(d, x[at] - mu, gx);
    });
    return Sums{block_reduce<false>(g), block_reduce<false>(gx)};
}

extern "C" __global__ void batchnorm_bwd_weight_shared(const float* RESTRICT dy, const float* RESTRICT x,
                                                       const float* RESTRICT mean, const float* RESTRICT invstd,
                                                       float* RESTRICT dw, float* RESTRICT db, BnShape s) {
    const int c = blockIdx.x;
    const Sums sums = channel_sums(dy, x, mean[c], c, s);
    if (threadIdx.x == 0) {
        dw[c] = sums.gx * invstd[c];
        db[c] = sums.g;
    }
}

extern "C" __global__ void batchnorm_bwd_data_shared(const float* RESTRICT dy, const float* RESTRICT x,
                                                     const float* RESTRICT mean, const float* RESTRICT invstd,
                                                     const float* RESTRICT w, float* RESTRICT dx, BnShape s) {
    const int c = blockIdx.x;
    const float mu = mean[c], inv = invstd[c];
    const Sums sums = channel_sums(dy, x, mu, c, s);
    const float per = 1.f / ((float)s.N * (float)s.S), a = w[c] * inv, g = sums.g * per, gx = sums.gx * inv * per;
    walk_channel(c, threadIdx.x, blockDim.x, s,
                 [&](size_t at) { dx[at] = bn_dx(dy[at], (x[at] - mu) * inv, a, g, gx); });
}
