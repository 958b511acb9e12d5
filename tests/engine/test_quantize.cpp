// quantize_model_file: q8/q4/q2 files load and their logits stay within a stated error of the
// f32 model's (relative to the largest logit magnitude, per position).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"

using namespace tinyloop;

namespace {

double logits_rel_error(const std::vector<float>& a, const std::vector<float>& ref, int V) {
    double worst = 0;
    for (size_t r = 0; r < ref.size() / V; ++r) {
        double num = 0, den = 0;
        for (int j = 0; j < V; ++j) {
            const double e = a[r * V + j] - ref[r * V + j];
            num += e * e;
            den += static_cast<double>(ref[r * V + j]) * ref[r * V + j];
        }
        worst = std::max(worst, std::sqrt(num / den));
    }
    return worst;
}

}  // namespace

TEST(Quantize, RoundTripLoadsAndStaysClose) {
    HParams hp = tltest::small_hparams();
    const std::string f32 = tltest::write_random_model("quant_src.tinyloop", hp, 17);
    tinyloop::ModelHandle ref = tinyloop::load_model_handle(f32);
    const std::vector<int32_t> ids = {5, 60, 120, 33, 250, 7, 8, 9};
    const auto lref = forward_logits(ref.get(), ids.data(), 8, 0);
    // Stated bounds (relative L2 error of each position's logits).
    struct Case { DType dt; int group; double bound; };
    double prev_err = 0;
    for (Case c : {Case{DType::F16, 32, 0.005}, Case{DType::Q8, 32, 0.06}, Case{DType::Q4, 32, 0.6}, Case{DType::Q2, 32, 2.0}}) {
        const std::string out = tltest::temp_path(std::string("quant_") + dtype_name(c.dt) + std::to_string(c.group) + ".tinyloop");
        QuantizeReport rep = quantize_model_file(f32, out, c.dt, c.group);
        ASSERT_FALSE(rep.tensors.empty());
        EXPECT_LT(rep.file_bytes_out, rep.file_bytes_in);
        double worst_tensor = 0;
        for (const auto& t : rep.tensors) {
            if (t.name.find("norm") != std::string::npos) {
                EXPECT_EQ(t.to, DType::F32);
                EXPECT_EQ(t.rel_error, 0.0);
            } else {
                EXPECT_EQ(t.to, c.dt);
                EXPECT_GT(t.rel_error, 0.0);
            }
            worst_tensor = std::max(worst_tensor, t.rel_error);
        }
        tinyloop::ModelHandle q = tinyloop::load_model_handle(out);
        const auto lq = forward_logits(q.get(), ids.data(), 8, 0);
        const double err = logits_rel_error(lq, lref, hp.vocab_size);
        EXPECT_LT(err, c.bound) << dtype_name(c.dt) << " group " << c.group;
        RecordProperty(std::string("logits_rel_error_") + dtype_name(c.dt) + std::to_string(c.group), std::to_string(err));
        if (c.group == 32) {
            EXPECT_GT(err, prev_err);  // fewer bits, larger error
            prev_err = err;
        }
        // The metadata records the quantization.
        EXPECT_NE(model_info(q.get()).metadata_json.find("quantization"), std::string::npos);
    }
    EXPECT_THROW(quantize_model_file(f32, tltest::temp_path("bad.tinyloop"), DType::Q4, 48), Error);
    // d_ff 96 is not a multiple of 64: refused, naming the tensor.
    try {
        quantize_model_file(f32, tltest::temp_path("bad64.tinyloop"), DType::Q4, 64);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("w_down"), std::string::npos) << e.what();
    }
}
