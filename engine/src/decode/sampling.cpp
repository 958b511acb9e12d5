#include "decode/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace tinyloop {

void apply_repetition_penalty(float* logits, int vocab, const std::vector<int32_t>& context, float penalty) {
    if (penalty == 1.0f || context.empty()) return;
    std::vector<char> seen(static_cast<size_t>(vocab), 0);
    for (int32_t id : context) {
        if (id < 0 || id >= vocab || seen[id]) continue;
        seen[id] = 1;
        float& l = logits[id];
        l = l < 0 ? l * penalty : l / penalty;  // HF: each seen token once, whatever its count
    }
}

void apply_frequency_presence(float* logits, int vocab, const std::vector<int32_t>& emitted,
                              float frequency, float presence) {
    if ((frequency == 0.0f && presence == 0.0f) || emitted.empty()) return;
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : emitted)
        if (id >= 0 && id < vocab) ++counts[id];
    for (const auto& [id, c] : counts) logits[id] -= frequency * static_cast<float>(c);
    if (presence != 0.0f)
        for (const auto& kv : counts) logits[kv.first] -= presence;
}

void apply_logit_bias(float* logits, int vocab, const std::vector<std::pair<int32_t, float>>& bias) {
    for (const auto& [id, b] : bias)
        if (id >= 0 && id < vocab) logits[id] += b;
}

void ban_repeated_ngrams(float* logits, int vocab, const std::vector<int32_t>& context, int n) {
    const int len = static_cast<int>(context.size());
    if (n <= 0 || len + 1 < n) return;
    // The last n-1 tokens; every earlier occurrence of them bans the token that followed.
    const int32_t* tail = context.data() + (len - (n - 1));
    for (int s = 0; s + n <= len; ++s)
        if (std::equal(tail, tail + (n - 1), context.data() + s)) {
            const int32_t banned = context[static_cast<size_t>(s + n - 1)];
            if (banned >= 0 && banned < vocab) logits[banned] = -std::numeric_limits<float>::infinity();
        }
}

void ban_bad_words(float* logits, int vocab, const std::vector<int32_t>& context,
                   const std::vector<std::vector<int32_t>>& bad_words) {
    for (const auto& w : bad_words) {
        if (w.empty()) continue;
        const size_t k = w.size() - 1;
        if (k > context.size()) continue;
        if (std::equal(w.begin(), w.end() - 1, context.end() - static_cast<std::ptrdiff_t>(k)) && w.back() >= 0 &&
            w.back() < vocab)
            logits[w.back()] = -std::numeric_limits<float>::infinity();
    }
}

void suppress_ids(float* logits, int vocab, const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
        if (id >= 0 && id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
}

void force_token(float* logits, int vocab, int32_t forced) {
    if (forced < 0 || forced >= vocab) return;
    std::fill(logits, logits + vocab, -std::numeric_limits<float>::infinity());
    logits[forced] = 0.0f;
}

void apply_length_decay(float* logits, int vocab, int32_t eos, int emitted, int start_index, float factor) {
    if (emitted <= start_index || eos < 0 || eos >= vocab || !std::isfinite(logits[eos])) return;
    const double s = logits[eos];
    const double raised = s + std::fabs(s) * (std::pow(static_cast<double>(factor), emitted - start_index) - 1.0);
    const double cap = std::numeric_limits<float>::max();
    logits[eos] = static_cast<float>(std::clamp(raised, -cap, cap));
}

bool is_greedy(float temperature) { return temperature <= 0.01f; }

std::vector<float> sampling_probs(const float* logits, int vocab, float temperature, int top_k,
                                  float top_p, float min_p, const SamplingCutoffs& cutoffs) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> z(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) z[i] = std::isnan(logits[i]) ? -inf : logits[i] / temperature;

    // Sorted order (descending logit, ascending id on ties) drives top-k and top-p.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const int k = std::clamp(top_k, 1, vocab);
    auto cmp = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
    order.resize(static_cast<size_t>(k));
    // Drop -inf survivors (masked ids) but keep at least the best one.
    while (order.size() > 1 && z[order.back()] == -inf) order.pop_back();

    const float zmax = z[order[0]];
    std::vector<double> p(order.size());
    double sum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        p[i] = z[order[i]] == -inf ? 0.0 : std::exp(static_cast<double>(z[order[i]]) - zmax);
        sum += p[i];
    }
    for (double& x : p) x /= sum;

    size_t keep = order.size();
    if (top_p < 1.0f) {
        double cum = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            cum += p[i];
            if (cum >= top_p) {  // keep the token that crosses the threshold
                keep = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        const double floor = static_cast<double>(min_p) * p[0];
        size_t j = 0;
        while (j < keep && p[j] >= floor) ++j;
        keep = std::max<size_t>(1, j);
    }
    std::vector<double> w(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep));
    if (cutoffs.typical_p < 1.0f) keep_typical(w, cutoffs.typical_p);
    if (cutoffs.epsilon_cutoff > 0.0f) keep_above_epsilon(w, cutoffs.epsilon_cutoff);
    if (cutoffs.eta_cutoff > 0.0f) keep_above_eta(w, cutoffs.eta_cutoff);
    double kept = 0;
    for (double x : w) kept += x;
    std::vector<float> out(static_cast<size_t>(vocab), 0.0f);
    for (size_t i = 0; i < keep; ++i) out[order[i]] = static_cast<float>(w[i] / kept);
    return out;
}

namespace {

// The weights as probabilities (0 stays 0) and their entropy in nats.
double normalized_entropy(const std::vector<double>& w, std::vector<double>& q) {
    double sum = 0;
    for (double x : w) sum += x;
    q.assign(w.size(), 0.0);
    double h = 0;
    for (size_t i = 0; i < w.size(); ++i)
        if (w[i] > 0) {
            q[i] = w[i] / sum;
            h -= q[i] * std::log(q[i]);
        }
    return h;
}

// Removes every token whose probability q is below `cut`, except the most probable one (HF's
// `probabilities < cut` and `scores < topk(scores, 1)`).
void keep_at_least(std::vector<double>& w, const std::vector<double>& q, double cut) {
    const double top = *std::max_element(w.begin(), w.end());
    for (size_t i = 0; i < w.size(); ++i)
        if (q[i] < cut && w[i] < top) w[i] = 0.0;
}

}  // namespace

void keep_typical(std::vector<double>& w, double mass) {
    std::vector<double> q;
    const double h = normalized_entropy(w, q);
    // HF: sort by |-log q - H| (most typical first), keep up to and including the token whose
    // cumulative mass first reaches `mass`, plus every token exactly as typical as it.
    std::vector<size_t> live;
    std::vector<double> shift(w.size(), std::numeric_limits<double>::infinity());
    for (size_t i = 0; i < w.size(); ++i)
        if (q[i] > 0) {
            live.push_back(i);
            shift[i] = std::fabs(-std::log(q[i]) - h);
        }
    std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) { return shift[a] < shift[b]; });
    double cum = 0;
    size_t last = 0;
    while (last < live.size() && (cum += q[live[last]]) < mass) ++last;
    if (last >= live.size()) return;  // the whole mass lies below `mass` (rounding): keep all
    const double bound = shift[live[last]];
    for (size_t i : live)
        if (shift[i] > bound) w[i] = 0.0;
}

void keep_above_epsilon(std::vector<double>& w, double epsilon) {
    std::vector<double> q;
    normalized_entropy(w, q);
    keep_at_least(w, q, epsilon);
}

void keep_above_eta(std::vector<double>& w, double eta) {
    std::vector<double> q;
    const double h = normalized_entropy(w, q);
    keep_at_least(w, q, std::min(eta, std::sqrt(eta) * std::exp(-h)));
}

int32_t draw(const std::vector<float>& probs, Rng& rng) {
    double total = 0;
    for (float x : probs) total += x;
    const double u = rng.uniform() * total;
    double cum = 0;
    int32_t last = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = static_cast<int32_t>(i);
        if (u < cum) return last;
    }
    return last;
}

float softmax_prob(const float* logits, int vocab, int32_t id) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < vocab; ++i)
        if (logits[i] > mx) mx = logits[i];
    double s = 0;
    for (int i = 0; i < vocab; ++i)
        if (logits[i] > -std::numeric_limits<float>::infinity()) s += std::exp(static_cast<double>(logits[i]) - mx);
    return static_cast<float>(std::exp(static_cast<double>(logits[id]) - mx) / s);
}

}  // namespace tinyloop
