// max-pool, fp32, NCHW, no padding; windows may overlap (AlexNet: 3x3, stride 2). The backward
// gives each output's gradient to the first maximum of its window (row-major order), as PyTorch
// does, and overlapping windows add: both backward kernels gather per input element, so no two
// threads write one address, no atomics are needed and the sums' order is fixed.
//
//   global  one thread per output (fwd) or input (bwd), every read from global memory; the bwd
//           finds the maximum of each window that covers its input (about 2.25 windows each at
//           3x3 stride 2): the baseline, which saves nothing between the phases.
//   shared  one block per band of rows of one plane, full width (the host sizes the bands, see
//           tracker/ops/maxpool.py). fwd: the input rows the band's windows read are one
//           contiguous run of the plane, staged in shared memory with cp.async; it writes each
//           output's value and the int32 offset of its window's maximum in the plane (`argmax`,
//           the output's shape; PyTorch's return_indices). bwd reads no x and finds no maximum:
//           it stages the gradients and saved offsets of the windows that meet its band of input
//           rows, and each input adds the gradients of the covering windows whose offset is its
//           own (at most 4 compares an input at 3x3 stride 2): neither x staged (4.1 times the
//           output at AlexNet's pool1) nor any window's 9 values compared again.
//
// The 3-D kernels (maxpool3d_*: the 3-D U-Net's 2x2x2, stride 2) are the same with a depth axis:
// the window's first maximum in (depth, row, column) order, saved as its offset in the image's
// input volume; the shared variant's blocks stage the `size` depth slices a band of windows
// reads (fwd), or the gradients and offsets of the windows meeting a band of input rows of one
// depth slice (bwd).
//
// The common windows (3x3 and 2x2, stride 2) are compiled as constants: the window's loads are
// unrolled, so a thread has them all in flight at once, and divisions by the stride are shifts.
#include "common.cuh"

struct PoolShape {
    int N, C, H, W, P, Q, size, stride;
};

// A window's size and stride: template arguments when they are known (> 0), else run-time.
template <int SIZE, int STRIDE>
struct Window {
    int size_, stride_;
    __device__ __forceinline__ int size() const { return SIZE ? SIZE : size_; }
    __device__ __forceinline__ int stride() const { return STRIDE ? STRIDE : stride_; }
    // The outputs whose windows cover input row (or column) h of `extent` outputs: lo .. hi.
    __device__ __forceinline__ void covering(int h, int extent, int& lo, int& hi) const {
        lo = h - size() + 1 <= 0 ? 0 : (h - size() + stride()) / stride();
        hi = min(h / stride(), extent - 1);
    }
};

// Calls Body::run(window, args...) with the shape's window, compiled for it where it is a common
// one. A struct's member template, not a generic lambda: NVRTC 13.0 takes a lambda's call operator
// for a host function, which JIT mode rejects, and marking it __device__ needs --extended-lambda.
template <class Body, class Shape, class... Args>
__device__ __forceinline__ void with_window(const Shape& s, Args... args) {
    if (s.size == 3 && s.stride == 2)
        Body::run(Window<3, 2>{3, 2}, args...);
    else if (s.size == 2 && s.stride == 2)
        Body::run(Window<2, 2>{2, 2}, args...);
    else
        Body::run(Window<0, 0>{s.size, s.stride}, args...);
}

// The first maximum (row-major) of the window whose corner is `corner`, in rows `pitch` apart:
// its value in `best`, its offset (row * pitch + column, from the corner) returned.
template <class Win>
__device__ __forceinline__ int first_max(const float* corner, int pitch, const Win& w, float& best) {
    float m = corner[0];
    int at = 0;
#pragma unroll
    for (int r = 0; r < w.size(); ++r)
#pragma unroll
        for (int t = 0; t < w.size(); ++t) {
            const float v = corner[r * pitch + t];
            if (v > m) m = v, at = r * pitch + t;
        }
    best = m;
    return at;
}

// Row and column of i = start, start + step, ... in rows of `width`, carried forward without dividing.
struct Walk {
    int row, col, drow, dcol, width;
    __device__ __forceinline__ Walk(int start, int step, int width)
        : row(start / width), col(start % width), drow(step / width), dcol(step % width), width(width) {}
    __device__ __forceinline__ void next() {
        row += drow;
        col += dcol;
        if (col >= width) col -= width, ++row;
    }
};

// n contiguous int32s (saved offsets), staged as stage() stages floats: cp.async copies bytes.
__device__ __forceinline__ void stage_ints(int* dst, const int* RESTRICT src, int n, int tid, int threads) {
    stage(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), n, tid, threads);
}

struct FwdGlobal {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT x, float* RESTRICT y, const PoolShape& s) {
        const int total = s.N * s.C * s.P * s.Q;
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
            const int q = e % s.Q, p = (e / s.Q) % s.P, plane = e / (s.Q * s.P);
            const float* corner = x + (size_t)plane * s.H * s.W + (p * w.stride()) * s.W + q * w.stride();
            float m;
            first_max(corner, s.W, w, m);
            y[e] = m;
        }
    }
};

extern "C" __global__ void maxpool_fwd_global(const float* RESTRICT x, float* RESTRICT y, PoolShape s) {
    with_window<FwdGlobal>(s, x, y, s);
}

struct BwdGlobal {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT dy, const float* RESTRICT x,
                                               float* RESTRICT dx, const PoolShape& s) {
        const int total = s.N * s.C * s.H * s.W;
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
            const int v = e % s.W, h = (e / s.W) % s.H, plane = e / (s.W * s.H);
            const float* in = x + (size_t)plane * s.H * s.W;
            int p0, p1, q0, q1;
            w.covering(h, s.P, p0, p1);
            w.covering(v, s.Q, q0, q1);
            float acc = 0.f, unused;
            for (int p = p0; p <= p1; ++p)
                for (int q = q0; q <= q1; ++q) {
                    const int h0 = p * w.stride(), v0 = q * w.stride();
                    if (first_max(in + h0 * s.W + v0, s.W, w, unused) == (h - h0) * s.W + (v - v0))
                        acc += dy[((size_t)plane * s.P + p) * s.Q + q];
                }
            dx[e] = acc;
        }
    }
};

extern "C" __global__ void maxpool_bwd_global(const float* RESTRICT dy, const float* RESTRICT x,
                                              float* RESTRICT dx, PoolShape s) {
    with_window<BwdGlobal>(s, dy, x, dx, s);
}

// Block per (band of `band` output rows, plane): grid (ceil(P / band), N * C). Dynamic shared
// memory: the input rows the band reads, ((band - 1) * stride + size) * W floats. Writes each
// output and its window's maximum's offset in the plane (argmax: the output's shape).
struct FwdShared {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT x, float* RESTRICT y,
                                               int* RESTRICT argmax, const PoolShape& s, int band, float* rows) {
        const int plane = blockIdx.y, p0 = blockIdx.x * band, np = min(band, s.P - p0);
        const int h0 = p0 * w.stride(), span = (np - 1) * w.stride() + w.size();
        stage(rows, x + ((size_t)plane * s.H + h0) * s.W, span * s.W, threadIdx.x, blockDim.x);
        __syncthreads();
        const size_t first = ((size_t)plane * s.P + p0) * s.Q;
        for (Walk o(threadIdx.x, blockDim.x, s.Q); o.row < np; o.next()) {
            const int corner = o.row * w.stride() * s.W + o.col * w.stride();  // staged rows are the plane's, from h0
            float m;
            const int at = corner + first_max(rows + corner, s.W, w, m);
            const size_t e = first + o.row * s.Q + o.col;
            y[e] = m;
            argmax[e] = h0 * s.W + at;
        }
    }
};

extern "C" __global__ void maxpool_fwd_shared(const float* RESTRICT x, float* RESTRICT y, int* RESTRICT argmax,
                                              PoolShape s, int band) {
    extern __shared__ float rows[];
    with_window<FwdShared>(s, x, y, argmax, s, band, rows);
}

// Block per (band of `band` input rows, plane): grid (ceil(H / band), N * C). Dynamic shared
// memory: the output gradients of the windows that meet the band and the offsets of their
// maxima the forward saved (see bwd_band_bytes in tracker/ops/maxpool.py).
struct BwdShared {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT dy, const int* RESTRICT argmax,
                                               float* RESTRICT dx, const PoolShape& s, int band, float* smem) {
        const int plane = blockIdx.y, h_first = blockIdx.x * band, h_last = min(h_first + band, s.H) - 1;
        int p0, p1, unused;
        w.covering(h_first, s.P, p0, unused);
        w.covering(h_last, s.P, unused, p1);
        const int windows = max(p1 - p0 + 1, 0) * s.Q;
        float* gs = smem;
        int* at = reinterpret_cast<int*>(gs + windows);
        const size_t first = ((size_t)plane * s.P + p0) * s.Q;
        stage(gs, dy + first, windows, threadIdx.x, blockDim.x);
        stage_ints(at, argmax + first, windows, threadIdx.x, blockDim.x);
        __syncthreads();
        float* out = dx + ((size_t)plane * s.H + h_first) * s.W;
        for (Walk i(threadIdx.x, blockDim.x, s.W); i.row <= h_last - h_first; i.next()) {
            const int h = h_first + i.row, here = h * s.W + i.col;
            int a0, a1, b0, b1;
            w.covering(h, s.P, a0, a1);
            w.covering(i.col, s.Q, b0, b1);
            float acc = 0.f;
            for (int p = a0; p <= a1; ++p)
                for (int q = b0; q <= b1; ++q) {
                    const int o = (p - p0) * s.Q + q;
                    if (at[o] == here) acc += gs[o];
                }
            out[i.row * s.W + i.col] = acc;
        }
    }
};

extern "C" __global__ void maxpool_bwd_shared(const float* RESTRICT dy, const int* RESTRICT argmax,
                                              float* RESTRICT dx, PoolShape s, int band) {
    extern __shared__ float smem[];
    with_window<BwdShared>(s, dy, argmax, dx, s, band, smem);
}

// --- 3-D ------------------------------------------------------------------------------------

struct Pool3Shape {
    int N, C, D, H, W, O, P, Q, size, stride;
};

// The first maximum (depth, row, column order) of the window whose corner is `corner`, its
// depth slices `slice` apart and its rows `pitch` apart: its value in `best`, its offset from the
// corner returned as if the depth slices were `volume_slice` apart (the input volume's H * W,
// where `slice` is that of a staged copy).
template <class Win>
__device__ __forceinline__ int first_max3(const float* corner, int slice, int pitch, int volume_slice, const Win& w,
                                          float& best) {
    float m = corner[0];
    int at = 0;
    for (int t = 0; t < w.size(); ++t)
#pragma unroll
        for (int r = 0; r < w.size(); ++r)
#pragma unroll
            for (int c = 0; c < w.size(); ++c) {
                const float v = corner[t * slice + r * pitch + c];
                if (v > m) m = v, at = t * volume_slice + r * pitch + c;
            }
    best = m;
    return at;
}

struct Fwd3Global {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT x, float* RESTRICT y, const Pool3Shape& s) {
        const int total = s.N * s.C * s.O * s.P * s.Q, hw = s.H * s.W;
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
            const int q = e % s.Q, p = e / s.Q % s.P, o = e / (s.Q * s.P) % s.O, plane = e / (s.Q * s.P * s.O);
            const float* corner = x + (size_t)plane * s.D * hw + (o * w.stride()) * hw + (p * w.stride()) * s.W + q * w.stride();
            float m;
            first_max3(corner, hw, s.W, hw, w, m);
            y[e] = m;
        }
    }
};

extern "C" __global__ void maxpool3d_fwd_global(const float* RESTRICT x, float* RESTRICT y, Pool3Shape s) {
    with_window<Fwd3Global>(s, x, y, s);
}

struct Bwd3Global {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT dy, const float* RESTRICT x,
                                               float* RESTRICT dx, const Pool3Shape& s) {
        const int total = s.N * s.C * s.D * s.H * s.W, hw = s.H * s.W;
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
            const int v = e % s.W, h = e / s.W % s.H, d = e / hw % s.D, plane = e / (hw * s.D);
            const float* in = x + (size_t)plane * s.D * hw;
            int o0, o1, p0, p1, q0, q1;
            w.covering(d, s.O, o0, o1);
            w.covering(h, s.P, p0, p1);
            w.covering(v, s.Q, q0, q1);
            float acc = 0.f, unused;
            for (int o = o0; o <= o1; ++o)
                for (int p = p0; p <= p1; ++p)
                    for (int q = q0; q <= q1; ++q) {
                        const int d0 = o * w.stride(), h0 = p * w.stride(), v0 = q * w.stride();
                        if (first_max3(in + d0 * hw + h0 * s.W + v0, hw, s.W, hw, w, unused) ==
                            (d - d0) * hw + (h - h0) * s.W + (v - v0))
                            acc += dy[(((size_t)plane * s.O + o) * s.P + p) * s.Q + q];
                    }
            dx[e] = acc;
        }
    }
};

extern "C" __global__ void maxpool3d_bwd_global(const float* RESTRICT dy, const float* RESTRICT x,
                                                float* RESTRICT dx, Pool3Shape s) {
    with_window<Bwd3Global>(s, dy, x, dx, s);
}

// Block per (band of `band` output rows, output depth slice, plane): grid (bands * O, N * C).
// Dynamic shared memory: the input rows the band reads in each of the window's `size` depth
// slices, size * ((band - 1) * stride + size) * W floats. Writes each output and its window's
// maximum's offset in the image's input volume (argmax: the output's shape).
struct Fwd3Shared {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT x, float* RESTRICT y,
                                               int* RESTRICT argmax, const Pool3Shape& s, int band, float* rows) {
        const int bands = (s.P + band - 1) / band, o = blockIdx.x / bands, plane = blockIdx.y;
        const int p0 = blockIdx.x % bands * band, np = min(band, s.P - p0);
        const int h0 = p0 * w.stride(), span = (np - 1) * w.stride() + w.size();
        for (int t = 0; t < w.size(); ++t)
            stage(rows + t * span * s.W, x + (((size_t)plane * s.D + o * w.stride() + t) * s.H + h0) * s.W, span * s.W,
                  threadIdx.x, blockDim.x);
        __syncthreads();
        const size_t first = (((size_t)plane * s.O + o) * s.P + p0) * s.Q;
        const int hw = s.H * s.W, corner0 = o * w.stride() * hw + h0 * s.W;  // the staged rows' first, in the volume
        for (Walk i(threadIdx.x, blockDim.x, s.Q); i.row < np; i.next()) {
            const int corner = i.row * w.stride() * s.W + i.col * w.stride();
            float m;
            const int at = corner + first_max3(rows + corner, span * s.W, s.W, hw, w, m);
            const size_t e = first + i.row * s.Q + i.col;
            y[e] = m;
            argmax[e] = corner0 + at;
        }
    }
};

extern "C" __global__ void maxpool3d_fwd_shared(const float* RESTRICT x, float* RESTRICT y, int* RESTRICT argmax,
                                                Pool3Shape s, int band) {
    extern __shared__ float rows[];
    with_window<Fwd3Shared>(s, x, y, argmax, s, band, rows);
}

// Block per (band of `band` input rows, input depth slice, plane): grid (bands * D, N * C).
// Dynamic shared memory, for each output depth slice whose windows meet the input slice: the
// output gradients of its windows that meet the band and the offsets of their maxima the forward
// saved (tracker/ops/maxpool.py, bwd3_band_bytes).
struct Bwd3Shared {
    template <class Win>
    __device__ static __forceinline__ void run(Win w, const float* RESTRICT dy, const int* RESTRICT argmax,
                                               float* RESTRICT dx, const Pool3Shape& s, int band, float* smem) {
        const int bands = (s.H + band - 1) / band, d = blockIdx.x / bands, plane = blockIdx.y;
        const int h_first = blockIdx.x % bands * band, h_last = min(h_first + band, s.H) - 1;
        int o0, o1, p0, p1, unused;
        w.covering(d, s.O, o0, o1);
        w.covering(h_first, s.P, p0, unused);
        w.covering(h_last, s.P, unused, p1);
        const int no = max(o1 - o0 + 1, 0), windows = max(p1 - p0 + 1, 0) * s.Q;
        float* gs = smem;                                     // per covering output slice, its windows' gradients
        int* at = reinterpret_cast<int*>(gs + no * windows);  // and their maxima's offsets
        for (int io = 0; io < no; ++io) {
            const size_t first = (((size_t)plane * s.O + o0 + io) * s.P + p0) * s.Q;
            stage(gs + io * windows, dy + first, windows, threadIdx.x, blockDim.x);
            stage_ints(at + io * windows, argmax + first, windows, threadIdx.x, blockDim.x);
        }
        __syncthreads();
        float* out = dx + (((size_t)plane * s.D + d) * s.H + h_first) * s.W;
        for (Walk i(threadIdx.x, blockDim.x, s.W); i.row <= h_last - h_first; i.next()) {
            const int h = h_first + i.row, here = (d * s.H + h) * s.W + i.col;
            int a0, a1, b0, b1;
            w.covering(h, s.P, a0, a1);
            w.covering(i.col, s.Q, b0, b1);
            float acc = 0.f;
            for (int io = 0; io < no; ++io)
                for (int p = a0; p <= a1; ++p)
                    for (int q = b0; q <= b1; ++q) {
                        const int o = io * windows + (p - p0) * s.Q + q;
                        if (at[o] == here) acc += gs[o];
                    }
            out[i.row * s.W + i.col] = acc;
        }
    }
};

extern "C" __global__ void maxpool3d_bwd_shared(const float* RESTRICT dy, const int* RESTRICT argmax,
                                                float* RESTRICT dx, Pool3Shape s, int band) {
    extern __shared__ float smem[];
    with_window<Bwd3Shared>(s, dy, argmax, dx, s, band, smem);
}
