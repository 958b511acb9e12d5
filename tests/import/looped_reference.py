"""A float64 reference forward of the published looped architectures, written with numpy from the
published modeling code (Ouro's modeling_ouro.py, Huginn's raven_modeling_minimal.py) and reading
the Hugging Face folder itself: config.json and the safetensors shards, with the checkpoint's
own key names, fused tensors and conventions (Huginn's fused Wqkv and fc, interleaved RoPE on
adjacent pairs, qk_bias before RoPE, the adapter on [state; prelude output]). It shares nothing
with the importer or the engine, so a file that `tinyloop import` wrote and the engine ran agree
with it only if the importer's transforms (FORMAT.md §1b) and the engine's forward are both
right. Every operation is in float64, including RoPE's angles and RMSNorm (the published code
computes those in float32 even when the model is cast to float64).

  reference_logits(hf_dir, ids, passes) -> {passes: [positions, vocab] float64 logits}
Huginn from a zero initial state (the published code with init_scale=0).
"""
import json
import struct
from pathlib import Path

import numpy as np


def read_checkpoint(folder, dtype=np.float64):
    """Every tensor of a folder's safetensors shards (BF16, F16, F32) as `dtype` (float64 for the
    reference; float32 keeps every value of these dtypes exactly, for bit comparisons)."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.load(open(index))["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for fn in files:
        raw = (folder / fn).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        data = raw[8 + n:]
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            if t["dtype"] == "BF16":
                v = (np.frombuffer(data[b:e], np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif t["dtype"] == "F16":
                v = np.frombuffer(data[b:e], np.float16)
            elif t["dtype"] == "F32":
                v = np.frombuffer(data[b:e], np.float32)
            else:
                raise ValueError(f"{fn}: {name}: dtype {t['dtype']}")
            out[name] = v.astype(dtype).reshape(t["shape"])
    return out


def rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def silu(x):
    return x / (1.0 + np.exp(-x))


def attention(q, k, v):
    """Causal softmax attention; q [S, H, hd], k/v [S, Hkv, hd] (grouped heads share k/v)."""
    S, H, hd = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
    s = s + np.triu(np.full((S, S), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v).reshape(S, H * hd)


def angles(S, hd, theta):
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    return np.outer(np.arange(S, dtype=np.float64), inv)  # [S, hd/2]


def rope_half(x, a):
    """modeling_ouro's rotate_half: dims i and i + hd/2 rotate together."""
    h = x.shape[-1] // 2
    c, s = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_pairs(x, a):
    """raven's apply_rotary_emb_complex_like: dims 2i and 2i+1 rotate together."""
    c, s = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return np.stack([x0 * c - x1 * s, x1 * c + x0 * s], axis=-1).reshape(x.shape)


def ouro_logits(w, cfg, ids, passes):
    d, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = cfg.get("head_dim") or d // H, cfg["rms_norm_eps"]
    a = angles(len(ids), hd, cfg["rope_theta"])
    h = w["model.embed_tokens.weight"][ids]
    out = {}
    for t in range(1, max(passes) + 1):
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = rms(h, w[p + "input_layernorm.weight"], eps)
            q = rope_half((x @ w[p + "self_attn.q_proj.weight"].T).reshape(-1, H, hd), a)
            k = rope_half((x @ w[p + "self_attn.k_proj.weight"].T).reshape(-1, Hkv, hd), a)
            v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(-1, Hkv, hd)
            o = attention(q, k, v) @ w[p + "self_attn.o_proj.weight"].T
            h = h + rms(o, w[p + "input_layernorm_2.weight"], eps)
            x = rms(h, w[p + "post_attention_layernorm.weight"], eps)
            m = (silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
            h = h + rms(m, w[p + "post_attention_layernorm_2.weight"], eps)
        h = rms(h, w["model.norm.weight"], eps)  # after every pass, fed to the next
        if t in passes:
            out[t] = h @ w["lm_head.weight"].T
    return out


def huginn_block(w, p, x, H, hd, eps, a):
    d = x.shape[-1]
    qkv = rms(x, w[p + "norm_1.weight"], eps) @ w[p + "attn.Wqkv.weight"].T
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(-1, H, hd) for i in range(3))
    if p + "attn.qk_bias" in w:
        b = w[p + "attn.qk_bias"]  # [2, 1, H, hd]
        q, k = q + b[0, 0], k + b[1, 0]
    q, k = rope_pairs(q, a), rope_pairs(k, a)
    x = rms(attention(q, k, v) @ w[p + "attn.proj.weight"].T + x, w[p + "norm_2.weight"], eps)
    f = rms(x, w[p + "norm_3.weight"], eps) @ w[p + "mlp.fc.weight"].T
    g, u = f[:, :f.shape[1] // 2], f[:, f.shape[1] // 2:]
    return rms((silu(g) * u) @ w[p + "mlp.proj.weight"].T + x, w[p + "norm_4.weight"], eps)


def huginn_logits(w, cfg, ids, passes):
    d, H = cfg["n_embd"], cfg["num_attention_heads"]
    hd, eps = d // H, cfg["norm_eps"]
    a = angles(len(ids), hd, cfg.get("rope_base", 50000.0))
    T = "transformer."
    e = w[T + "wte.weight"][ids] * np.sqrt(d)
    for i in range(cfg["n_layers_in_prelude"]):
        e = huginn_block(w, f"{T}prelude.{i}.", e, H, hd, eps, a)
    head = w["lm_head.weight"] if not cfg.get("tie_embeddings") else w[T + "wte.weight"]
    x = np.zeros_like(e)  # init_scale=0
    out = {}
    for t in range(1, max(passes) + 1):
        x = np.concatenate([x, e], axis=-1) @ w[T + "adapter.weight"].T
        for i in range(cfg["n_layers_in_recurrent_block"]):
            x = huginn_block(w, f"{T}core_block.{i}.", x, H, hd, eps, a)
        if t in passes:
            y = rms(x, w[T + "ln_f.weight"], eps)
            for i in range(cfg["n_layers_in_coda"]):
                y = huginn_block(w, f"{T}coda.{i}.", y, H, hd, eps, a)
            out[t] = rms(y, w[T + "ln_f.weight"], eps) @ head.T
    return out


def reference_logits(hf_dir, ids, passes):
    cfg = json.load(open(Path(hf_dir) / "config.json"))
    w = read_checkpoint(hf_dir)
    arch = cfg["architectures"][0]
    ids = np.asarray(ids, dtype=np.int64)
    passes = set(passes)
    if arch == "OuroForCausalLM":
        return ouro_logits(w, cfg, ids, passes)
    if arch == "RavenForCausalLM":
        return huginn_logits(w, cfg, ids, passes)
    raise ValueError(f"architecture {arch}")
