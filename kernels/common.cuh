// Shared device code: the tiled GEMM every matrix-shaped variant uses, the loaders that feed it
// (dense matrices, and implicit im2col views of a convolution with the batch folded into the
// GEMM), and its epilogue (bias, ReLU, accumulate, split-K partials). One GEMM body, many
// callers: no kernel body is copied.
//
// C[m][n] = sum_k A(m, k) * B(k, n) in CTA tiles of TILE_M x TILE_N, k-tiles of TILE_K. Each
// thread owns an 8 x 8 register block (THREAD_M x THREAD_N): rows ty*4 + {0..3} and
// ty*4 + TILE_M/2 + {0..3}, columns likewise from tx. A warp's 32 threads are WARP_ROWS x
// (32 / WARP_ROWS) of those blocks (warp tiling: 4 x 8 threads cover 32 x 64 outputs, 8 x 4 cover
// 64 x 32, so a fragment is shared by 8 or 4 lanes), and per k each thread reads its fragments as
// four 128-bit LDS (two of A, two of B) and issues 64 FFMA: 16 FFMA per shared load. The fragments
// are double-buffered in registers (in the cp.async builds): step k's FFMAs issue while step k + 1's loads are in flight,
// and the k-tile's last step hands the ring over (its barrier) before its FFMAs, so that the next
// tile's first fragments are loading meanwhile.
// The k-tiles flow through a ring of STAGES buffers in shared memory: while tile k is multiplied,
// the global loads of tiles k+1 .. k+STAGES-1 are in flight, and one barrier per k-tile
// separates writing a buffer from reading it. Plain operands go straight to shared memory with
// cp.async (LDGSTS, sm_80 on), which needs no staging registers, so more stages are more loads in
// flight; a dense operand whose rows run along the tile's outer index is copied 16 bytes at a
// time (in_runs). An operand read through a ReLU mask (the fused backward's output gradient) is
// copied with cp.async too, the ReLU's output beside it into a ring of its own, and each thread zeroes its own
// copies where that output is not positive once they have landed, before the barrier that hands
// the tile to the other threads: the mask costs a compare a copied element, not the pipeline.
// Every operand of the L1-bypass build is staged through registers, one k-tile ahead (a 4-byte
// cp.async always goes through L1; see copy_async). Every GEMM kernel is __launch_bounds__(GEMM_THREADS,
// MIN_CTAS) (GEMM_MIN_CTAS): 0 leaves registers to ptxas's own trade-off, 1 gives the code all it asks for, 2
// holds a 256-thread tile to 128 (spilling if it must) so that two CTAs share an SM: the default
// tile's (tracker/ops/gemm.py's DEFAULT), which every kernel here fits without spills on sm_90;
// `tracker tune` measures which pays. The epilogue stores 4 consecutive columns as one 16-byte
// store where they lie together (Store::quad).
//
// The sizes are not written here: tracker/ops/gemm.py hands them to NVRTC as -D options (and
// tracker/ops/conv2d.py CONSTANT_FLOATS), so the launch grids computed in
// Python and the kernels compiled from here read the same numbers, and `tracker tune` can
// compile other tile shapes without touching this file.
#pragma once

// Kernel pointers are `T* RESTRICT`. By default that is __restrict__, and the compiler, knowing
// that an input aliases no output, loads it through the read-only path (LDG.E.CONSTANT), which
// caches in L1 whatever -dlcm says. The L1-bypass build (-DTRACKER_L1_BYPASS beside -Xptxas
// -dlcm=cg) drops __restrict__, so that every global load is a plain LDG, which -dlcm=cg sends
// around L1. `tracker kernels` shows each build's load mix, read from its SASS.
#ifdef TRACKER_L1_BYPASS
#define RESTRICT
#else
#define RESTRICT __restrict__
#endif

#if !defined(TILE_M) || !defined(TILE_N) || !defined(TILE_K) || !defined(THREAD_M) || !defined(THREAD_N) || \
    !defined(GEMM_THREADS) || !defined(WARP_ROWS) || !defined(STAGES) || !defined(TILE_PAD) || !defined(MIN_CTAS) || \
    !defined(RELU_MASK)
#error "the GEMM's sizes come from tracker/ops/gemm.py as -D options (tracker.gpu.kernels.compile_options)"
#endif
// RELU_MASK 1: the build the fused variants' backward launches, whose Masked operand reads the
// output gradient through the ReLU's output (copied beside it, see gemm_tile); 0: every other
// build, where a Masked operand's y is null and the operand is copied like any other.
static_assert(RELU_MASK == 0 || RELU_MASK == 1, "RELU_MASK is 0 or 1");
// The register policy every GEMM kernel's __launch_bounds__ applies: the tile's MIN_CTAS, except
// that the builds which stage their operands through registers (L1-bypass, staged) leave a cap of
// two CTAs an SM to ptxas: their staging registers do not fit beside the accumulators in 128
// without spills (the cp.async builds copy around the registers and do).
#if defined(TRACKER_L1_BYPASS) || defined(TRACKER_STAGED)
#define GEMM_MIN_CTAS (MIN_CTAS == 2 ? 0 : MIN_CTAS)
#else
#define GEMM_MIN_CTAS MIN_CTAS
#endif
static_assert(THREAD_M == 8 && THREAD_N == 8, "a thread's block is two 4-row by two 4-column groups");
constexpr int WARP_COLS = 32 / WARP_ROWS;
static_assert(WARP_ROWS * WARP_COLS == 32 && TILE_M % (WARP_ROWS * THREAD_M) == 0 && TILE_N % (WARP_COLS * THREAD_N) == 0,
              "a warp's WARP_ROWS x WARP_COLS threads tile the CTA's outputs");
static_assert(STAGES >= 2, "a k-tile is loaded while the one before it is multiplied");
static_assert(TILE_K % 2 == 0, "the fragments' two register buffers alternate, the next k-tile's first in buffer 0");
static_assert((TILE_M / THREAD_M) * (TILE_N / THREAD_N) == GEMM_THREADS, "one thread per register block");

// Loading a k-tile: each thread fetches one k (row kk of the tile) at LOADS outer positions
// o, o + LANES, ... (rows of A, columns of B), so LANES threads cover a row of the tile.
constexpr int LANES = GEMM_THREADS / TILE_K;
constexpr int LOADS_A = TILE_M / LANES, LOADS_B = TILE_N / LANES;
static_assert(GEMM_THREADS % TILE_K == 0 && TILE_M % LANES == 0 && TILE_N % LANES == 0,
              "the threads cover a k-tile of A and of B exactly");

// A loader is one GEMM operand as one thread walks it: start(o, k) fixes its LOADS outer
// positions o + LANES * j and its k, at(j) is where slot j's element lies at the current k, next()
// moves k on by TILE_K. Whatever the index arithmetic costs (a convolution's divisions) is paid in
// start(), once per thread, and next() carries it forward with one compare a digit (carry()).
// k_contiguous says which of the two indices walks memory, so that the threads of a warp read
// consecutive addresses. A padded loader (a convolution's gather) also says which slots read
// zeros: its probe(k_in) is the current k-tile's, once per k-tile, and valid(j, probe) slot j's,
// one bitwise test a slot (tap bits, below); an unpadded one's slots are valid inside the
// operand (slots_inside) and the k range.

// Carries a digit of a k index that has grown past its radix (by less than the radix): returns
// the carry into the next digit. A loader's next() adds TILE_K's digits, split once in start(), and
// carries: no division, and no loop where TILE_K is more than a digit's radix.
__device__ __forceinline__ int carry(int& digit, int radix) {
    const int over = digit >= radix;
    if (over) digit -= radix;
    return over;
}
// carry() for a digit counted down from `top` (a transposed gather's first tap, Im2colT): returns
// the borrow where it has come down by `radix`.
__device__ __forceinline__ int borrow(int& digit, int top, int radix) {
    const int under = digit <= top - radix;
    if (under) digit += radix;
    return under;
}

// A dense row-major matrix: element (o, k) at p[o * ld + k] (K_FAST: A of A B, B of A B^T) or at
// p[k * ld + o] (A of A^T B, B of A B).
template <int L, bool K_FAST>
struct Dense {
    const float* RESTRICT p;
    int ld;
    int base = 0;
    static constexpr bool k_contiguous = K_FAST, padded = false;
    __device__ __forceinline__ void start(int o, int k) { base = K_FAST ? o * ld + k : k * ld + o; }
    __device__ __forceinline__ int at(int j) const { return base + j * (K_FAST ? LANES * ld : LANES); }
    __device__ __forceinline__ void next() { base += K_FAST ? TILE_K : TILE_K * ld; }
};

// Images of `rows` x `ld` one after another (NCHW activations: rows = channels, ld = positions),
// read as one matrix whose columns run over the images: element (row, image * ld + j) at
// p[(image * rows + row) * ld + j], column n's offset n + (n / ld) * (rows - 1) * ld. K_IS_COLUMN
// false: k is the row and o the column (B of the conv gemm variant's data gradient: its output
// gradient); true: o is the row and k the column (A of its weight gradient).
template <int L, bool K_IS_COLUMN>
struct Images {
    const float* RESTRICT p;
    int ld, rows;
    int fixed[K_IS_COLUMN ? 1 : L];  // the offset o contributes: per slot as a column, slot 0's as a row
    int j = 0, k_at = 0;             // the current k: its position in its image (as a column), its offset
    int images = 0, dj = 0;          // TILE_K as whole images and a position (ld may be shorter than TILE_K)
    static constexpr bool k_contiguous = K_IS_COLUMN, padded = false;
    __device__ __forceinline__ int column(int n) const { return n + (n / ld) * (rows - 1) * ld; }
    __device__ __forceinline__ void start(int o, int k0) {
        if (K_IS_COLUMN) {
            fixed[0] = o * ld;  // rows LANES apart: slot s adds s * LANES * ld
        } else {
#pragma unroll
            for (int s = 0; s < L; ++s) fixed[s] = column(o + LANES * s);
        }
        if (K_IS_COLUMN) j = k0 % ld, images = TILE_K / ld, dj = TILE_K % ld;
        k_at = K_IS_COLUMN ? column(k0) : k0 * ld;
    }
    __device__ __forceinline__ int at(int s) const {
        return (K_IS_COLUMN ? fixed[0] + s * LANES * ld : fixed[s]) + k_at;
    }
    __device__ __forceinline__ void next() {
        if (K_IS_COLUMN) {  // carried: each image crossed puts the next one's rows (rows - 1) * ld further on
            j += dj;
            k_at += TILE_K + (images + carry(j, ld)) * (rows - 1) * ld;
        } else {
            k_at += TILE_K * ld;
        }
    }
};

// An operand read through a ReLU: zero where the ReLU's output y (laid out as the operand) is not
// positive. The fused variants' backward kernels use it (built with RELU_MASK 1); y == nullptr
// reads the operand as it is.
template <class G>
struct Masked : G {
    const float* RESTRICT y;
};

template <class G>
constexpr bool is_masked = false;
template <class G>
constexpr bool is_masked<Masked<G>> = true;

// The loader of a Masked operand's y: the same walk over y's memory (any other loader: itself,
// never copied).
template <class G>
__device__ __forceinline__ G mask_of(const Masked<G>& g) {
    G m = g;
    m.p = g.y;
    return m;
}
template <class G>
__device__ __forceinline__ const G& mask_of(const G& g) {
    return g;
}

// Tap bits: which filter taps a convolution's gathered slot meets inside the data, one bit a tap
// along each axis, the last axis in the lowest field of TAP_BITS<AXES>: a filter side fits in a
// field (tracker/ops/conv2d.py's MAX_TAPS, the -D MAX_TAPS_2D / MAX_TAPS_3D). The k-loop tests a
// slot with one bitwise AND instead of unpacking its coordinates and comparing them with the
// data's bounds: either the k-tile's tap bit against the taps the slot meets (Im2col: the slot
// holds a window, the k a tap), or the slot's tap bit against the taps the k-tile's window meets
// (Im2colT: the other way round). Bit 31 (NEVER) belongs to no tap: no slot's taps hold it, so a
// k-tile past the reduction probes it.
#if !defined(MAX_TAPS_2D) || !defined(MAX_TAPS_3D)
#error "MAX_TAPS_2D and MAX_TAPS_3D come from tracker/ops/conv2d.py as -D options"
#endif
constexpr unsigned NEVER = 1u << 31;
template <int AXES>
constexpr int TAP_BITS = 31 / AXES;
template <int AXES>
constexpr unsigned TAP_FIELD = (1u << TAP_BITS<AXES>) - 1;  // the lowest field's bits
static_assert(MAX_TAPS_2D <= TAP_BITS<2> && MAX_TAPS_3D <= TAP_BITS<3>, "a filter side's taps fit in a field");

// Bit of tap (a, b) (2-D) or (a, b, c) (3-D).
__device__ __forceinline__ unsigned tap_bit(int a, int b) { return 1u << (TAP_BITS<2> + a) | 1u << b; }
__device__ __forceinline__ unsigned tap_bit(int a, int b, int c) {
    return 1u << (2 * TAP_BITS<3> + a) | 1u << (TAP_BITS<3> + b) | 1u << c;
}
// Bits pos .. pos + width - 1 (width clamped to 0 .. 32 - pos; none from pos 32 on): one BMSK
// from sm_70 on.
__device__ __forceinline__ unsigned bit_range(unsigned pos, unsigned width) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    unsigned bits;
    asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(bits) : "r"(pos), "r"(width));
    return bits;
#else
    if (pos >= 32) return 0u;
    const unsigned n = width < 32 - pos ? width : 32 - pos;
    return static_cast<unsigned>(((1ull << n) - 1) << pos);
#endif
}
// The taps lo .. hi - 1 of an axis, clipped to its field (none where the range is empty).
template <int AXES>
__device__ __forceinline__ unsigned tap_range(int lo, int hi) {
    const int from = max(lo, 0);
    return bit_range(from, max(hi - from, 0)) & TAP_FIELD<AXES>;
}
// The taps of a side of `taps` at which input position `at` (plus the padding) meets one of
// `extent` outputs `stride` apart: the data gradient's, where the stride leaves gaps in the range.
__device__ __forceinline__ unsigned meeting(int at, int taps, int extent, int stride) {
    unsigned bits = 0;
    for (int r = 0; r < taps; ++r) {
        const int y = at - r;
        if (y >= 0 && y % stride == 0 && y / stride < extent) bits |= 1u << r;
    }
    return bits;
}
// The taps along one axis that a window meets inside the data, as bits of the axis's field (from
// bit `field`): `first` is the bit of the tap that lands on the data's first position (field + pad
// - the window's position; below the field where the window starts inside the data), and the taps
// inside are the `extent` bits from `first` on, less those below the field. What runs past the
// field's end is the caller's to clip (the top field's spill past bit 29 meets no slot's tap).
// Exact where the padding is at most the filter's side (tracker/ops/conv2d.py's check_taps): the
// window's last tap then reaches the data, and the width is not negative.
__device__ __forceinline__ unsigned taps_inside(int first, int field, int extent) {
    const int from = max(first, field);
    return bit_range(from, first + extent - from);
}

// Whether every bit of `part` is in `whole`: a slot's test against its k-tile's probe.
__device__ __forceinline__ bool within(unsigned part, unsigned whole) { return (part & ~whole) == 0; }

// The slots (outer indices o + LANES * j) inside an operand of `extent`: the first `slots_inside`
// of them, as slot indices grow with j.
template <int LOADS>
__device__ __forceinline__ unsigned slots_inside(int o, int extent) {
    return min(max(extent - o + LANES - 1, 0) / LANES, LOADS);
}
// The current k-tile's probe of loader g, and whether slot j is valid under it. slots: those
// inside the operand (slots_inside); k_in: the k-tile's row inside the reduction. An unpadded
// loader's probe is the number of its valid slots.
template <class G>
__device__ __forceinline__ unsigned probe_of(const G& g, unsigned slots, bool k_in) {
    if constexpr (G::padded)
        return g.probe(k_in);
    else
        return k_in ? slots : 0u;
}
template <class G>
__device__ __forceinline__ bool valid_at(const G& g, int j, unsigned probe) {
    if constexpr (G::padded)
        return g.valid(j, probe);
    else
        return static_cast<unsigned>(j) < probe;
}
// A padded loader folds the slots outside its operand into its tap bits once, at the start.
template <class G>
__device__ __forceinline__ void start_at(G& g, int o, int k, unsigned slots) {
    if constexpr (G::padded)
        g.start(o, k, slots);
    else
        g.start(o, k);
}

template <class G>
__device__ __forceinline__ float element(const G& g, int j, unsigned probe) {
    return valid_at(g, j, probe) ? g.p[g.at(j)] : 0.f;
}

template <class G>
__device__ __forceinline__ float element(const Masked<G>& g, int j, unsigned probe) {
    if (!valid_at(g, j, probe)) return 0.f;
    const int at = g.at(j);
    return (g.y == nullptr || g.y[at] > 0.f) ? g.p[at] : 0.f;
}

// Division by a stride d as a multiply and a shift, for the data gradient's loaders, which divide
// the current filter tap by the stride once a k-tile: x / d = x * inverse(d) >> 16, inverse(d) =
// ceil(2^16 / d), exact for a tap (0 <= x < 16) at any stride (1 included: no select).
__device__ __forceinline__ int inverse(int d) { return static_cast<int>((65535u + d) / d); }
__device__ __forceinline__ int divide(int x, int inverse_d) { return x * inverse_d >> 16; }

// A(m = channel, k = (outer, inner)) of a convolution's gradient GEMMs, 2-D and 3-D alike, read
// from a tensor laid out [outer][channels][inner]: the data gradient's filters (K x C x taps:
// channel c, k = (kout, tap)) and the weight gradient's output gradient (images x K x positions:
// channel kout, k = (image, position)). k walks memory but for the channels between one outer
// index and the next. (kernels/conv2d.cu and conv3d.cu have the gathered operands.)
template <int L>
struct Channels {
    const float* RESTRICT p;
    int channels, inner;     // channels, and inner values a channel (taps a filter, positions a plane)
    int at_inner = 0;        // the current k's inner index
    int base = 0;            // slot 0's offset at the current k; slot j's lies j * LANES channels on
    int dinner = 0, step = 0;  // TILE_K as inner values, and as an offset where no outer index is crossed
    static constexpr bool k_contiguous = true, padded = false;
    __device__ __forceinline__ void start(int channel, int k) {
        at_inner = k % inner, dinner = TILE_K % inner;
        base = (k / inner * channels + channel) * inner + at_inner;
        step = TILE_K / inner * channels * inner + dinner;
    }
    __device__ __forceinline__ int at(int j) const { return base + j * (LANES * inner); }
    __device__ __forceinline__ void next() {  // the next outer index's lies past the other channels
        at_inner += dinner;
        base += step + carry(at_inner, inner) * (channels - 1) * inner;
    }
};

// Convolution geometry of one layer (NCHW input, KCRS filters, NKPQ output).
struct ConvShape {
    int N, C, H, W, K, R, S, P, Q, stride, pad;
};

// A 16-byte access needs a 16-byte-aligned address: a GPU faults on any other (the emulation
// checks every one, cuda_emu.h's emu_aligned).
__device__ __forceinline__ bool aligned16(const void* p) { return reinterpret_cast<size_t>(p) % 16 == 0; }
__device__ __forceinline__ void check_aligned(const void* p) {
#ifndef __CUDA_ARCH__
    emu_aligned(p);
#endif
}

// Epilogue: C(m, n) = (accumulate ? C : 0) + v + bias, then ReLU if asked. C is images of
// `rows` x `per_image` (the batch folded into the GEMM's columns: n = image * per_image + j);
// a plain matrix is one image, per_image = its columns.
struct Store {
    float* RESTRICT c;
    int rows;
    int per_image;
    const float* RESTRICT bias;  // nullptr: none
    bool bias_per_row;           // bias[m] (conv: per output channel) or bias[n] (linear)
    bool relu;
    bool accumulate;
    // Where column n lies in c, row 0: the one division a column, which a thread does once for
    // each of its columns rather than for each of its outputs.
    __device__ __forceinline__ size_t column(int n) const {
        const int image = n / per_image;
        return (size_t)image * rows * per_image + (n - image * per_image);
    }
    __device__ __forceinline__ void operator()(int m, int n, size_t at_column, float v) const {
        if (bias != nullptr) v += bias[bias_per_row ? m : n];
        if (relu) v = fmaxf(v, 0.f);
        float* dst = c + at_column + (size_t)m * per_image;
        *dst = accumulate ? *dst + v : v;
    }
    __device__ __forceinline__ void operator()(int m, int n, float v) const { (*this)(m, n, column(n), v); }
    // Columns n .. n + 3 of row m (n a multiple of 4; at[q]: column(n + q)), those below N: one
    // 16-byte store (STG.128) where the four lie together in one image and 16-byte aligned, the
    // four stores of operator() elsewhere (a ragged edge, images of a width not a multiple of 4).
    __device__ __forceinline__ void quad(int m, int n, int N, const size_t* at, const float* v) const {
        float* dst = c + at[0] + (size_t)m * per_image;
        if (per_image % 4 == 0 && n + 3 < N && aligned16(dst)) {
            float out[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                out[q] = v[q] + (bias == nullptr ? 0.f : bias[bias_per_row ? m : n + q]);
                if (relu) out[q] = fmaxf(out[q], 0.f);
            }
            float4& to = *reinterpret_cast<float4*>(dst);
            if (accumulate) {
                const float4 was = to;
                out[0] += was.x, out[1] += was.y, out[2] += was.z, out[3] += was.w;
            }
            to = make_float4(out[0], out[1], out[2], out[3]);
        } else {
#pragma unroll
            for (int q = 0; q < 4; ++q)
                if (n + q < N) (*this)(m, n + q, at[q], v[q]);
        }
    }
};

// Split-K: CTA z of gridDim.z multiplies k in [z * k_chunk, (z + 1) * k_chunk). With one split (no
// partial) it stores through `out`; with more, its raw partial product goes to partial[z] (M x N),
// and gemm.cu's splitk_reduce adds the splits in order and applies `out`: deterministic.
// A batched GEMM's grid y holds its items' row tiles in turn: CTA y is row tile y % tiles_of(M,
// TILE_M) of item y / tiles_of(M, TILE_M) (gemm.cu's _batched kernels), so z is the split still.
__device__ __forceinline__ int tiles_of(int n, int tile) { return (n + tile - 1) / tile; }

__device__ __forceinline__ Store split_store(const Store& out, float* RESTRICT partial, int M, int N) {
    if (partial == nullptr) return out;
    return Store{partial + (size_t)blockIdx.z * M * N, M, N, nullptr, false, false, false};
}

// Copying global memory to shared memory around the registers: on sm_80 and later each
// copy_async is a cp.async (LDGSTS), so all of a thread's copies are in flight together instead of
// one load at a time through a register; wait_copies() waits for the thread's own (a
// __syncthreads must follow before any thread reads another's). The L1-bypass build keeps plain
// loads, which -dlcm=cg sends around L1: a 4-byte cp.async always goes through L1 (only the
// 16-byte cp.async.cg bypasses it, and a convolution's NCHW operands are not 16-byte vectors in
// the layout the GEMM's shared tiles want). The staged build (-DTRACKER_STAGED, -dlcm=ca) runs the
// L1-bypass build's code with L1 caching: the l1-bypass experiment's like-for-like arm, whose
// difference from the cg build is the L1 alone.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(TRACKER_L1_BYPASS) && !defined(TRACKER_STAGED)
#define TRACKER_CP_ASYNC 1
#endif
// Whether the GEMM copies its plain operands straight into shared memory with copy_async: where
// that is a cp.async, and on the CPU emulation (where it is a plain copy, so the tests run this
// path). Otherwise (the L1-bypass and staged builds, GPUs before sm_80) they are staged through
// registers; the emulation of those builds runs that path.
#if defined(TRACKER_CP_ASYNC) || (!defined(__CUDA_ARCH__) && !defined(TRACKER_L1_BYPASS) && !defined(TRACKER_STAGED))
constexpr bool COPY_AROUND_REGISTERS = true;
#else
constexpr bool COPY_AROUND_REGISTERS = false;
#endif

// dst = valid ? *src : 0 (src is not read when !valid).
__device__ __forceinline__ void copy_async(float* dst, const float* RESTRICT src, bool valid) {
#ifdef TRACKER_CP_ASYNC
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 4 : 0));
#else
    *dst = valid ? *src : 0.f;
#endif
}

// dst[0..3] = the first `count` (0 to 4) floats at src, zeros after them (src is not read past
// them); dst and src 16-byte aligned. One 16-byte cp.async, .ca like copy_async's: the build that
// caches in L1 caches every copy (the l1-bypass experiment's L1 arm), the cg build has none.
__device__ __forceinline__ void copy_async16(float* dst, const float* RESTRICT src, int count) {
#ifdef TRACKER_CP_ASYNC
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(count * 4));
#else
    // As the GPU would, one 16-byte access each way where all four are read (the memory trace
    // counts a 16-byte access's banks and sectors as the GPU does).
    check_aligned(dst);
    check_aligned(src);
    float4 v = {0.f, 0.f, 0.f, 0.f};
    if (count == 4) {
        v = *reinterpret_cast<const float4*>(src);
    } else {
        if (count > 0) v.x = src[0];
        if (count > 1) v.y = src[1];
        if (count > 2) v.z = src[2];
    }
    *reinterpret_cast<float4*>(dst) = v;
#endif
}

// Closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void commit_copies() {
#ifdef TRACKER_CP_ASYNC
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most PENDING of this thread's committed groups are still in flight (ALL: every
// copy, committed or not; wait_all is a commit and a wait, one instruction more).
constexpr int ALL = -1;
template <int PENDING = ALL>
__device__ __forceinline__ void wait_copies() {
#ifdef TRACKER_CP_ASYNC
    if constexpr (PENDING == ALL) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
    }
#endif
}

// n contiguous floats, thread `tid` of `threads` copying every threads-th; waits for its own.
__device__ __forceinline__ void stage(float* dst, const float* RESTRICT src, int n, int tid, int threads) {
#pragma unroll 4
    for (int i = tid; i < n; i += threads) copy_async(dst + i, src + i, true);
    wait_copies();
}

// Whether gemm_tile copies a Masked operand's y into a ring of its own and applies the mask in
// shared memory (the copy path of a RELU_MASK build); the staged path reads y in element().
template <class G>
constexpr bool masks_in_shared = RELU_MASK && COPY_AROUND_REGISTERS && is_masked<G>;

// Zeroes this thread's LOADS slots of a landed k-tile row where the ReLU's output is not positive.
template <int LOADS>
__device__ __forceinline__ void apply_mask(float* row, const float* y_row) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j)
        if (!(y_row[LANES * j] > 0.f)) row[LANES * j] = 0.f;
}

// One operand's share of a k-tile for gemm_tile: slot j is outer index o + LANES * j, at
// row[LANES * j] of its shared k-row, valid under the k-tile's probe (probe_of). COPY: copied
// there around the registers; else loaded into regs[j], which stash_operand then stores there.
template <bool COPY, int LOADS, class G, int R>
__device__ __forceinline__ void fetch_operand(const G& g, float (&regs)[R], float* row, unsigned probe) {
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
        if constexpr (COPY) {
            // The address is formed whatever the slot's validity (a copy that is not valid reads
            // nothing): no select between addresses, so slots a constant apart share one base register.
            copy_async(row + LANES * j, g.p + g.at(j), valid_at(g, j, probe));
        } else {
            regs[j] = element(g, j, probe);
        }
    }
}

template <bool COPY, int LOADS, int R>
__device__ __forceinline__ void stash_operand(const float (&regs)[R], float* row) {
    if constexpr (!COPY) {
#pragma unroll
        for (int j = 0; j < LOADS; ++j) row[LANES * j] = regs[j];
    }
}

// Where each loader thread copies, and the shared rows' pads, so that a warp's copies into the
// ring fall in 32 distinct banks (tests/test_memory_access.py counts them at every tile tune
// can pick). A k-contiguous operand's thread t copies k-row k_run(t) of column k_run_column(t):
// runs of K_RUN consecutive k (one 32-byte sector of a row in global memory), so that a warp
// writes 8 k-rows x 4 columns at any TILE_K, rows TILE_PAD = 4 banks apart (16 consecutive
// k-rows put rows 8 apart in one bank). Another operand's warp writes 32 / LANES k-rows of LANES
// consecutive columns where LANES < 32: its rows are padded to lie LANES banks apart.
constexpr int K_RUN = TILE_K < 8 ? TILE_K : 8;
static_assert(TILE_K % K_RUN == 0, "TILE_K is a multiple of 8, or below it");
__device__ __forceinline__ int k_run(int t) {
    if constexpr (TILE_K == K_RUN) return t % TILE_K;  // one run a k-tile: no more index math than that
    return t % K_RUN + K_RUN * (t / (K_RUN * LANES));
}
__device__ __forceinline__ int k_run_column(int t) {
    if constexpr (TILE_K == K_RUN) return t / TILE_K;
    return (t / K_RUN) % LANES;
}

// A dense operand whose outer index walks memory (Dense<L, false>: B of A B, A of A^T B) is copied
// in runs of 4 outer positions, one 16-byte cp.async a run (LDGSTS.128: a quarter of the copies),
// where its rows are 16-byte aligned (ld a multiple of 4, p aligned; else each run as four 4-byte
// copies): thread t copies run t % RUNS of k-row t / RUNS, then every GEMM_THREADS / RUNS-th
// k-row after it, so that a warp's copies are whole rows of the tile, in and out. A k-contiguous
// operand's 4 consecutive k go to 4 k-rows of the ring: no 16-byte copy fits them.
template <class G, int WIDTH>
constexpr bool in_runs = false;
template <int L, int WIDTH>
constexpr bool in_runs<Dense<L, false>, WIDTH> =
    COPY_AROUND_REGISTERS && WIDTH % 4 == 0 && GEMM_THREADS % (WIDTH / 4) == 0 && TILE_K % (GEMM_THREADS / (WIDTH / 4)) == 0;

// Where thread t copies into a k-tile of an operand WIDTH wide: its first k-row and outer index.
template <class G, int WIDTH>
__device__ __forceinline__ int loader_k(int t) {
    if constexpr (in_runs<G, WIDTH>) return t / (WIDTH / 4);
    return G::k_contiguous ? k_run(t) : t / LANES;
}
template <class G, int WIDTH>
__device__ __forceinline__ int loader_o(int t) {
    if constexpr (in_runs<G, WIDTH>) return t % (WIDTH / 4) * 4;
    return G::k_contiguous ? k_run_column(t) : t % LANES;
}

// A Dense<L, false> operand's share of a k-tile (in_runs): its runs at k-rows k, k + ROWS, ...
// from dst (its first run's place in the ring; rows ROW floats apart), those at or past the tile's
// `rows` valid k-rows and past extent zeros (full: a whole tile, known where it is inlined, so
// that no k-row is tested). vector: the rows are 16-byte aligned.
template <int WIDTH, int ROW, class G>
__device__ __forceinline__ void fetch_runs(const G& g, float* dst, int o, int extent, int k, int rows, bool full,
                                           bool vector) {
    constexpr int ROWS = GEMM_THREADS / (WIDTH / 4);
    const int count = min(max(extent - o, 0), 4);
#pragma unroll
    for (int j = 0; j < TILE_K / ROWS; ++j) {
        const int n = full || k + ROWS * j < rows ? count : 0;
        const float* src = g.p + g.base + (size_t)j * ROWS * g.ld;
        if (vector) {
            copy_async16(dst + j * ROWS * ROW, src, n);
        } else {  // four 4-byte copies: 4 lanes a bank, the price of rows that are not aligned
#pragma unroll
            for (int q = 0; q < 4; ++q) copy_async(dst + j * ROWS * ROW + q, src + q, q < n);
        }
    }
}

template <bool K_CONTIGUOUS, int WIDTH>
__host__ __device__ constexpr int row_pad() {
    constexpr int pad = K_CONTIGUOUS || LANES >= 32 ? TILE_PAD : ((LANES - WIDTH) % 32 + 32) % 32;
    static_assert((WIDTH + pad) % 4 == 0, "rows stay 16-byte aligned for the 128-bit fragment loads");
    return pad;
}

template <class A, class B, class Epi>
__device__ __forceinline__ void gemm_tile(int M, int N, int K, int k_chunk, A a, B b, const Epi& epi) {
    constexpr int PAD_A = row_pad<A::k_contiguous, TILE_M>(), PAD_B = row_pad<B::k_contiguous, TILE_N>();
    __shared__ __align__(16) float As[STAGES][TILE_K][TILE_M + PAD_A];
    __shared__ __align__(16) float Bs[STAGES][TILE_K][TILE_N + PAD_B];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    constexpr int WARPS_N = TILE_N / (WARP_COLS * THREAD_N);
    const int tx = (warp % WARPS_N) * WARP_COLS + lane % WARP_COLS, ty = (warp / WARPS_N) * WARP_ROWS + lane / WARP_COLS;
    const int m0 = (blockIdx.y % tiles_of(M, TILE_M)) * TILE_M, n0 = blockIdx.x * TILE_N;
    // The split's k-tiles, the partial one first (CUTLASS's residue-first order): `first` k-rows
    // (1 to TILE_K), then whole tiles, so that the k-loop's fetches test no k bound.
    const int k_begin = blockIdx.z * k_chunk, span = max(min(K, k_begin + k_chunk) - k_begin, 0);
    const int tiles = tiles_of(span, TILE_K), first = span - (tiles - 1) * TILE_K;

    const int ka = loader_k<A, TILE_M>(t), oa = loader_o<A, TILE_M>(t);
    const int kb = loader_k<B, TILE_N>(t), ob = loader_o<B, TILE_N>(t);
    const unsigned slots_a = slots_inside<LOADS_A>(m0 + oa, M), slots_b = slots_inside<LOADS_B>(n0 + ob, N);
    // Where this thread's copies go in a ring buffer: one offset each, not its row and column.
    const int at_a = ka * (TILE_M + PAD_A) + oa, at_b = kb * (TILE_N + PAD_B) + ob;
    auto start = [&](int k) {  // the loaders at the k-tile from k (they stand at the next tile to fetch)
        start_at(a, m0 + oa, k + ka, slots_a);
        start_at(b, n0 + ob, k + kb, slots_b);
    };
    start(k_begin);
    constexpr bool runs_a = in_runs<A, TILE_M>, runs_b = in_runs<B, TILE_N>;
    bool vector_a = false, vector_b = false;  // an operand in runs: whether its rows are 16-byte aligned
    if constexpr (runs_a) vector_a = a.ld % 4 == 0 && aligned16(a.p);
    if constexpr (runs_b) vector_b = b.ld % 4 == 0 && aligned16(b.p);
    constexpr bool copy_a = COPY_AROUND_REGISTERS, copy_b = COPY_AROUND_REGISTERS;
    float ra[copy_a ? 1 : LOADS_A], rb[copy_b ? 1 : LOADS_B];  // staging registers, where used
    // A masked operand's y ring, in step with its own (a token where no operand is masked).
    constexpr bool mask_a = masks_in_shared<A>, mask_b = masks_in_shared<B>, masking = mask_a || mask_b;
    static_assert(!(mask_a && mask_b), "one operand at most is read through the mask");
    __shared__ __align__(16) float Ys[masking ? STAGES : 1][masking ? TILE_K : 1][mask_a ? TILE_M + PAD_A : TILE_N + PAD_B];
    // The k-tile where the loaders stand into buffer buf, its first `rows` k-rows valid (full: all,
    // a constant where it is called): copied operands straight there (a masked one's y beside it),
    // staged ones into their registers.
    auto fetch = [&](int buf, int rows, bool full) {
        if constexpr (runs_a) {
            fetch_runs<TILE_M, TILE_M + PAD_A>(a, &As[buf][0][0] + at_a, m0 + oa, M, ka, rows, full, vector_a);
        } else {
            const unsigned probe = probe_of(a, slots_a, full || ka < rows);
            fetch_operand<copy_a, LOADS_A>(a, ra, &As[buf][0][0] + at_a, probe);
            if constexpr (mask_a) fetch_operand<true, LOADS_A>(mask_of(a), ra, &Ys[buf][0][0] + at_a, probe);
        }
        if constexpr (runs_b) {
            fetch_runs<TILE_N, TILE_N + PAD_B>(b, &Bs[buf][0][0] + at_b, n0 + ob, N, kb, rows, full, vector_b);
        } else {
            const unsigned probe = probe_of(b, slots_b, full || kb < rows);
            fetch_operand<copy_b, LOADS_B>(b, rb, &Bs[buf][0][0] + at_b, probe);
            if constexpr (mask_b) fetch_operand<true, LOADS_B>(mask_of(b), rb, &Ys[buf][0][0] + at_b, probe);
        }
    };
    auto mask = [&](int buf) {  // this thread's copies into buffer buf, landed, through the mask
        if constexpr (mask_a) apply_mask<LOADS_A>(&As[buf][0][0] + at_a, &Ys[buf][0][0] + at_a);
        if constexpr (mask_b) apply_mask<LOADS_B>(&Bs[buf][0][0] + at_b, &Ys[buf][0][0] + at_b);
    };
    auto advance = [&] {  // the loaders on to the next k-tile
        a.next();
        b.next();
    };
    auto stash = [&](int buf) {  // the staged operands' registers into buffer buf
        stash_operand<copy_a, LOADS_A>(ra, &As[buf][0][0] + at_a);
        stash_operand<copy_b, LOADS_B>(rb, &Bs[buf][0][0] + at_b);
    };

    float acc[THREAD_M][THREAD_N] = {};
    // Tiles 0 .. STAGES-2 into buffers 0 .. STAGES-2 (the partial tile first, zeros past the last),
    // so that tile i is in buffer i % STAGES. One group of copies a k-tile (empty past the last in
    // the loop below), so that wait_copies<STAGES - 2> counts tiles.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        fetch(s, s >= tiles ? 0 : s == 0 ? first : TILE_K, false);
        if (s == 0)
            start(k_begin + first);  // the whole tiles after the partial one
        else
            advance();
        stash(s);
        commit_copies();
    }
    wait_copies<STAGES - 2>();
    mask(0);
    __syncthreads();
    // The fragments, double-buffered in registers where the operands bypass them (cp.async): step
    // kk's FFMAs run while step kk + 1's four 128-bit shared loads are in flight (the last step's,
    // the next k-tile's first). The staged builds spend those registers on their staging instead.
    constexpr bool DOUBLE = COPY_AROUND_REGISTERS;
    float4 frag[DOUBLE ? 2 : 1][4];
    auto load_fragments = [&](float4(&f)[4], int buf, int kk) {
        f[0] = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
        f[1] = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4 + TILE_M / 2]);
        f[2] = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
        f[3] = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4 + TILE_N / 2]);
    };
    auto multiply = [&](const float4(&f)[4]) {
        const float ar[THREAD_M] = {f[0].x, f[0].y, f[0].z, f[0].w, f[1].x, f[1].y, f[1].z, f[1].w};
        const float br[THREAD_N] = {f[2].x, f[2].y, f[2].z, f[2].w, f[3].x, f[3].y, f[3].z, f[3].w};
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    };
    unsigned read = 0;  // unsigned: % STAGES is a mask where STAGES is a power of 2
    if constexpr (DOUBLE) load_fragments(frag[0], read, 0);
    for (int tile = 0; tile < tiles; ++tile) {
        // The next tile to fetch (a whole one) goes to the buffer the last tile used: every thread
        // finished reading it before the last barrier. Its loads fly while this tile is multiplied.
        const unsigned write = (read + STAGES - 1) % STAGES;
        const bool more = tile + STAGES - 1 < tiles;
        if (more) {
            fetch(write, TILE_K, true);
            advance();
        }
        commit_copies();
#pragma unroll
        for (int kk = 0; kk < TILE_K; ++kk) {
            float4(&now)[4] = frag[DOUBLE ? kk % 2 : 0];
            if constexpr (!DOUBLE) load_fragments(now, read, kk);
            if (kk == TILE_K - 1) {
                // Every thread holds this tile's last fragments, and the next tile has landed for
                // every thread (its group, and its stash a barrier or more ago): hand it over.
                if (more) stash(write);
                wait_copies<STAGES - 2>();
                mask((read + 1) % STAGES);
                __syncthreads();
                read = (read + 1) % STAGES;
            }
            if constexpr (DOUBLE) load_fragments(frag[(kk + 1) % 2], read, (kk + 1) % TILE_K);
            multiply(now);
        }
    }
    // A thread's columns are two runs of 4 (common.cuh's register block), stored a run at a time.
    size_t columns[THREAD_N];
#pragma unroll
    for (int j = 0; j < THREAD_N; ++j) columns[j] = epi.column(n0 + tx * 4 + j % 4 + (j / 4) * (TILE_N / 2));
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        const int m = m0 + ty * 4 + i % 4 + (i / 4) * (TILE_M / 2);
        if (m >= M) continue;
#pragma unroll
        for (int run = 0; run < THREAD_N / 4; ++run)
            epi.quad(m, n0 + tx * 4 + run * (TILE_N / 2), N, &columns[4 * run], &acc[i][4 * run]);
    }
}

// Block-wide sum or max of one value per thread (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v) {
    __shared__ float partial[32];
    __shared__ float result;
    v = MAX ? warp_max(v) : warp_sum(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? partial[lane] : (MAX ? __int_as_float(0xff800000) : 0.f);
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) result = v;
    }
    __syncthreads();
    const float out = result;
    __syncthreads();  // the shared slots are reused by the next call
    return out;
}
