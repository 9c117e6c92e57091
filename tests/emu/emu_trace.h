// The emulation's memory trace (built with -DEMU_TRACE and g++'s -fsanitize=kernel-address, whose
// outlined checks call the __asan_* hooks below on every load and store the kernel makes): each
// access of a kernel thread to memory that is not its own stack is recorded with the thread, its
// block, its size and the instruction (the hook's return address), so that tests/emu/trace.py
// can gather the 32 lanes of each warp-wide access and count the sectors and shared-memory
// wavefronts a GPU would serve it in. Accesses of the emulation's own state (threadIdx and the
// like, the shuffle's lanes) and of the scheduler between fibers are left out.
#pragma once
#include <cstdint>

struct EmuAccess {
    uint64_t address;
    uint64_t instruction;
    uint32_t block;
    uint16_t thread;
    uint8_t bytes;
    uint8_t kind;  // bit 0: a store; bit 1: to a __constant__ array
};

inline EmuAccess* emu_trace_buffer = nullptr;
inline uint64_t emu_trace_capacity = 0, emu_trace_count = 0, emu_trace_dropped = 0;

template <class T>
__attribute__((no_sanitize_address)) inline bool emu_within(uintptr_t a, const T& object) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(&object);
    return a >= lo && a < lo + sizeof object;
}

__attribute__((no_sanitize_address)) inline void emu_record(uintptr_t a, size_t bytes, bool store, void* pc) {
    if (!emu_tracing || emu_trace_capacity == 0 || (a >= emu_stacks.first && a < emu_stacks.second)) return;
    if (emu_within(a, threadIdx) || emu_within(a, blockIdx) || emu_within(a, blockDim) || emu_within(a, gridDim) ||
        emu_within(a, emu_tid) || emu_within(a, emu_lanes))
        return;
    if (emu_trace_count == emu_trace_capacity) {
        ++emu_trace_dropped;
        return;
    }
    emu_tracing = false;  // the table's own code is instrumented too
    bool constant = false;
    for (const auto& [name, symbol] : emu_symbols()) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(symbol.first);
        constant |= a >= lo && a < lo + symbol.second;
    }
    emu_tracing = true;
    const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    emu_trace_buffer[emu_trace_count++] = {a,
                                           reinterpret_cast<uint64_t>(pc),
                                           block,
                                           static_cast<uint16_t>(emu_tid),
                                           static_cast<uint8_t>(bytes),
                                           static_cast<uint8_t>(store | (constant << 1))};
}

#define EMU_HOOK(n)                                                                                     \
    extern "C" __attribute__((no_sanitize_address)) void __asan_load##n##_noabort(uintptr_t a) {        \
        emu_record(a, n, false, __builtin_return_address(0));                                          \
    }                                                                                                   \
    extern "C" __attribute__((no_sanitize_address)) void __asan_store##n##_noabort(uintptr_t a) {       \
        emu_record(a, n, true, __builtin_return_address(0));                                           \
    }
EMU_HOOK(1)
EMU_HOOK(2)
EMU_HOOK(4)
EMU_HOOK(8)
EMU_HOOK(16)
#undef EMU_HOOK
extern "C" __attribute__((no_sanitize_address)) void __asan_loadN_noabort(uintptr_t a, size_t n) {
    emu_record(a, n, false, __builtin_return_address(0));
}
extern "C" __attribute__((no_sanitize_address)) void __asan_storeN_noabort(uintptr_t a, size_t n) {
    emu_record(a, n, true, __builtin_return_address(0));
}
extern "C" void __asan_handle_no_return() {}
extern "C" void __asan_before_dynamic_init(const char*) {}  // the runtime's, for globals: none checked
extern "C" void __asan_after_dynamic_init() {}

// The trace of the launches since the last call: starts a fresh buffer of ``capacity`` records
// (0: record nothing, a launch not asked for).
extern "C" __attribute__((no_sanitize_address)) void emu_trace_start(uint64_t capacity) {
    if (emu_trace_buffer != nullptr) munmap(emu_trace_buffer, emu_trace_capacity * sizeof(EmuAccess));
    emu_trace_buffer = static_cast<EmuAccess*>(mmap(nullptr, capacity * sizeof(EmuAccess), PROT_READ | PROT_WRITE,
                                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    emu_trace_capacity = emu_trace_buffer == MAP_FAILED ? 0 : capacity;
    if (emu_trace_buffer == MAP_FAILED) emu_trace_buffer = nullptr;
    emu_trace_count = emu_trace_dropped = 0;
}
extern "C" EmuAccess* emu_trace_records() { return emu_trace_buffer; }
extern "C" uint64_t emu_trace_recorded() { return emu_trace_count; }
extern "C" uint64_t emu_trace_lost() { return emu_trace_dropped; }
