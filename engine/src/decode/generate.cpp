// Plain decoding (greedy and sampling) with the seed's canonical state machine, and the seed's
// generate / generate_stream / generate_batch wrappers (and those of the speculative modes).
#include "decode/decode.h"
#include "decode/emit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

namespace tinyloop {

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::EOS: return "EOS";
        case StopReason::STOP_SEQUENCE: return "STOP_SEQUENCE";
        case StopReason::MAX_TOKENS: return "MAX_TOKENS";
        case StopReason::CALLBACK_ABORT: return "CALLBACK_ABORT";
        case StopReason::GRAMMAR_DEAD_END: return "GRAMMAR_DEAD_END";
        case StopReason::STOP_STRING: return "STOP_STRING";
        case StopReason::MAX_TIME: return "MAX_TIME";
    }
    return "?";
}

namespace {

// num_return_sequences > 1 when sampling: independent draws, sequence i seeded sample_seed + i
// (the first is the plain call's output, and the only one the callbacks see).
GenerateResult sample_several(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                              const GenerateOptions& options, const DecodeStart* start) {
    GenerateResult first;
    for (int i = 0; i < config.num_return_sequences; ++i) {
        GenerateConfig c = config;
        c.sample_seed = config.sample_seed + static_cast<uint64_t>(i);
        GenerateOptions o;
        if (i == 0) o = options;
        double logp = 0;
        o.observer = [&logp, user = o.observer](const TokenEvent& ev) {
            logp += std::log(static_cast<double>(ev.prob));
            return user ? user(ev) : true;
        };
        GenerateResult r = decode(m, prompt, prompt_len, c, o, start);
        ReturnedSequence seq{std::vector<int32_t>(r.tokens.begin() + r.prompt_len, r.tokens.end()), r.text,
                             r.stats.stop_reason, logp};
        if (i == 0) first = std::move(r);
        first.sequences.push_back(std::move(seq));
    }
    return first;
}

}  // namespace

GenerateResult generate_from(const Model& m, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                             const GenerateOptions& options, const DecodeStart* start) {
    if (config.num_return_sequences > 1 && config.beam_size < 2) {
        validate_config(&m, prompt_len, config);  // refuses greedy before any draw
        return sample_several(m, prompt, prompt_len, config, options, start);
    }
    return decode(m, prompt, prompt_len, config, options, start);
}

GenerateResult generate_ex(Model* model, const int32_t* prompt, int prompt_len, const GenerateConfig& config,
                           const GenerateOptions& options) {
    return generate_from(checked(model), prompt, prompt_len, config, options, nullptr);
}

std::vector<float> next_token_distribution(Model* model, const int32_t* tokens, int n, int emitted,
                                           const GenerateConfig& config) {
    const Model& m = checked(model);
    if (emitted < 0 || emitted >= n)
        throw Error(ErrorCode::InvalidArgument, "emitted: " + std::to_string(emitted) + " is outside [0, n - 1 = " +
                                                    std::to_string(n - 1) + "] (the prompt needs a token)");
    validate_config(model, n - emitted, config);
    if (config.grammar) throw Error(ErrorCode::InvalidArgument, "grammar: next_token_distribution takes no grammar");
    check_prompt_ids(m, tokens, n);
    const int V = m.hp.vocab_size;
    const std::vector<float> all = forward_logits(model, tokens, n, config.loops, config.kv_cache);
    const std::vector<int32_t> context(tokens, tokens + n), output(tokens + (n - emitted), tokens + n);
    const LogitsPipeline pipe(m, config);
    std::vector<float> z;
    pipe.process(all.data() + static_cast<size_t>(n - 1) * V, context, output, nullptr, z);
    if (!pipe.greedy()) return pipe.probs(z);
    std::vector<float> one_hot(static_cast<size_t>(V), 0.0f);
    one_hot[static_cast<size_t>(greedy_choice(m, z.data()).token)] = 1.0f;
    return one_hot;
}

std::vector<int32_t> generate(Model* model, const int32_t* prompt, int prompt_len, const GenerateConfig& config) {
    return generate_ex(model, prompt, prompt_len, config).tokens;
}

std::vector<int32_t> generate_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                          const SpeculativeConfig& config) {
    return generate_speculative_ex(model, prompt, prompt_len, config).tokens;
}

std::vector<int32_t> generate_tree_speculative(Model* model, const int32_t* prompt, int prompt_len,
                                               const TreeSpeculativeConfig& config) {
    return generate_tree_speculative_ex(model, prompt, prompt_len, config).tokens;
}

std::vector<int32_t> generate_stream(Model* model, const int32_t* prompt, int prompt_len,
                                     const GenerateConfig& config, const GenerateTokenCallback& on_token,
                                     GenerateStats* stats) {
    GenerateOptions opt;
    opt.on_token = on_token;
    GenerateResult r = generate_ex(model, prompt, prompt_len, config, opt);
    if (stats) *stats = std::move(r.stats);
    return std::move(r.tokens);
}

std::vector<GenerateResult> generate_batch_ex(Model* model, const std::vector<std::vector<int32_t>>& prompts,
                                              const GenerateConfig& config, const GenerateBatchOptions& options) {
    checked(model);
    // Validate every prompt before decoding any, so a bad one does not waste the others' work.
    for (size_t i = 0; i < prompts.size(); ++i) {
        try {
            validate_config(model, static_cast<int>(prompts[i].size()), config);
            check_prompt_ids(*model, prompts[i].data(), static_cast<int>(prompts[i].size()));
        } catch (const Error& e) {
            throw Error(e.code(), "prompts[" + std::to_string(i) + "]: " + e.what());
        }
    }
    auto observer_for = [&options](size_t i) -> TokenObserver {
        if (!options.observer) return {};
        return [&options, i](const TokenEvent& ev) { return options.observer(i, ev); };
    };
    std::vector<GenerateResult> results;
    if (config.beam_size >= 2 || config.num_return_sequences > 1 || options.lens || !config.kv_sharing.exact()) {
        // The batch engine runs neither beam search, several outputs per prompt nor the logit
        // lens: one prompt after another.
        for (size_t i = 0; i < prompts.size(); ++i) {
            GenerateOptions o;
            o.observer = observer_for(i);
            o.lens = options.lens;
            o.lens_top_k = options.lens_top_k;
            results.push_back(generate_ex(model, prompts[i].data(), static_cast<int>(prompts[i].size()), config, o));
        }
    } else if (!prompts.empty()) {
        // All prompts (up to 64 at a time) in one engine whose pool holds the largest 64 at once.
        const HParams& hp = model_hparams(model);
        const int loops = resolve_loops(checked(model), config.loops);
        BatchEngineOptions opt;
        opt.max_batch = static_cast<int>(std::min<size_t>(prompts.size(), 64));
        std::vector<int> need;
        for (const auto& p : prompts)
            need.push_back(pages_needed(exec_layers(hp, loops), static_cast<int>(p.size()) + config.max_tokens, opt.page_size));
        std::sort(need.begin(), need.end(), std::greater<int>());
        long long pages = 0;
        for (int i = 0; i < opt.max_batch; ++i) pages += need[static_cast<size_t>(i)];
        opt.kv_pages = static_cast<int>(std::clamp<long long>(pages, 1, 1 << 20));
        std::unique_ptr<BatchEngine, void (*)(BatchEngine*)> engine(create_batch_engine(model, opt), free_batch_engine);
        std::vector<uint64_t> ids;
        for (size_t i = 0; i < prompts.size(); ++i) {
            BatchRequest r;
            r.prompt = prompts[i];
            r.config = config;
            r.observer = observer_for(i);
            ids.push_back(batch_submit(engine.get(), std::move(r)));
        }
        batch_run_until_idle(engine.get());
        for (uint64_t id : ids) results.push_back(batch_result(engine.get(), id));
    }
    return results;
}

std::vector<int32_t> generate_batch(Model* model, const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateConfig& config, std::vector<int>* output_lengths) {
    std::vector<GenerateResult> results = generate_batch_ex(model, prompts, config);
    std::vector<int32_t> flat;
    if (output_lengths) output_lengths->clear();
    for (const auto& r : results) {
        if (output_lengths) output_lengths->push_back(static_cast<int>(r.tokens.size()));
        flat.insert(flat.end(), r.tokens.begin(), r.tokens.end());
    }
    return flat;
}

std::vector<std::vector<int32_t>> split_batch_output(const std::vector<int32_t>& flat,
                                                     const std::vector<int>& output_lengths) {
    std::vector<std::vector<int32_t>> out;
    size_t at = 0;
    for (size_t i = 0; i < output_lengths.size(); ++i) {
        const int n = output_lengths[i];
        if (n < 0 || at + static_cast<size_t>(n) > flat.size())
            throw Error(ErrorCode::InvalidArgument, "output_lengths[" + std::to_string(i) +
                                                        "]: runs past the end of the flat output");
        out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + n));
        at += static_cast<size_t>(n);
    }
    if (at != flat.size())
        throw Error(ErrorCode::InvalidArgument, "output_lengths: sum " + std::to_string(at) +
                                                    " does not match the flat output's length " + std::to_string(flat.size()));
    return out;
}

}  // namespace tinyloop
