// Honest timings (tinyloop_analysis/timing_stats.h): the median and spread of repeats, and the one
// "faster beyond the noise" rule that decides whether a view may rank or call a setting best.
#include <tinyloop_analysis/timing_stats.h>
#include <gtest/gtest.h>

#include "analysis_test_util.h"

using namespace tinyloop::analysis;
using namespace analysis_test;

TEST(TimingStats, MedianAndSpreadOfRepeats) {
    const Timing odd = summarize({5.0, 1.0, 3.0});
    EXPECT_DOUBLE_EQ(odd.median, 3.0);
    EXPECT_DOUBLE_EQ(odd.min, 1.0);
    EXPECT_DOUBLE_EQ(odd.max, 5.0);
    EXPECT_DOUBLE_EQ(odd.spread(), 4.0);
    EXPECT_DOUBLE_EQ(odd.relative_spread(), 4.0 / 3.0);
    EXPECT_EQ(odd.samples, (std::vector<double>{5.0, 1.0, 3.0}));  // measured order kept
    const Timing even = summarize({4.0, 1.0, 2.0, 10.0});
    EXPECT_DOUBLE_EQ(even.median, 3.0);
    // one wild repeat moves the median no more than a quiet one
    EXPECT_DOUBLE_EQ(summarize({2.0, 2.1, 90.0}).median, 2.1);
    EXPECT_TRUE(summarize({}).empty());
    EXPECT_DOUBLE_EQ(summarize({}).median, 0.0);
}

TEST(TimingStats, FasterOnlyWhenTheRangesDoNotOverlap) {
    const Timing fast = summarize({1.0, 1.1, 1.2});
    const Timing slow = summarize({1.3, 1.5, 1.4});
    const Timing noisy = summarize({0.8, 1.25, 2.0});  // a faster median, but it overlaps both
    EXPECT_TRUE(faster_beyond_noise(fast, slow));
    EXPECT_FALSE(faster_beyond_noise(slow, fast));
    EXPECT_FALSE(too_close_to_rank(fast, slow));
    EXPECT_FALSE(faster_beyond_noise(noisy, slow));
    EXPECT_TRUE(too_close_to_rank(noisy, slow));
    EXPECT_TRUE(too_close_to_rank(fast, fast));            // a tie is never a ranking
    EXPECT_FALSE(faster_beyond_noise(fast, Timing{}));      // nothing measured: nothing to beat
    EXPECT_FALSE(faster_beyond_noise(summarize({1.0, 1.0}), slow));  // two repeats are not enough
    EXPECT_TRUE(contains(compare_sentence("A", fast, "B", slow), "A is faster than B beyond the noise"));
    EXPECT_TRUE(contains(compare_sentence("A", slow, "B", fast), "B is faster than A beyond the noise"));
    EXPECT_TRUE(contains(compare_sentence("A", noisy, "B", slow), "too close to rank"));
}

TEST(TimingStats, SpeedupCarriesTheRangeAndTheVerdict) {
    const Timing greedy = summarize({10.0, 11.0, 12.0});
    const Speedup clear = speedup_over(greedy, summarize({5.0, 5.5, 6.0}));
    EXPECT_DOUBLE_EQ(clear.median, 2.0);
    EXPECT_DOUBLE_EQ(clear.min, 10.0 / 6.0);
    EXPECT_DOUBLE_EQ(clear.max, 12.0 / 5.0);
    EXPECT_TRUE(clear.beyond_noise);
    // the case: one run read 1.48x, the next 0.77x -- a median above 1 is not enough
    const Speedup lucky = speedup_over(greedy, summarize({7.4, 9.0, 14.3}));
    EXPECT_GT(lucky.median, 1.0);
    EXPECT_FALSE(lucky.beyond_noise);
    EXPECT_FALSE(speedup_over(greedy, Timing{}).beyond_noise);
}

TEST(TimingStats, RankingSaysWhereNeighboursAreTooClose) {
    const std::vector<Timing> t = {summarize({3.0, 3.1, 3.2}), summarize({1.0, 1.1, 1.2}), Timing{},
                                   summarize({3.15, 3.3, 3.4})};
    const Ranking r = rank_fastest_first(t);
    EXPECT_EQ(r.order, (std::vector<int>{1, 0, 3, 2}));
    EXPECT_EQ(r.distinct_from_next, (std::vector<bool>{true, false, false, false}));
    EXPECT_FALSE(r.fully_ranked());
    EXPECT_TRUE(rank_fastest_first({summarize({1, 1, 1}), summarize({2, 2, 2})}).fully_ranked());
}

TEST(TimingStats, RatesAndRepeatRange) {
    const Rate r = rate_per_second(summarize({100.0, 200.0, 400.0}), 20);
    EXPECT_DOUBLE_EQ(r.median, 100.0);
    EXPECT_DOUBLE_EQ(r.max, 200.0);  // fastest run, highest rate
    EXPECT_DOUBLE_EQ(r.min, 50.0);
    EXPECT_NO_THROW(check_repeats(kDefaultRepeats));
    try {
        check_repeats(2, "repeats");
        FAIL() << "two repeats accepted";
    } catch (const tinyloop::Error& e) {
        EXPECT_TRUE(contains(e.what(), "repeats: 2 is outside [3, 20]")) << e.what();
    }
    EXPECT_THROW(check_repeats(21), tinyloop::Error);
}
