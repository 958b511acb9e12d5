// Chooses the SIMD level once from the CPU's features; tests and benchmarks may force a lower one.
#include <atomic>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {
namespace {

bool cpu_has(Simd level) {
    switch (level) {
        case Simd::Scalar:
            return true;
        case Simd::Avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("f16c");
        case Simd::Avx512:
            // The AVX-512 files are built with F/BW/VL/DQ (plus AVX2/FMA/F16C, which every such CPU
            // has); DQ comes with BW and VL on every shipped CPU, but checking costs nothing.
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   cpu_has(Simd::Avx2);
    }
    return false;
}

Simd detect() {
    __builtin_cpu_init();  // needed when the first call comes from a static initialiser
    if (cpu_has(Simd::Avx512)) return Simd::Avx512;
    if (cpu_has(Simd::Avx2)) return Simd::Avx2;
    return Simd::Scalar;
}

std::atomic<int> g_forced{-1};
std::atomic<bool> g_no_vnni{false};  // "avx512-novnni" forced

}  // namespace

Simd active_simd() {
    static const Simd detected = detect();
    const int f = g_forced.load(std::memory_order_relaxed);
    return f < 0 ? detected : static_cast<Simd>(f);
}

bool cpu_has_avx512_level() { return cpu_has(Simd::Avx512); }

bool avx512_vnni_active() { return cpu_has_avx512_vnni() && !g_no_vnni.load(std::memory_order_relaxed); }

const IsaTable& isa_scalar() {
    static const IsaTable t{matmul_rows_scalar, rmsnorm_scalar,     rope_token_scalar,
                            silu_mul_scalar,    add_inplace_scalar, attend_one_scalar, nullptr,
                            matmul_rows_i8_scalar, nullptr, quantize_row_i8_scalar};
    return t;
}

const IsaTable& active_isa() {
    switch (active_simd()) {
        case Simd::Avx512: return isa_avx512();
        case Simd::Avx2: return isa_avx2();
        case Simd::Scalar: break;
    }
    return isa_scalar();
}

}  // namespace detail

const char* simd_level() {
    switch (detail::active_simd()) {
        case detail::Simd::Avx512: return detail::avx512_vnni_active() ? "avx512" : "avx512-novnni";
        case detail::Simd::Avx2: return "avx2";
        case detail::Simd::Scalar: break;
    }
    return "scalar";
}

bool force_simd_level(const char* level) {
    if (level == nullptr) return false;
    detail::Simd want;
    bool no_vnni = false;
    if (std::strcmp(level, "avx512") == 0) {
        want = detail::Simd::Avx512;
        if (!detail::cpu_has_avx512_vnni()) return false;  // this CPU's AVX-512 is "avx512-novnni"
    } else if (std::strcmp(level, "avx512-novnni") == 0) {
        want = detail::Simd::Avx512;
        no_vnni = true;
    } else if (std::strcmp(level, "avx2") == 0) {
        want = detail::Simd::Avx2;
    } else if (std::strcmp(level, "scalar") == 0) {
        want = detail::Simd::Scalar;
    } else {
        return false;
    }
    if (!detail::cpu_has(want)) return false;
    detail::g_no_vnni.store(no_vnni, std::memory_order_relaxed);
    detail::g_forced.store(static_cast<int>(want), std::memory_order_relaxed);
    return true;
}

}  // namespace tinyloop::kern
