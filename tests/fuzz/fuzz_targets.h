// The body of every fuzz target, shared by the libFuzzer entry points (tests/fuzz/fuzz_*.cpp)
// and the regression replay test (tests/hardening/test_fuzz_regressions.cpp), so a crashing
// input kept in tests/fuzz/regressions/<target>/ is replayed by exactly the code that found it.
//
// Contract of each target: any input may be refused with tinyloop::Error; anything else (a
// crash, a sanitizer report, another exception type, a broken invariant) is a finding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "tinyloop/tinyloop.h"

namespace tlfuzz {

// A broken invariant: print and abort, so libFuzzer (and the replay test, through a death
// check) sees it.
// Bytes as a C string literal, for failure messages.
inline std::string escaped(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        char buf[8];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') out += static_cast<char>(c);
        else std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
    }
    return out + "\"";
}

// The regression replay test sets this so a broken invariant is a test failure, not an abort.
inline bool fail_throws = false;

[[noreturn]] inline void fail(const char* what, const std::string& detail = "") {
    std::fprintf(stderr, "tlfuzz invariant broken: %s %s\n", what, detail.c_str());
    if (fail_throws) throw std::logic_error(std::string("tlfuzz invariant broken: ") + what + " " + detail);
    std::abort();
}

// Scratch directory of this process (a model file per fuzz input is rewritten in place).
inline std::string scratch_dir() {
    static const std::string dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("tinyloop-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d.string();
    }();
    return dir;
}

// A small tokenizer with real merges and two special tokens, for the tokenizer and grammar
// targets (and the seed generator): merges of frequent English pairs, then <|endoftext|>.
inline tinyloop::TokenizerSpec small_tokenizer() {
    tinyloop::TokenizerSpec t;
    std::vector<std::string> pieces;  // piece k is made by merge k
    auto id_of = [&](const std::string& s) -> int32_t {
        if (s.size() == 1) return static_cast<unsigned char>(s[0]);
        for (size_t k = 0; k < pieces.size(); ++k)
            if (pieces[k] == s) return static_cast<int32_t>(256 + k);
        return -1;
    };
    auto add = [&](const std::string& a, const std::string& b) {
        int32_t ia = id_of(a), ib = id_of(b);
        if (ia < 0 || ib < 0) fail("small_tokenizer: bad merge", a + "+" + b);
        t.merges.push_back({ia, ib});
        pieces.push_back(a + b);
    };
    add("t", "h"); add("th", "e"); add(" ", "t"); add(" t", "h"); add(" th", "e"); add("i", "n"); add("a", "n");
    add("e", "r"); add("o", "n"); add("an", "d"); add(" ", "a"); add(" a", "n"); add(" an", "d"); add("r", "e");
    add("in", "g"); add("e", "s"); add(" ", "s"); add("o", "r"); add("\xc3", "\xa9");
    add("\xe2", "\x80"); add("\xe2\x80", "\x99"); add(" ", " "); add("  ", "  "); add("\n", "\n");
    add("1", "2"); add("<", "|");
    const int32_t next = static_cast<int32_t>(256 + t.merges.size());
    t.special_tokens = {{"<|endoftext|>", next}, {"<|pad|>", next + 1}};
    t.eos_id = next;
    t.bos_id = -1;
    return t;
}

inline tinyloop::HParams tiny_hparams() {
    tinyloop::HParams hp;
    hp.vocab_size = 288;
    hp.d_model = 32;
    hp.n_heads = 4;
    hp.n_kv_heads = 1;
    hp.head_dim = 8;
    hp.d_ff = 64;
    hp.n_pre_blocks = 1;
    hp.n_loop_layers = 1;
    hp.default_loops = 2;
    hp.max_loops = 4;
    hp.max_seq_len = 64;
    return hp;
}

// The model the tokenizer and grammar targets share: loaded once per process.
inline tinyloop::Model* shared_model() {
    static tinyloop::Model* m = [] {
        tinyloop::ModelSpec spec = tinyloop::random_model_spec(tiny_hparams(), 1);
        spec.tokenizer = small_tokenizer();
        const std::string path = scratch_dir() + "/shared.tinyloop";
        tinyloop::save_model(path, spec);
        tinyloop::LoadOptions o;
        o.backend = tinyloop::Backend::Cpu;
        o.threads = 1;
        tinyloop::Model* model = tinyloop::load_model(path, o);
        std::filesystem::remove(path);
        return model;
    }();
    return m;
}

// --- loader ----------------------------------------------------------------------------------
// The bytes are a .tinyloop file. When it loads, the model must be usable: info, a tokenizer
// round trip, a two-token greedy generation and a score (any tinyloop::Error is fine).
inline int fuzz_loader(const uint8_t* data, size_t size) {
    const std::string path = scratch_dir() + "/input.tinyloop";
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    tinyloop::LoadOptions o;
    o.backend = tinyloop::Backend::Cpu;
    o.threads = 1;
    tinyloop::Model* m = nullptr;
    try {
        m = tinyloop::load_model(path, o);
    } catch (const tinyloop::Error& e) {
        if (e.code() != tinyloop::ErrorCode::BadFile && e.code() != tinyloop::ErrorCode::Io &&
            e.code() != tinyloop::ErrorCode::OutOfMemory)
            fail("load_model threw an unexpected error code", e.what());
        return 0;
    }
    try {
        const tinyloop::ModelInfo info = tinyloop::model_info(m);
        const tinyloop::HParams& hp = info.hparams;
        std::vector<int32_t> ids = tinyloop::tokenize(m, "In the beginning <|endoftext|>", true);
        if (ids.empty()) ids.push_back(0);
        if (ids.size() > 4) ids.resize(4);
        // Bound the work: tiny models only (a fuzzed file may describe a large but valid one).
        const double work = double(hp.d_model) * (hp.d_ff + 4.0 * hp.n_heads * hp.head_dim) *
                                (hp.n_pre_blocks + hp.n_loop_layers) +
                            double(hp.vocab_size) * hp.d_model;
        if (work < 4e6 && hp.max_seq_len >= 6) {
            tinyloop::GenerateConfig cfg;
            cfg.max_tokens = 2;
            cfg.loops = 1;
            auto out = tinyloop::generate(m, ids.data(), static_cast<int>(ids.size()), cfg);
            if (out.size() < ids.size() || out.size() > ids.size() + 2) fail("generate: bad output length");
            for (int32_t t : out)
                if (t < 0 || t >= hp.vocab_size) fail("generate: token out of range", std::to_string(t));
            tinyloop::score(m, ids.data(), static_cast<int>(ids.size()), 1);
        }
    } catch (const tinyloop::Error&) {
    }
    tinyloop::free_model(m);
    return 0;
}

// --- tokenizer -------------------------------------------------------------------------------
// Byte 0 picks the operation; the rest is text or a little-endian list of 16-bit ids.
inline int fuzz_tokenizer(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    tinyloop::Model* m = shared_model();
    const int op = data[0] % 4;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const int vocab = tinyloop::model_hparams(m).vocab_size;
    try {
        if (op == 0 || op == 1) {
            const bool special = op == 1;
            std::vector<int32_t> ids = tinyloop::tokenize(m, text, special);
            for (int32_t id : ids)
                if (id < 0 || id >= vocab) fail("tokenize: id out of range", std::to_string(id));
            const std::string back = tinyloop::detokenize(m, ids.data(), ids.size());
            // Special tokens decode to their own text, so the round trip is exact either way.
            if (back != text) fail("tokenize/detokenize round trip differs");
            if (!special && !text.empty() && ids.empty()) fail("tokenize: empty result for non-empty text");
            const std::string shown = tinyloop::detokenize_text(m, ids.data(), ids.size());
            if (shown != tinyloop::sanitize_utf8(back)) fail("detokenize_text != sanitize_utf8(detokenize)");
        } else {
            std::vector<int32_t> ids;
            for (size_t i = 1; i + 1 < size; i += 2) {
                int v = data[i] | (data[i + 1] << 8);
                // Mostly valid ids, sometimes just outside the range or negative.
                if (v >= 0xff00) v = -(v & 0xff);
                else v %= (vocab + 8);
                ids.push_back(v);
            }
            if (op == 2) {
                std::string raw;
                bool ok = true;
                try {
                    raw = tinyloop::detokenize(m, ids.data(), ids.size());
                } catch (const tinyloop::Error&) {
                    ok = false;
                }
                if (ok) {
                    std::string joined;
                    for (int32_t id : ids) joined += tinyloop::token_bytes(m, id);
                    if (joined != raw) fail("detokenize != concatenated token_bytes");
                }
            } else {
                tinyloop::StreamDecoder dec(m);
                std::string streamed;
                std::vector<int32_t> good;
                for (int32_t id : ids) {
                    try {
                        streamed += dec.push(id);
                        good.push_back(id);
                    } catch (const tinyloop::Error&) {
                    }
                }
                streamed += dec.flush();
                const std::string whole = tinyloop::detokenize_text(m, good.data(), good.size());
                if (streamed != whole) {
                    std::string ids_text;
                    for (int32_t id : good) ids_text += std::to_string(id) + ",";
                    fail("StreamDecoder output != detokenize_text", "ids " + ids_text + " streamed " + escaped(streamed) +
                                                                        " whole " + escaped(whole));
                }
            }
        }
    } catch (const tinyloop::Error&) {
    }
    return 0;
}

}  // namespace tlfuzz
