// Bad input, everywhere a user can put it: every GenerateConfig, SpeculativeConfig and
// TreeSpeculativeConfig field just outside the range its header comment gives, token ids outside
// the vocabulary, empty prompts, lengths past max_seq_len, depths past max_loops, the scoring
// and cache functions with bad arguments, LoadOptions, and every CLI flag malformed or without
// its value. Each must be a tinyloop::Error (the CLI: exit status 2) whose message names the
// field (the flag), never a crash, and the model must answer exactly as before afterwards.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace tinyloop;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Runs f; it must throw tinyloop::Error with `code` whose message contains `field`.
void expect_refused(const std::string& label, const std::function<void()>& f, const std::string& field,
                    ErrorCode code = ErrorCode::InvalidArgument) {
    SCOPED_TRACE(label);
    try {
        f();
        ADD_FAILURE() << label << ": accepted; expected Error naming '" << field << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << label << ": " << error_code_name(e.code()) << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos)
            << label << ": message does not name '" << field << "': " << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << label << ": threw a non-tinyloop exception: " << e.what();
    }
}

class BadInput : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        path_ = new std::string(tltest::write_random_model("bad_input.tinyloop", tltest::small_hparams(), 21));
        LoadOptions o;
        o.backend = Backend::Cpu;
        o.threads = 2;
        model_ = load_model(*path_, o);
        prompt_ = new std::vector<int32_t>(tokenize(model_, "In the beginning"));
        GenerateConfig c;
        c.max_tokens = 12;
        reference_ = new std::vector<int32_t>(generate(model_, prompt_->data(), (int)prompt_->size(), c));
    }
    static void TearDownTestSuite() {
        free_model(model_);
        delete path_;
        delete prompt_;
        delete reference_;
    }
    // The model still answers exactly as it did before the errors.
    void TearDown() override {
        GenerateConfig c;
        c.max_tokens = 12;
        EXPECT_EQ(generate(model_, prompt_->data(), (int)prompt_->size(), c), *reference_)
            << "the model answers differently after the refusals";
    }
    static Model* model_;
    static std::string* path_;
    static std::vector<int32_t>* prompt_;
    static std::vector<int32_t>* reference_;
    const HParams& hp() const { return model_hparams(model_); }
    const int32_t* p() const { return prompt_->data(); }
    int n() const { return static_cast<int>(prompt_->size()); }
};
Model* BadInput::model_ = nullptr;
std::string* BadInput::path_ = nullptr;
std::vector<int32_t>* BadInput::prompt_ = nullptr;
std::vector<int32_t>* BadInput::reference_ = nullptr;

struct ConfigCase {
    std::string label;
    std::function<void(GenerateConfig&, const HParams&)> set;
    std::string field;
};

TEST_F(BadInput, EveryGenerateConfigFieldJustOutsideItsRange) {
    const std::vector<ConfigCase> cases = {
        {"max_tokens -1", [](auto& c, auto&) { c.max_tokens = -1; }, "max_tokens"},
        {"max_tokens INT_MIN", [](auto& c, auto&) { c.max_tokens = std::numeric_limits<int>::min(); }, "max_tokens"},
        {"max_tokens INT_MAX", [](auto& c, auto&) { c.max_tokens = std::numeric_limits<int>::max(); }, "max_tokens"},
        {"loops -1", [](auto& c, auto&) { c.loops = -1; }, "loops"},
        {"loops max+1", [](auto& c, auto& hp) { c.loops = hp.max_loops + 1; }, "loops"},
        {"loops INT_MAX", [](auto& c, auto&) { c.loops = std::numeric_limits<int>::max(); }, "loops"},
        {"temperature -0.001", [](auto& c, auto&) { c.temperature = -0.001f; }, "temperature"},
        {"temperature NaN", [](auto& c, auto&) { c.temperature = kNaN; }, "temperature"},
        {"temperature Inf", [](auto& c, auto&) { c.temperature = kInf; }, "temperature"},
        {"top_k 0 sampling", [](auto& c, auto&) { c.temperature = 0.8f, c.top_k = 0; }, "top_k"},
        {"top_k -1 sampling", [](auto& c, auto&) { c.temperature = 0.8f, c.top_k = -1; }, "top_k"},
        {"top_p 0", [](auto& c, auto&) { c.top_p = 0.0f; }, "top_p"},
        {"top_p 1.0001", [](auto& c, auto&) { c.top_p = 1.0001f; }, "top_p"},
        {"top_p -1", [](auto& c, auto&) { c.top_p = -1.0f; }, "top_p"},
        {"top_p NaN", [](auto& c, auto&) { c.top_p = kNaN; }, "top_p"},
        {"min_p -0.001", [](auto& c, auto&) { c.min_p = -0.001f; }, "min_p"},
        {"min_p 1.001", [](auto& c, auto&) { c.min_p = 1.001f; }, "min_p"},
        {"min_p NaN", [](auto& c, auto&) { c.min_p = kNaN; }, "min_p"},
        {"cache_window -1", [](auto& c, auto&) { c.cache_window = -1; }, "cache_window"},
        {"repetition_penalty 0", [](auto& c, auto&) { c.repetition_penalty = 0.0f; }, "repetition_penalty"},
        {"repetition_penalty -1", [](auto& c, auto&) { c.repetition_penalty = -1.0f; }, "repetition_penalty"},
        {"repetition_penalty NaN", [](auto& c, auto&) { c.repetition_penalty = kNaN; }, "repetition_penalty"},
        {"repetition_penalty Inf", [](auto& c, auto&) { c.repetition_penalty = kInf; }, "repetition_penalty"},
        {"frequency_penalty 2.001", [](auto& c, auto&) { c.frequency_penalty = 2.001f; }, "frequency_penalty"},
        {"frequency_penalty -2.001", [](auto& c, auto&) { c.frequency_penalty = -2.001f; }, "frequency_penalty"},
        {"frequency_penalty NaN", [](auto& c, auto&) { c.frequency_penalty = kNaN; }, "frequency_penalty"},
        {"presence_penalty 2.001", [](auto& c, auto&) { c.presence_penalty = 2.001f; }, "presence_penalty"},
        {"presence_penalty -2.001", [](auto& c, auto&) { c.presence_penalty = -2.001f; }, "presence_penalty"},
        {"presence_penalty NaN", [](auto& c, auto&) { c.presence_penalty = kNaN; }, "presence_penalty"},
        {"logit_bias id vocab", [](auto& c, auto& hp) { c.logit_bias = {{hp.vocab_size, 1.0f}}; }, "logit_bias"},
        {"logit_bias id -1", [](auto& c, auto&) { c.logit_bias = {{-1, 1.0f}}; }, "logit_bias"},
        {"logit_bias 100.01", [](auto& c, auto&) { c.logit_bias = {{5, 100.01f}}; }, "logit_bias"},
        {"logit_bias -100.01", [](auto& c, auto&) { c.logit_bias = {{5, -100.01f}}; }, "logit_bias"},
        {"logit_bias NaN", [](auto& c, auto&) { c.logit_bias = {{5, kNaN}}; }, "logit_bias"},
        {"logit_bias second bad", [](auto& c, auto&) { c.logit_bias = {{5, 1.0f}, {6, kInf}}; }, "logit_bias[1]"},
        {"stop_sequences empty", [](auto& c, auto&) { c.stop_sequences = {{}}; }, "stop_sequences"},
        {"stop_sequences id vocab", [](auto& c, auto& hp) { c.stop_sequences = {{1, hp.vocab_size}}; }, "stop_sequences"},
        {"stop_sequences id -1", [](auto& c, auto&) { c.stop_sequences = {{-1}}; }, "stop_sequences"},
        {"stop_strings empty", [](auto& c, auto&) { c.stop_strings = {"a", ""}; }, "stop_strings"},
        {"beam_size -1", [](auto& c, auto&) { c.beam_size = -1; }, "beam_size"},
        {"beam_size 65", [](auto& c, auto&) { c.beam_size = 65; }, "beam_size"},
        {"length_penalty without beam", [](auto& c, auto&) { c.length_penalty = 0.5f; }, "length_penalty"},
        {"length_penalty NaN beam", [](auto& c, auto&) { c.beam_size = 2, c.length_penalty = kNaN; }, "length_penalty"},
        {"beam + early exit", [](auto& c, auto&) { c.beam_size = 2, c.early_exit.patience = 1; }, "beam_size"},
        {"early_stopping without beam", [](auto& c, auto&) { c.early_stopping = EarlyStopping::Never; }, "early_stopping"},
        {"early_stopping 9", [](auto& c, auto&) { c.beam_size = 2, c.early_stopping = static_cast<EarlyStopping>(9); }, "early_stopping"},
        {"renormalize_logits without beam", [](auto& c, auto&) { c.renormalize_logits = true; }, "renormalize_logits"},
        {"min_new_tokens -1", [](auto& c, auto&) { c.min_new_tokens = -1; }, "min_new_tokens"},
        {"min_length past max_seq_len", [](auto& c, auto& hp) { c.min_length = hp.max_seq_len + 1; }, "min_length"},
        {"forced_eos_token_id vocab", [](auto& c, auto& hp) { c.forced_eos_token_id = hp.vocab_size; }, "forced_eos_token_id"},
        {"decay factor NaN", [](auto& c, auto&) { c.exponential_decay_length_penalty = std::pair<int, float>{1, kNaN}; }, "exponential_decay_length_penalty"},
        {"suppress_tokens -5", [](auto& c, auto&) { c.suppress_tokens = {-5}; }, "suppress_tokens"},
        {"typical_p NaN", [](auto& c, auto&) { c.typical_p = kNaN; }, "typical_p"},
        {"epsilon_cutoff 1", [](auto& c, auto&) { c.epsilon_cutoff = 1.0f; }, "epsilon_cutoff"},
        {"eta_cutoff NaN", [](auto& c, auto&) { c.eta_cutoff = kNaN; }, "eta_cutoff"},
        {"early_exit_patience -1", [](auto& c, auto&) { c.early_exit.patience = -1; }, "early_exit_patience"},
        {"early_exit_min_L 0", [](auto& c, auto&) { c.early_exit.min_L = 0; }, "early_exit_min_L"},
        {"early_exit_min_L max+1", [](auto& c, auto& hp) { c.early_exit.min_L = hp.max_loops + 1; }, "early_exit_min_L"},
        {"early_exit_peek_every 0", [](auto& c, auto&) { c.early_exit.peek_every = 0; }, "early_exit_peek_every"},
        {"early_exit_logit_margin -0.1", [](auto& c, auto&) { c.early_exit.logit_margin = -0.1f; }, "early_exit_logit_margin"},
        {"early_exit_logit_margin NaN", [](auto& c, auto&) { c.early_exit.logit_margin = kNaN; }, "early_exit_logit_margin"},
        {"early_exit_threshold 0", [](auto& c, auto&) { c.early_exit.threshold = 0.0f; }, "early_exit_threshold"},
        {"early_exit_threshold -1", [](auto& c, auto&) { c.early_exit.threshold = -1.0f; }, "early_exit_threshold"},
        {"early_exit_threshold NaN", [](auto& c, auto&) { c.early_exit.threshold = kNaN; }, "early_exit_threshold"},
        {"early_exit_criterion past the last", [](auto& c, auto&) { c.early_exit.criterion = static_cast<EarlyExitCriterion>(static_cast<int>(EarlyExitCriterion::MinPKL) + 1); }, "early_exit_criterion"},
        {"early_exit_criterion -1", [](auto& c, auto&) { c.early_exit.criterion = static_cast<EarlyExitCriterion>(-1); }, "early_exit_criterion"},
    };
    for (const auto& k : cases) {
        GenerateConfig c;
        c.max_tokens = 4;
        k.set(c, hp());
        expect_refused("validate_config " + k.label, [&] { validate_config(model_, n(), c); }, k.field);
        expect_refused("generate " + k.label, [&] { generate(model_, p(), n(), c); }, k.field);
        expect_refused("generate_ex " + k.label, [&] { generate_ex(model_, p(), n(), c); }, k.field);
        expect_refused("generate_stream " + k.label,
                       [&] { generate_stream(model_, p(), n(), c, [](int32_t, int) { return true; }); }, k.field);
        expect_refused("generate_batch " + k.label, [&] { generate_batch(model_, {*prompt_}, c); }, k.field);
    }
}

TEST_F(BadInput, EveryValueJustInsideTheRangeIsAccepted) {
    // The other side of each boundary: the refusals above are not over-eager.
    std::vector<std::function<void(GenerateConfig&)>> ok = {
        [](auto& c) { c.max_tokens = 0; },
        [&](auto& c) { c.loops = hp().max_loops; },
        [](auto& c) { c.loops = 1; },
        [](auto& c) { c.temperature = 0.0f, c.top_k = 0; },  // top_k ignored when greedy
        [](auto& c) { c.temperature = 2.0f, c.top_k = 1; },
        [](auto& c) { c.top_p = 1.0f; },
        [](auto& c) { c.temperature = 1.0f, c.top_p = 1e-6f; },
        [](auto& c) { c.min_p = 1.0f; },
        [](auto& c) { c.cache_window = 1; },
        [](auto& c) { c.repetition_penalty = 1e-3f; },
        [](auto& c) { c.frequency_penalty = 2.0f, c.presence_penalty = -2.0f; },
        [&](auto& c) { c.logit_bias = {{hp().vocab_size - 1, 100.0f}, {0, -100.0f}}; },
        [](auto& c) { c.beam_size = 1; },
        [](auto& c) { c.early_exit.patience = 1, c.early_exit.min_L = 1, c.early_exit.threshold = 1e-6f; },
    };
    for (size_t i = 0; i < ok.size(); ++i) {
        GenerateConfig c;
        c.max_tokens = 3;
        ok[i](c);
        EXPECT_NO_THROW(generate(model_, p(), n(), c)) << "case " << i;
    }
}

TEST_F(BadInput, PromptsAndLengths) {
    GenerateConfig c;
    c.max_tokens = 4;
    const int V = hp().vocab_size;
    std::vector<int32_t> bad_hi = *prompt_, bad_lo = *prompt_;
    bad_hi[1] = V;
    bad_lo[0] = -1;
    expect_refused("prompt id vocab", [&] { generate(model_, bad_hi.data(), n(), c); }, "prompt");
    expect_refused("prompt id -1", [&] { generate(model_, bad_lo.data(), n(), c); }, "prompt");
    expect_refused("prompt id INT_MIN", [&] { int32_t t = std::numeric_limits<int32_t>::min(); generate(model_, &t, 1, c); }, "prompt");
    expect_refused("empty prompt", [&] { generate(model_, p(), 0, c); }, "prompt_len");
    expect_refused("negative prompt_len", [&] { generate(model_, p(), -3, c); }, "prompt_len");
    expect_refused("null prompt", [&] { generate(model_, nullptr, 3, c); }, "prompt");
    expect_refused("null model", [&] { generate(nullptr, p(), n(), c); }, "model");
    expect_refused("null model score", [&] { score(nullptr, p(), n()); }, "model");
    expect_refused("null model tokenize", [&] { tokenize(nullptr, "x"); }, "model");
    expect_refused("null model info", [&] { model_info(nullptr); }, "model");
    // prompt_len + max_tokens over max_seq_len, by one.
    const int max_seq = hp().max_seq_len;
    c.max_tokens = max_seq - n() + 1;
    expect_refused("prompt+max_tokens = max_seq_len+1", [&] { generate(model_, p(), n(), c); }, "max_tokens");
    c.max_tokens = 0;
    std::vector<int32_t> longp(static_cast<size_t>(max_seq) + 1, 65);
    expect_refused("prompt longer than max_seq_len", [&] { generate(model_, longp.data(), (int)longp.size(), c); }, "max_tokens");
    c.max_tokens = max_seq - n();
    EXPECT_NO_THROW(validate_config(model_, n(), c)) << "exactly max_seq_len must be accepted";
    // Stop handling and batch outputs.
    expect_refused("split_batch_output lengths", [&] { split_batch_output({1, 2, 3}, {2, 2}); }, "output_lengths");
    expect_refused("split_batch_output negative", [&] { split_batch_output({1, 2, 3}, {-1, 4}); }, "output_lengths");
    expect_refused("generate_batch empty prompt", [&] { GenerateConfig d; d.max_tokens = 2; generate_batch(model_, {*prompt_, {}}, d); }, "prompt");
}

TEST_F(BadInput, GenerateOptions) {
    GenerateConfig c;
    c.max_tokens = 3;
    for (int k : {0, -1, 65}) {
        GenerateOptions o;
        o.lens = true;
        o.lens_top_k = k;
        expect_refused("lens_top_k " + std::to_string(k), [&] { generate_ex(model_, p(), n(), c, o); }, "lens_top_k");
    }
    // A callback that throws a non-tinyloop exception: it propagates, the model survives.
    GenerateOptions o;
    o.observer = [](const TokenEvent&) -> bool { throw std::runtime_error("observer failed"); };
    EXPECT_THROW(generate_ex(model_, p(), n(), c, o), std::runtime_error);
}

TEST_F(BadInput, SpeculativeConfigFields) {
    struct Case {
        std::string label;
        std::function<void(SpeculativeConfig&, const HParams&)> set;
        std::string field;
    };
    const std::vector<Case> cases = {
        {"max_tokens -1", [](auto& c, auto&) { c.max_tokens = -1; }, "max_tokens"},
        {"max_tokens over max_seq_len", [](auto& c, auto& hp) { c.max_tokens = hp.max_seq_len; }, "max_tokens"},
        {"draft_loops 0", [](auto& c, auto&) { c.draft_loops = 0; }, "draft_loops"},
        {"draft_loops = verify_loops", [](auto& c, auto&) { c.draft_loops = 4, c.verify_loops = 4; }, "draft_loops"},
        {"draft_loops > verify_loops", [](auto& c, auto&) { c.draft_loops = 5, c.verify_loops = 4; }, "draft_loops"},
        {"verify_loops 1", [](auto& c, auto&) { c.draft_loops = 1, c.verify_loops = 1; }, "verify_loops"},
        {"verify_loops max+1", [](auto& c, auto& hp) { c.verify_loops = hp.max_loops + 1; }, "verify_loops"},
        {"draft_ahead 0", [](auto& c, auto&) { c.draft_ahead = 0; }, "draft_ahead"},
        {"draft_ahead 33", [](auto& c, auto&) { c.draft_ahead = 33; }, "draft_ahead"},
        {"temperature -0.5", [](auto& c, auto&) { c.temperature = -0.5f; }, "temperature"},
        {"temperature NaN", [](auto& c, auto&) { c.temperature = kNaN; }, "temperature"},
        {"top_k -1 sampling", [](auto& c, auto&) { c.temperature = 0.7f, c.top_k = -1; }, "top_k"},
        {"top_p 0 sampling", [](auto& c, auto&) { c.temperature = 0.7f, c.top_p = 0.0f; }, "top_p"},
        {"top_p 1.5 sampling", [](auto& c, auto&) { c.temperature = 0.7f, c.top_p = 1.5f; }, "top_p"},
        {"top_p NaN sampling", [](auto& c, auto&) { c.temperature = 0.7f, c.top_p = kNaN; }, "top_p"},
    };
    for (const auto& k : cases) {
        SpeculativeConfig c;
        c.max_tokens = 4;
        c.verify_loops = 4;
        k.set(c, hp());
        expect_refused("speculative " + k.label, [&] { generate_speculative(model_, p(), n(), c); }, k.field);
        expect_refused("speculative_ex " + k.label, [&] { generate_speculative_ex(model_, p(), n(), c); }, k.field);
    }
    SpeculativeConfig c;
    c.verify_loops = 4;
    c.max_tokens = 3;
    std::vector<int32_t> bad = *prompt_;
    bad.back() = hp().vocab_size;
    expect_refused("speculative prompt id", [&] { generate_speculative(model_, bad.data(), n(), c); }, "prompt");
    expect_refused("speculative empty prompt", [&] { generate_speculative(model_, p(), 0, c); }, "prompt_len");
    expect_refused("speculative null model", [&] { generate_speculative(nullptr, p(), n(), c); }, "model");
}

TEST_F(BadInput, TreeSpeculativeConfigFields) {
    struct Case {
        std::string label;
        std::function<void(TreeSpeculativeConfig&, const HParams&)> set;
        std::string field;
    };
    const std::vector<Case> cases = {
        {"max_tokens -1", [](auto& c, auto&) { c.max_tokens = -1; }, "max_tokens"},
        {"max_tokens over max_seq_len", [](auto& c, auto& hp) { c.max_tokens = hp.max_seq_len; }, "max_tokens"},
        {"draft_loops 0", [](auto& c, auto&) { c.draft_loops = 0; }, "draft_loops"},
        {"draft_loops = verify_loops", [](auto& c, auto&) { c.draft_loops = 4, c.verify_loops = 4; }, "draft_loops"},
        {"verify_loops 1", [](auto& c, auto&) { c.draft_loops = 1, c.verify_loops = 1; }, "verify_loops"},
        {"verify_loops max+1", [](auto& c, auto& hp) { c.verify_loops = hp.max_loops + 1; }, "verify_loops"},
        {"draft_ahead 0", [](auto& c, auto&) { c.draft_ahead = 0; }, "draft_ahead"},
        {"draft_ahead 9", [](auto& c, auto&) { c.draft_ahead = 9; }, "draft_ahead"},
        {"K_branches 0", [](auto& c, auto&) { c.K_branches = 0; }, "K_branches"},
        {"K_branches 9", [](auto& c, auto&) { c.K_branches = 9; }, "K_branches"},

        {"temperature -1", [](auto& c, auto&) { c.temperature = -1.0f; }, "temperature"},
        {"temperature NaN", [](auto& c, auto&) { c.temperature = kNaN; }, "temperature"},
    };
    for (const auto& k : cases) {
        TreeSpeculativeConfig c;
        c.max_tokens = 4;
        c.verify_loops = 4;
        k.set(c, hp());
        expect_refused("tree " + k.label, [&] { generate_tree_speculative(model_, p(), n(), c); }, k.field);
        expect_refused("tree_ex " + k.label, [&] { generate_tree_speculative_ex(model_, p(), n(), c); }, k.field);
    }
    TreeSpeculativeConfig c;
    c.verify_loops = 4;
    c.max_tokens = 3;
    c.temperature = 0.5f;  // documented as refused: NotSupported (use the chain mode)
    expect_refused("tree temperature 0.5", [&] { generate_tree_speculative(model_, p(), n(), c); }, "temperature",
                   ErrorCode::NotSupported);
    c.temperature = 0.0f;
    std::vector<int32_t> bad = *prompt_;
    bad.front() = -7;
    expect_refused("tree prompt id", [&] { generate_tree_speculative(model_, bad.data(), n(), c); }, "prompt");
    expect_refused("tree empty prompt", [&] { generate_tree_speculative(model_, p(), 0, c); }, "prompt_len");
}

TEST_F(BadInput, ScoringFunctions) {
    const int V = hp().vocab_size, L = hp().max_loops, S = hp().max_seq_len;
    std::vector<int32_t> bad = *prompt_;
    bad[2] = V;
    std::vector<int32_t> longt(static_cast<size_t>(S) + 1, 66);
    const std::vector<std::pair<std::string, std::function<void(const int32_t*, int, int)>>> fns = {
        {"score", [&](const int32_t* t, int k, int l) { score(model_, t, k, l); }},
        {"forward_logits", [&](const int32_t* t, int k, int l) { forward_logits(model_, t, k, l); }},
        {"score_last_token", [&](const int32_t* t, int k, int l) { score_last_token(model_, t, k, l); }},
        {"forward_lens_logits", [&](const int32_t* t, int k, int l) { forward_lens_logits(model_, t, k, l); }},
        {"score_logit_lens", [&](const int32_t* t, int k, int l) { score_logit_lens(model_, t, k, l); }},
        {"score_with_uncertainty", [&](const int32_t* t, int k, int l) { score_with_uncertainty(model_, t, k, l); }},
    };
    for (const auto& [name, f] : fns) {
        expect_refused(name + " loops -1", [&] { f(p(), n(), -1); }, "loops");
        expect_refused(name + " loops max+1", [&] { f(p(), n(), L + 1); }, "loops");
        expect_refused(name + " n 0", [&] { f(p(), 0, 0); }, "n");
        expect_refused(name + " n -1", [&] { f(p(), -1, 0); }, "n");
        expect_refused(name + " n > max_seq_len", [&] { f(longt.data(), (int)longt.size(), 0); }, "n");
        expect_refused(name + " token id vocab", [&] { f(bad.data(), n(), 0); }, "tokens");
        expect_refused(name + " null tokens", [&] { f(nullptr, n(), 0); }, "tokens");
    }
    expect_refused("score_last_token top_k 0", [&] { score_last_token(model_, p(), n(), 0, 0); }, "top_k");
    expect_refused("score_last_token top_k V+1", [&] { score_last_token(model_, p(), n(), 0, V + 1); }, "top_k");
    expect_refused("score_logit_lens top_k 0", [&] { score_logit_lens(model_, p(), n(), 0, 0); }, "top_k");
    expect_refused("score_logit_lens top_k 65", [&] { score_logit_lens(model_, p(), n(), 0, 65); }, "top_k");

    const std::vector<std::pair<std::string, std::function<void(EscalationConfig&)>>> esc = {
        {"depths", [](auto& c) { c.depths = {}; }},
        {"depths", [](auto& c) { c.depths = {0, 2}; }},
        {"depths", [&](auto& c) { c.depths = {2, L + 1}; }},
        {"depths", [](auto& c) { c.depths = {4, 2}; }},
        {"depths", [](auto& c) { c.depths = {2, 2}; }},
        {"threshold", [](auto& c) { c.threshold = 0.0f; }},
        {"threshold", [](auto& c) { c.threshold = kNaN; }},
        {"threshold", [](auto& c) { c.signal = EscalationSignal::Margin, c.threshold = 1.5f; }},
    };
    for (size_t i = 0; i < esc.size(); ++i) {
        EscalationConfig c;
        c.depths = {1, 2, 4};
        esc[i].second(c);
        expect_refused("escalation case " + std::to_string(i), [&] { score_with_consistency_escalation(model_, p(), n(), c); },
                       esc[i].first);
    }
    expect_refused("escalation n 0", [&] { score_with_consistency_escalation(model_, p(), 0); }, "n");
    expect_refused("escalation token", [&] { score_with_consistency_escalation(model_, bad.data(), n()); }, "tokens");
}

TEST_F(BadInput, TokenizerAndTensors) {
    const int V = hp().vocab_size;
    for (int32_t id : {-1, V, V + 100, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
        expect_refused("detokenize " + std::to_string(id), [&] { detokenize(model_, &id, 1); }, std::to_string(id));
        expect_refused("detokenize_text " + std::to_string(id), [&] { detokenize_text(model_, &id, 1); }, std::to_string(id));
        expect_refused("token_bytes " + std::to_string(id), [&] { token_bytes(model_, id); }, std::to_string(id));
        StreamDecoder d(model_);
        expect_refused("StreamDecoder " + std::to_string(id), [&] { d.push(id); }, std::to_string(id));
    }
    expect_refused("tensor_as_f32 unknown", [&] { tensor_as_f32(model_, "loop.99.wq"); }, "loop.99.wq");
    expect_refused("parse_dtype", [&] { parse_dtype("q3"); }, "q3");
}

// A null id array with a length: refused like a null prompt, not dereferenced (engine/src/model/api.cpp
// detokenize read ids[0] through the null pointer: UBSan "load of null pointer").
TEST_F(BadInput, DetokenizeNullIds) {
    expect_refused("detokenize null ids", [&] { detokenize(model_, nullptr, 3); }, "ids");
    expect_refused("detokenize_text null ids", [&] { detokenize_text(model_, nullptr, 3); }, "ids");
    EXPECT_EQ(detokenize(model_, nullptr, 0), "");
}

TEST_F(BadInput, CachesWithBadArguments) {
    GenerateConfig c;
    c.max_tokens = 3;
    const int L = hp().max_loops;
    expect_refused("prefix cache n 0", [&] { free_prefix_cache(create_prefix_cache(model_, p(), 0)); }, "prefix");
    expect_refused("prefix cache loops", [&] { free_prefix_cache(create_prefix_cache(model_, p(), 2, L + 1)); }, "loops");
    expect_refused("prefix cache window", [&] { free_prefix_cache(create_prefix_cache(model_, p(), 2, 0, -1)); }, "cache_window");
    PrefixCache* pc = create_prefix_cache(model_, p(), 2, 2);
    GenerateConfig d = c;
    d.loops = 3;
    expect_refused("prefix cache depth mismatch", [&] { generate_with_prefix(model_, pc, p(), n(), d); }, "loops");
    d.loops = 2;
    std::vector<int32_t> other = *prompt_;
    other[0] = (other[0] + 1) % hp().vocab_size;
    expect_refused("prefix mismatch", [&] { generate_with_prefix(model_, pc, other.data(), n(), d); }, "prompt");
    expect_refused("prefix null cache", [&] { generate_with_prefix(model_, nullptr, p(), n(), d); }, "cache");
    d.temperature = -1;
    expect_refused("prefix bad config", [&] { generate_with_prefix(model_, pc, p(), n(), d); }, "temperature");
    free_prefix_cache(pc);

    expect_refused("resume n 0", [&] { free_resume_handle(create_resume_handle(model_, p(), 0)); }, "prompt");
    ResumeHandle* h = create_resume_handle(model_, p(), n(), 2);
    d = c;
    d.loops = L + 1;
    expect_refused("resume loops", [&] { resume_generate(h, d); }, "loops");
    d.loops = 0;
    d.cache_window = 4;
    expect_refused("resume cache_window", [&] { resume_generate(h, d); }, "cache_window");
    d.cache_window = 0;
    d.top_p = 0;
    expect_refused("resume top_p", [&] { resume_generate(h, d); }, "top_p");
    expect_refused("resume null", [&] { resume_generate(nullptr, c); }, "handle");
    free_resume_handle(h);

    PrefixPool* pool = create_prefix_pool(model_, 2);
    expect_refused("pool add n 0", [&] { prefix_pool_add(pool, p(), 0); }, "prefix");
    std::vector<int32_t> bad = *prompt_;
    bad[0] = -1;
    expect_refused("pool add bad id", [&] { prefix_pool_add(pool, bad.data(), n()); }, "prefix");
    d = c;
    d.loops = 3;
    expect_refused("pool depth", [&] { generate_with_pool(pool, p(), n(), d); }, "loops");
    expect_refused("pool loops", [&] { free_prefix_pool(create_prefix_pool(model_, L + 1)); }, "loops");
    free_prefix_pool(pool);
}

TEST_F(BadInput, LoadOptions) {
    const std::vector<std::pair<std::string, std::function<void(LoadOptions&)>>> cases = {
        {"threads", [](auto& o) { o.threads = -1; }},
        {"threads", [](auto& o) { o.threads = 257; }},
        {"max_seq_len", [](auto& o) { o.max_seq_len = -1; }},
        {"max_seq_len", [&](auto& o) { o.max_seq_len = hp().max_seq_len + 1; }},
        {"prefill_chunk", [](auto& o) { o.prefill_chunk = 0; }},
        {"prefill_chunk", [](auto& o) { o.prefill_chunk = 4097; }},
        {"backend", [](auto& o) { o.backend = static_cast<Backend>(9); }},
    };
    for (const auto& [field, set] : cases) {
        LoadOptions o;
        o.backend = Backend::Cpu;
        set(o);
        expect_refused("load " + field, [&] { free_model(load_model(*path_, o)); }, field);
    }
    expect_refused("load missing file", [&] { free_model(load_model("/nonexistent/dir/x.tinyloop")); }, "/nonexistent/dir/x.tinyloop",
                   ErrorCode::Io);
    expect_refused("load a directory", [&] { free_model(load_model(::testing::TempDir())); }, "", ErrorCode::Io);
}

// ---------------------------------------------------------------------------------------------
// The command line: every flag malformed or missing its value -> exit status 2, the flag named.
// ---------------------------------------------------------------------------------------------

struct CliRun {
    int status = -1;  // exit status, or -1 when killed by a signal
    int signal = 0;
    std::string out, err;
};

std::string shell_quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

CliRun run_cli(const std::vector<std::string>& args) {
    const std::string out = tltest::temp_path("cli_out.txt"), err = tltest::temp_path("cli_err.txt");
    std::string cmd = shell_quote(TL_CLI_PATH);
    for (const auto& a : args) {
        cmd.push_back(' ');
        cmd.append(shell_quote(a));
    }
    cmd.append(" </dev/null >").append(shell_quote(out)).append(" 2>").append(shell_quote(err));
    const int rc = std::system(cmd.c_str());
    CliRun r;
    if (rc != -1 && WIFEXITED(rc)) {
        r.status = WEXITSTATUS(rc);
        // The shell reports a child killed by a signal as 128 + signal.
        if (r.status > 128) r.signal = r.status - 128, r.status = -1;
    } else if (rc != -1 && WIFSIGNALED(rc)) {
        r.signal = WTERMSIG(rc);
    }
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

class CliBadInput : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        model_path_ = new std::string(tltest::write_random_model("cli_bad_input.tinyloop", tltest::small_hparams(), 5));
    }
    static void TearDownTestSuite() { delete model_path_; }
    static std::string* model_path_;

    void expect_usage_error(const std::vector<std::string>& args, const std::string& named) {
        std::string line;
        for (const auto& a : args) line += a + " ";
        SCOPED_TRACE(line);
        const CliRun r = run_cli(args);
        EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "; stderr: " << r.err;
        EXPECT_EQ(r.status, 2) << "stderr: " << r.err;
        EXPECT_NE(r.err.find(named), std::string::npos) << "stderr does not name " << named << ": " << r.err;
    }
};
std::string* CliBadInput::model_path_ = nullptr;

// Every option of `generate` (from its --help) that takes a value, given without one.
TEST_F(CliBadInput, EveryGenerateOptionMissingItsValue) {
    const CliRun help = run_cli({"generate", "--help"});
    ASSERT_EQ(help.status, 0) << help.err;
    std::set<std::string> valued;
    std::regex opt(R"(^\s+(--[a-z0-9-]+) ([A-Z][A-Z:_]*))");
    std::istringstream in(help.out);
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, opt)) valued.insert(m[1]);
    }
    ASSERT_GE(valued.size(), 20u) << "could not read the options from --help:\n" << help.out;
    for (const auto& flag : valued) {
        // At the end of the line, and followed by another option.
        expect_usage_error({"generate", *model_path_, "--prompt-ids", "1,2", flag}, flag);
        if (flag != "--prompt-ids")
            expect_usage_error({"generate", *model_path_, "--prompt-ids", "1,2", flag, "--json"}, flag);
    }
}

TEST_F(CliBadInput, GenerateOptionsWithMalformedValues) {
    struct Case {
        std::string flag;
        std::vector<std::string> values;
        std::vector<std::string> extra;  // other flags the case needs
    };
    const std::vector<Case> cases = {
        {"--max-tokens", {"abc", "-1", "1.5", "99999999999", "", "1e3"}, {}},
        {"--loops", {"abc", "-1", "7", "1000000"}, {}},
        {"--temperature", {"abc", "-1", "nan", "inf", "1e999", ""}, {}},
        {"--top-k", {"abc", "0", "-5", "2.5"}, {"--temperature", "0.8"}},
        {"--top-p", {"abc", "0", "1.01", "-0.5", "nan"}, {"--temperature", "0.8"}},
        {"--min-p", {"abc", "-0.1", "1.5"}, {"--temperature", "0.8"}},
        {"--repetition-penalty", {"abc", "0", "-1"}, {}},
        {"--frequency-penalty", {"abc", "2.5", "-3"}, {}},
        {"--presence-penalty", {"abc", "2.5", "-3"}, {}},
        {"--logit-bias", {"abc", "5", "5:", ":1", "5:abc", "300:1", "-1:1", "5:101", "5:-101", "5:nan"}, {}},
        {"--seed", {"abc", "-1", "1.5", "99999999999999999999999"}, {"--temperature", "0.8"}},
        {"--cache-window", {"abc", "-1"}, {}},
        {"--stop", {""}, {}},
        {"--stop-ids", {"abc", "1,,2", "1,", ",", "", "-1", "300"}, {}},
        {"--mode", {"bogus", "", "GREEDY"}, {}},
        {"--draft-loops", {"abc", "0", "3"}, {"--mode", "speculative", "--verify-loops", "3"}},
        {"--verify-loops", {"abc", "1", "7"}, {"--mode", "speculative"}},
        {"--draft-ahead", {"abc", "0", "33"}, {"--mode", "speculative"}},
        {"--branches", {"abc", "0", "9"}, {"--mode", "tree"}},
        {"--beam-size", {"abc", "1", "65"}, {"--mode", "beam"}},
        {"--length-penalty", {"abc", "nan"}, {"--mode", "beam"}},
        {"--early-exit", {"bogus", ""}, {}},
        {"--early-exit-patience", {"abc", "-1"}, {"--early-exit", "l2"}},
        {"--early-exit-min-l", {"abc", "0", "7"}, {"--early-exit", "l2"}},
        {"--early-exit-peek-every", {"abc", "0"}, {"--early-exit", "l2"}},
        {"--early-exit-threshold", {"abc", "-1", "0"}, {"--early-exit", "l2"}},
        {"--grammar", {"/nonexistent/grammar.gbnf"}, {}},
        {"--lens-top-k", {"abc", "0", "65"}, {"--lens"}},
        {"--backend", {"bogus", ""}, {}},
        {"--threads", {"abc", "0", "257", "-1"}, {}},
    };
    for (const auto& k : cases)
        for (const auto& v : k.values) {
            std::vector<std::string> args = {"generate", *model_path_, "--prompt-ids", "1,2", "--max-tokens", "2"};
            if (k.flag == "--max-tokens") args.resize(4);
            args.insert(args.end(), k.extra.begin(), k.extra.end());
            args.push_back(k.flag + "=" + v);
            expect_usage_error(args, k.flag);
        }
    // The prompt sources.
    for (const std::string v : {"abc", "1,,2", "", "-1", "300", "1,2,"})
        expect_usage_error({"generate", *model_path_, "--prompt-ids=" + v}, "--prompt-ids");
    expect_usage_error({"generate", *model_path_, "--prompt-file", "/nonexistent/prompt.txt"}, "/nonexistent/prompt.txt");
    expect_usage_error({"generate", *model_path_, "--prompt", "a", "--prompt-ids", "1"}, "--prompt");
    expect_usage_error({"generate", *model_path_}, "prompt");
    expect_usage_error({"generate", *model_path_, "--prompt", ""}, "prompt");
    expect_usage_error({"generate", *model_path_, "--prompt", "a", "--max-tokens", "2", "--max-tokens", "3"}, "--max-tokens");
    expect_usage_error({"generate", *model_path_, "--prompt", "a", "--ignore-eos=yes"}, "--ignore-eos");
    expect_usage_error({"generate", *model_path_, "--prompt", "a", "--no-such-flag"}, "--no-such-flag");
    expect_usage_error({"generate", *model_path_, "--prompt", "a", "-x"}, "-x");
    expect_usage_error({"generate", "/nonexistent/model.tinyloop", "--prompt", "a"}, "/nonexistent/model.tinyloop");
    expect_usage_error({"generate", ::testing::TempDir(), "--prompt", "a"}, "");
}

// A grammar file nested far too deep (the recursion that was rc 139) or too large: exit 2 with
// the grammar error, located in the file.
TEST_F(CliBadInput, GrammarFilesTooDeepOrTooLarge) {
    const std::string deep = tltest::temp_path("deep.gbnf");
    std::ofstream(deep) << "root ::= " << std::string(100000, '(') << "\"a\"" << std::string(100000, ')') << "\n";
    expect_usage_error({"generate", *model_path_, "--prompt", "hi", "--grammar", deep}, "groups nested too deep");
    expect_usage_error({"generate", *model_path_, "--prompt", "hi", "--grammar", deep}, deep + ":1:");
    const std::string large = tltest::temp_path("large.gbnf");
    std::ofstream(large) << "root ::= \"" << std::string(2000, 'a') << "\"{4096}\n";
    expect_usage_error({"generate", *model_path_, "--prompt", "hi", "--grammar", large}, "grammar too large");
}

TEST_F(CliBadInput, OtherCommands) {
    for (const std::string cmd : {"info", "score"}) {
        expect_usage_error({cmd}, cmd);
        const std::vector<std::string> input = cmd == "score" ? std::vector<std::string>{"--text", "abc"} : std::vector<std::string>{};
        auto with = [&](std::vector<std::string> a) {
            a.insert(a.begin() + 2, input.begin(), input.end());
            return a;
        };
        expect_usage_error(with({cmd, "/nonexistent/model.tinyloop"}), "/nonexistent/model.tinyloop");
        expect_usage_error(with({cmd, *model_path_, "--threads"}), "--threads");
        expect_usage_error(with({cmd, *model_path_, "--threads", "abc"}), "--threads");
        expect_usage_error(with({cmd, *model_path_, "--backend", "gpu"}), "--backend");
        expect_usage_error(with({cmd, *model_path_, "--bogus"}), "--bogus");
    }
    expect_usage_error({"score", *model_path_, "--text", "abc", "--loops", "abc"}, "--loops");
    expect_usage_error({"score", *model_path_, "--text", "abc", "--loops", "99"}, "--loops");
    expect_usage_error({"score", *model_path_, "--text"}, "--text");
    expect_usage_error({"score", *model_path_, "--file", "/nonexistent/t.txt"}, "/nonexistent/t.txt");
    expect_usage_error({"nosuchcommand"}, "nosuchcommand");
    expect_usage_error({"--bogus"}, "--bogus");
    // And a good run still works after all that.
    const CliRun ok = run_cli({"generate", *model_path_, "--prompt-ids", "1,2", "--max-tokens", "3", "--json"});
    EXPECT_EQ(ok.status, 0) << ok.err;
    EXPECT_NE(ok.out.find("output_ids"), std::string::npos) << ok.out;
}

}  // namespace
