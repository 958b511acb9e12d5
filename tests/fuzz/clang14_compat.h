// Local workaround, force-included (-include) into a clang <= 14 fuzz build only: clang 14
// rejects __builtin_cpu_supports("f16c") (kernels/cpu/dispatch.cpp), so the builtin is answered
// from CPUID here. Remove once kernels/cpu/dispatch.cpp checks F16C portably.
#pragma once
#if defined(__clang__) && __clang_major__ < 15 && defined(__cplusplus) && defined(__x86_64__)
#include <cpuid.h>
#include <cstring>
static inline int tl_compat_cpu_supports(const char* f) {
    unsigned a = 0, b = 0, c = 0, d = 0, a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    __get_cpuid(1, &a, &b, &c, &d);
    __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
    if (!std::strcmp(f, "f16c")) return (c >> 29) & 1;
    if (!std::strcmp(f, "fma")) return (c >> 12) & 1;
    if (!std::strcmp(f, "avx2")) return (b7 >> 5) & 1;
    if (!std::strcmp(f, "avx512f")) return (b7 >> 16) & 1;
    if (!std::strcmp(f, "avx512dq")) return (b7 >> 17) & 1;
    if (!std::strcmp(f, "avx512bw")) return (b7 >> 30) & 1;
    if (!std::strcmp(f, "avx512vl")) return (b7 >> 31) & 1;
    return 0;
}
#define __builtin_cpu_supports(f) tl_compat_cpu_supports(f)
#endif
