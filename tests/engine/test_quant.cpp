// Asymmetric group quantization (quant.h, FORMAT.md §2): error bounds, the range search never
// worse than plain min/max, degenerate groups, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/quant.h"
#include "quant_ref.h"

using namespace tinyloop;

namespace {

using tltest::bound_for;
using tltest::decode_view;
using tltest::rel_err;

}  // namespace

namespace {

std::vector<float> dequantize(const QuantizedMatrix& q, int rows, int cols, DType t, int gs) {
    kern::WeightView v;
    v.type = t == DType::Q8 ? kern::WType::Q8 : t == DType::Q4 ? kern::WType::Q4 : kern::WType::Q2;
    v.rows = rows;
    v.cols = cols;
    v.group_size = gs;
    v.data = q.codes.data();
    v.scales = q.scales.data();
    v.zeros = q.zeros.data();
    return decode_view(v);
}

// Plain min/max quantization (scale and zero rounded to f16), the baseline the search must beat.
double plain_sq_err(const std::vector<float>& w, int bits, int gs) {
    const int qmax = (1 << bits) - 1;
    double err = 0;
    for (size_t g0 = 0; g0 < w.size(); g0 += static_cast<size_t>(gs)) {
        float mn = w[g0], mx = w[g0];
        for (int i = 1; i < gs; ++i) {
            mn = std::min(mn, w[g0 + i]);
            mx = std::max(mx, w[g0 + i]);
        }
        const float s = kern::f16_to_f32(kern::f32_to_f16((mx - mn) / qmax));
        const float z = kern::f16_to_f32(kern::f32_to_f16(-mn / s));
        for (int i = 0; i < gs; ++i) {
            const float q = std::clamp(std::nearbyint(w[g0 + i] / s + z), 0.0f, float(qmax));
            const double d = double(w[g0 + i]) - s * (q - z);
            err += d * d;
        }
    }
    return err;
}

}  // namespace

TEST(Quantize, ErrorBoundsOnGaussianData) {
    const int rows = 64, cols = 512;
    std::mt19937_64 rng(99);
    std::normal_distribution<float> nd(0.0f, 0.7f);
    std::vector<float> w(static_cast<size_t>(rows) * cols);
    for (float& v : w) v = nd(rng);
    double sq = 0;
    for (float v : w) sq += double(v) * v;
    for (DType t : {DType::Q8, DType::Q4, DType::Q2}) {
        const int bits = t == DType::Q8 ? 8 : t == DType::Q4 ? 4 : 2;
        for (int gs : {32, 64, 128}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " group " + std::to_string(gs));
            const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, t, gs);
            EXPECT_EQ(q.codes.size(), w.size() * bits / 8);
            EXPECT_EQ(q.scales.size(), w.size() / gs);
            EXPECT_EQ(q.zeros.size(), w.size() / gs);
            const std::vector<float> d = dequantize(q, rows, cols, t, gs);
            const double e = rel_err(d, w);
            if (gs == 32) {
                EXPECT_LT(e, bound_for(t));
            }
            EXPECT_LT(e, bound_for(t) * 1.25);
            const double plain = std::sqrt(plain_sq_err(w, bits, gs) / sq);
            EXPECT_LE(e, plain * (1 + 1e-6)) << "search " << e << " vs plain " << plain;
            std::printf("  %s g%-3d rel err %.5f (plain min/max %.5f)\n", dtype_name(t), gs, e,
                        plain);
        }
    }
}

TEST(Quantize, DegenerateGroupsStayFinite) {
    const int cols = 32;
    const std::vector<float> constants = {0.0f, 3.0f, -2.5f, 1e-30f, -1e-7f, 1e5f, 70000.0f};
    for (DType t : {DType::Q8, DType::Q4, DType::Q2}) {
        for (float c : constants) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " constant " + std::to_string(c));
            std::vector<float> w(cols, c);
            const QuantizedMatrix q = quantize_matrix(w.data(), 1, cols, t, 32);
            const std::vector<float> d = dequantize(q, 1, cols, t, 32);
            for (float v : d) {
                ASSERT_TRUE(std::isfinite(v));
                EXPECT_NEAR(v, c, std::abs(c) * 2e-3 + 1e-6);
            }
        }
        // All-positive and all-negative groups with a narrow range.
        std::vector<float> w(64);
        for (size_t i = 0; i < w.size(); ++i)
            w[i] = (i < 32 ? 10.0f : -10.0f) + 0.001f * float(i % 32);
        const std::vector<float> d =
            dequantize(quantize_matrix(w.data(), 1, 64, t, 32), 1, 64, t, 32);
        for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(d[i], w[i], 0.02) << i;
    }
}

TEST(Quantize, RefusesBadArguments) {
    // Each refusal is InvalidArgument and names the field and what is allowed.
    const auto expect_refused = [](const std::vector<float>& w, int cols, DType t, int gs,
                                   const std::vector<std::string>& must_name) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " group " + std::to_string(gs));
        try {
            quantize_matrix(w.data(), 1, cols, t, gs);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            for (const std::string& part : must_name)
                EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
        }
    };
    std::vector<float> w(64, 1.0f);
    expect_refused(w, 64, DType::F32, 32, {"dtype f32", "allowed q8, q4, q2"});
    expect_refused(w, 64, DType::Q4, 48, {"group_size 48", "allowed 32, 64 or 128"});
    expect_refused(w, 64, DType::Q4, 128, {"shape [1, 64]", "multiple of group_size 128"});
    w[3] = std::numeric_limits<float>::quiet_NaN();
    expect_refused(w, 64, DType::Q4, 32, {"row 0, col 3", "not finite"});
    w[3] = 1.0f;
    w[40] = -std::numeric_limits<float>::infinity();
    expect_refused(w, 64, DType::Q8, 32, {"row 0, col 40", "not finite"});
}
