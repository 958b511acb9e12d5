#include <tinyloop_analysis/timing_stats.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <tinyloop/tinyloop.h>

namespace tinyloop::analysis {

void check_repeats(int repeats, const char* field) {
    if (repeats < kMinRepeats || repeats > kMaxRepeats)
        throw tinyloop::Error(tinyloop::ErrorCode::InvalidArgument,
                              std::string(field) + ": " + std::to_string(repeats) + " is outside [" +
                                  std::to_string(kMinRepeats) + ", " + std::to_string(kMaxRepeats) +
                                  "] (a median needs at least three repeats)");
}

Timing summarize(std::vector<double> samples) {
    Timing t;
    t.samples = samples;
    if (samples.empty()) return t;
    std::sort(samples.begin(), samples.end());
    const size_t n = samples.size();
    t.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    t.min = samples.front();
    t.max = samples.back();
    return t;
}

Rate rate_per_second(const Timing& ms, double count) {
    auto per_s = [count](double t) { return t > 0 ? count * 1000.0 / t : 0.0; };
    return {per_s(ms.median), per_s(ms.max), per_s(ms.min)};
}

bool faster_beyond_noise(const Timing& a, const Timing& b) {
    const size_t enough = static_cast<size_t>(kMinRepeats);
    return a.samples.size() >= enough && b.samples.size() >= enough && a.max < b.min;
}

bool too_close_to_rank(const Timing& a, const Timing& b) {
    return !faster_beyond_noise(a, b) && !faster_beyond_noise(b, a);
}

Speedup speedup_over(const Timing& baseline, const Timing& candidate) {
    Speedup s;
    if (baseline.empty() || candidate.empty() || candidate.median <= 0 || candidate.min <= 0) return s;
    s.median = baseline.median / candidate.median;
    s.min = baseline.min / candidate.max;
    s.max = baseline.max / candidate.min;
    s.beyond_noise = faster_beyond_noise(candidate, baseline);
    return s;
}

bool Ranking::fully_ranked() const {
    for (size_t i = 0; i + 1 < distinct_from_next.size(); ++i)
        if (!distinct_from_next[i]) return false;
    return true;
}

Ranking rank_fastest_first(const std::vector<Timing>& timings) {
    Ranking r;
    r.order.resize(timings.size());
    std::iota(r.order.begin(), r.order.end(), 0);
    std::stable_sort(r.order.begin(), r.order.end(), [&](int a, int b) {
        const Timing& ta = timings[static_cast<size_t>(a)];
        const Timing& tb = timings[static_cast<size_t>(b)];
        if (ta.empty() != tb.empty()) return tb.empty();
        return ta.median < tb.median;
    });
    r.distinct_from_next.assign(timings.size(), false);
    for (size_t i = 0; i + 1 < r.order.size(); ++i)
        r.distinct_from_next[i] = faster_beyond_noise(timings[static_cast<size_t>(r.order[i])],
                                                      timings[static_cast<size_t>(r.order[i + 1])]);
    return r;
}

std::string compare_sentence(const std::string& a_label, const Timing& a, const std::string& b_label,
                             const Timing& b, const std::string& unit) {
    char ranges[160];
    std::snprintf(ranges, sizeof ranges, "%zu repeats: %.3g..%.3g %s against %.3g..%.3g %s", a.samples.size(), a.min,
                  a.max, unit.c_str(), b.min, b.max, unit.c_str());
    if (faster_beyond_noise(a, b)) return a_label + " is faster than " + b_label + " beyond the noise (" + ranges + ")";
    if (faster_beyond_noise(b, a)) return b_label + " is faster than " + a_label + " beyond the noise (" + ranges + ")";
    return a_label + " and " + b_label + " are too close to rank: their ranges overlap (" + ranges + ")";
}

nlohmann::json timing_to_json(const Timing& t) {
    return {{"median", t.median}, {"min", t.min}, {"max", t.max}, {"samples", t.samples}};
}

}  // namespace tinyloop::analysis
