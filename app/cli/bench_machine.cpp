#include "bench_machine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace tinyloop::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

enum class Isa { Scalar, Avx2, Avx512 };

// The widest of this file's x86 kernel sets the CPU runs (AVX-512F; AVX2 with FMA), for both
// the FMA and the read-bandwidth measurements.
Isa x86_kernel_isa() {
#if defined(TL_X86_FMA_KERNELS)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
    return Isa::Scalar;
}

// Runs f(thread_index) on `threads` threads started together; returns the wall time of the
// slowest, measured from a common start.
template <class F>
double timed_parallel(int threads, F&& f) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            f(t);
        });
    while (ready.load() < threads - 1) std::this_thread::yield();
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    f(0);
    for (auto& th : pool) th.join();
    return seconds_since(t0);
}

// Plain C++ so that any ISA runs it; four independent sums let the compiler vectorise.
float fma_scalar_kernel(long iters, float a, float b) {
    float acc[16];
    for (int c = 0; c < 16; ++c) acc[c] = static_cast<float>(c) * 1e-3f;
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < 16; ++c) acc[c] = std::fma(acc[c], a, b);
    float s = 0;
    for (float v : acc) s += v;
    return s;
}

}  // namespace

double measure_read_bandwidth_gbs(int threads, size_t bytes) {
    threads = std::max(1, threads);
    const size_t n = bytes / sizeof(uint64_t);
    std::unique_ptr<uint64_t[]> data(new uint64_t[n]);
    // First touch from the threads that will read, so pages land near them.
    timed_parallel(threads, [&](int t) {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        for (size_t i = lo; i < hi; ++i) data[i] = i;
    });
    // The widest read the machine has (the kernels' own load width); plain C++ elsewhere.
    uint64_t (*vector_read)(const uint64_t*, size_t) = nullptr;
    switch (x86_kernel_isa()) {
        case Isa::Avx512: vector_read = read_avx512_kernel; break;
        case Isa::Avx2: vector_read = read_avx2_kernel; break;
        case Isa::Scalar: break;
    }
    std::vector<uint64_t> sink(threads * 8);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        const double s = timed_parallel(threads, [&](int t) {
            const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
            if (vector_read != nullptr) {
                const size_t whole = (hi - lo) / 32 * 32;
                uint64_t acc = vector_read(data.get() + lo, whole);
                for (size_t i = lo + whole; i < hi; ++i) acc += data[i];
                sink[t * 8] = acc;
                return;
            }
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            size_t i = lo;
            for (; i + 4 <= hi; i += 4) {
                a0 += data[i];
                a1 += data[i + 1];
                a2 += data[i + 2];
                a3 += data[i + 3];
            }
            for (; i < hi; ++i) a0 += data[i];
            sink[t * 8] = a0 + a1 + a2 + a3;
        });
        best = std::min(best, s);
    }
    volatile uint64_t keep = 0;
    for (uint64_t v : sink) keep = keep + v;
    (void)keep;
    return static_cast<double>(n * sizeof(uint64_t)) / best / 1e9;
}

double measure_fma_gflops(int threads, std::string* isa) {
    threads = std::max(1, threads);
    float (*kernel)(long, float, float) = fma_scalar_kernel;
    int flops_per_iter = 16 * 2;
    std::string name = "scalar";
    switch (x86_kernel_isa()) {
        case Isa::Avx512: kernel = fma_avx512_kernel, flops_per_iter = fma_avx512_flops_per_iter, name = "avx512"; break;
        case Isa::Avx2: kernel = fma_avx2_kernel, flops_per_iter = fma_avx2_flops_per_iter, name = "avx2"; break;
        case Isa::Scalar: break;
    }
    if (isa) *isa = name;
    // Size the loop to about 50 ms on one thread.
    volatile float va = 0.999999f, vb = 1e-7f;
    long iters = 1 << 16;
    for (;;) {
        auto t0 = Clock::now();
        volatile float r = kernel(iters, va, vb);
        (void)r;
        if (seconds_since(t0) > 0.02 || iters > (1L << 34)) break;
        iters *= 2;
    }
    std::vector<float> sink(threads * 16);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep)
        best = std::min(best, timed_parallel(threads, [&](int t) { sink[t * 16] = kernel(iters, va, vb); }));
    volatile float keep = 0;
    for (float v : sink) keep = keep + v;
    (void)keep;
    return static_cast<double>(iters) * flops_per_iter * threads / best / 1e9;
}

}  // namespace tinyloop::cli
