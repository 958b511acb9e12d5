// measure_sweep_cost (speculation.h): one pass over k rows, timed per k side by side. The pass is
// the executor's run_passes, exactly what chain and tree verification run per cycle.
#include <algorithm>
#include <chrono>
#include <string>

#include <time.h>

#include "forward/executor.h"

namespace tinyloop {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& m) { throw Error(ErrorCode::InvalidArgument, m); }

double cpu_ms_now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

std::vector<SweepCost> measure_sweep_cost(Model* model, const std::vector<int>& rows, int context, int repeat) {
    const Model& m = checked(model);
    const HParams& hp = m.hp;
    if (rows.empty()) bad("rows: give at least one row count");
    int most = 0;
    for (int k : rows) {
        if (k < 1 || k > 64) bad("rows: " + std::to_string(k) + " is outside [1, 64]");
        most = std::max(most, k);
    }
    if (context < 1 || context > m.max_seq_len - most)
        bad("context: " + std::to_string(context) + " is outside [1, max_seq_len - " + std::to_string(most) + " = " +
            std::to_string(m.max_seq_len - most) + "]");
    if (repeat < 1 || repeat > 1000) bad("repeat: " + std::to_string(repeat) + " is outside [1, 1000]");
    if (hp.max_loops < 2)
        throw Error(ErrorCode::NotSupported, "measure_sweep_cost: the model's max_loops is 1 (a pass to resume needs 2)");

    const std::unique_ptr<Executor> ex = run_executor(m, {ExecOp::ChainSpeculation});
    const int loops = std::max(2, std::min(hp.default_loops, hp.max_loops));
    const std::unique_ptr<ExecSequence> seq = ex->sequence({.loops = loops, .capacity = context + most});
    const int n_ids = std::max(1, std::min(hp.vocab_size, m.tokenizer.n_ids()));
    std::vector<int32_t> ids(static_cast<size_t>(context + most));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919 + 17) % static_cast<size_t>(n_ids));
    seq->run(ids.data(), context, 0, nullptr);

    // The rows' pass-1 states (and prelude outputs): what a verify resumes from.
    const size_t d = static_cast<size_t>(hp.d_model);
    std::vector<float> h1(static_cast<size_t>(most) * d), e1(injects_input(hp) ? h1.size() : 0);
    seq->run_passes({.tokens = ids.data() + context, .n = most, .pos0 = context, .first = 1, .last = 1,
                     .out_h = h1.data(), .out_e = e1.empty() ? nullptr : e1.data()});
    std::vector<float> logits(static_cast<size_t>(most) * hp.vocab_size);

    std::vector<SweepCost> out(rows.size());
    std::vector<std::vector<double>> heads(rows.size()), cpus(rows.size());
    auto round = [&](bool keep) {
        for (size_t i = 0; i < rows.size(); ++i) {
            const int k = rows[i];
            const double c0 = cpu_ms_now();
            const auto t0 = Clock::now();
            seq->run_passes({.tokens = ids.data() + context, .n = k, .pos0 = context, .first = 2, .last = 2,
                             .h_in = h1.data(), .e_in = e1.empty() ? nullptr : e1.data()});
            const auto t1 = Clock::now();
            const double c1 = cpu_ms_now();
            seq->logits(0, k, logits.data());
            const auto t2 = Clock::now();
            if (!keep) continue;
            out[i].rows = k;
            out[i].pass_runs_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            cpus[i].push_back(c1 - c0);
            heads[i].push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        }
    };
    round(false);
    for (int r = 0; r < repeat; ++r) round(true);
    for (size_t i = 0; i < rows.size(); ++i) {
        out[i].pass_ms = median(out[i].pass_runs_ms);
        out[i].pass_cpu_ms = median(cpus[i]);
        out[i].head_ms = median(heads[i]);
    }
    return out;
}

}  // namespace tinyloop
