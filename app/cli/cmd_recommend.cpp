// tinyloop recommend MODEL (--text T | --file F | --ids ...) [--prompts P1|P2...] [--write | --out F]:
// measures the checkpoint's early-exit policy and speculation knobs with the analysis library
// (recommendation_search.h, the computations of the workbench's calibration and sweep views)
// and, with --write or --out, stores them in the model file's metadata ("recommended",
// docs/FORMAT.md §2) through write_model_metadata: only the metadata changes, every tensor byte
// stays. Those values then become the defaults of generate, bench and score --early-exit (and
// of any front end that resolves through run_decode / resolve_early_exit).
#include <cstdio>
#include <sstream>

#include <tinyloop/json.h>
#include <tinyloop_analysis/recommendation_search.h>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec recommend_spec() {
    CommandSpec s;
    s.name = "recommend";
    s.synopsis = "MODEL (--text TEXT | --file F | --ids 1,2,3) [--prompts P1|P2|...] [--write | --out FILE] [--json]";
    s.summary =
        "Finds the checkpoint's recommended early-exit policy and speculation knobs and, with --write\n"
        "or --out, stores them in the model file's metadata (only the metadata changes; every tensor\n"
        "byte stays). Early exit: the policy with the lowest modelled cost per token (passes, head,\n"
        "probes) whose teacher-forced NLL on the text stays within --nll-tolerance of the default\n"
        "depth's. Speculation: the chain and the tree cell with the highest measured wall speedup\n"
        "among those token-identical to plain greedy and faster than it beyond the noise of the same\n"
        "run; the modelled speedup (tokens per cycle x V / passes) is printed beside it.";
    const std::string I = "Input", R = "Search", W = "Output";
    s.options = {
        {"--text", "TEXT", "held-out text scored for the early-exit search", "", false, I},
        {"--file", "F", "read that text from file F (- for stdin); at most max_seq_len tokens", "", false, I},
        {"--ids", "IDS", "the text as token ids: 1,2,3", "", false, I},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens", "", false, I},
        {"--prompts", "P1|P2", "prompts of the speculation sweep, separated by | (default: the first\n"
                               "                              three lines of the text)", "", false, R},
        {"--max-tokens", "N", "tokens per sweep run, 4..256 (default 48)", "an integer in [4, 256]", false, R},
        {"--nll-tolerance", "X", "allowed relative NLL increase of early exit, 0..0.2 (default 0.01)",
         "a number in [0, 0.2]", false, R},
        {"--skip", "PART", "leave one search out: early-exit | speculation", "one of early-exit, speculation", false, R},
        {"--write", "", "store the result in MODEL itself", "", false, W},
        {"--out", "FILE", "store the result in a copy of MODEL at FILE", "", false, W},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "A part searched now replaces the one stored; a part left out (--skip) keeps what the file has.\n"
        "--json prints one object: model, recommended{speculation, early_exit}, early_exit{loops,\n"
        "nll_per_token_at_loops, nll_tolerance, chosen, candidates[{criterion, threshold, patience,\n"
        "min_L, nll_per_token, mean_depth, depth_counts}]}, speculation{verify_loops, chain, tree,\n"
        "cells[{draft_loops, draft_ahead, branches, acceptance, tokens_per_cycle, modelled_speedup,\n"
        "measured_speedup, equals_greedy}]}, written (the file written, or null).\n";
    return s;
}

namespace {

std::vector<std::string> sweep_prompts(const Args& args, const TokenInput& in, Model* model,
                                       const std::vector<int32_t>& ids) {
    std::vector<std::string> prompts;
    if (auto p = args.value("--prompts")) {
        std::string item;
        std::istringstream s(*p);
        while (std::getline(s, item, '|'))
            if (!item.empty()) prompts.push_back(item);
        if (prompts.empty()) throw UsageError("--prompts: expected prompts separated by |, got '" + *p + "'");
        return prompts;
    }
    // The first words of the first three non-empty lines of the text.
    std::istringstream s(in.source == "--ids" ? detokenize_text(model, ids.data(), ids.size()) : in.text);
    std::string line;
    while (prompts.size() < 3 && std::getline(s, line))
        if (line.size() > 8) prompts.push_back(line.substr(0, std::min<size_t>(line.size(), 40)));
    if (prompts.empty()) throw UsageError("--prompts: the text has no line to prompt with; give --prompts");
    return prompts;
}

void print_text(const analysis::ExitSearch* ex, const analysis::SweepResult* sw, const Recommendation& rec) {
    if (ex) {
        std::printf("early exit: NLL per token at the default depth %d: %.4f (tolerance %.1f%%)\n", ex->loops,
                    ex->base_nll, 100 * ex->nll_tolerance);
        if (ex->best < 0) {
            std::printf("  no policy of the grid exits early within the tolerance: none recommended\n");
        } else {
            const auto& c = ex->candidates[static_cast<size_t>(ex->best)];
            std::printf("  chosen: %s threshold %g patience %d min_L %d: NLL %.4f (%+.2f%%), mean depth %.2f of %d, "
                        "modelled cost %.2f of the fixed depth's\n",
                        criterion_name(c.policy.criterion), c.policy.threshold, c.policy.patience, c.policy.min_L, c.nll,
                        100 * (c.nll / ex->base_nll - 1), c.mean_depth, ex->loops, c.relative_cost);
            std::printf("  exit depth histogram:");
            for (size_t d = 0; d < c.depth_counts.size(); ++d) std::printf(" L%zu:%d", d + 1, c.depth_counts[d]);
            std::printf("\n");
        }
    }
    if (sw) {
        for (bool tree : {false, true}) {
            const int i = analysis::best_paying_cell(*sw, tree);
            if (i < 0) {
                std::printf("%s speculation: no cell is faster than greedy beyond the noise: none recommended\n", tree ? "tree" : "chain");
                continue;
            }
            const auto& c = sw->cells[static_cast<size_t>(i)];
            std::printf("%s speculation: draft %d -> verify %d, draft_ahead %d%s: acceptance %.2f, %.2f tokens/cycle, "
                        "measured wall %.2fx (modelled %.2fx)\n",
                        tree ? "tree" : "chain", c.draft_loops, sw->verify_loops, c.draft_ahead,
                        tree ? (", branches " + std::to_string(c.branches)).c_str() : "", c.acceptance(),
                        c.cycles > 0 ? double(c.tokens) / c.cycles : 0.0, c.measured_speedup(),
                        analysis::modelled_speedup(c, sw->verify_loops));
        }
    }
    std::printf("recommended: %s\n", recommendation_to_json(rec).dump().c_str());
}

}  // namespace

int run_recommend(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const TokenInput input = read_token_input(args);
    const int max_tokens = args.get_int("--max-tokens", 4, 256).value_or(48);
    const float tolerance = args.get_float("--nll-tolerance").value_or(0.01f);
    if (!(tolerance >= 0.0f && tolerance <= 0.2f))
        throw UsageError("--nll-tolerance: expected a number in [0, 0.2], got '" + *args.value("--nll-tolerance") + "'");
    const std::string skip = args.value("--skip").value_or("");
    if (!skip.empty() && skip != "early-exit" && skip != "speculation")
        throw UsageError("--skip: expected one of early-exit, speculation, got '" + skip + "'");
    if (args.has("--write") && args.has("--out")) throw UsageError("--out: not with --write (one of the two)");
    if (auto o = args.value("--out"); o && o->empty()) throw UsageError("--out: expected a file name, got ''");

    ModelHandle model = open_model(model_path, load_options(args));
    const std::vector<int32_t> ids = input_tokens(input, model.get(), 2);
    std::unique_ptr<analysis::ExitSearch> exits;
    std::unique_ptr<analysis::SweepResult> sweep;
    if (skip != "early-exit")
        exits = std::make_unique<analysis::ExitSearch>(analysis::search_exit_policy(model.get(), ids, tolerance));
    if (skip != "speculation") {
        analysis::SweepSpec spec;
        spec.prompts = sweep_prompts(args, input, model.get(), ids);
        spec.max_tokens = max_tokens;
        spec.draft_loops = {1, 2, 3};
        spec.draft_ahead = {2, 3, 4, 6};
        spec.branches = {0, 2, 3};
        sweep = std::make_unique<analysis::SweepResult>(analysis::run_sweep(model.get(), spec));
    }
    const Recommendation rec = analysis::recommendation_from(exits.get(), sweep.get());
    nlohmann::json measured = nlohmann::json::object();
    if (exits) measured["early_exit"] = analysis::exit_search_to_json(*exits);
    if (sweep) measured["speculation"] = analysis::speculation_choice_to_json(*sweep);

    std::optional<std::string> written;
    if (args.has("--write") || args.has("--out")) {
        written = args.has("--write") ? model_path : *args.value("--out");
        const std::string meta = analysis::metadata_with_recommendation(model_info(model.get()).metadata_json, rec, measured);
        model.reset();  // the file may be replaced in place
        write_model_metadata(model_path, *written, meta);
    }
    if (args.has("--json")) {
        nlohmann::json j = {{"model", model_path}, {"recommended", recommendation_to_json(rec)},
                            {"written", written ? nlohmann::json(*written) : nlohmann::json(nullptr)}};
        for (auto it = measured.begin(); it != measured.end(); ++it) j[it.key()] = it.value();
        print_json(j);
        return 0;
    }
    print_text(exits.get(), sweep.get(), rec);
    if (written) std::printf("written to %s (metadata only; every tensor byte kept)\n", written->c_str());
    return 0;
}

}  // namespace tinyloop::cli
