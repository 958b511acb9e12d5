// llama_parity MODEL.tinyloop MODEL.gguf --loops L (--text TEXT | --ids 1,2,3) [--tolerance T]
//
// Runs the same tokens through our engine (forward_logits at depth L) and through llama.cpp on
// the `tinyloop export-gguf` file (its llama graph, f32 KV cache, one thread) and compares the
// logits of every position. With --text, llama.cpp's tokenizer must also give our ids.
// Prints one line of figures; exits 1 when max |ours - llama.cpp| > T * max |ours| (default
// 1e-4) or an argmax or a token id differs, 2 on a usage or load error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "llama.h"
#include "tinyloop/tinyloop.h"

namespace {

int usage(const char* why) {
    std::fprintf(stderr,
                 "llama_parity: %s\nusage: llama_parity MODEL.tinyloop MODEL.gguf --loops L "
                 "(--text TEXT | --ids 1,2,3) [--tolerance T]\n",
                 why);
    return 2;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::vector<int32_t> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    size_t at = 0;
    while (at < s.size()) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        ids.push_back(static_cast<int32_t>(std::stol(s.substr(at, end - at))));
        at = end + 1;
    }
    return ids;
}

// Every position's logits from llama.cpp, n x vocab.
std::vector<float> llama_logits(llama_context* ctx, const std::vector<int32_t>& ids, int vocab) {
    llama_batch b = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
        b.token[i] = ids[i];
        b.pos[i] = static_cast<llama_pos>(i);
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = static_cast<int32_t>(ids.size());
    const int rc = llama_decode(ctx, b);
    std::vector<float> out;
    if (rc == 0)
        for (size_t i = 0; i < ids.size(); ++i) {
            const float* l = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
            out.insert(out.end(), l, l + vocab);
        }
    llama_batch_free(b);
    return out;
}

}  // namespace

int run(int argc, char** argv) {
    if (argc < 3) return usage("expected MODEL.tinyloop and MODEL.gguf");
    const std::string ours_path = argv[1], gguf_path = argv[2];
    int loops = 0;
    double tolerance = 1e-4;
    std::string text;
    std::vector<int32_t> ids;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--loops") loops = std::atoi(value.c_str());
        else if (flag == "--text") text = value;
        else if (flag == "--ids") ids = parse_ids(value);
        else if (flag == "--tolerance") tolerance = std::atof(value.c_str());
        else return usage(("unknown flag " + flag).c_str());
    }
    if (loops < 1) return usage("--loops: expected an integer >= 1");
    if (text.empty() == ids.empty()) return usage("give exactly one of --text and --ids");

    tinyloop::LoadOptions lo;
    lo.backend = tinyloop::Backend::Cpu;
    lo.threads = 1;
    tinyloop::Model* ours = tinyloop::load_model(ours_path, lo);
    const int vocab = tinyloop::model_hparams(ours).vocab_size;

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model* lm = llama_model_load_from_file(gguf_path.c_str(), mp);
    if (!lm) return usage(("llama.cpp cannot load " + gguf_path).c_str());
    const llama_vocab* lv = llama_model_get_vocab(lm);
    if (llama_vocab_n_tokens(lv) != vocab) return usage("the GGUF's vocabulary size differs from the model's");

    bool ok = true;
    if (!text.empty()) {
        ids = tinyloop::tokenize(ours, text);
        std::vector<llama_token> theirs(text.size() + 8);
        const int n = llama_tokenize(lv, text.data(), static_cast<int32_t>(text.size()), theirs.data(),
                                     static_cast<int32_t>(theirs.size()), false, false);
        theirs.resize(static_cast<size_t>(std::max(n, 0)));
        const bool same = std::vector<int32_t>(theirs.begin(), theirs.end()) == ids;
        std::printf("tokens: ours %zu, llama.cpp %zu, %s\n", ids.size(), theirs.size(), same ? "identical" : "DIFFERENT");
        ok = ok && same;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(ids.size());
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(ids.size());
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;  // our cache is f32
    cp.flash_attn = false;
    llama_context* ctx = llama_init_from_model(lm, cp);
    if (!ctx) return usage("llama.cpp cannot make a context");
    const std::vector<float> theirs = llama_logits(ctx, ids, vocab);
    if (theirs.empty()) return usage("llama_decode failed");
    const std::vector<float> mine = tinyloop::forward_logits(ours, ids.data(), static_cast<int>(ids.size()), loops);

    double max_diff = 0, max_abs = 0;
    size_t argmax_same = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
        const float* a = mine.data() + p * vocab;
        const float* b = theirs.data() + p * vocab;
        for (int v = 0; v < vocab; ++v) {
            max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[v] - b[v])));
            max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[v])));
        }
        argmax_same += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    }
    const double rel = max_abs > 0 ? max_diff / max_abs : max_diff;
    std::printf("logits: %zu positions x %d, max |ours - llama.cpp| = %.3g (max |logit| %.3g, relative %.3g, "
                "tolerance %.3g), argmax agrees at %zu/%zu\n",
                ids.size(), vocab, max_diff, max_abs, rel, tolerance, argmax_same, ids.size());
    ok = ok && rel <= tolerance && argmax_same == ids.size();
    llama_free(ctx);
    llama_model_free(lm);
    llama_backend_free();
    tinyloop::free_model(ours);
    std::puts(ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_parity: %s\n", e.what());
        return 2;
    }
}
