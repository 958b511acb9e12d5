// PCRE2 wrapper for the hf_byte_bpe pre-tokenizer (FORMAT.md §3b).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pcre_regex.h"

#include <pcre2.h>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

namespace {

// One search may try at most this many backtracking steps (PCRE2's match limit; JIT and
// interpreter alike) and recurse this deep (interpreter). A real tokenizer pattern needs a few
// hundred steps per pre-token; (a+)+$ on 30 letters needs billions and stops here in
// milliseconds.
constexpr uint32_t kMatchLimit = 1'000'000;
constexpr uint32_t kDepthLimit = 10'000;

// The JIT's stack: one per thread (match contexts are shared, stacks must not be).
pcre2_jit_stack* thread_jit_stack(void*) {
    thread_local std::unique_ptr<pcre2_jit_stack, void (*)(pcre2_jit_stack*)> stack(
        pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr), pcre2_jit_stack_free);
    return stack.get();
}

std::string pcre_message(int code) {
    PCRE2_UCHAR buf[256];
    if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
    return reinterpret_cast<const char*>(buf);
}

// tokenizers runs its patterns with Oniguruma, whose Unicode \s, \w and \b differ from PCRE2's
// UCP ones (PCRE2's \s adds U+180E; its \w lacks marks and connector punctuation but has every
// number). The pattern is rewritten so these escapes mean what Oniguruma means: \s = \t-\r,
// U+0085, Zl, Zp, Zs; \w = L, M, Nd, Pc; \b / \B from that \w.
constexpr const char* kOnigSpace = R"(\t-\r\x{85}\p{Zl}\p{Zp}\p{Zs})";
constexpr const char* kOnigWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

std::string onig_compatible(const std::string& p) {
    const std::string S = kOnigSpace, W = kOnigWord;
    std::string out;
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[i + 1];
            ++i;
            if (in_class) {
                if (e == 's') out += S;
                else if (e == 'w') out += W;
                else out += std::string{'\\', e};
                continue;
            }
            switch (e) {
                case 's': out += "[" + S + "]"; break;
                case 'S': out += "[^" + S + "]"; break;
                case 'w': out += "[" + W + "]"; break;
                case 'W': out += "[^" + W + "]"; break;
                case 'b': out += "(?:(?<=[" + W + "])(?![" + W + "])|(?<![" + W + "])(?=[" + W + "]))"; break;
                case 'B': out += "(?:(?<=[" + W + "])(?=[" + W + "])|(?<![" + W + "])(?![" + W + "]))"; break;
                default: out += std::string{'\\', e};
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = out.size() + 1;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i], ++class_start;
            continue;
        }
        // A ']' first in a class is a literal; elsewhere it closes the class.
        if (in_class && c == ']' && out.size() > class_start) in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

struct Regex::Code {
    pcre2_code* code = nullptr;
    pcre2_match_context* mctx = nullptr;
    ~Code() {
        pcre2_match_context_free(mctx);
        pcre2_code_free(code);
    }
};

Regex::Regex(const std::string& pattern, std::string field) : field_(std::move(field)) {
    auto c = std::make_shared<Code>();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string translated = onig_compatible(pattern);
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!c->code)
        throw Error(ErrorCode::InvalidArgument,
                    field_ + ": the pattern does not compile at offset " + std::to_string(err_off) +
                        ": " + pcre_message(err) + " (allowed a PCRE2 pattern, UTF + UCP)");
    // JIT is an optimisation: without it (not built, no executable memory) the interpreter runs.
    const bool jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
    c->mctx = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(c->mctx, kMatchLimit);
    pcre2_set_depth_limit(c->mctx, kDepthLimit);
    if (jit) pcre2_jit_stack_assign(c->mctx, thread_jit_stack, nullptr);
    code_ = std::move(c);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
        pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
    if (!md) throw Error(ErrorCode::OutOfMemory, field_ + ": no memory for a regex match");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= text.size()) {
        // The text was checked as UTF-8 once by the caller; PCRE2 need not check it again.
        const int rc = pcre2_match(code_->code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK,
                                   md.get(), code_->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            const bool limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                               rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT;
            throw Error(ErrorCode::InvalidArgument,
                        field_ + ": " +
                            (limit ? "the pattern exceeds the match limit (" +
                                         std::to_string(kMatchLimit) +
                                         " steps) on this text: catastrophic backtracking, "
                                         "allowed a pattern that matches in bounded steps"
                                   : "matching failed: " + pcre_message(rc)));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t s = ov[0], e = ov[1];
        if (s == e && have_last && last_match_end == e) {
            // Skip one character (UTF-8 lead byte and its continuation bytes).
            size_t k = last_end + 1;
            while (k < text.size() && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) ++k;
            last_end = k;
            continue;
        }
        last_end = e;
        last_match_end = e;
        have_last = true;
        out.emplace_back(s, e);
        if (e == text.size() && s == e) break;
    }
    return out;
}

}  // namespace tinyloop
