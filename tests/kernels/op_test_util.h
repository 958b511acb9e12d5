// Helpers shared by the op tests (tests/kernels/test_ops.cpp, test_backend_ops.cpp and
// tests/cuda/test_cuda_ops.cpp): the run's random seed, a random generator, random weight
// matrices stored as FORMAT.md §2 says with an independent decoder, and bit comparison.
//
// The seed is random per run and printed on failure; TL_TEST_SEED=<n> replays one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace tinyloop::kern::testing {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline uint64_t test_seed() {
    static const uint64_t seed = []() -> uint64_t {
        if (const char* s = std::getenv("TL_TEST_SEED")) return std::strtoull(s, nullptr, 10);
        return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }();
    return seed;
}

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t salt) : g(test_seed() ^ (salt * 0x9e3779b97f4a7c15ull)) {}
    float normal(float sd = 1.0f) { return std::normal_distribution<float>(0.0f, sd)(g); }
    float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
    int integer(int a, int b) { return std::uniform_int_distribution<int>(a, b)(g); }
    std::vector<float> normals(size_t n, float sd = 1.0f) {
        std::vector<float> v(n);
        for (auto& x : v) x = normal(sd);
        return v;
    }
};

#define TL_SEED_TRACE SCOPED_TRACE("TL_TEST_SEED=" + std::to_string(test_seed()))

// The SIMD levels this CPU supports; the dispatcher's own choice is restored afterwards.
struct Levels {
    std::string saved = simd_level();
    std::vector<std::string> list;
    Levels() {
        for (const char* l : {"scalar", "avx2", "avx512-novnni", "avx512"}) {
            if (force_simd_level(l)) list.emplace_back(l);
        }
        force_simd_level(saved.c_str());
    }
    ~Levels() { force_simd_level(saved.c_str()); }
};

inline const char* type_name(WType t) {
    switch (t) {
        case WType::F32: return "f32";
        case WType::F16: return "f16";
        case WType::Q8: return "q8";
        case WType::Q4: return "q4";
        case WType::Q2: return "q2";
        case WType::BF16: return "bf16";
    }
    return "?";
}

// A random weight matrix stored as FORMAT.md §2 says, plus an independent decoder of it.
struct Weights {
    WType type;
    int rows, cols, gs;
    std::vector<uint8_t> data;
    std::vector<uint16_t> scales, zeros;

    Weights(WType t, int r, int c, int g, Rng& rng) : type(t), rows(r), cols(c), gs(g) {
        const size_t n = static_cast<size_t>(r) * c;
        if (t == WType::F32) {
            data.resize(n * 4);
            for (size_t i = 0; i < n; ++i) {
                const float f = rng.normal(0.1f);
                std::memcpy(&data[i * 4], &f, 4);
            }
            return;
        }
        if (t == WType::F16) {
            data.resize(n * 2);
            for (size_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_f16(rng.normal(0.1f));
                std::memcpy(&data[i * 2], &h, 2);
            }
            return;
        }
        if (t == WType::BF16) {  // the top 16 bits of a random f32 (truncation: any bf16 will do)
            data.resize(n * 2);
            for (size_t i = 0; i < n; ++i) {
                const float f = rng.normal(0.1f);
                uint32_t u;
                std::memcpy(&u, &f, 4);
                const uint16_t h = static_cast<uint16_t>(u >> 16);
                std::memcpy(&data[i * 2], &h, 2);
            }
            return;
        }
        const int bits = wtype_bits(t);
        data.assign(n * bits / 8, 0);
        for (size_t i = 0; i < n; ++i) {
            const uint32_t q = static_cast<uint32_t>(rng.integer(0, (1 << bits) - 1));
            const size_t row = i / c, col = i % c;
            const size_t bit = row * static_cast<size_t>(c) * bits + col * bits;
            data[bit / 8] |= static_cast<uint8_t>(q << (bit % 8));
        }
        const size_t ng = n / g;
        for (size_t i = 0; i < ng; ++i) {
            scales.push_back(f32_to_f16(rng.uniform(0.002f, 0.05f)));
            zeros.push_back(f32_to_f16(rng.uniform(0.0f, static_cast<float>((1 << bits) - 1))));
        }
    }

    WeightView view() const {
        WeightView w;
        w.type = type;
        w.rows = rows;
        w.cols = cols;
        w.group_size = gs;
        w.data = data.data();
        w.scales = scales.empty() ? nullptr : scales.data();
        w.zeros = zeros.empty() ? nullptr : zeros.data();
        return w;
    }

    // Decoded straight from the FORMAT.md description, not through the kernels.
    float at(int r, int c) const {
        const size_t i = static_cast<size_t>(r) * cols + c;
        if (type == WType::F32) {
            float f;
            std::memcpy(&f, &data[i * 4], 4);
            return f;
        }
        if (type == WType::F16) {
            uint16_t h;
            std::memcpy(&h, &data[i * 2], 2);
            return f16_to_f32(h);
        }
        if (type == WType::BF16) {  // FORMAT.md §2: the upper half of a binary32, lower half zero
            uint16_t h;
            std::memcpy(&h, &data[i * 2], 2);
            const uint32_t u = static_cast<uint32_t>(h) << 16;
            float f;
            std::memcpy(&f, &u, 4);
            return f;
        }
        const int bits = wtype_bits(type);
        uint32_t q;
        if (bits == 8) {
            q = data[i];
        } else if (bits == 4) {
            q = (data[i / 2] >> (4 * (i % 2))) & 15u;  // element 2k: bits 0-3, 2k+1: bits 4-7
        } else {
            q = (data[i / 4] >> (2 * (i % 4))) & 3u;  // element 4k+j: bits 2j..2j+1
        }
        const size_t gi = static_cast<size_t>(r) * (cols / gs) + c / gs;
        return f16_to_f32(scales[gi]) * (static_cast<float>(q) - f16_to_f32(zeros[gi]));
    }
};

inline bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace tinyloop::kern::testing
