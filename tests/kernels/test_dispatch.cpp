// The SIMD dispatcher against the CPU's own word: which levels exist is read here from `cpuid`
// and XGETBV (the OS's saved-state mask), independently of dispatch.cpp's __builtin_cpu_supports,
// so that broken detection cannot silently drop a level and every test run at it. Also
// TINYLOOP_SIMD: a cap for the whole process, refused by name when the CPU lacks the level.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "app/cli_run.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"

namespace tinyloop::kern {
namespace {

struct CpuidLevels {
    bool avx2 = false, avx512 = false, vnni = false;
};

// Intel SDM vol. 2A, CPUID: leaf 1 ECX (FMA 12, OSXSAVE 27, AVX 28, F16C 29); leaf 7 subleaf 0
// EBX (AVX2 5, AVX512F 16, AVX512DQ 17, AVX512BW 30, AVX512VL 31), ECX (AVX512_VNNI 11). The OS
// must save the state too: XCR0 bits 1-2 (SSE, YMM) and 5-7 (opmask, ZMM halves).
CpuidLevels read_cpuid() {
    CpuidLevels l;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return l;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    uint64_t xcr0 = 0;
    if (osxsave) {
        uint32_t lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
    }
    const bool ymm_state = (xcr0 & 0x6) == 0x6, zmm_state = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return l;
    const bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
               vl = b & (1u << 31), vnni = c & (1u << 11);
    l.avx2 = avx && avx2 && fma && f16c && ymm_state;
    l.avx512 = l.avx2 && f && dq && bw && vl && zmm_state;
    l.vnni = l.avx512 && vnni;
    return l;
}

// The levels force_simd_level must accept, best last: cpuid's, capped by TINYLOOP_SIMD (parsed
// here too) unless that names a level the CPU lacks (then the process keeps the hardware's).
std::vector<std::string> expected_levels() {
    const CpuidLevels hw = read_cpuid();
    std::vector<std::string> all = {"scalar"};
    if (hw.avx2) all.push_back("avx2");
    if (hw.avx512) all.push_back("avx512-novnni");
    if (hw.vnni) all.push_back("avx512");
    const char* e = std::getenv("TINYLOOP_SIMD");
    if (e == nullptr || *e == '\0') return all;
    for (size_t i = 0; i < all.size(); ++i) {
        if (all[i] == e) {
            all.resize(i + 1);
            return all;
        }
    }
    return all;  // refused: the hardware's levels stand
}

const char* const kAllLevels[] = {"scalar", "avx2", "avx512-novnni", "avx512"};

TEST(Dispatch, LevelsAreNamedAndForceable) {
    const std::vector<std::string> want = expected_levels();
    const std::string saved = simd_level();
    EXPECT_EQ(saved, want.back()) << "the default level is not the best one cpuid (and TINYLOOP_SIMD) allow";
    EXPECT_FALSE(force_simd_level("sse9"));
    EXPECT_FALSE(force_simd_level(nullptr));
    EXPECT_EQ(simd_level(), saved);  // a refused force changes nothing
    for (const char* l : kAllLevels) {
        const bool expect = std::find(want.begin(), want.end(), l) != want.end();
        EXPECT_EQ(force_simd_level(l), expect) << l << (expect ? ": cpuid has it, the dispatcher refused it"
                                                             : ": cpuid lacks it, the dispatcher accepted it");
        if (expect) {
            EXPECT_EQ(simd_level(), std::string(l));
        }
    }
    ASSERT_TRUE(force_simd_level(saved.c_str()));
    std::printf("[ info ] SIMD levels (cpuid, TINYLOOP_SIMD=%s): ", std::getenv("TINYLOOP_SIMD") ? std::getenv("TINYLOOP_SIMD") : "");
    for (const auto& l : want) std::printf("%s ", l.c_str());
    std::printf("(default %s)\n", saved.c_str());
}

// The int8 panel and AMX kernels need AVX512-VNNI: a cap below it turns them off as well.
TEST(Dispatch, PanelsFollowTheCap) {
    const std::vector<std::string> want = expected_levels();
    const bool vnni = want.back() == "avx512";
    EXPECT_EQ(detail::cpu_has_avx512_vnni(), vnni);
    if (!vnni) {
        EXPECT_FALSE(int8_amx_active());
    }
}

TEST(Dispatch, RefusalNamesTheVariableTheValueAndWhatTheCpuHas) {
    using detail::CpuLevels;
    using detail::simd_request_refusal;
    const CpuLevels laptop{true, false, false}, skylake{true, true, false}, icelake{true, true, true},
        old{false, false, false};
    for (const char* ok : {"scalar", "avx2"}) EXPECT_EQ(simd_request_refusal(ok, laptop), "") << ok;
    for (const char* ok : {"scalar", "avx2", "avx512-novnni"}) EXPECT_EQ(simd_request_refusal(ok, skylake), "") << ok;
    for (const char* ok : kAllLevels) EXPECT_EQ(simd_request_refusal(ok, icelake), "") << ok;
    EXPECT_EQ(simd_request_refusal("avx512", laptop),
              "TINYLOOP_SIMD=avx512 refused: this CPU has no avx512 (it has scalar, avx2)");
    EXPECT_EQ(simd_request_refusal("avx512", skylake),
              "TINYLOOP_SIMD=avx512 refused: this CPU has no avx512 (it has scalar, avx2, avx512-novnni)");
    EXPECT_EQ(simd_request_refusal("avx2", old), "TINYLOOP_SIMD=avx2 refused: this CPU has no avx2 (it has scalar)");
    EXPECT_EQ(simd_request_refusal("AVX2", icelake),
              "TINYLOOP_SIMD=AVX2 refused: not one of scalar, avx2, avx512-novnni, avx512");
}

// The whole process follows TINYLOOP_SIMD: the CLI reports the level it runs at, and refuses a
// level the CPU lacks or an unknown name with the message (exit status 2, no crash).
TEST(Dispatch, EnvironmentCapsTheWholeProcessAndRefusesByName) {
    namespace fs = std::filesystem;
    const std::string model = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-q8.tinyloop";
    std::string dir = (fs::temp_directory_path() / "tinyloop_dispatch_XXXXXX").string();
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    const char* prior = std::getenv("TINYLOOP_SIMD");
    const std::string restore = prior ? prior : "";
    const std::vector<std::string> want = expected_levels();
    for (const std::string& l : want) {
        setenv("TINYLOOP_SIMD", l.c_str(), 1);
        const tl_test::CliRun r = tl_test::run_cli(dir, {"info", model, "--json"});
        EXPECT_EQ(r.status, 0) << l << ": " << r.err;
        EXPECT_NE(r.out.find("(" + l + ", "), std::string::npos) << l << ": " << r.out.substr(0, 300);
    }
    std::vector<std::string> refused = {"sse9"};
    for (const char* l : kAllLevels)
        if (std::find(want.begin(), want.end(), l) == want.end() && !prior) refused.emplace_back(l);
    for (const std::string& l : refused) {
        setenv("TINYLOOP_SIMD", l.c_str(), 1);
        const tl_test::CliRun r = tl_test::run_cli(dir, {"info", model, "--json"});
        EXPECT_EQ(r.status, 2) << l;  // the CLI's status for every refusal (main.cpp)
        EXPECT_FALSE(r.signaled) << l;
        EXPECT_NE(r.err.find("TINYLOOP_SIMD=" + l + " refused: "), std::string::npos) << l << ": " << r.err;
    }
    if (prior) setenv("TINYLOOP_SIMD", restore.c_str(), 1);
    else unsetenv("TINYLOOP_SIMD");
    std::error_code ec;
    fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace tinyloop::kern
