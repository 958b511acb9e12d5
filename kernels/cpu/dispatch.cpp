// Chooses the SIMD level once from the CPU's features, capped by TINYLOOP_SIMD; tests and
// benchmarks may force a lower one.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_internal.h"

namespace tinyloop::kern {
namespace detail {
namespace {

// What the hardware (and the OS, which __builtin_cpu_supports checks through XCR0) offers.
bool hw_has(Simd level) {
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
                   hw_has(Simd::Avx2);
    }
    return false;
}

bool hw_vnni() { return hw_has(Simd::Avx512) && __builtin_cpu_supports("avx512vnni"); }

// TINYLOOP_SIMD, read once: the highest level this process may use, as if the CPU had nothing
// above it (so that one machine can run what an AVX2-only laptop runs: the default level, the
// levels a test may force, the int8 panel and AMX kernels, which need AVX512-VNNI, all follow).
// A refused value leaves the hardware's levels and sets `refusal`, which load_model reports.
struct Ceiling {
    Simd level = Simd::Scalar;
    bool vnni = false;
    std::string refusal;
};

const Ceiling& ceiling() {
    static const Ceiling c = [] {
        __builtin_cpu_init();  // needed when the first call comes from a static initialiser
        Ceiling out;
        const CpuLevels have{hw_has(Simd::Avx2), hw_has(Simd::Avx512), hw_vnni()};
        out.level = have.avx512 ? Simd::Avx512 : have.avx2 ? Simd::Avx2 : Simd::Scalar;
        out.vnni = have.vnni;
        const char* e = std::getenv("TINYLOOP_SIMD");
        if (e == nullptr || *e == '\0') return out;
        out.refusal = simd_request_refusal(e, have);
        if (!out.refusal.empty()) return out;
        if (std::strcmp(e, "scalar") == 0) out.level = Simd::Scalar;
        else if (std::strcmp(e, "avx2") == 0) out.level = Simd::Avx2;
        else out.level = Simd::Avx512;
        out.vnni = out.level == Simd::Avx512 && std::strcmp(e, "avx512-novnni") != 0;
        return out;
    }();
    return c;
}

bool cpu_has(Simd level) {
    return static_cast<int>(level) <= static_cast<int>(ceiling().level) && hw_has(level);
}

Simd detect() { return ceiling().level; }

std::atomic<int> g_forced{-1};
std::atomic<bool> g_no_vnni{false};  // "avx512-novnni" forced

}  // namespace

Simd active_simd() {
    static const Simd detected = detect();
    const int f = g_forced.load(std::memory_order_relaxed);
    return f < 0 ? detected : static_cast<Simd>(f);
}

bool cpu_has_avx512_level() { return cpu_has(Simd::Avx512); }

bool cpu_has_avx512_vnni() { return cpu_has(Simd::Avx512) && ceiling().vnni; }

std::string simd_request_refusal(const char* value, const CpuLevels& have) {
    const std::string v = value == nullptr ? "" : value;
    std::string has = "scalar";
    if (have.avx2) has += ", avx2";
    if (have.avx512) has += have.vnni ? ", avx512-novnni, avx512" : ", avx512-novnni";
    bool lacks = false;
    if (v == "scalar") lacks = false;
    else if (v == "avx2") lacks = !have.avx2;
    else if (v == "avx512-novnni") lacks = !have.avx512;
    else if (v == "avx512") lacks = !have.avx512 || !have.vnni;
    else
        return "TINYLOOP_SIMD=" + v + " refused: not one of scalar, avx2, avx512-novnni, avx512";
    if (lacks) return "TINYLOOP_SIMD=" + v + " refused: this CPU has no " + v + " (it has " + has + ")";
    return "";
}

bool avx512_vnni_active() { return cpu_has_avx512_vnni() && !g_no_vnni.load(std::memory_order_relaxed); }

const IsaTable& isa_scalar() {
    static const IsaTable t{matmul_rows_scalar, rmsnorm_scalar,     rope_token_scalar,
                            silu_mul_scalar,    add_inplace_scalar, attend_one_scalar, nullptr,
                            matmul_rows_i8_scalar, nullptr, quantize_row_i8_scalar,
                            matmul_rows_fpanels_scalar};
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

const char* simd_request_error() {
    const std::string& r = detail::ceiling().refusal;
    return r.empty() ? nullptr : r.c_str();
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
