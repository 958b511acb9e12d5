// tinyloop lens MODEL (--text T | --file F | --ids 1,2,3) [--loops L] [--top-k K]: the logit
// lens across loop depth. Text: a token x depth table that fits the terminal (depth columns wrap
// into blocks); --json: every field of score_logit_lens with token texts.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "commands.h"
#include "common.h"

namespace tinyloop::cli {

CommandSpec lens_spec() {
    CommandSpec s;
    s.name = "lens";
    s.synopsis = "MODEL (--text TEXT | --file F | --ids 1,2,3) [--loops L] [--top-k K] [--json]";
    s.summary =
        "The logit lens: at every position and every loop depth 1..L, the readout head applied to\n"
        "that depth's hidden state (depth L is the model's output). The table has one row per\n"
        "position (its token and the actual next token) and one column per depth; a cell shows the\n"
        "top-1 prediction, its probability and the probability of the actual next token.";
    const std::string I = "Input", O = "Lens";
    s.options = {
        {"--text", "TEXT", "the text to look at", "", false, I},
        {"--file", "F", "read the text from file F (- for stdin)", "", false, I},
        {"--ids", "IDS", "token ids: 1,2,3", "", false, I},
        {"--parse-special", "", "treat special-token strings (<|endoftext|>) in the text as tokens",
         "", false, I},
        {"--loops", "L", "deepest depth, 1..max_loops (default: the model's default_loops)",
         "an integer in [1, max_loops]", false, O},
        {"--top-k", "K", "top entries kept per cell, 1..64 (default 5; --json)",
         "an integer in [1, 64]", false, O},
        {"--width", "W", "table width in columns, 40..1000 (default: the terminal's, else 120)",
         "an integer in [40, 1000]", false, O},
    };
    for (auto& o : common_options()) s.options.push_back(o);
    s.notes =
        "Cells read \"top1 p1 pn\": the top-1 token at that depth (spaces shown as '_', bytes of an\n"
        "incomplete UTF-8 sequence as \\xNN, ids without text as <id>, long texts\n"
        "cut with '~'), its probability and the probability of the actual next token (1.0 = 1,\n"
        ".07 = 0.07; '-' at the last position, which has no next token). A '*' marks a top-1\n"
        "that is the actual next token.\n"
        "\n"
        "--json prints one object: model, loops, top_k, n_positions, tokens, token_texts,\n"
        "positions[{position, token, text, next_token (null at the last), next_text,\n"
        "depths[{depth, top_ids, top_probs, top_texts, argmax, argmax_text, p_final_argmax,\n"
        "p_next (null at the last position), entropy (nats), kl_to_final (nats)}]}].\n";
    return s;
}

namespace {

// Code points in UTF-8 text (the table's texts are sanitized, so no invalid sequences).
size_t width_of(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xc0) != 0x80) ++n;
    return n;
}

// A token text for a table cell: escaped, spaces as '_', at most `w` code points ('~' marks a cut).
std::string cell_text(const std::string& bytes, size_t w) {
    std::string t;
    if (sanitize_utf8(bytes) == bytes) {
        t = display_text(bytes);
    } else {  // a piece of a UTF-8 sequence: its bytes say more than U+FFFD
        static const char* hex = "0123456789abcdef";
        for (unsigned char c : bytes) {
            if (c >= 0x80) {
                t += "\\x";
                t += hex[c >> 4];
                t += hex[c & 15];
            } else {
                t += display_text(std::string(1, static_cast<char>(c)));
            }
        }
    }
    std::replace(t.begin(), t.end(), ' ', '_');
    if (width_of(t) <= w) return t + std::string(w - width_of(t), ' ');
    std::string out;
    size_t n = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(t[i]);
        if ((c & 0xc0) != 0x80 && ++n > w - 1) break;
        out += t[i];
    }
    return out + "~";
}

// A probability in 3 characters: "1.0", ".07", " - " for none.
std::string prob3(double p) {
    if (p < 0) return " - ";
    int pct = static_cast<int>(p * 100.0 + 0.5);
    if (pct >= 100) return "1.0";
    const char digits[] = {'.', static_cast<char>('0' + pct / 10), static_cast<char>('0' + pct % 10), 0};
    return digits;
}

int terminal_width() {
    struct winsize ws {};
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
        return ws.ws_col;
    if (const char* c = std::getenv("COLUMNS")) {
        int v = std::atoi(c);
        if (v >= 40 && v <= 1000) return v;
    }
    return 120;
}

}  // namespace

int run_lens(const Args& args) {
    const std::string model_path = args.single_positional("MODEL");
    const TokenInput input = read_token_input(args);
    const int loops = loops_flag(args).value_or(0);
    const int top_k = args.get_int("--top-k", 1, 64).value_or(5);
    const int width = args.get_int("--width", 40, 1000).value_or(0);
    const LoadOptions load = load_options(args);

    ModelHandle model = open_model(model_path, load);
    const std::vector<int32_t> ids = input_tokens(input, model.get(), 1);
    const int n = static_cast<int>(ids.size());
    LensResult lr;
    try {
        lr = score_logit_lens(model.get(), ids.data(), n, loops, top_k);
    } catch (const Error& e) {
        throw Error(e.code(), with_flag_name(e.what(), {{"loops", "--loops"}, {"top_k", "--top-k"}}));
    }

    std::vector<std::string> texts;
    for (int32_t id : ids) texts.push_back(token_text(model.get(), id));

    if (args.has("--json")) {
        nlohmann::json positions = nlohmann::json::array();
        std::vector<std::string> clean;
        for (const auto& t : texts) clean.push_back(sanitize_utf8(t));
        for (int i = 0; i < lr.n_positions; ++i) {
            nlohmann::json depths = nlohmann::json::array();
            const bool last = i + 1 >= n;
            for (int d = 1; d <= lr.loops; ++d) {
                const LensCell& c = lr.at(i, d);
                std::vector<double> probs;
                std::vector<std::string> top_texts;
                for (float p : c.top_probs) probs.push_back(f2d(p));
                for (int32_t id : c.top_ids) top_texts.push_back(sanitize_utf8(token_text(model.get(), id)));
                depths.push_back({{"depth", d},
                                  {"top_ids", c.top_ids},
                                  {"top_probs", probs},
                                  {"top_texts", top_texts},
                                  {"argmax", c.argmax},
                                  {"argmax_text", sanitize_utf8(token_text(model.get(), c.argmax))},
                                  {"p_final_argmax", f2d(c.p_final_argmax)},
                                  {"p_next", last ? nlohmann::json(nullptr) : nlohmann::json(f2d(c.p_next))},
                                  {"entropy", f2d(c.entropy)},
                                  {"kl_to_final", f2d(c.kl_to_final)}});
            }
            positions.push_back({{"position", i},
                                 {"token", ids[i]},
                                 {"text", clean[i]},
                                 {"next_token", last ? nlohmann::json(nullptr) : nlohmann::json(ids[i + 1])},
                                 {"next_text", last ? nlohmann::json(nullptr) : nlohmann::json(clean[i + 1])},
                                 {"depths", depths}});
        }
        print_json({{"model", model_path},
                    {"loops", lr.loops},
                    {"top_k", lr.top_k},
                    {"n_positions", lr.n_positions},
                    {"tokens", ids},
                    {"token_texts", clean},
                    {"positions", positions}});
        return 0;
    }

    // An id the tokenizer cannot spell (padding of random models) shows as <id>.
    auto spell = [&](int32_t id) {
        std::string t = token_text(model.get(), id);
        if (!t.empty()) return t;
        std::string r(1, '<');
        r.append(std::to_string(id)).push_back('>');
        return r;
    };
    // Layout: "  pos  token     next      | d1 cell | d2 cell ..." wrapped into blocks of depths.
    constexpr size_t kTok = 8, kCellTok = 6;
    const std::string row_head_blank(5 + 2 + kTok + 2 + kTok + 1, ' ');
    const size_t cell_w = 1 + kCellTok + 1 + 3 + 1 + 3 + 1;  // " tok___* .31 .07"
    const int W = width > 0 ? width : terminal_width();
    const int per_block = std::max<int>(1, static_cast<int>((W - static_cast<int>(row_head_blank.size())) /
                                                            static_cast<int>(cell_w + 1)));
    std::ostringstream o;
    o << "logit lens: " << n << " positions x depths 1.." << lr.loops
      << "\ncell: top-1 token, its probability, probability of the actual next token\n"
      << "(* marks a top-1 that is the actual next token)\n";
    for (int d0 = 1; d0 <= lr.loops; d0 += per_block) {
        const int d1 = std::min(lr.loops, d0 + per_block - 1);
        char head[64];
        std::snprintf(head, sizeof(head), "%5s  %-*s  %-*s ", "pos", static_cast<int>(kTok), "token",
                      static_cast<int>(kTok), "next");
        o << "\n" << head;
        for (int d = d0; d <= d1; ++d) {
            std::snprintf(head, sizeof(head), "|%-*s", static_cast<int>(cell_w),
                          (" depth " + std::to_string(d)).c_str());
            o << head;
        }
        o << "\n";
        for (int i = 0; i < n; ++i) {
            char pos[16];
            std::snprintf(pos, sizeof(pos), "%5d", i);
            o << pos << "  " << cell_text(texts[i], kTok) << "  "
              << (i + 1 < n ? cell_text(texts[i + 1], kTok) : std::string(kTok, ' ')) << " ";
            for (int d = d0; d <= d1; ++d) {
                const LensCell& c = lr.at(i, d);
                const bool hit = i + 1 < n && c.argmax == ids[i + 1];
                const double p1 = c.top_probs.empty() ? 0.0 : c.top_probs[0];
                o << "| " << cell_text(spell(c.argmax), kCellTok) << (hit ? "*" : " ")
                  << prob3(p1) << " " << prob3(i + 1 < n ? c.p_next : -1.0) << " ";
            }
            o << "\n";
        }
    }
    std::string s = o.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

}  // namespace tinyloop::cli
