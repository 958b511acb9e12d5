// Asymmetric group quantization with a small range search (quant.h, FORMAT.md §2).
//
// For a group x[0..g) and b bits (qmax = 2^b - 1) a candidate range [lo, hi] gives
//   scale = f16((hi - lo) / qmax),  zero = f16(-lo / scale),
//   q_i = clamp(round(x_i / scale + zero), 0, qmax),  w_i = scale * (q_i - zero).
// Codes are always computed against the f16-rounded scale and zero, so the error measured
// here is exactly the error the runtime sees. Candidates: the plain min/max range, that range
// shrunk about its centre by a few factors (clipping outliers buys resolution for the bulk),
// the range stretched to include 0, then a least-squares refit of scale and zero for the best
// codes. The lowest squared error wins, so the result is never worse than plain min/max.
#include "model/quant.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kernels.h"

namespace tinyloop {

namespace {

constexpr uint16_t kF16Max = 0x7bff;  // 65504

// f16 of a finite value, saturating instead of overflowing to infinity.
uint16_t to_f16_sat(float v) {
    uint16_t h = kern::f32_to_f16(v);
    if ((h & 0x7c00u) == 0x7c00u) h = static_cast<uint16_t>((h & 0x8000u) | kF16Max);
    return h;
}

struct Fit {
    uint16_t scale = 0, zero = 0;
    double err = 0;
};

// Squared error of (scale, zero) on the group; writes codes when q is not null.
double evaluate(const float* x, int g, uint16_t s16, uint16_t z16, int qmax, uint8_t* q) {
    const float s = kern::f16_to_f32(s16), z = kern::f16_to_f32(z16);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    double err = 0;
    for (int i = 0; i < g; ++i) {
        float code = 0;
        if (s > 0) {
            code = std::nearbyint(x[i] * inv + z);
            code = std::min(std::max(code, 0.0f), static_cast<float>(qmax));
        }
        const float w = s * (code - z);
        const double d = static_cast<double>(x[i]) - w;
        err += d * d;
        if (q) q[i] = static_cast<uint8_t>(code);
    }
    return err;
}

Fit fit_range(const float* x, int g, float lo, float hi, int qmax) {
    Fit f;
    if (!(hi > lo)) {  // empty range: only exact when every value is 0
        f.err = evaluate(x, g, 0, 0, qmax, nullptr);
        return f;
    }
    f.scale = to_f16_sat((hi - lo) / static_cast<float>(qmax));
    const float s = kern::f16_to_f32(f.scale);
    f.zero = s > 0 ? to_f16_sat(-lo / s) : 0;
    f.err = evaluate(x, g, f.scale, f.zero, qmax, nullptr);
    return f;
}

// Least-squares x ≈ s*q + c over the codes of `f`, rounded to f16 like any candidate.
Fit refit(const float* x, int g, const Fit& f, int qmax, uint8_t* scratch) {
    evaluate(x, g, f.scale, f.zero, qmax, scratch);
    double sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < g; ++i) {
        const double q = scratch[i];
        sq += q;
        sqq += q * q;
        sx += x[i];
        sxq += x[i] * q;
    }
    const double den = g * sqq - sq * sq;
    if (!(den > 0)) return f;
    const double s = (g * sxq - sx * sq) / den;
    const double c = (sx - s * sq) / g;
    if (!(s > 0) || !std::isfinite(s) || !std::isfinite(c)) return f;
    Fit r;
    r.scale = to_f16_sat(static_cast<float>(s));
    const float sf = kern::f16_to_f32(r.scale);
    if (!(sf > 0)) return f;
    r.zero = to_f16_sat(static_cast<float>(-c / sf));
    r.err = evaluate(x, g, r.scale, r.zero, qmax, nullptr);
    return r.err < f.err ? r : f;
}

void quantize_group(const float* x, int g, int bits, uint16_t* scale, uint16_t* zero,
                    uint8_t* codes, uint8_t* scratch) {
    const int qmax = (1 << bits) - 1;
    float mn = x[0], mx = x[0];
    for (int i = 1; i < g; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
    }
    Fit best = fit_range(x, g, mn, mx, qmax);
    if (best.err > 0) {
        static constexpr float kShrink8[] = {0.99f, 0.98f, 0.96f, 0.94f};
        static constexpr float kShrink4[] = {0.96f, 0.92f, 0.88f, 0.84f, 0.8f, 0.76f, 0.72f};
        static constexpr float kShrink2[] = {0.92f, 0.85f, 0.78f, 0.72f, 0.66f,
                                             0.6f,  0.55f, 0.5f,  0.45f, 0.4f};
        const float* shrink = bits == 8 ? kShrink8 : bits == 4 ? kShrink4 : kShrink2;
        const int n_shrink = bits == 8 ? 4 : bits == 4 ? 7 : 10;
        const float mid = 0.5f * mn + 0.5f * mx, half = 0.5f * mx - 0.5f * mn;
        for (int k = 0; k < n_shrink; ++k) {
            const Fit f = fit_range(x, g, mid - half * shrink[k], mid + half * shrink[k], qmax);
            if (f.err < best.err) best = f;
        }
        // A zero-spanning range makes the zero point exact, which matters when every value of
        // the group has the same sign (a large fractional zero would lose precision in f16).
        const Fit z = fit_range(x, g, std::min(mn, 0.0f), std::max(mx, 0.0f), qmax);
        if (z.err < best.err) best = z;
        for (int it = 0; it < 2 && best.err > 0; ++it) best = refit(x, g, best, qmax, scratch);
    }
    *scale = best.scale;
    *zero = best.zero;
    evaluate(x, g, best.scale, best.zero, qmax, codes);
}

}  // namespace

QuantizedMatrix quantize_matrix(const float* w, int rows, int cols, DType dtype, int group_size,
                                kern::ThreadPool* pool) {
    if (!dtype_is_quantized(dtype))
        throw Error(ErrorCode::InvalidArgument,
                    std::string("quantize: dtype ") + dtype_name(dtype) + ", allowed q8, q4, q2");
    const int bits = dtype_bits(dtype);
    if (group_size != 32 && group_size != 64 && group_size != 128)
        throw Error(
            ErrorCode::InvalidArgument,
            "quantize: group_size " + std::to_string(group_size) + ", allowed 32, 64 or 128");
    if (rows <= 0 || cols <= 0 || cols % group_size != 0)
        throw Error(ErrorCode::InvalidArgument,
                    "quantize: shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                        "], allowed positive sizes with cols a multiple of group_size " +
                        std::to_string(group_size));
    const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(w[i]))
            throw Error(ErrorCode::InvalidArgument,
                        "quantize: value at row " + std::to_string(i / cols) + ", col " +
                            std::to_string(i % cols) + " is not finite, allowed finite values");

    const int groups_per_row = cols / group_size;
    QuantizedMatrix out;
    out.codes.assign(n * static_cast<size_t>(bits) / 8, 0);
    out.scales.resize(static_cast<size_t>(rows) * groups_per_row);
    out.zeros.resize(out.scales.size());
    const size_t row_bytes = static_cast<size_t>(cols) * bits / 8;
    const int per_byte = 8 / bits;
    // A row's codes are whole bytes (cols is a multiple of group_size >= 32), so blocks of rows
    // write disjoint bytes.
    auto quantize_rows = [&](int r0, int r1) {
        std::vector<uint8_t> q(static_cast<size_t>(group_size)), scratch(q.size());
        for (int r = r0; r < r1; ++r) {
            uint8_t* row_codes = out.codes.data() + static_cast<size_t>(r) * row_bytes;
            for (int gi = 0; gi < groups_per_row; ++gi) {
                const size_t gidx = static_cast<size_t>(r) * groups_per_row + gi;
                const float* x = w + static_cast<size_t>(r) * cols + static_cast<size_t>(gi) * group_size;
                quantize_group(x, group_size, bits, &out.scales[gidx], &out.zeros[gidx], q.data(), scratch.data());
                // Lower element index in the lower bits of a byte.
                for (int i = 0; i < group_size; ++i) {
                    const int c = gi * group_size + i;
                    row_codes[c / per_byte] |= static_cast<uint8_t>(q[static_cast<size_t>(i)] << ((c % per_byte) * bits));
                }
            }
        }
    };
    if (!pool || pool->size() <= 1 || rows < 2) {
        quantize_rows(0, rows);
        return out;
    }
    // A few blocks per thread balance rows of unequal cost (the range search stops early on some).
    const int blocks = std::min(rows, pool->size() * 8);
    pool->parallel_for(blocks, [&](int b) {
        quantize_rows(static_cast<int>(static_cast<int64_t>(rows) * b / blocks),
                      static_cast<int>(static_cast<int64_t>(rows) * (b + 1) / blocks));
    });
    return out;
}

}  // namespace tinyloop
