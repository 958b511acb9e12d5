#include <tinyloop_analysis/quant_across_depth.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include "tinyloop/mode_rules.h"

namespace tinyloop::analysis {

namespace {

[[noreturn]] void bad(const std::string& m) { throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument, m); }

void softmax(const float* z, int n, std::vector<double>& p) {
    p.resize(static_cast<size_t>(n));
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(z[i]));
    double s = 0;
    for (int i = 0; i < n; ++i) s += p[static_cast<size_t>(i)] = std::exp(static_cast<double>(z[i]) - mx);
    for (double& x : p) x /= s;
}

int32_t argmax(const float* z, int n) { return static_cast<int32_t>(std::max_element(z, z + n) - z); }

template <class T>
double mean_row(const std::vector<T>& v, size_t off, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += static_cast<double>(v[off + static_cast<size_t>(i)]);
    return n > 0 ? s / n : 0.0;
}

template <class T>
std::vector<T> slice(const std::vector<T>& v, size_t off, int n) {
    return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(off), v.begin() + static_cast<std::ptrdiff_t>(off + n));
}

}  // namespace

double QuantData::mean_kl(int depth) const { return mean_row(kl, at(depth, 0), n); }
double QuantData::mean_max_abs_diff(int depth) const { return mean_row(max_abs_diff, at(depth, 0), n); }
double QuantData::mean_p_final_a(int depth) const { return mean_row(p_final_a, at(depth, 0), n); }
double QuantData::mean_p_final_b(int depth) const { return mean_row(p_final_b, at(depth, 0), n); }
double QuantData::top1_agreement(int depth) const {
    int same = 0;
    for (int p = 0; p < n; ++p) same += top1_a[at(depth, p)] == top1_b[at(depth, p)];
    return n > 0 ? static_cast<double>(same) / n : 0.0;
}

double kl_logits(const float* za, const float* zb, int vocab) {
    std::vector<double> p, q;
    softmax(za, vocab, p);
    softmax(zb, vocab, q);
    double kl = 0;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
    return kl;
}

void check_same_model(const tinyloop::Model* a, const tinyloop::Model* b) {
    const tinyloop::HParams& ha = tinyloop::model_hparams(a);
    const tinyloop::HParams& hb = tinyloop::model_hparams(b);
    auto same = [](const char* field, int x, int y) {
        if (x != y)
            bad(std::string("second model: ") + field + " is " + std::to_string(y) + ", the first model's is " +
                std::to_string(x) + " (open another file of the same model)");
    };
    same("vocab_size", ha.vocab_size, hb.vocab_size);
    same("d_model", ha.d_model, hb.d_model);
    same("n_pre_blocks", ha.n_pre_blocks, hb.n_pre_blocks);
    same("n_loop_layers", ha.n_loop_layers, hb.n_loop_layers);
    same("max_loops", ha.max_loops, hb.max_loops);
    const tinyloop::ModelInfo ia = tinyloop::model_info(a), ib = tinyloop::model_info(b);
    if (ia.tokenizer.merges != ib.tokenizer.merges) bad("second model: tokenizer merges differ from the first model's");
    if (ia.tokenizer.special_tokens != ib.tokenizer.special_tokens)
        bad("second model: special tokens differ from the first model's");
}

QuantData compare_quantized(tinyloop::Model* a, tinyloop::Model* b, const std::vector<int32_t>& tokens, int loops) {
    check_same_model(a, b);
    const tinyloop::HParams& hp = tinyloop::model_hparams(a);
    const int L = tinyloop::resolve_loops(hp, loops);
    if (L < 1 || L > hp.max_loops)
        bad("loops: " + std::to_string(L) + " is outside [1, " + std::to_string(hp.max_loops) + "]");
    const int n = static_cast<int>(tokens.size());
    if (n < 1) bad("tokens: needs at least one token");
    const int V = hp.vocab_size;
    const std::vector<float> za = tinyloop::forward_lens_logits(a, tokens.data(), n, L);
    const std::vector<float> zb = tinyloop::forward_lens_logits(b, tokens.data(), n, L);
    QuantData q;
    q.name_a = tinyloop::model_info(a).path;
    q.name_b = tinyloop::model_info(b).path;
    q.tokens = tokens;
    for (int32_t t : tokens) q.pieces.push_back(tinyloop::detokenize_text(a, &t, 1));
    q.n = n;
    q.loops = L;
    const size_t cells = static_cast<size_t>(L) * n;
    q.p_final_a.resize(cells);
    q.p_final_b.resize(cells);
    q.top1_a.resize(cells);
    q.top1_b.resize(cells);
    q.kl.resize(cells);
    q.max_abs_diff.resize(cells);
    auto row = [&](const std::vector<float>& z, int depth, int pos) {
        return z.data() + (static_cast<size_t>(depth - 1) * n + static_cast<size_t>(pos)) * V;
    };
    std::vector<double> pa, pb;
    for (int p = 0; p < n; ++p) {
        const int32_t fa = argmax(row(za, L, p), V);
        const int32_t fb = argmax(row(zb, L, p), V);
        for (int l = 1; l <= L; ++l) {
            const float* ra = row(za, l, p);
            const float* rb = row(zb, l, p);
            softmax(ra, V, pa);
            softmax(rb, V, pb);
            const size_t c = q.at(l, p);
            q.p_final_a[c] = static_cast<float>(pa[static_cast<size_t>(fa)]);
            q.p_final_b[c] = static_cast<float>(pb[static_cast<size_t>(fb)]);
            q.top1_a[c] = argmax(ra, V);
            q.top1_b[c] = argmax(rb, V);
            q.kl[c] = static_cast<float>(kl_logits(ra, rb, V));
            float mx = 0;
            for (int i = 0; i < V; ++i) mx = std::max(mx, std::fabs(ra[i] - rb[i]));
            q.max_abs_diff[c] = mx;
        }
    }
    return q;
}

nlohmann::json quant_json(const QuantData& q) {
    nlohmann::json j;
    j["view"] = "quantization across depth";
    j["model_a"] = q.name_a;
    j["model_b"] = q.name_b;
    j["tokens"] = q.tokens;
    j["pieces"] = q.pieces;
    j["loops"] = q.loops;
    nlohmann::json depths = nlohmann::json::array();
    for (int l = 1; l <= q.loops; ++l) {
        const size_t off = q.at(l, 0);
        depths.push_back({{"depth", l},
                          {"mean_kl", q.mean_kl(l)},
                          {"mean_max_abs_logit_diff", q.mean_max_abs_diff(l)},
                          {"mean_p_final_a", q.mean_p_final_a(l)},
                          {"mean_p_final_b", q.mean_p_final_b(l)},
                          {"top1_agreement", q.top1_agreement(l)},
                          {"kl", slice(q.kl, off, q.n)},
                          {"max_abs_logit_diff", slice(q.max_abs_diff, off, q.n)},
                          {"p_final_a", slice(q.p_final_a, off, q.n)},
                          {"p_final_b", slice(q.p_final_b, off, q.n)},
                          {"top1_a", slice(q.top1_a, off, q.n)},
                          {"top1_b", slice(q.top1_b, off, q.n)}});
    }
    j["depths"] = depths;
    return j;
}

}  // namespace tinyloop::analysis
