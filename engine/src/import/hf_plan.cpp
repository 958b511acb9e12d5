// config.json + safetensors headers -> ImportPlan (hf_plan.h), for Ouro (OuroForCausalLM,
// ByteDance's modeling_ouro.py) and Huginn-0125 (RavenForCausalLM, seal-rg's
// raven_modeling_minimal.py). docs/FORMAT.md §1b states the math each field maps to.
#include "import/hf_plan.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "model/loader.h"

namespace tinyloop {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& where, const std::string& msg) {
    throw Error(ErrorCode::BadFile, where + ": " + msg);
}

std::string brief(const json& v) {
    std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string shape_text(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// Reads config.json's fields, remembering which were read, so that finish() can refuse every
// field nobody mapped, checked or acknowledged.
class Config {
public:
    Config(const json& j, std::string path) : j_(j), path_(std::move(path)) {
        if (!j_.is_object()) bad(path_, "expected a JSON object");
    }
    bool has(const std::string& k) const { return j_.contains(k) && !j_.at(k).is_null(); }
    const json* raw(const std::string& k) {
        used_.insert(k);
        return has(k) ? &j_.at(k) : nullptr;
    }
    int64_t integer(const std::string& k, int64_t lo, int64_t hi, const int64_t* dflt = nullptr) {
        const json* v = raw(k);
        if (!v) {
            if (dflt) return *dflt;
            bad(path_, k + ": missing, required (an integer in " + std::to_string(lo) + " .. " + std::to_string(hi) + ")");
        }
        if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
            bad(path_, k + ": " + brief(*v) + ", allowed an integer in " + std::to_string(lo) + " .. " + std::to_string(hi));
        return v->get<int64_t>();
    }
    double number(const std::string& k, double lo, double hi, const double* dflt = nullptr) {
        const json* v = raw(k);
        if (!v) {
            if (dflt) return *dflt;
            bad(path_, k + ": missing, required (a number in (" + std::to_string(lo) + ", " + std::to_string(hi) + "])");
        }
        if (!v->is_number() || !(v->get<double>() > lo) || !(v->get<double>() <= hi))
            bad(path_, k + ": " + brief(*v) + ", allowed a number in (" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return v->get<double>();
    }
    bool boolean(const std::string& k, bool dflt) {
        const json* v = raw(k);
        if (!v) return dflt;
        if (!v->is_boolean()) bad(path_, k + ": " + brief(*v) + ", allowed true or false");
        return v->get<bool>();
    }
    // A field whose value must be `allowed` (absent counts as `dflt`) for the math here to hold.
    void require(const std::string& k, const json& allowed, const json& dflt, const std::string& why) {
        const json* v = raw(k);
        const json& got = v ? *v : dflt;
        if (got != allowed) bad(path_, k + ": " + brief(got) + ", allowed " + brief(allowed) + " (" + why + ")");
    }
    // A field read and judged to have no effect on the forward pass; recorded with the reason.
    void acknowledge(const std::string& k, const std::string& why, ojson& notes) {
        used_.insert(k);
        if (j_.contains(k)) notes[k] = why;
    }
    void finish(const std::string& arch) const {
        for (const auto& [k, v] : j_.items())
            if (!used_.count(k))
                bad(path_, k + ": " + brief(v) + " is a field the " + arch +
                               " importer does not know; refused rather than ignored");
    }
    const std::string& path() const { return path_; }

private:
    const json& j_;
    std::string path_;
    std::set<std::string> used_;
};

// Fields every transformers PretrainedConfig may carry that do not change the forward pass.
void acknowledge_generic(Config& c, ojson& notes) {
    for (const char* k : {"architectures", "model_type", "auto_map", "torch_dtype", "dtype", "transformers_version",
                          "use_cache", "initializer_range", "_name_or_path", "name", "return_dict",
                          "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16"})
        c.acknowledge(k, "bookkeeping, no effect on the forward pass", notes);
    for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
        c.acknowledge(k, "token ids: the tokenizer and generation_config.json carry them", notes);
}

// The checkpoint's tensors, checked against the shapes config.json implies and marked consumed.
class Sources {
public:
    Sources(const SafetensorsSet& st, std::string config_path) : st_(st), config_path_(std::move(config_path)) {}
    const StTensor* need(const std::string& name, const std::vector<int64_t>& shape) {
        const StTensor* t = st_.find(name);
        if (!t) bad(config_path_, "the checkpoint has no tensor " + name + " (shape " + shape_text(shape) +
                                     "), which these config fields require");
        if (t->shape != shape)
            bad(t->file, "header." + name + ".shape: " + shape_text(t->shape) + ", config.json implies " + shape_text(shape));
        used_.insert(name);
        return t;
    }
    const StTensor* maybe(const std::string& name) {
        const StTensor* t = st_.find(name);
        if (t) used_.insert(name);
        return t;
    }
    void finish(const std::string& arch) const {
        for (const auto& [name, t] : st_.tensors())
            if (!used_.count(name))
                bad(t.file, "header." + name + ": a tensor the " + arch +
                                " importer does not map (shape " + shape_text(t.shape) + "); refused rather than ignored");
    }

private:
    const SafetensorsSet& st_;
    std::string config_path_;
    std::set<std::string> used_;
};

// The rows [r0, r0 + n) of a 2-D tensor, as a tensor of its own (a view).
StTensor row_slice(const StTensor& t, int64_t r0, int64_t n) {
    StTensor s = t;
    const uint64_t row_bytes = static_cast<uint64_t>(t.shape[1]) * st_dtype_bytes(t.dtype);
    s.shape = {n, t.shape[1]};
    s.numel = static_cast<uint64_t>(n) * t.shape[1];
    s.bytes = s.numel * st_dtype_bytes(t.dtype);
    s.data = t.data + static_cast<uint64_t>(r0) * row_bytes;
    return s;
}

// Interleaved RoPE (rotation of pairs (2i, 2i+1)) to the half-split form FORMAT.md §1 uses
// (pairs (i, i + hd/2)): within every head, output row i takes input row 2i and row hd/2 + i
// takes 2i + 1. Applied to the rows of wq and wk (and the entries of bq, bk), it leaves every
// q·k unchanged, since both sides are permuted alike and RoPE rotates the same pairs by the
// same angles.
void permute_interleaved(float* v, int64_t heads, int64_t hd, int64_t row_len) {
    std::vector<float> tmp(static_cast<size_t>(hd * row_len));
    for (int64_t h = 0; h < heads; ++h) {
        float* base = v + h * hd * row_len;
        std::memcpy(tmp.data(), base, tmp.size() * sizeof(float));
        for (int64_t i = 0; i < hd / 2; ++i) {
            std::memcpy(base + i * row_len, tmp.data() + (2 * i) * row_len, row_len * sizeof(float));
            std::memcpy(base + (hd / 2 + i) * row_len, tmp.data() + (2 * i + 1) * row_len, row_len * sizeof(float));
        }
    }
}

PlanTensor copy_of(const std::string& name, const StTensor* src, std::vector<int64_t> shape, bool vector) {
    PlanTensor p;
    p.name = name;
    p.shape = std::move(shape);
    p.vector = vector;
    p.sources = {src};
    p.fill = [src](float* out) { st_to_f32(*src, out); };
    return p;
}

int to_int(int64_t v) { return static_cast<int>(v); }

// --- Ouro -----------------------------------------------------------------------------------

ImportPlan plan_ouro(Config& c, Sources& src, const ImportOptions& o) {
    ImportPlan plan;
    plan.source_architecture = "OuroForCausalLM";
    plan.architecture = "ouro";
    HParams& hp = plan.hp;
    hp.vocab_size = to_int(c.integer("vocab_size", 256, 1 << 20));
    hp.d_model = to_int(c.integer("hidden_size", 1, 65536));
    hp.n_heads = to_int(c.integer("num_attention_heads", 1, 4096));
    const int64_t kv_default = hp.n_heads;
    hp.n_kv_heads = to_int(c.integer("num_key_value_heads", 1, 4096, &kv_default));
    const int64_t hd_default = hp.d_model / hp.n_heads;
    hp.head_dim = to_int(c.integer("head_dim", 2, 4096, &hd_default));
    hp.d_ff = to_int(c.integer("intermediate_size", 1, 1 << 20));
    hp.n_pre_blocks = 0;
    hp.n_loop_layers = to_int(c.integer("num_hidden_layers", 1, 1024));
    const int T = to_int(c.integer("total_ut_steps", 1, 1024));
    hp.default_loops = o.loops > 0 ? o.loops : T;
    hp.max_loops = std::min(1024, std::max({64, 4 * T, hp.default_loops}));
    hp.max_seq_len = to_int(c.integer("max_position_embeddings", 1, 1 << 20));
    const double theta_default = 10000.0, eps_default = 1e-6;
    hp.rope_theta = static_cast<float>(c.number("rope_theta", 0.0, 1e12, &theta_default));
    hp.norm_eps = static_cast<float>(c.number("rms_norm_eps", 0.0, 1.0, &eps_default));
    hp.tie_embeddings = c.boolean("tie_word_embeddings", false);
    hp.loop_input = LoopInput::None;
    hp.architecture = "ouro";
    hp.block = BlockKind::SandwichBranch;
    hp.pass_norm = true;
    hp.exit_gate = true;
    if (const std::string p = hparams_problem(hp); !p.empty()) bad(c.path(), "(as mapped) " + p);

    c.require("hidden_act", "silu", "silu", "the MLP is SwiGLU with SiLU");
    c.require("attention_bias", false, false, "q/k/v/o projections without bias");
    c.require("mlp_bias", false, false, "MLP projections without bias");
    c.require("use_sliding_window", false, false, "every layer attends to the whole context here");
    if (const json* rs = c.raw("rope_scaling")) {
        const bool plain = rs->is_object() && rs->size() == 1 &&
                           (rs->value("rope_type", "") == "default" || rs->value("type", "") == "default");
        if (!plain) bad(c.path(), "rope_scaling: " + brief(*rs) + ", allowed null (plain RoPE; scaled RoPE is not implemented)");
    }
    if (const json* lt = c.raw("layer_types")) {
        if (!lt->is_array() || lt->size() != static_cast<size_t>(hp.n_loop_layers))
            bad(c.path(), "layer_types: " + brief(*lt) + ", allowed a list of num_hidden_layers entries");
        for (size_t i = 0; i < lt->size(); ++i)
            if ((*lt)[i] != "full_attention")
                bad(c.path(), "layer_types[" + std::to_string(i) + "]: " + brief((*lt)[i]) +
                                  ", allowed \"full_attention\" (sliding-window attention is not implemented)");
    }
    c.acknowledge("sliding_window", "used only by sliding_attention layers, and there are none", plan.notes);
    c.acknowledge("max_window_layers", "used only with use_sliding_window, which is false", plan.notes);
    c.acknowledge("attention_dropout", "dropout acts only in training", plan.notes);
    c.acknowledge("early_exit_threshold", "the exit gate's CDF threshold: an exit policy, kept in metadata.source", plan.notes);
    acknowledge_generic(c, plan.notes);

    const int64_t d = hp.d_model, H = int64_t{hp.n_heads} * hp.head_dim, Hkv = int64_t{hp.n_kv_heads} * hp.head_dim,
                  ff = hp.d_ff, V = hp.vocab_size;
    plan.tensors.push_back(copy_of("embed", src.need("model.embed_tokens.weight", {V, d}), {V, d}, false));
    for (int j = 0; j < hp.n_loop_layers; ++j) {
        const std::string s = "model.layers." + std::to_string(j) + ".", p = "loop." + std::to_string(j) + ".";
        auto vec = [&](const std::string& ours, const std::string& theirs) {
            plan.tensors.push_back(copy_of(p + ours, src.need(s + theirs + ".weight", {d}), {d}, true));
        };
        auto mat = [&](const std::string& ours, const std::string& theirs, int64_t r, int64_t cc) {
            plan.tensors.push_back(copy_of(p + ours, src.need(s + theirs + ".weight", {r, cc}), {r, cc}, false));
        };
        vec("attn_norm", "input_layernorm");
        mat("wq", "self_attn.q_proj", H, d);
        mat("wk", "self_attn.k_proj", Hkv, d);
        mat("wv", "self_attn.v_proj", Hkv, d);
        mat("wo", "self_attn.o_proj", d, H);
        vec("attn_post_norm", "input_layernorm_2");
        vec("mlp_norm", "post_attention_layernorm");
        mat("w_gate", "mlp.gate_proj", ff, d);
        mat("w_up", "mlp.up_proj", ff, d);
        mat("w_down", "mlp.down_proj", d, ff);
        vec("mlp_post_norm", "post_attention_layernorm_2");
    }
    plan.tensors.push_back(copy_of("final_norm", src.need("model.norm.weight", {d}), {d}, true));
    if (!hp.tie_embeddings) plan.tensors.push_back(copy_of("head", src.need("lm_head.weight", {V, d}), {V, d}, false));
    else if (src.maybe("lm_head.weight"))
        bad(c.path(), "tie_word_embeddings: true, but the checkpoint also holds lm_head.weight; allowed false with it");
    plan.tensors.push_back(copy_of("exit_gate.w", src.need("model.early_exit_gate.weight", {1, d}), {d}, true));
    plan.tensors.push_back(copy_of("exit_gate.b", src.need("model.early_exit_gate.bias", {1}), {1}, true));
    return plan;
}

// --- Huginn (Raven) --------------------------------------------------------------------------

// Checks the stored RoPE table against rope_base: the buffer is derived, so it is dropped, but a
// checkpoint whose table says another θ would otherwise run with the wrong angles.
void check_freqs_cis(const StTensor& t, int64_t hd, double theta) {
    std::vector<float> v(t.numel);
    st_to_f32(t, v.data());
    const int64_t positions = t.shape[1], half = hd / 2;
    for (int64_t p = 0; p < positions; p += std::max<int64_t>(1, positions / 64))
        for (int64_t i = 0; i < half; ++i) {
            const float inv = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
            const float a = static_cast<float>(p) * inv;
            const float want[2] = {std::cos(a), std::sin(a)};
            for (int k = 0; k < 2; ++k) {
                const float got = v[static_cast<size_t>((p * half + i) * 2 + k)];
                if (!(std::fabs(got - want[k]) <= 1e-2f))
                    bad(t.file, "header.freqs_cis: position " + std::to_string(p) + ", pair " + std::to_string(i) + ": " +
                                    std::to_string(got) + ", rope_base " + std::to_string(theta) + " gives " +
                                    std::to_string(want[k]) + " (the table disagrees with config.json's rope_base)");
            }
        }
}

ImportPlan plan_huginn(Config& c, Sources& src, const ImportOptions& o) {
    ImportPlan plan;
    plan.source_architecture = "RavenForCausalLM";
    plan.architecture = "huginn";
    HParams& hp = plan.hp;
    hp.vocab_size = to_int(c.integer("vocab_size", 256, 1 << 20));
    hp.d_model = to_int(c.integer("n_embd", 1, 65536));
    // RavenConfig: attribute_map names n_heads num_attention_heads; num_key_value_heads is set
    // to n_heads whatever the file says (MHA).
    hp.n_heads = c.has("n_heads") ? to_int(c.integer("n_heads", 1, 4096)) : to_int(c.integer("num_attention_heads", 1, 4096));
    if (c.has("n_heads") && c.has("num_attention_heads"))
        c.require("num_attention_heads", hp.n_heads, hp.n_heads, "n_heads and num_attention_heads name one value");
    const int64_t kv_default = hp.n_heads;
    hp.n_kv_heads = to_int(c.integer("num_key_value_heads", hp.n_heads, hp.n_heads, &kv_default));
    if (hp.d_model % hp.n_heads != 0)
        bad(c.path(), "n_embd: " + std::to_string(hp.d_model) + ", allowed a multiple of n_heads " + std::to_string(hp.n_heads));
    hp.head_dim = hp.d_model / hp.n_heads;
    hp.d_ff = to_int(c.integer("intermediate_size", 1, 1 << 20));
    hp.n_pre_blocks = to_int(c.integer("n_layers_in_prelude", 0, 1024));
    hp.n_loop_layers = to_int(c.integer("n_layers_in_recurrent_block", 1, 1024));
    const int n_coda = to_int(c.integer("n_layers_in_coda", 0, 1024));
    const int T = to_int(c.integer("mean_recurrence", 1, 1024));
    hp.default_loops = o.loops > 0 ? o.loops : T;
    hp.max_loops = std::min(1024, std::max({64, 4 * T, hp.default_loops}));
    hp.max_seq_len = to_int(c.integer("block_size", 1, 1 << 20));
    const double theta_default = 50000.0;  // RavenConfig's default; the published JSON omits it
    const double theta = c.number("rope_base", 0.0, 1e12, &theta_default);
    hp.rope_theta = static_cast<float>(theta);
    hp.norm_eps = static_cast<float>(c.number("norm_eps", 0.0, 1.0));
    hp.tie_embeddings = c.boolean("tie_embeddings", true);
    if (c.has("tie_word_embeddings"))
        c.require("tie_word_embeddings", hp.tie_embeddings, hp.tie_embeddings, "must agree with tie_embeddings");
    const bool qk_bias = c.boolean("qk_bias", true);
    const float embed_scale = std::sqrt(static_cast<float>(hp.d_model));  // RavenConfig: sqrt(n_embd)
    hp.loop_input = LoopInput::Adapter;
    hp.architecture = "huginn";
    hp.block = BlockKind::SandwichSum;
    hp.qk_bias = qk_bias;
    hp.embed_scale = embed_scale;
    hp.n_coda_blocks = n_coda;
    if (o.state_init == "model") {
        // initialize_state: trunc_normal(std σ, ±3σ) · emb_scale, σ = sqrt(2 / (5 d)).
        hp.state_init.kind = StateInit::Kind::TruncNormal;
        hp.state_init.std = static_cast<float>(std::sqrt(2.0 / (5.0 * hp.d_model)));
        hp.state_init.scale = embed_scale;
        hp.state_init.seed = 0;
    } else if (o.state_init != "zeros") {
        throw Error(ErrorCode::InvalidArgument, "state_init: \"" + o.state_init + "\", allowed model or zeros");
    }
    if (const std::string p = hparams_problem(hp); !p.empty()) bad(c.path(), "(as mapped) " + p);

    c.require("bias", false, false, "linear layers without bias");
    c.require("block_class_name", "SandwichBlock", "SandwichBlock", "the block the published code builds");
    c.require("norm_class_name", "RMSNorm_llama", "RMSNorm_llama", "RMSNorm with a gain");
    c.require("mlp_class_name", "GatedMLP", "GatedMLP", "SwiGLU");
    c.require("nonlin_name", "SiLU", "SiLU", "SwiGLU with SiLU");
    c.require("injection_type", "linear", "linear", "the concatenating adapter");
    c.require("state_init", "like-init", "like-init", "the truncated-normal initial state");
    c.require("architecture_class_name", "RecurrentGPT", "RecurrentGPT", "the published recurrent model");
    if (c.has("n_layers")) {
        const int64_t total = int64_t{hp.n_pre_blocks} + hp.n_loop_layers + n_coda;
        c.require("n_layers", total, total, "prelude + recurrent block + coda");
    }
    c.acknowledge("padding_multiple", "RavenConfig sets padded_vocab_size = vocab_size", plan.notes);
    for (const char* k : {"init_strategy", "init_orthogonal", "sampling_scheme", "mean_backprop_depth",
                          "activation_checkpoint_impl", "hf_config"})
        c.acknowledge(k, "training only", plan.notes);
    acknowledge_generic(c, plan.notes);

    const int64_t d = hp.d_model, hd = hp.head_dim, H = int64_t{hp.n_heads} * hd, Hkv = int64_t{hp.n_kv_heads} * hd,
                  ff = hp.d_ff, V = hp.vocab_size;
    const int64_t nh = hp.n_heads, nkv = hp.n_kv_heads;
    plan.tensors.push_back(copy_of("embed", src.need("transformer.wte.weight", {V, d}), {V, d}, false));
    auto block = [&](const std::string& s, const std::string& p) {
        auto vec = [&](const std::string& ours, const std::string& theirs) {
            plan.tensors.push_back(copy_of(p + ours, src.need(s + theirs + ".weight", {d}), {d}, true));
        };
        const StTensor* qkv = src.need(s + "attn.Wqkv.weight", {H + 2 * Hkv, d});
        auto part = [&](const std::string& ours, int64_t r0, int64_t n, int64_t heads, bool rope) {
            PlanTensor t;
            t.name = p + ours;
            t.shape = {n, d};
            t.sources = {qkv};
            t.fill = [qkv, r0, n, heads, hd, d, rope](float* out) {
                st_to_f32(row_slice(*qkv, r0, n), out);
                if (rope) permute_interleaved(out, heads, hd, d);
            };
            plan.tensors.push_back(std::move(t));
        };
        vec("attn_norm", "norm_1");
        part("wq", 0, H, nh, true);
        part("wk", H, Hkv, nkv, true);
        part("wv", H + Hkv, Hkv, nkv, false);
        if (qk_bias) {
            const StTensor* b = src.need(s + "attn.qk_bias", {2, 1, nh, hd});
            for (int k = 0; k < 2; ++k) {
                PlanTensor t;
                t.name = p + (k == 0 ? "bq" : "bk");
                t.shape = {k == 0 ? H : Hkv};
                t.vector = true;
                t.sources = {b};
                t.fill = [b, k, nh, hd](float* out) {
                    std::vector<float> all(b->numel);
                    st_to_f32(*b, all.data());
                    std::memcpy(out, all.data() + k * nh * hd, static_cast<size_t>(nh * hd) * sizeof(float));
                    permute_interleaved(out, nh, hd, 1);
                };
                plan.tensors.push_back(std::move(t));
            }
        }
        plan.tensors.push_back(copy_of(p + "wo", src.need(s + "attn.proj.weight", {d, H}), {d, H}, false));
        vec("attn_post_norm", "norm_2");
        vec("mlp_norm", "norm_3");
        const StTensor* fc = src.need(s + "mlp.fc.weight", {2 * ff, d});
        for (int k = 0; k < 2; ++k) {  // fc(x).chunk(2): the first half is the SiLU gate
            PlanTensor t;
            t.name = p + (k == 0 ? "w_gate" : "w_up");
            t.shape = {ff, d};
            t.sources = {fc};
            t.fill = [fc, k, ff](float* out) { st_to_f32(row_slice(*fc, k * ff, ff), out); };
            plan.tensors.push_back(std::move(t));
        }
        plan.tensors.push_back(copy_of(p + "w_down", src.need(s + "mlp.proj.weight", {d, ff}), {d, ff}, false));
        vec("mlp_post_norm", "norm_4");
    };
    for (int i = 0; i < hp.n_pre_blocks; ++i)
        block("transformer.prelude." + std::to_string(i) + ".", "pre." + std::to_string(i) + ".");
    for (int j = 0; j < hp.n_loop_layers; ++j)
        block("transformer.core_block." + std::to_string(j) + ".", "loop." + std::to_string(j) + ".");
    for (int j = 0; j < n_coda; ++j)
        block("transformer.coda." + std::to_string(j) + ".", "coda." + std::to_string(j) + ".");
    plan.tensors.push_back(copy_of("adapter", src.need("transformer.adapter.weight", {d, 2 * d}), {d, 2 * d}, false));
    plan.tensors.push_back(copy_of("final_norm", src.need("transformer.ln_f.weight", {d}), {d}, true));
    const StTensor* head = src.maybe("lm_head.weight");
    if (!hp.tie_embeddings) {
        plan.tensors.push_back(copy_of("head", src.need("lm_head.weight", {V, d}), {V, d}, false));
    } else if (head) {
        // Published Huginn stores the tied head a second time; it must be the embedding.
        const StTensor* wte = src.need("transformer.wte.weight", {V, d});
        if (head->shape != wte->shape)
            bad(head->file, "header.lm_head.weight.shape: " + shape_text(head->shape) + ", tied to transformer.wte.weight " +
                                shape_text(wte->shape));
        plan.tensors.front().sources.push_back(head);
        plan.tensors.front().fill = [wte, head](float* out) {
            st_to_f32(*wte, out);
            std::vector<float> row(static_cast<size_t>(head->shape[1]));
            const int64_t rows = head->shape[0], cols = head->shape[1];
            for (int64_t r = 0; r < rows; ++r) {
                st_to_f32(row_slice(*head, r, 1), row.data());
                if (std::memcmp(row.data(), out + r * cols, row.size() * sizeof(float)) != 0)
                    bad(head->file, "header.lm_head.weight: row " + std::to_string(r) +
                                        " differs from transformer.wte.weight, but tie_embeddings is true");
            }
        };
    }
    if (const StTensor* f = src.maybe("freqs_cis")) {
        if (f->shape.size() != 5 || f->shape[0] != 1 || f->shape[2] != 1 || f->shape[3] != hd / 2 || f->shape[4] != 2 ||
            f->shape[1] < 1)
            bad(f->file, "header.freqs_cis.shape: " + shape_text(f->shape) + ", allowed [1, positions, 1, " +
                             std::to_string(hd / 2) + ", 2]");
        check_freqs_cis(*f, hd, theta);
    }
    return plan;
}

}  // namespace

ImportPlan plan_hf_import(const json& config, const std::string& config_path, const SafetensorsSet& st,
                          const ImportOptions& options) {
    Config c(config, config_path);
    const json* archs = c.raw("architectures");
    if (!archs || !archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string())
        bad(config_path, std::string("architectures: ") + (archs ? brief(*archs) : "missing") +
                             ", allowed [\"OuroForCausalLM\"] or [\"RavenForCausalLM\"]");
    const std::string arch = (*archs)[0].get<std::string>();
    Sources src(st, config_path);
    ImportPlan plan;
    if (arch == "OuroForCausalLM") plan = plan_ouro(c, src, options);
    else if (arch == "RavenForCausalLM") plan = plan_huginn(c, src, options);
    else
        bad(config_path, "architectures: \"" + arch + "\", allowed OuroForCausalLM or RavenForCausalLM");
    c.finish(arch);
    src.finish(arch);
    // The file's order is the loader's (expected_tensors); the plan must make exactly those
    // tensors with exactly those shapes, or the mapping above is wrong (a bug, not bad input).
    const std::vector<ExpectedTensor> expected = expected_tensors(plan.hp);
    std::map<std::string, PlanTensor*> made;
    for (PlanTensor& t : plan.tensors) made[t.name] = &t;
    std::vector<PlanTensor> ordered;
    for (const ExpectedTensor& e : expected) {
        const auto it = made.find(e.name);
        if (it == made.end() || it->second->shape != e.shape || it->second->vector != e.is_norm)
            throw Error(ErrorCode::Internal, "import plan: tensor " + e.name + " " + shape_text(e.shape) +
                                                 (it == made.end() ? " not made" : " made with another shape or kind"));
        ordered.push_back(std::move(*it->second));
    }
    if (ordered.size() != plan.tensors.size())
        throw Error(ErrorCode::Internal, "import plan: " + std::to_string(plan.tensors.size()) + " tensors made, the file holds " +
                                             std::to_string(ordered.size()));
    plan.tensors = std::move(ordered);
    return plan;
}

}  // namespace tinyloop
