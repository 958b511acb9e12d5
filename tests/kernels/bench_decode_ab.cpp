// Local A/B benchmark of whole-model prefill and decode with float vs int8 activations, in one
// process, alternating, timed in this thread's CPU time (not part of the build or of CTest).
// One thread only: all work then runs on the calling thread, so CPU time is the cost and time
// spent descheduled on a shared machine does not count. The random model by default.
//   g++ -O2 -std=c++20 -I. -Iengine/include tests/kernels/bench_decode_ab.cpp
//       build-speed/engine/libtinyloop.a build-speed/kernels/libtinyloop_kernels.a -lpthread -o /tmp/ab
//   /tmp/ab [dtype q8|q4|f32] [rounds] [prompt tokens] [decode tokens]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tinyloop/tinyloop.h"

namespace {

double cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    using namespace tinyloop;
    const std::string dt = argc > 1 ? argv[1] : "q4";
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const int P = argc > 3 ? std::atoi(argv[3]) : 256;
    const int N = argc > 4 ? std::atoi(argv[4]) : 128;
    HParams hp;
    hp.d_model = 512;
    hp.n_heads = 8;
    hp.n_kv_heads = 8;
    hp.head_dim = 64;
    hp.d_ff = 1408;
    hp.vocab_size = 4096;
    hp.n_pre_blocks = 2;
    hp.n_loop_layers = 2;
    hp.default_loops = 7;
    hp.max_loops = 16;
    hp.max_seq_len = 1024;
    const DType dtype = dt == "q8" ? DType::Q8 : dt == "q4" ? DType::Q4 : DType::F32;
    const std::string path = "/tmp/tl_ab_" + std::to_string(getpid()) + "_" + dt + ".tinyloop";
    save_model(path, random_model_spec(hp, 1, dtype, 32));
    LoadOptions lo;
    lo.threads = 1;
    Model* m = load_model(path, lo);
    std::vector<int32_t> prompt(static_cast<size_t>(P));
    for (int i = 0; i < P; ++i) prompt[static_cast<size_t>(i)] = (i * 37 + 11) % 256;
    auto run = [&](int max_tokens) {
        GenerateConfig c;
        c.max_tokens = max_tokens;
        c.loops = hp.default_loops;
        c.ignore_eos = true;
        const double t0 = cpu_s();
        generate_ex(m, prompt.data(), P, c);
        return cpu_s() - t0;
    };
    std::vector<double> pre[2], dec[2];
    for (int act = 0; act < 2; ++act) {  // warm-up
        kern::set_int8_activations(act == 1);
        run(4);
    }
    for (int r = 0; r < rounds; ++r) {
        for (int act = 0; act < 2; ++act) {
            kern::set_int8_activations(act == 1);
            const double p = run(1), full = run(N + 1);
            pre[act].push_back(P / p);
            dec[act].push_back(N / (full - p));
        }
    }
    std::printf("%s (simd %s), 1 thread, CPU time, median of %d alternating rounds, prompt %d, %d decoded\n",
                dt.c_str(), kern::simd_level(), rounds, P, N);
    for (int act = 0; act < 2; ++act) {
        std::printf("  %-17s prefill %7.1f tok/s  decode %7.1f tok/s\n", act ? "int8 activations" : "float activations",
                    median(pre[act]), median(dec[act]));
    }
    free_model(m);
    std::remove(path.c_str());
    return 0;
}
