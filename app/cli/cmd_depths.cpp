// tinyloop depths MODEL (--text T | --file F | --ids ...) --depths 2,4,8 [--max-tokens N]:
// answers one prompt at several loop depths from one prefill, through a ResumeHandle: a deeper
// depth runs only its new passes over the prompt, a shallower one is free. Greedy; the answer at
// each depth equals a fresh generation at that depth (the engine's tests check it bit for bit).
#include <chrono>
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec depths_spec() {
    CommandSpec s;
    s.name = "depths";
    s.synopsis = "MODEL (--text TEXT | --file F | --ids 1,2,3) --depths 2,4,8 [--max-tokens N] [--json]";
    s.summary =
        "Answers one prompt at several loop depths without recomputing the prompt: one prefill at\n"
        "the first depth is kept (a ResumeHandle); each further depth runs only the passes it adds\n"
        "(or none, when shallower than one already computed). Greedy decoding.";
    const std::string I = "Input", D = "Depths";
    s.options = {
        {"--text", "TEXT", "the prompt text", "", false, I},
        {"--file", "F", "read the prompt text from file F (- for stdin)", "", false, I},
        {"--ids", "IDS", "the prompt as token ids: 1,2,3", "", false, I},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens", "", false, I},
        {"--depths", "DEPTHS", "loop depths to answer at, in order, e.g. 2,4,8", "a list of depths like 2,4,8",
         false, D},
        {"--max-tokens", "N", "tokens to generate at each depth (default 32)", "an integer >= 0", false, D},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "--json prints one object: model, prompt_ids, handle_bytes, answers[{loops, output_ids,\n"
        "text, ms, tokens_emitted, stop_reason, handle_loops}] (handle_loops: the deepest depth the\n"
        "kept state has reached after this answer).\n";
    return s;
}

int run_depths(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const TokenInput input = read_token_input(args);
    if (!args.has("--depths")) throw UsageError("--depths: required, e.g. --depths 2,4,8");
    std::vector<int> depths;
    for (const auto& item : split_list("--depths", *args.value("--depths")))
        depths.push_back(static_cast<int>(parse_integer("--depths", item, 1, INT32_MAX, "a depth in [1, max_loops]")));
    const int max_tokens = static_cast<int>(args.get_int("--max-tokens").value_or(32));
    if (max_tokens < 0) throw UsageError("--max-tokens: expected an integer >= 0, got " + std::to_string(max_tokens));
    const LoadOptions load = load_options(args);
    ModelHandle model = open_model(model_path, load);
    check_depths("--depths", depths, model_hparams(model.get()));
    const std::vector<int32_t> ids = input_tokens(input, model.get(), 1);
    const std::vector<std::pair<std::string, std::string>> fields = {{"loops", "--depths"},
                                                                     {"max_tokens", "--max-tokens"}};
    auto engine = [&](auto&& f) {
        try {
            return f();
        } catch (const Error& e) {
            throw Error(e.code(), with_flag_name(e.what(), fields));
        }
    };
    const Owned<ResumeHandle> owned_handle(
        engine([&] { return create_resume_handle(model.get(), ids.data(), static_cast<int>(ids.size()), depths[0]); }));
    ResumeHandle* handle = owned_handle.get();

    nlohmann::json answers = nlohmann::json::array();
    std::ostringstream text;
    for (int d : depths) {
        GenerateConfig c;
        c.max_tokens = max_tokens;
        c.loops = d;
        const auto t0 = std::chrono::steady_clock::now();
        GenerateResult r = engine([&] { return resume_generate(handle, c); });
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::vector<int32_t> out(r.tokens.begin() + r.prompt_len, r.tokens.end());
        answers.push_back({{"loops", d},
                           {"output_ids", out},
                           {"text", r.text},
                           {"ms", ms},
                           {"tokens_emitted", r.stats.tokens_emitted},
                           {"stop_reason", stop_reason_name(r.stats.stop_reason)},
                           {"handle_loops", resume_handle_loops(handle)}});
        char head[96];
        std::snprintf(head, sizeof head, "L=%-3d %8.2f ms  ", d, ms);
        text << head << display_text(r.text) << "\n";
    }
    if (args.has("--json")) {
        print_json({{"model", model_path},
                    {"prompt_ids", ids},
                    {"handle_bytes", resume_handle_bytes(handle)},
                    {"answers", answers}});
        return 0;
    }
    std::fputs(text.str().c_str(), stdout);
    std::fprintf(stderr, "tinyloop: one prefill kept (%zu bytes), deepest depth reached %d\n",
                 resume_handle_bytes(handle), resume_handle_loops(handle));
    return 0;
}

}  // namespace tinyloop::cli
