// The bundled reasoner (resources/models/tinyloop-digitsum): the shipped f32 file, run by the
// engine on a quarter of its own held-out problems (heldout.jsonl), greedy, one thread. The
// answer needs the loops: exact-match accuracy >= 95% at the default depth and <= 30% at one
// pass; with the early-exit setting recommended in the file's metadata the answer token's exit
// depth rises with the problem's size (Spearman >= 0.8) and accuracy stays within 2 points.
// Its logits match the float64 reference in parity.json (make_parity.py) at every stored depth,
// and the q8 and q4 files made from it by `tinyloop quantize` keep its accuracy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/parity_fixture.h"
#include "test_util.h"

using namespace tinyloop;
using nlohmann::json;

namespace {

const std::string kDir = TL_SOURCE_DIR "/resources/models/tinyloop-digitsum/";

struct Problem {
    std::string prompt, answer;
    int size = 0;
};

std::vector<Problem> heldout_subset(int every) {
    std::ifstream f(kDir + "heldout.jsonl");
    if (!f) throw std::runtime_error("cannot open " + kDir + "heldout.jsonl");
    std::vector<Problem> out;
    std::string line;
    for (int i = 0; std::getline(f, line); ++i) {
        if (line.empty() || i % every) continue;
        const json j = json::parse(line);
        out.push_back({j.at("prompt").get<std::string>(), j.at("answer").get<std::string>(), j.at("size").get<int>()});
    }
    return out;
}

struct Outcome {
    double accuracy = 0;
    std::vector<double> exit_depth;  // the depth of the answer token, per problem
};

Outcome run(Model* m, const std::vector<Problem>& probs, GenerateConfig c) {
    c.max_tokens = 4;
    c.temperature = 0.0f;
    Outcome o;
    int hits = 0;
    for (const Problem& p : probs) {
        const std::vector<int32_t> prompt = tokenize(m, p.prompt);
        const GenerateResult r = generate_ex(m, prompt.data(), static_cast<int>(prompt.size()), c);
        std::vector<int32_t> want = tokenize(m, "=" + p.answer);
        want.push_back(256);  // <|endoftext|>
        const std::vector<int32_t> got(r.tokens.begin() + r.prompt_len, r.tokens.end());
        hits += got == want;
        const auto& d = r.stats.depth_per_token;
        o.exit_depth.push_back(d.size() > 1 ? d[1] : d.empty() ? 0 : d[0]);
    }
    o.accuracy = static_cast<double>(hits) / static_cast<double>(probs.size());
    return o;
}

std::vector<double> ranks(const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < order.size();) {
        size_t j = i;
        while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
        for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j)) / 2 + 1;
        i = j + 1;
    }
    return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
    const std::vector<double> rx = ranks(x), ry = ranks(y);
    const double n = static_cast<double>(x.size());
    double mx = 0, my = 0;
    for (size_t i = 0; i < rx.size(); ++i) mx += rx[i] / n, my += ry[i] / n;
    double cov = 0, vx = 0, vy = 0;
    for (size_t i = 0; i < rx.size(); ++i) {
        cov += (rx[i] - mx) * (ry[i] - my);
        vx += (rx[i] - mx) * (rx[i] - mx);
        vy += (ry[i] - my) * (ry[i] - my);
    }
    return vx > 0 && vy > 0 ? cov / std::sqrt(vx * vy) : 0.0;
}

EarlyExitCriterion criterion_named(const std::string& s) {
    static const std::map<std::string, EarlyExitCriterion> names = {
        {"hidden_l2", EarlyExitCriterion::HiddenL2}, {"logit_margin", EarlyExitCriterion::LogitMargin},
        {"kl", EarlyExitCriterion::KL}, {"entropy_delta", EarlyExitCriterion::EntropyDelta},
        {"argmax_stable", EarlyExitCriterion::ArgmaxStable}};
    const auto it = names.find(s);
    if (it == names.end()) throw std::runtime_error("metadata recommended.early_exit.criterion: unknown '" + s + "'");
    return it->second;
}

LoadOptions one_thread() {
    LoadOptions o;
    o.backend = Backend::Cpu;
    o.threads = 1;
    return o;
}

}  // namespace

TEST(BundledReasoner, AnswerNeedsTheLoops) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kDir + "model-f32.tinyloop", one_thread());
    const auto probs = heldout_subset(4);
    ASSERT_EQ(probs.size(), 100u);
    GenerateConfig c;  // loops 0: the model's default depth
    const Outcome deep = run(mp.get(), probs, c);
    c.loops = 1;
    const Outcome shallow = run(mp.get(), probs, c);
    EXPECT_GE(deep.accuracy, 0.95);
    EXPECT_LE(shallow.accuracy, 0.30);
}

TEST(BundledReasoner, RecommendedEarlyExitStopsLaterOnBiggerProblems) {
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(kDir + "model-f32.tinyloop", one_thread());
    const json meta = json::parse(model_info(mp.get()).metadata_json);
    const json& ee = meta.at("recommended").at("early_exit");
    const auto probs = heldout_subset(4);
    GenerateConfig c;
    const Outcome full = run(mp.get(), probs, c);
    c.early_exit.criterion = criterion_named(ee.at("criterion").get<std::string>());
    c.early_exit.threshold = ee.at("threshold").get<float>();
    c.early_exit.patience = ee.at("patience").get<int>();
    c.early_exit.min_L = ee.at("min_L").get<int>();
    c.early_exit.peek_every = ee.at("peek_every").get<int>();
    const Outcome early = run(mp.get(), probs, c);
    std::vector<double> sizes;
    for (const Problem& p : probs) sizes.push_back(p.size);
    EXPECT_GE(spearman(sizes, early.exit_depth), 0.8);
    EXPECT_GE(early.accuracy, full.accuracy - 0.02);
    const int D = model_hparams(mp.get()).default_loops;
    double mean = 0;
    for (double d : early.exit_depth) mean += d / static_cast<double>(early.exit_depth.size());
    EXPECT_LT(mean, D);  // it does stop early on average
}

TEST(BundledReasoner, LogitsMatchTheFloat64ReferenceAtEveryStoredDepth) {
    const std::string path = kDir + "parity.json";
    const json fx = tltest::read_parity_fixture(path);
    tinyloop::ModelHandle mp = tinyloop::load_model_handle(tltest::parity_model_path(path, fx), one_thread());
    const HParams hp = model_hparams(mp.get());
    const auto depths = fx.at("depths").get<std::vector<int>>();
    for (int L : {1, hp.default_loops, hp.max_loops})  // one pass, the default, the deepest allowed
        EXPECT_NE(std::find(depths.begin(), depths.end(), L), depths.end()) << "depth " << L << " not in the fixture";
    EXPECT_GE(tltest::expect_parity_token_ids(mp.get(), fx), 4);
    // f32 against float64 through up to 24 passes of the shared layer: measured 6.7e-7. The
    // bound leaves 15x room and still fails on any change of the weights or the math (the q8
    // file against this fixture: 5e-3 to 1.6e-2).
    const tltest::ParityOutcome p = tltest::expect_parity_logits(mp.get(), fx, 1e-5);
    EXPECT_GE(p.rows, 6 * static_cast<int>(depths.size()));
    std::cout << "[ parity   ] " << p.rows << " rows, max relative difference " << p.worst_rel << "\n";
}

// The recipe's q8 and q4 files (group size 32). On the 400 held-out problems at the default
// depth f32 and q8 both score 99.5% and q4 97.75%; on the even-numbered 200 used here 99.0%,
// 99.0% and 97.5%. The bounds: q8 within 1 point of f32, q4 within 4 (q4 at group 64 scores
// 96.5% here, q2 35.5%, a wrong model ~0); at one pass both stay at most 30%, like f32.
TEST(BundledReasoner, QuantizedFilesKeepTheAccuracy) {
    const auto probs = heldout_subset(2);
    ASSERT_EQ(probs.size(), 200u);
    GenerateConfig deep;  // loops 0: the model's default depth
    GenerateConfig one;
    one.loops = 1;
    double f32 = 0;
    {
        tinyloop::ModelHandle mp = tinyloop::load_model_handle(kDir + "model-f32.tinyloop", one_thread());
        f32 = run(mp.get(), probs, deep).accuracy;
    }
    for (const auto& [dtype, margin] : {std::pair<std::string, double>{"q8", 0.01}, {"q4", 0.04}}) {
        SCOPED_TRACE("model-" + dtype + ".tinyloop");
        tinyloop::ModelHandle mp = tinyloop::load_model_handle(kDir + "model-" + dtype + ".tinyloop", one_thread());
        const json meta = json::parse(model_info(mp.get()).metadata_json);
        EXPECT_EQ(meta.value("name", ""), "tinyloop-digitsum");
        EXPECT_EQ(meta.at("quantization").at("dtype"), dtype);
        EXPECT_EQ(meta.at("quantization").at("group_size"), 32);
        const double acc = run(mp.get(), probs, deep).accuracy;
        EXPECT_GE(acc, f32 - margin - 1e-9) << "f32 " << f32;  // on the bound counts as within
        EXPECT_LE(run(mp.get(), probs, one).accuracy, 0.30);
        std::cout << "[ accuracy ] " << dtype << " " << acc << " (f32 " << f32 << ") at the default depth\n";
    }
}
