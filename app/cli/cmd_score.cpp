// tinyloop score MODEL (--text TEXT | --file F | --ids 1,2,3): per-token log-probabilities,
// total negative log-likelihood and perplexity at one loop depth.
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec score_spec() {
    CommandSpec s;
    s.name = "score";
    s.synopsis = "MODEL (--text TEXT | --file F | --ids 1,2,3) [--loops L] [--json]";
    s.summary =
        "Scores a text: the log-probability of every token given the ones before it, the total\n"
        "negative log-likelihood and the perplexity, at loop depth L.";
    const std::string I = "Input", O = "Scoring";
    s.options = {
        {"--text", "TEXT", "the text to score", "", false, I},
        {"--file", "F", "read the text from file F (- for stdin)", "", false, I},
        {"--ids", "IDS", "token ids to score: 1,2,3", "", false, I},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens",
         "", false, I},
        {"--loops", "L", "loop depth, 1..max_loops (default: the model's default_loops)",
         "an integer in [1, max_loops]", false, O},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "The first token has no log-probability (nothing precedes it); at least two are needed.\n"
        "--json prints one object: model, tokens (ids), token_texts, token_logprobs (n-1 values:\n"
        "log p(token[i+1] | tokens[..i])), total_nll, perplexity, loops.\n";
    return s;
}

int run_score(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const std::string source = args.exclusive({"--text", "--file", "--ids"});
    if (source.empty()) throw UsageError("missing input: give --text TEXT, --file F or --ids 1,2,3");
    if (source == "--ids" && args.has("--parse-special"))
        throw UsageError("--parse-special applies to text, not to --ids");
    std::string text;
    std::vector<int32_t> ids;
    if (source == "--text") text = *args.value("--text");
    if (source == "--file") text = read_text_file("--file", *args.value("--file"));
    if (source == "--ids") ids = parse_id_list("--ids", *args.value("--ids"));
    const int loops = args.get_int("--loops").value_or(0);
    const LoadOptions load = load_options(args);

    ModelPtr model = open_model(model_path, load);
    const HParams& hp = model_hparams(model.get());
    if (source == "--ids") {
        for (int32_t id : ids)
            if (id >= hp.vocab_size)
                throw UsageError("--ids: token id " + std::to_string(id) +
                                 " is outside the model's vocabulary (ids 0.." +
                                 std::to_string(hp.vocab_size - 1) + ")");
    } else {
        ids = tokenize(model.get(), text, args.has("--parse-special"));
    }
    if (ids.size() < 2)
        throw UsageError(source + ": need at least 2 tokens to score, got " +
                         std::to_string(ids.size()));

    ScoreResult r;
    try {
        r = score(model.get(), ids.data(), static_cast<int>(ids.size()), loops);
    } catch (const Error& e) {
        throw Error(e.code(), with_flag_name(e.what(), {{"loops", "--loops"}}));
    }

    std::vector<std::string> texts;
    for (int32_t id : ids) {
        try {
            texts.push_back(token_bytes(model.get(), id));
        } catch (const Error&) {
            texts.push_back("");  // a padded id the tokenizer cannot spell
        }
    }

    if (args.has("--json")) {
        std::vector<double> lp;
        for (float v : r.token_logprobs) lp.push_back(static_cast<double>(v));
        std::vector<std::string> clean;
        for (const auto& t : texts) clean.push_back(sanitize_utf8(t));
        print_json({{"model", model_path},
                    {"tokens", ids},
                    {"token_texts", clean},
                    {"token_logprobs", lp},
                    {"total_nll", r.total_nll},
                    {"perplexity", r.perplexity},
                    {"loops", r.loops}});
        return 0;
    }

    std::ostringstream o;
    o << "     #       id  logprob  token\n";
    for (size_t i = 0; i < ids.size(); ++i) {
        char line[96];
        if (i == 0)
            std::snprintf(line, sizeof(line), "%6zu %8d %8s  ", i, ids[i], "-");
        else
            std::snprintf(line, sizeof(line), "%6zu %8d %8.4f  ", i, ids[i],
                          i - 1 < r.token_logprobs.size()
                              ? static_cast<double>(r.token_logprobs[i - 1])
                              : 0.0);
        o << line << "\"" << display_text(texts[i]) << "\"\n";
    }
    char summary[200];
    std::snprintf(summary, sizeof(summary),
                  "total NLL %.4f nats over %zu predicted tokens, perplexity %.4f, loops %d\n",
                  r.total_nll, ids.size() - 1, r.perplexity, r.loops);
    o << summary;
    std::string s = o.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
