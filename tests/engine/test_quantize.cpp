// quantize_model_file: q8/q4/q2 files load and their logits stay within a stated error of the
// f32 model's (relative to the largest logit magnitude, per position).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "quant_ref.h"
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
    // bf16 (half of f32's bytes; each weight the nearest bfloat16, relative error <= 2^-9).
    {
        const std::string out = tltest::temp_path("quant_bf16.tinyloop");
        const QuantizeReport rep = quantize_model_file(f32, out, DType::BF16);
        for (const auto& t : rep.tensors) {
            if (t.name.find("norm") != std::string::npos) continue;
            EXPECT_EQ(t.to, DType::BF16);
            EXPECT_EQ(t.bytes_out * 2, t.bytes_in) << t.name;
            EXPECT_GT(t.rel_error, 0.0);
            EXPECT_LT(t.rel_error, 1.0 / 512) << t.name;
        }
        tinyloop::ModelHandle q = tinyloop::load_model_handle(out);
        const double err = logits_rel_error(forward_logits(q.get(), ids.data(), 8, 0), lref, hp.vocab_size);
        EXPECT_LT(err, 0.02);
        RecordProperty("logits_rel_error_bf16", std::to_string(err));
    }
}

// bf16 is an input like any other: a bf16 file (what an imported checkpoint is) quantizes to q8
// and q4 with the errors the f32 original would give, and back to f32 exactly (the widening).
TEST(Quantize, Bf16InputToQ8Q4AndF32) {
    HParams hp = tltest::small_hparams();
    const std::string f32 = tltest::write_random_model("quant_bf_src.tinyloop", hp, 19);
    const std::string bf = tltest::temp_path("quant_bf.tinyloop");
    quantize_model_file(f32, bf, DType::BF16);
    tinyloop::ModelHandle mb = tinyloop::load_model_handle(bf);
    const std::vector<int32_t> ids = {5, 60, 120, 33, 250, 7, 8, 9};
    const auto lbf = forward_logits(mb.get(), ids.data(), 8, 0);
    const std::string back = tltest::temp_path("quant_bf_f32.tinyloop");
    const QuantizeReport rb = quantize_model_file(bf, back, DType::F32);
    for (const auto& t : rb.tensors) {
        EXPECT_EQ(t.rel_error, 0.0) << t.name << ": bf16 -> f32 is exact";
        if (t.name.find("norm") == std::string::npos) {
            EXPECT_EQ(t.from, DType::BF16);
        }
    }
    tinyloop::ModelHandle mf = tinyloop::load_model_handle(back);
    EXPECT_EQ(forward_logits(mf.get(), ids.data(), 8, 0), lbf) << "the f32 copy has the bf16 model's logits bit for bit";
    // q8/q4 from the bf16 file land as close to the f32 model as q8/q4 from the f32 file itself.
    tinyloop::ModelHandle m32 = tinyloop::load_model_handle(f32);
    const auto l32 = forward_logits(m32.get(), ids.data(), 8, 0);
    for (DType dt : {DType::Q8, DType::Q4}) {
        const std::string out = tltest::temp_path(std::string("quant_bf_") + dtype_name(dt) + ".tinyloop");
        const std::string out32 = tltest::temp_path(std::string("quant_f32_") + dtype_name(dt) + ".tinyloop");
        const QuantizeReport rep = quantize_model_file(bf, out, dt, 32);
        quantize_model_file(f32, out32, dt, 32);
        for (const auto& t : rep.tensors) {
            if (t.name.find("norm") == std::string::npos) {
                EXPECT_EQ(t.from, DType::BF16);
                EXPECT_EQ(t.to, dt);
                EXPECT_LT(t.rel_error, tltest::bound_for(dt)) << t.name;
            }
        }
        tinyloop::ModelHandle q = tinyloop::load_model_handle(out), q32 = tinyloop::load_model_handle(out32);
        const double err = logits_rel_error(forward_logits(q.get(), ids.data(), 8, 0), l32, hp.vocab_size);
        const double err32 = logits_rel_error(forward_logits(q32.get(), ids.data(), 8, 0), l32, hp.vocab_size);
        EXPECT_LT(err, 1.25 * err32 + 0.01) << dtype_name(dt) << ": from bf16 " << err << ", from f32 " << err32;
        std::printf("[ info ] %s logits vs the f32 model: from the bf16 file %.4f, from the f32 file %.4f\n",
                    dtype_name(dt), err, err32);
    }
}
