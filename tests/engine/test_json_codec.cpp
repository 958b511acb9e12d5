// The one JSON codec (tinyloop/json.h): every type round-trips (config, speculation knobs, run
// specification, stats, events with lens rows and speculative cycles), refusals name the field and
// its range, the ranges are the engine's validate_config's, and a real run's events and stats
// survive the trip.
#include <gtest/gtest.h>

#include "config_fixture.h"
#include "test_util.h"
#include "tinyloop/json.h"

using namespace tinyloop;
using nlohmann::json;

namespace {

GenerateConfig every_field_changed() { return tltest::every_config_field_changed(); }

// The message of the refusal `f` throws (empty, and a failure, when it throws none).
template <class F>
std::string refusal(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "expected a refusal";
    return "";
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

}  // namespace

TEST(JsonCodec, ConfigRoundTripsEveryField) {
    const GenerateConfig c = every_field_changed();
    const json j = config_to_json(c);
    // every field of the table is written, and nothing else
    EXPECT_EQ(j.size(), config_fields().size());
    for (const auto& f : config_fields()) EXPECT_TRUE(j.contains(f.key)) << f.key;
    const GenerateConfig back = config_from_json(json::parse(j.dump()));
    EXPECT_EQ(config_to_json(back), j);
    EXPECT_EQ(back.temperature, c.temperature);
    EXPECT_EQ(back.logit_bias, c.logit_bias);
    EXPECT_EQ(back.stop_strings, c.stop_strings);
    EXPECT_EQ(back.bad_words, c.bad_words);
    EXPECT_EQ(back.sample_seed, c.sample_seed);
    EXPECT_EQ(back.early_exit.criterion, c.early_exit.criterion);
    EXPECT_EQ(back.kv_cache, c.kv_cache);
    EXPECT_EQ(back.max_time, c.max_time);
    // floats are written in their shortest form
    EXPECT_EQ(j["temperature"].dump(), "0.73");
    // defaults come back as defaults; missing fields keep them
    EXPECT_EQ(config_to_json(config_from_json(json::object())), config_to_json(GenerateConfig{}));
}

TEST(JsonCodec, ConfigAliasesAreReadAndNeverWritten) {
    // the names the CLI's --json echo wrote beside the codec's (its flags' names, an early_exit
    // object with the short criterion name and min_l): read as the codec's fields
    const json old = {{"seed", 9},
                      {"stop", {"\n\n"}},
                      {"stop_ids", {{13}, {198, 198}}},
                      {"no_repeat_ngram", 3},
                      {"early_exit", {{"criterion", "margin"}, {"patience", 2}, {"min_l", 3}, {"peek_every", 2},
                                      {"threshold", 0.5}, {"logit_margin", 0.5}}}};
    const GenerateConfig c = config_from_json(old);
    EXPECT_EQ(c.sample_seed, 9u);
    EXPECT_EQ(c.stop_strings, std::vector<std::string>{"\n\n"});
    EXPECT_EQ(c.stop_sequences, (std::vector<std::vector<int32_t>>{{13}, {198, 198}}));
    EXPECT_EQ(c.no_repeat_ngram_size, 3);
    EXPECT_EQ(c.early_exit.criterion, EarlyExitCriterion::LogitMargin);
    EXPECT_EQ(c.early_exit.patience, 2);
    EXPECT_EQ(c.early_exit.min_L, 3);
    EXPECT_EQ(c.early_exit.peek_every, 2);
    EXPECT_FLOAT_EQ(c.early_exit.threshold, 0.5f);
    // written once, by the codec's names only
    const json j = config_to_json(c);
    for (const char* alias : {"seed", "stop", "stop_ids", "no_repeat_ngram", "early_exit"})
        EXPECT_FALSE(j.contains(alias)) << alias;
    EXPECT_EQ(j["sample_seed"], 9);
    EXPECT_EQ(j["early_exit_min_L"], 3);
    EXPECT_EQ(j["early_exit_criterion"], "logit_margin");
    // an alias's value is checked as the field's, under the name the file used
    EXPECT_TRUE(starts_with(refusal([] { config_from_json(json{{"no_repeat_ngram", -1}}); }), "no_repeat_ngram_size:"));
    EXPECT_TRUE(starts_with(refusal([] { config_from_json(json{{"early_exit", {{"warp", 1}}}}); }), "early_exit.warp: unknown key"));
    EXPECT_TRUE(starts_with(refusal([] { config_from_json(json{{"seed", "x"}}); }), "seed:"));
}

TEST(JsonCodec, ConfigRefusalsNameTheFieldAndRange) {
    ConfigLimits lim;
    lim.max_loops = 6;
    lim.max_seq_len = 256;
    lim.vocab_size = 300;
    struct Bad {
        json j;
        std::string field, why;
    };
    const Bad cases[] = {
        {{{"top_p", 1.5}}, "config.top_p:", "outside (0, 1]"},
        {{{"loops", 7}}, "config.loops:", "outside [1, 6]"},
        {{{"max_tokens", 300}}, "config.max_tokens:", "outside [0, 256]"},
        {{{"max_tokens", "many"}}, "config.max_tokens:", "expected an integer"},
        {{{"logit_bias", {{400, 1}}}}, "config.logit_bias[0]:", "outside the vocabulary [0, 300)"},
        {{{"logit_bias", {{5, 150}}}}, "config.logit_bias[0]:", "bias 150 is outside [-100, 100]"},
        {{{"stop_strings", {"a", 3}}}, "config.stop_strings[1]:", "expected a string"},
        {{{"early_exit_criterion", "vibes"}}, "config.early_exit_criterion:", "hidden_l2"},
        {{{"kv_cache", "f16"}}, "config.kv_cache:", "f32, int8"},
        {{{"sample_seed", -1}}, "config.sample_seed:", "[0, 2^64-1]"},
        {{{"grammar", "root ::= x"}}, "config.grammar:", "grammar_file"},
        {{{"temprature", 0.5}}, "config.temprature:", "unknown field"},
        {{{"length_penalty", 0.5}}, "config.length_penalty:", "only applies to beam search"},
        {{{"temperature", 0.7}, {"top_k", 0}}, "config.top_k:", "must be >= 1 when sampling"},
    };
    for (const Bad& b : cases) {
        const std::string m = refusal([&] { config_from_json(b.j, lim, "config."); });
        EXPECT_TRUE(starts_with(m, b.field)) << b.j.dump() << " -> " << m;
        EXPECT_NE(m.find(b.why), std::string::npos) << b.j.dump() << " -> " << m;
    }
    EXPECT_TRUE(starts_with(refusal([&] { config_from_json(json::array()); }), "config:"));
}

// The codec's ranges are validate_config's: the same config is refused with the same message.
TEST(JsonCodec, RangesAreTheEnginesValidation) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(tltest::write_random_model("codec.tinyloop", tltest::small_hparams(), 7));
    GenerateConfig c;
    c.frequency_penalty = 2.5f;
    const std::string engine = refusal([&] { validate_config(m.get(), 4, c); });
    const std::string codec = refusal([&] { validate_config_fields(c, config_limits(m.get())); });
    EXPECT_EQ(engine, codec);
    EXPECT_TRUE(starts_with(codec, "frequency_penalty:")) << codec;
    const ConfigLimits lim = config_limits(m.get());
    EXPECT_EQ(lim.max_loops, tltest::small_hparams().max_loops);
    EXPECT_EQ(lim.vocab_size, tltest::small_hparams().vocab_size);
}

TEST(JsonCodec, CriterionNamesAndAliases) {
    for (int i = 0; i <= 4; ++i) {
        const auto c = static_cast<EarlyExitCriterion>(i);
        EarlyExitCriterion back;
        ASSERT_TRUE(parse_criterion(criterion_name(c), &back));
        EXPECT_EQ(back, c);
    }
    EarlyExitCriterion c;
    EXPECT_TRUE(parse_criterion("margin", &c));
    EXPECT_EQ(c, EarlyExitCriterion::LogitMargin);
    EXPECT_FALSE(parse_criterion("vibes", &c));
}

TEST(JsonCodec, RunSpecRoundTrips) {
    RunSpec spec;
    spec.mode = DecodeMode::Tree;
    spec.config = every_field_changed();
    spec.config.length_penalty = 1.0f;  // the beam-only knobs at their defaults: beam search is off
    spec.config.early_stopping = tinyloop::EarlyStopping::Heuristic;
    spec.config.renormalize_logits = false;
    spec.config.num_beam_groups = 1;
    spec.config.diversity_penalty = 0.0f;
    spec.config.beam_size = 0;
    spec.speculation = {.verify_loops = 6, .draft_loops = 2, .draft_ahead = 3, .branches = 4, .gamma = 5};
    const json j = run_spec_to_json(spec);
    const RunSpec back = run_spec_from_json(json::parse(j.dump()));
    EXPECT_EQ(back.mode, spec.mode);
    EXPECT_EQ(config_to_json(back.config), config_to_json(spec.config));
    EXPECT_EQ(speculation_to_json(back.speculation), speculation_to_json(spec.speculation));
    for (DecodeMode m : {DecodeMode::Greedy, DecodeMode::Sample, DecodeMode::EarlyExit, DecodeMode::Beam,
                         DecodeMode::Speculative, DecodeMode::Tree, DecodeMode::DraftModel, DecodeMode::Pipelined}) {
        DecodeMode p;
        ASSERT_TRUE(parse_decode_mode(decode_mode_name(m), &p));
        EXPECT_EQ(p, m);
    }
    // the workbench's presets name the branches K_branches: read as branches
    EXPECT_EQ(speculation_from_json(json{{"K_branches", 3}}).branches, 3);

    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"mode", "warp"}}); }), "mode:"));
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"speculation", {{"branches", 9}}}}); }),
                            "speculation.branches: 9 is outside [0, 8]"));
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"speculation", {{"draft_ahead", 0}}}}); }),
                            "speculation.draft_ahead: 0 is outside [1, 32]"));
    EXPECT_EQ(run_spec_from_json(run_spec_to_json(RunSpec{})).speculation.draft_ahead, 0);  // unset round-trips
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"speculation", {{"gamma", 0}}}}); }),
                            "speculation.gamma:"));
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"config", {{"top_p", 0}}}}); }),
                            "config.top_p:"));
    EXPECT_TRUE(starts_with(refusal([] { run_spec_from_json(json{{"modes", "greedy"}}); }), "modes: unknown field"));
}

TEST(JsonCodec, StatsRoundTripWithEveryField) {
    GenerateStats s;
    s.prefill_ms = 1.5;
    s.first_token_ms = 2.25;
    s.decode_ms = 10;
    s.total_ms = 12.5;
    s.prompt_tokens = 6;
    s.tokens_emitted = 5;
    s.stop_reason = StopReason::STOP_STRING;
    s.loops_used = 4;
    s.depth_per_token = {4, 4, 3, 4, 4};
    s.spec_cycles = 2;
    s.spec_drafted = 8;
    s.spec_tested = 7;
    s.spec_accepted = 3;
    s.spec_accept_hist = {0, 1, 1};
    s.draft_ms = 3;
    s.verify_ms = 4;
    s.kv_cache_bytes = 123456;
    const json j = stats_to_json(s);
    EXPECT_EQ(j["stop_reason"], "STOP_STRING");
    EXPECT_DOUBLE_EQ(j["decode_tokens_per_s"].get<double>(), s.decode_tokens_per_s());
    EXPECT_DOUBLE_EQ(j["spec_acceptance_rate"].get<double>(), 3.0 / 7.0);
    EXPECT_DOUBLE_EQ(j["spec_mean_accepted"].get<double>(), 1.5);
    EXPECT_EQ(stats_to_json(stats_from_json(json::parse(j.dump()))), j);
    // non-speculative stats carry the counters too, as zeros: one field set for every mode
    EXPECT_EQ(stats_to_json(GenerateStats{}).size(), j.size());
    EXPECT_TRUE(starts_with(refusal([] { stats_from_json(json{{"stop_reason", "BORED"}}); }), "stop_reason:"));
    EXPECT_TRUE(starts_with(refusal([] { stats_from_json(json{{"tokens_emitted", "five"}}); }), "tokens_emitted:"));
}

TEST(JsonCodec, EventRoundTripsWithLensAndCycle) {
    TokenEvent ev;
    ev.token = 42;
    ev.position = 9;
    ev.index = 3;
    ev.piece = "ab";
    ev.depth = 2;
    ev.prob = 0.3f;
    ev.lens = {{1, {4, 5}, {0.5f, 0.25f}, 0.125f, 1.5f}, {2, {5, 4}, {0.7f, 0.1f}, 0.7f, 0.9f}};
    ev.cycle = 1;
    ev.drafted = {42, 7};
    ev.accepted = 1;
    ev.from_verifier = true;
    ev.exit_gate = {0.25f, 0.5f};
    ev.exit_gate_cdf = {0.25f, 0.625f};
    const json j = event_to_json(ev);
    EXPECT_EQ(j["prob"].dump(), "0.3");
    EXPECT_EQ(j["exit_gate_cdf"].dump(), "[0.25,0.625]");
    EXPECT_EQ(j["lens"].size(), 2u);
    EXPECT_EQ(j["cycle"], 1);
    const TokenEvent back = event_from_json(json::parse(j.dump()));
    EXPECT_EQ(back.prob, ev.prob);
    EXPECT_EQ(back.lens[1].top_probs, ev.lens[1].top_probs);
    EXPECT_EQ(back.drafted, ev.drafted);
    EXPECT_EQ(back.exit_gate, ev.exit_gate);
    EXPECT_EQ(back.exit_gate_cdf, ev.exit_gate_cdf);
    EXPECT_EQ(event_to_json(back), j);

    // outside speculation and without a lens the event has neither
    TokenEvent plain;
    const json p = event_to_json(plain);
    EXPECT_FALSE(p.contains("cycle"));
    EXPECT_FALSE(p.contains("lens"));
    EXPECT_FALSE(p.contains("exit_gate"));  // a model without the exit gate
    EXPECT_EQ(event_to_json(event_from_json(p)), p);
    EXPECT_TRUE(starts_with(refusal([] { event_from_json(json{{"lens", 3}}); }), "lens:"));
    // the gate's two rows go together, and hold probabilities
    EXPECT_TRUE(starts_with(refusal([] { event_from_json(json{{"exit_gate", {0.5}}, {"exit_gate_cdf", json::array()}}); }),
                            "exit_gate_cdf:"));
    EXPECT_TRUE(starts_with(refusal([] { event_from_json(json{{"exit_gate", {1.5}}, {"exit_gate_cdf", {0.5}}}); }),
                            "exit_gate:"));
}

// A real speculative run with a lens: its events and stats survive the trip unchanged.
TEST(JsonCodec, RealRunSurvivesTheTrip) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(tltest::write_random_model("codec-run.tinyloop", tltest::small_hparams(), 11));
    const std::vector<int32_t> prompt = {5, 17, 42, 99};
    RunSpec spec;
    spec.mode = DecodeMode::Speculative;
    spec.config.max_tokens = 12;
    spec.config.ignore_eos = true;
    std::vector<TokenEvent> events;
    GenerateOptions o;
    o.lens = true;
    o.lens_top_k = 3;
    o.observer = [&](const TokenEvent& ev) {
        events.push_back(ev);
        return true;
    };
    const GenerateResult r = run_decode(m.get(), prompt.data(), 4, spec, o);
    ASSERT_FALSE(events.empty());
    int in_cycles = 0;
    for (const auto& ev : events) {
        const json j = event_to_json(ev);
        EXPECT_EQ(j.contains("cycle"), ev.cycle >= 0);  // the prefill's token belongs to no cycle
        in_cycles += ev.cycle >= 0 ? 1 : 0;
        EXPECT_EQ(j["lens"].size(), static_cast<size_t>(ev.depth));
        EXPECT_EQ(event_to_json(event_from_json(json::parse(j.dump()))), j);
    }
    EXPECT_GT(in_cycles, 0);
    const json s = stats_to_json(r.stats);
    EXPECT_GT(s["spec_cycles"].get<int>(), 0);
    EXPECT_EQ(stats_to_json(stats_from_json(json::parse(s.dump()))), s);
}
