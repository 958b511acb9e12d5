// Thread safety (docs/ARCHITECTURE.md, "Threads"): several threads calling one loaded Model at once
// (greedy, sampling with seeds, early exit, chain and tree speculation, beam, scoring, the lens,
// streaming with observers, the caches) get exactly what the same calls return one after another.
// Run under ThreadSanitizer too (build-tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace tinyloop;

namespace {

HParams thread_hparams() {
    HParams hp = tltest::small_hparams();
    hp.max_loops = 8;
    hp.default_loops = 4;
    return hp;
}

// One job's whole observable result, flattened to compare with ==.
struct Outcome {
    std::vector<int32_t> tokens;
    std::vector<int> depths;
    std::vector<float> numbers;  // scores, lens probabilities
    std::string text;
    bool operator==(const Outcome&) const = default;
};

Outcome from(const GenerateResult& r) {
    Outcome o;
    o.tokens = r.tokens;
    o.depths = r.stats.depth_per_token;
    o.text = r.text;
    o.numbers = {static_cast<float>(r.stats.spec_accepted), static_cast<float>(r.stats.spec_cycles),
                 static_cast<float>(static_cast<int>(r.stats.stop_reason))};
    return o;
}

using Job = std::function<Outcome(Model*)>;

std::vector<Job> jobs(const std::vector<int32_t>& prompt) {
    const int32_t* p = prompt.data();
    const int n = static_cast<int>(prompt.size());
    std::vector<Job> j;
    j.push_back([=](Model* m) {  // greedy
        GenerateConfig c;
        c.max_tokens = 24;
        return from(generate_ex(m, p, n, c));
    });
    for (uint64_t seed : {1u, 2u, 77u}) {
        j.push_back([=](Model* m) {  // sampling with a seed and every filter
            GenerateConfig c;
            c.max_tokens = 24;
            c.temperature = 0.9f;
            c.top_k = 40;
            c.top_p = 0.95f;
            c.min_p = 0.01f;
            c.repetition_penalty = 1.1f;
            c.sample_seed = seed;
            return from(generate_ex(m, p, n, c));
        });
    }
    j.push_back([=](Model* m) {  // early exit
        GenerateConfig c;
        c.max_tokens = 24;
        c.loops = 8;
        c.early_exit.patience = 1;
        c.early_exit.threshold = 0.3f;
        return from(generate_ex(m, p, n, c));
    });
    j.push_back([=](Model* m) {  // early exit, another criterion
        GenerateConfig c;
        c.max_tokens = 16;
        c.loops = 6;
        c.early_exit.patience = 2;
        c.early_exit.criterion = EarlyExitCriterion::ArgmaxStable;
        return from(generate_ex(m, p, n, c));
    });
    j.push_back([=](Model* m) {  // chain speculation, greedy
        SpeculativeConfig s;
        s.max_tokens = 24;
        s.draft_loops = 2;
        s.verify_loops = 6;
        s.draft_ahead = 4;
        return from(generate_speculative_ex(m, p, n, s));
    });
    j.push_back([=](Model* m) {  // chain speculation, sampling
        SpeculativeConfig s;
        s.max_tokens = 16;
        s.draft_loops = 1;
        s.verify_loops = 4;
        s.temperature = 0.8f;
        s.seed = 5;
        return from(generate_speculative_ex(m, p, n, s));
    });
    j.push_back([=](Model* m) {  // tree speculation
        TreeSpeculativeConfig t;
        t.max_tokens = 16;
        t.draft_loops = 2;
        t.verify_loops = 5;
        t.draft_ahead = 3;
        t.K_branches = 2;
        return from(generate_tree_speculative_ex(m, p, n, t));
    });
    j.push_back([=](Model* m) {  // beam
        GenerateConfig c;
        c.max_tokens = 12;
        c.beam_size = 3;
        return from(generate_ex(m, p, n, c));
    });
    j.push_back([=](Model* m) {  // streaming with an observer and the lens
        GenerateConfig c;
        c.max_tokens = 16;
        c.loops = 5;
        GenerateOptions o;
        o.lens = true;
        o.lens_top_k = 3;
        Outcome out;
        o.observer = [&](const TokenEvent& ev) {
            for (const auto& l : ev.lens) out.numbers.insert(out.numbers.end(), l.top_probs.begin(), l.top_probs.end());
            out.text += ev.piece;
            return true;
        };
        out.tokens = generate_ex(m, p, n, c, o).tokens;
        return out;
    });
    j.push_back([=](Model* m) {  // scores
        Outcome out;
        out.numbers = score(m, p, n, 3).token_logprobs;
        const auto u = score_with_uncertainty(m, p, n, 6);
        out.numbers.insert(out.numbers.end(), u.entropy.begin(), u.entropy.end());
        const auto e = score_with_consistency_escalation(m, p, n);
        out.numbers.insert(out.numbers.end(), e.token_logprobs.begin(), e.token_logprobs.end());
        out.depths = e.depth_used;
        return out;
    });
    j.push_back([=](Model* m) {  // lens
        Outcome out;
        const auto l = score_logit_lens(m, p, n, 5, 4);
        for (const auto& c : l.cells) out.numbers.push_back(c.entropy), out.tokens.push_back(c.argmax);
        return out;
    });
    j.push_back([=](Model* m) {  // caches
        PrefixCache* pc = create_prefix_cache(m, p, n / 2, 3);
        GenerateConfig c;
        c.max_tokens = 12;
        c.loops = 3;
        Outcome out = from(generate_with_prefix(m, pc, p, n, c));
        free_prefix_cache(pc);
        ResumeHandle* h = create_resume_handle(m, p, n, 2);
        c.loops = 6;
        Outcome deeper = from(resume_generate(h, c));
        free_resume_handle(h);
        out.tokens.insert(out.tokens.end(), deeper.tokens.begin(), deeper.tokens.end());
        return out;
    });
    return j;
}

class Threads : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        path_ = new std::string(tltest::write_random_model("threads.tinyloop", thread_hparams(), 41));
    }
    static void TearDownTestSuite() { delete path_; }
    static std::string* path_;
};
std::string* Threads::path_ = nullptr;

// Runs every job on `threads` threads at once (each thread takes jobs round robin, `rounds`
// times) and compares with the serial results.
void run_concurrently(Model* m, const std::vector<Job>& js, const std::vector<Outcome>& serial, int threads, int rounds) {
    std::vector<std::vector<std::pair<size_t, Outcome>>> got(static_cast<size_t>(threads));
    std::vector<std::string> errors(static_cast<size_t>(threads));
    std::atomic<int> ready{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < threads) std::this_thread::yield();  // start together
            try {
                for (int r = 0; r < rounds; ++r)
                    for (size_t i = static_cast<size_t>(t + r) % js.size(), k = 0; k < js.size();
                         k += static_cast<size_t>(threads), i = (i + static_cast<size_t>(threads)) % js.size())
                        got[static_cast<size_t>(t)].push_back({i, js[i](m)});
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(t)] = e.what();
            }
        });
    }
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) {
        EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
        for (const auto& [i, o] : got[static_cast<size_t>(t)]) EXPECT_TRUE(o == serial[i]) << "thread " << t << " job " << i;
    }
}

TEST_F(Threads, FourThreadsGiveTheSerialResults) {
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 2;
    tinyloop::ModelHandle m = tinyloop::load_model_handle(*path_, lo);
    const std::vector<int32_t> prompt = tokenize(m.get(), "In the beginning God created");
    const auto js = jobs(prompt);
    std::vector<Outcome> serial;
    for (const auto& j : js) serial.push_back(j(m.get()));
    // Serial twice gives the same: the comparison below is meaningful.
    for (size_t i = 0; i < js.size(); ++i) ASSERT_TRUE(js[i](m.get()) == serial[i]) << "job " << i << " is not deterministic";
    run_concurrently(m.get(), js, serial, 4, 2);
}

TEST_F(Threads, ConcurrentScoreAndGenerate) {
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 1;
    tinyloop::ModelHandle m = tinyloop::load_model_handle(*path_, lo);
    const std::vector<int32_t> prompt = tokenize(m.get(), "And the earth was without form");
    const ScoreResult ref_score = score(m.get(), prompt.data(), (int)prompt.size(), 4);
    const auto ref_logits = forward_logits(m.get(), prompt.data(), (int)prompt.size(), 4);
    GenerateConfig c;
    c.max_tokens = 20;
    c.loops = 4;
    const auto ref_gen = generate(m.get(), prompt.data(), (int)prompt.size(), c);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            for (int r = 0; r < 3; ++r) {
                if ((t + r) % 2 == 0) {
                    const ScoreResult s = score(m.get(), prompt.data(), (int)prompt.size(), 4);
                    if (s.token_logprobs != ref_score.token_logprobs) ++mismatches;
                    if (forward_logits(m.get(), prompt.data(), (int)prompt.size(), 4) != ref_logits) ++mismatches;
                } else {
                    if (generate(m.get(), prompt.data(), (int)prompt.size(), c) != ref_gen) ++mismatches;
                }
            }
        });
    for (auto& th : ts) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}

// The model's own thread pool (threads = 2) shared by concurrent callers.
TEST_F(Threads, SharedWorkerPoolAndTokenizer) {
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 2;
    tinyloop::ModelHandle m = tinyloop::load_model_handle(*path_, lo);
    const std::string text = "caf\xc3\xa9 In the beginning 123 <|endoftext|>";
    const auto ref_ids = tokenize(m.get(), text, true);
    const std::string ref_text = detokenize_text(m.get(), ref_ids.data(), ref_ids.size());
    std::vector<int32_t> prompt(ref_ids.begin(), ref_ids.begin() + 5);
    GenerateConfig c;
    c.max_tokens = 16;
    c.temperature = 0.7f;
    c.sample_seed = 9;
    const auto ref_gen = generate(m.get(), prompt.data(), (int)prompt.size(), c);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&] {
            for (int r = 0; r < 4; ++r) {
                if (tokenize(m.get(), text, true) != ref_ids) ++mismatches;
                if (detokenize_text(m.get(), ref_ids.data(), ref_ids.size()) != ref_text) ++mismatches;
                if (generate(m.get(), prompt.data(), (int)prompt.size(), c) != ref_gen) ++mismatches;
            }
        });
    for (auto& th : ts) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}

// One grammar-free PrefixPool shared by threads (the pool hands out state under its lock).
TEST_F(Threads, SharedPrefixPool) {
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 1;
    tinyloop::ModelHandle m = tinyloop::load_model_handle(*path_, lo);
    const std::vector<int32_t> prompt = tokenize(m.get(), "In the beginning God created the heaven");
    PrefixPool* pool = create_prefix_pool(m.get(), 3);
    prefix_pool_add(pool, prompt.data(), 4);
    GenerateConfig c;
    c.max_tokens = 10;
    c.loops = 3;
    const auto ref = generate(m.get(), prompt.data(), (int)prompt.size(), c);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&] {
            for (int r = 0; r < 3; ++r) {
                int reused = -1;
                if (generate_with_pool(pool, prompt.data(), (int)prompt.size(), c, {}, &reused).tokens != ref) ++mismatches;
                if (reused != 4) ++mismatches;
            }
        });
    for (auto& th : ts) th.join();
    free_prefix_pool(pool);
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
