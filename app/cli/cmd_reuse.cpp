// tinyloop reuse MODEL --prefix TEXT... --prompt TEXT...: generates several prompts that share
// prefixes through a PrefixPool: each registered prefix is prefilled once, and every prompt
// reuses the longest registered prefix it starts with (only the rest of it is prefilled).
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "tinyloop/mode_rules.h"

namespace tinyloop::cli {

CommandSpec reuse_spec() {
    CommandSpec s;
    s.name = "reuse";
    s.synopsis = "MODEL --prefix TEXT [--prefix TEXT]... --prompt TEXT [--prompt TEXT]... [--loops L] [--max-tokens N]";
    s.summary =
        "Generates (greedy) for several prompts that share prefixes: the prefixes are prefilled once\n"
        "into a PrefixPool and each prompt reuses the longest one it starts with. Prints each\n"
        "answer with the prefix tokens it reused and its prefill time.";
    const std::string R = "Reuse";
    s.options = {
        {"--prefix", "TEXT", "a prefix to register (repeatable)", "", true, R},
        {"--prompt", "TEXT", "a prompt to answer (repeatable)", "", true, R},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the texts as tokens", "", false, R},
        {"--loops", "L", "loop depth of the pool and the answers (default: the model's)", "an integer in [1, max_loops]", false, R},
        {"--max-tokens", "N", "tokens to generate per prompt (default 32)", "an integer >= 0", false, R},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "--json prints one object: model, loops, pool_bytes, answers[{prompt_ids, reused_tokens,\n"
        "output_ids, text, prefill_ms, stop_reason}].\n";
    return s;
}

int run_reuse(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const auto prefixes = args.values("--prefix");
    const auto prompts = args.values("--prompt");
    if (prefixes.empty()) throw UsageError("--prefix: at least one is required");
    if (prompts.empty()) throw UsageError("--prompt: at least one is required");
    const int loops = loops_flag(args).value_or(0);
    const int max_tokens = static_cast<int>(args.get_int("--max-tokens").value_or(32));
    const bool special = args.has("--parse-special");
    ModelHandle model = open_model(model_path, load_options(args));
    const std::vector<std::pair<std::string, std::string>> fields = {{"loops", "--loops"},
                                                                     {"max_tokens", "--max-tokens"},
                                                                     {"prefix", "--prefix"},
                                                                     {"prompt", "--prompt"}};
    auto engine = [&](auto&& f) {
        try {
            return f();
        } catch (const Error& e) {
            throw Error(e.code(), with_flag_name(e.what(), fields));
        }
    };
    const Owned<PrefixPool> owned_pool(engine([&] { return create_prefix_pool(model.get(), loops); }));
    PrefixPool* pool = owned_pool.get();
    for (const auto& p : prefixes) {
        const auto ids = tokenize(model.get(), p, special);
        if (ids.empty()) throw UsageError("--prefix: an empty prefix");
        engine([&] { return prefix_pool_add(pool, ids.data(), static_cast<int>(ids.size())); });
    }
    nlohmann::json answers = nlohmann::json::array();
    for (const auto& p : prompts) {
        const auto ids = tokenize(model.get(), p, special);
        if (ids.empty()) throw UsageError("--prompt: an empty prompt");
        GenerateConfig c;
        c.max_tokens = max_tokens;
        int reused = 0;
        GenerateResult r = engine([&] {
            return generate_with_pool(pool, ids.data(), static_cast<int>(ids.size()), c, {}, &reused);
        });
        std::vector<int32_t> out(r.tokens.begin() + r.prompt_len, r.tokens.end());
        answers.push_back({{"prompt_ids", ids},
                           {"reused_tokens", reused},
                           {"output_ids", out},
                           {"text", r.text},
                           {"prefill_ms", r.stats.prefill_ms},
                           {"stop_reason", stop_reason_name(r.stats.stop_reason)}});
        if (!args.has("--json"))
            std::printf("[reused %d/%zu prompt tokens, prefill %.2f ms] %s\n", reused, ids.size(), r.stats.prefill_ms,
                        display_text(r.text).c_str());
    }
    if (args.has("--json")) {
        const int L = resolve_loops(model_hparams(model.get()), loops);
        print_json({{"model", model_path}, {"loops", L}, {"pool_bytes", prefix_pool_bytes(pool)}, {"answers", answers}});
    } else {
        std::fprintf(stderr, "tinyloop: pool holds %zu prefixes, %zu bytes\n", prefixes.size(), prefix_pool_bytes(pool));
    }
    return 0;
}

}  // namespace tinyloop::cli
