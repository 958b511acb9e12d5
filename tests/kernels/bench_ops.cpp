// Local microbenchmark for the CPU kernels (not part of the build or of CTest).
//   g++ -O2 -std=c++20 -I. tests/kernels/bench_ops.cpp build-kern/kernels/libtinyloop_kernels.a -lpthread -o /tmp/bench_ops
//   /tmp/bench_ops [threads] [avx512|avx512-novnni|avx2|scalar] [attention context]
// Prints matvec (decode) effective weight bandwidth and prefill GFLOP/s per dtype and level; q8
// and q4 with float activations and with int8 activations (the default), side by side.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/kernels.h"

using namespace tinyloop::kern;

namespace {

struct Mat {
    std::vector<uint8_t> data;
    std::vector<uint16_t> s, z;
    WeightView v;
};

Mat make(WType t, int rows, int cols, int gs) {
    Mat m;
    std::mt19937 g(1);
    const size_t n = static_cast<size_t>(rows) * cols;
    m.data.resize(n * wtype_bits(t) / 8);
    for (auto& b : m.data) b = static_cast<uint8_t>(g());
    if (t == WType::F32) {
        float* f = reinterpret_cast<float*>(m.data.data());
        for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(g() % 1000) * 1e-4f;
    }
    if (t == WType::F16) {
        uint16_t* h = reinterpret_cast<uint16_t*>(m.data.data());
        for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(static_cast<float>(g() % 1000) * 1e-4f);
    }
    m.s.assign(n / gs, f32_to_f16(0.01f));
    m.z.assign(n / gs, f32_to_f16(7.0f));
    m.v = WeightView{t, rows, cols, gs, m.data.data(), m.s.data(), m.z.data()};
    return m;
}

double bytes_of(const Mat& m) {
    return static_cast<double>(m.data.size()) + 2.0 * (m.s.size() + m.z.size()) *
                                                    (m.v.type == WType::F32 || m.v.type == WType::F16 ? 0 : 1);
}

// Best of many short samples: the machine is shared, so the minimum is the honest figure. With
// one thread the clock is this thread's CPU time (time spent descheduled does not count).
bool g_cpu_clock = true;
double now_s() {
    if (g_cpu_clock) {
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
double time_it(F f, double budget_s = 0.3) {
    f();
    int reps = 1;
    for (;;) {
        const double t0 = now_s();
        for (int i = 0; i < reps; ++i) f();
        if (now_s() - t0 >= 2e-3) break;
        reps *= 2;
    }
    double best = 1e30;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < budget_s) {
        const double t0 = now_s();
        for (int i = 0; i < reps; ++i) f();
        const double s = (now_s() - t0) / reps;
        if (s < best) best = s;
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
    ThreadPool pool(threads);
    g_cpu_clock = threads == 1;
    const char* names[] = {"f32", "f16", "q8", "q4", "q2"};
    const WType types[] = {WType::F32, WType::F16, WType::Q8, WType::Q4, WType::Q2};
    std::printf("threads %d\n", threads);
    const char* only = argc > 2 ? argv[2] : nullptr;
    for (const char* level : {"avx512", "avx512-novnni", "avx2", "scalar"}) {
        if (only && std::strcmp(only, level) != 0) continue;
        if (!force_simd_level(level)) continue;
        for (int shape = 0; shape < 2; ++shape) {
            const int rows = shape == 0 ? 1408 : 512, cols = shape == 0 ? 512 : 1408;
            for (int ti = 0; ti < 5; ++ti) {
                const Mat m = make(types[ti], rows, cols, 32);
                std::vector<float> x(64 * static_cast<size_t>(cols)), y(64 * static_cast<size_t>(rows));
                std::mt19937 g(2);
                for (auto& v : x) v = static_cast<float>(g() % 2001) * 1e-3f - 1.0f;
                // Q8/Q4: the float-activation kernels, then the int8-activation ones.
                const bool quant = types[ti] == WType::Q8 || types[ti] == WType::Q4;
                for (int act = 0; act < (quant ? 2 : 1); ++act) {
                    set_int8_activations(act == 1);
                    const double t1 = time_it([&] { matmul(m.v, x.data(), 1, y.data(), &pool); });
                    const double t64 = time_it([&] { matmul(m.v, x.data(), 64, y.data(), &pool); });
                    std::printf("%-13s %4dx%-4d %-4s %-5s decode %7.1f us %6.1f GB/s | prefill64 %7.1f us %6.1f GFLOP/s\n",
                                simd_level(), rows, cols, names[ti], act ? "int8" : "float", t1 * 1e6,
                                bytes_of(m) / t1 * 1e-9, t64 * 1e6, 2.0 * rows * cols * 64 / t64 * 1e-9);
                }
                set_int8_activations(true);
            }
        }
    }
    // The small ops at decode size.
    force_simd_level("avx512") || force_simd_level("avx2");
    std::vector<float> a(1408, 0.3f), b(1408, 0.2f), c(1408);
    std::printf("silu_mul 1408: %.2f us\n", time_it([&] { silu_mul(a.data(), b.data(), c.data(), 1408); }, 0.1) * 1e6);
    std::printf("rmsnorm 512: %.2f us\n", time_it([&] { rmsnorm(a.data(), b.data(), 1, 512, 1e-5f, c.data()); }, 0.1) * 1e6);
    const int ctx = argc > 3 ? std::atoi(argv[3]) : 512, nh = 8, hd = 64;
    std::vector<float> q(nh * hd, 0.1f), kv(static_cast<size_t>(ctx) * nh * hd, 0.1f), out(nh * hd);
    std::vector<int> kb(1, 0), ke(1, ctx);
    AttentionArgs at{q.data(), 1, nh, nh, hd, kv.data(), kv.data(), nh * hd, kb.data(), ke.data(), out.data()};
    std::printf("attention decode ctx %d, %d heads x %d: %.2f us\n", ctx, nh, hd,
                time_it([&] { attention(at, &pool); }, 0.1) * 1e6);
    return 0;
}
