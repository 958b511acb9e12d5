#!/usr/bin/env python3
"""Writes a Hugging Face checkpoint folder of a published looped architecture with random
weights: the real config.json fields, the real tensor names and shapes, sharded safetensors with
model.safetensors.index.json, a byte-level BPE tokenizer.json trained with the `tokenizers`
package, tokenizer_config.json (a chat template) and generation_config.json.

  make_hf_checkpoint.py ouro OUT_DIR              small Ouro (OuroForCausalLM), BF16 shards
  make_hf_checkpoint.py huginn OUT_DIR            small Huginn-0125 (RavenForCausalLM), F32
                                                  shards with the duplicate lm_head and freqs_cis
  make_hf_checkpoint.py ouro OUT_DIR --full-size ouro-1.4b
                                                  Ouro-1.4B's shapes (1.4 B parameters, BF16,
                                                  49,152-token tokenizer)
  make_hf_checkpoint.py huginn OUT_DIR --full-size huginn-0125
                                                  Huginn-0125's shapes (3.56 B parameters plus the
                                                  duplicate lm_head, F32 as published: 15.6 GB in 4
                                                  shards; 65,536-token tokenizer)
  make_hf_checkpoint.py ouro OUT_DIR --layers 24 --steps 4
  make_hf_checkpoint.py huginn OUT_DIR --core 4 --steps 32
                                                  the small width with a published model's depth
                                                  structure (Ouro-1.4B; Huginn-0125), e.g. for the
                                                  workbench's screenshots at those shapes

Used by tests/import (what `tinyloop import` must map exactly) and by the README's size
measurement. Needs numpy, safetensors, tokenizers (tests/python/requirements.txt). The weights
are seeded: the same arguments write the same bytes.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

SMALL = {
    "ouro": dict(vocab=512, d=64, heads=4, kv=2, hd=16, ff=128, layers=2, steps=3, ctx=256),
    "huginn": dict(vocab=512, d=96, heads=4, ff=160, prelude=2, core=2, coda=2, steps=4, ctx=256),
}
FULL = {
    "ouro-1.4b": dict(vocab=49152, d=2048, heads=16, kv=16, hd=128, ff=5632, layers=24, steps=4, ctx=65536),
    # raven_config_minimal.json: n_embd 5280, 55 heads (head_dim 96), 2 + 4 + 2 layers, mean_recurrence 32
    "huginn-0125": dict(vocab=65536, d=5280, heads=55, ff=17920, prelude=2, core=4, coda=2, steps=32, ctx=4096),
}

# ------------------------------------------------------------------------------ safetensors


def bf16_bits(x):
    """float32 array -> bfloat16 bit patterns (round to nearest even), as uint16."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    b = b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))
    return (b >> np.uint32(16)).astype(np.uint16)


class ShardWriter:
    """Writes one safetensors file tensor by tensor (header first: shapes and dtypes are known),
    so a 1.4 B-parameter checkpoint never has to be in memory."""

    SIZES = {"BF16": 2, "F16": 2, "F32": 4}

    def __init__(self, path, specs):
        # specs: [(name, dtype, shape)] in the order tensors will be written
        self.path, self.specs = path, specs
        header, off = {}, 0
        for name, dt, shape in specs:
            n = int(np.prod(shape, dtype=np.int64)) * self.SIZES[dt]
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
        header["__metadata__"] = {"format": "pt"}
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)  # the data starts 8-aligned, as safetensors writes it
        self.f = open(path, "wb")
        self.f.write(struct.pack("<Q", len(h)) + h)
        self.next = 0

    def write(self, name, values):
        want, dt, shape = self.specs[self.next]
        assert name == want and tuple(values.shape) == tuple(shape), (name, want, values.shape, shape)
        if dt == "BF16":
            self.f.write(bf16_bits(values).tobytes())
        elif dt == "F16":
            self.f.write(np.ascontiguousarray(values, dtype=np.float16).tobytes())
        else:
            self.f.write(np.ascontiguousarray(values, dtype=np.float32).tobytes())
        self.next += 1

    def close(self):
        assert self.next == len(self.specs)
        self.f.close()


# ------------------------------------------------------------------------------ tensors


def ouro_tensors(c, untied=True):
    d, H, Hkv, ff, V = c["d"], c["heads"] * c["hd"], c["kv"] * c["hd"], c["ff"], c["vocab"]
    out = [("model.embed_tokens.weight", (V, d), "mat")]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (d,), "norm"),
            (p + "input_layernorm_2.weight", (d,), "norm"),
            (p + "post_attention_layernorm.weight", (d,), "norm"),
            (p + "post_attention_layernorm_2.weight", (d,), "norm"),
            (p + "self_attn.q_proj.weight", (H, d), "mat"),
            (p + "self_attn.k_proj.weight", (Hkv, d), "mat"),
            (p + "self_attn.v_proj.weight", (Hkv, d), "mat"),
            (p + "self_attn.o_proj.weight", (d, H), "mat"),
            (p + "mlp.gate_proj.weight", (ff, d), "mat"),
            (p + "mlp.up_proj.weight", (ff, d), "mat"),
            (p + "mlp.down_proj.weight", (d, ff), "mat"),
        ]
    out += [("model.norm.weight", (d,), "norm"), ("model.early_exit_gate.weight", (1, d), "mat"),
            ("model.early_exit_gate.bias", (1,), "bias")]
    if untied:
        out.append(("lm_head.weight", (V, d), "mat"))
    return out


def huginn_tensors(c):
    d, ff, V, hd = c["d"], c["ff"], c["vocab"], c["d"] // c["heads"]
    out = [("transformer.wte.weight", (V, d), "mat")]

    def block(p):
        return [
            (p + "norm_1.weight", (d,), "norm"), (p + "norm_2.weight", (d,), "norm"),
            (p + "norm_3.weight", (d,), "norm"), (p + "norm_4.weight", (d,), "norm"),
            (p + "attn.Wqkv.weight", (3 * d, d), "mat"), (p + "attn.qk_bias", (2, 1, c["heads"], hd), "bias"),
            (p + "attn.proj.weight", (d, d), "mat"),
            (p + "mlp.fc.weight", (2 * ff, d), "mat"), (p + "mlp.proj.weight", (d, ff), "mat"),
        ]

    for i in range(c["prelude"]):
        out += block(f"transformer.prelude.{i}.")
    out.append(("transformer.adapter.weight", (d, 2 * d), "mat"))
    for i in range(c["core"]):
        out += block(f"transformer.core_block.{i}.")
    for i in range(c["coda"]):
        out += block(f"transformer.coda.{i}.")
    out += [("transformer.ln_f.weight", (d,), "norm"), ("lm_head.weight", (V, d), "tied"),
            ("freqs_cis", (1, c["ctx"], 1, hd // 2, 2), "rope")]
    return out


def freqs_cis(hd, ctx, theta):
    """raven_modeling_minimal.precompute_freqs_cis in float32."""
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd)))).astype(np.float32)
    f = np.outer(np.arange(ctx, dtype=np.float32), inv).astype(np.float32)
    return np.stack([np.cos(f), np.sin(f)], axis=-1)[None, :, None, :, :].astype(np.float32)


def values(rng, name, shape, kind, c, embed):
    if kind == "norm":
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "bias":
        return (0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "tied":
        return embed
    if kind == "rope":
        return freqs_cis(c["d"] // c["heads"], c["ctx"], c.get("theta", 50000.0))
    x = rng.standard_normal(shape, dtype=np.float32)
    x *= np.float32(1.0 / math.sqrt(shape[-1]))
    if name == "transformer.adapter.weight" and c.get("state_gain", 1.0) != 1.0:
        # The columns that read the previous state (the adapter sees cat([state, embeddings])).
        x[:, : shape[-1] // 2] *= np.float32(c["state_gain"])
    return x


# ------------------------------------------------------------------------------ tokenizer


def corpus(rng, n_words):
    """A deterministic text mixing words, digit runs, punctuation, whitespace runs, accents, emoji
    and code, so the trained merges and the pre-tokenizer see every kind of input."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    lex = ["".join(rng.choice(list(letters), size=int(rng.integers(2, 9)))) for _ in range(max(400, n_words // 8))]
    extra = ["café", "naïve", "Ωmega", "東京", "😀", "def", "return", "x+=1;", "{}", "\t", "  ", "\n\n", "1234", "3.14"]
    words = rng.choice(lex + extra, size=n_words)
    caps = rng.random(n_words) < 0.1
    return " ".join(w.capitalize() if k else w for w, k in zip(words, caps))


def make_tokenizer(kind, vocab, rng, n_words):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    if kind == "ouro":  # SmolLM2: digits isolated, then the GPT-2 pattern
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        n_special_after = 0
    else:  # Huginn: a Split keeping the matches of its own pattern, then ByteLevel without regex
        specials = []
        pattern = r"\p{L}+|\p{N}|[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        n_special_after = 6
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - n_special_after, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = corpus(rng, n_words)
    tok.train_from_iterator((text[i:i + 4096] for i in range(0, len(text), 4096)), trainer=trainer)
    if kind == "huginn":
        names = ["<|begin_text|>", "<|end_text|>", "<|begin_header|>", "<|end_header|>", "<|end_turn|>", "<|pad|>"]
        tok.add_special_tokens(names)
        bos, eos = tok.token_to_id("<|begin_text|>"), tok.token_to_id("<|end_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_text|> $A <|end_text|>", pair="<|begin_text|> $A <|end_text|> $B:1 <|end_text|>:1",
            special_tokens=[("<|begin_text|>", bos), ("<|end_text|>", eos)])
    return tok


OURO_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")
HUGINN_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|begin_header|>' + message['role'] + "
                   "'<|end_header|>\\n\\n' + message['content'] + '<|end_turn|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|begin_header|>Huginn<|end_header|>\\n\\n' }}{% endif %}")

# ------------------------------------------------------------------------------ folders


def write_folder(arch, out, c, seed, dtype, shards, n_words):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    tok = make_tokenizer(arch, c["vocab"], rng, n_words)
    if tok.get_vocab_size() > c["vocab"]:
        sys.exit(f"tokenizer has {tok.get_vocab_size()} ids, more than vocab_size {c['vocab']}")
    tok.save(os.path.join(out, "tokenizer.json"))

    if arch == "ouro":
        config = {
            "architectures": ["OuroForCausalLM"], "model_type": "ouro",
            "auto_map": {"AutoConfig": "configuration_ouro.OuroConfig", "AutoModelForCausalLM": "modeling_ouro.OuroForCausalLM"},
            "vocab_size": c["vocab"], "hidden_size": c["d"], "intermediate_size": c["ff"],
            "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"], "num_key_value_heads": c["kv"],
            "head_dim": c["hd"], "hidden_act": "silu", "max_position_embeddings": c["ctx"],
            "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "tie_word_embeddings": False,
            "rope_theta": 1000000.0, "rope_scaling": None, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": c["layers"], "layer_types": ["full_attention"] * c["layers"],
            "attention_dropout": 0.0, "total_ut_steps": c["steps"], "early_exit_threshold": 1.0,
            "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0,
            "torch_dtype": "bfloat16", "transformers_version": "4.54.1",
        }
        tensors = ouro_tensors(c)
        tok_cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "unk_token": "<|endoftext|>", "model_max_length": c["ctx"], "chat_template": OURO_TEMPLATE,
                   "tokenizer_class": "GPT2Tokenizer"}
        gen = {"bos_token_id": 0, "eos_token_id": [0, 2], "pad_token_id": 0, "transformers_version": "4.54.1"}
    else:
        config = {
            "architectures": ["RavenForCausalLM"], "model_type": "huginn_raven",
            "auto_map": {"AutoConfig": "raven_config_minimal.RavenConfig",
                         "AutoModelForCausalLM": "raven_modeling_minimal.RavenForCausalLM"},
            "torch_dtype": "bfloat16", "transformers_version": "4.28.1",
            "hf_config": {"org": "tomg-group-umd", "name": "nebel-raven-3.5b"},
            "block_size": c["ctx"], "vocab_size": c["vocab"], "padding_multiple": 4096, "tie_embeddings": True,
            "num_attention_heads": c["heads"], "num_key_value_heads": c["heads"], "n_embd": c["d"],
            "intermediate_size": c["ff"], "bias": False, "architecture_class_name": "RecurrentGPT",
            "block_class_name": "SandwichBlock", "norm_class_name": "RMSNorm_llama", "norm_eps": 1e-6,
            "mlp_class_name": "GatedMLP", "nonlin_name": "SiLU", "init_strategy": "takase", "init_orthogonal": False,
            "state_init": "like-init", "injection_type": "linear", "n_layers_in_recurrent_block": c["core"],
            "mean_recurrence": c["steps"], "sampling_scheme": "poisson-lognormal-filling", "mean_backprop_depth": 8,
            "n_layers_in_prelude": c["prelude"], "n_layers_in_coda": c["coda"], "qk_bias": True,
            "activation_checkpoint_impl": "per-iteration",
        }
        tensors = huginn_tensors(c)
        tok_cfg = {"bos_token": "<|begin_text|>", "eos_token": "<|end_text|>", "pad_token": "<|pad|>",
                   "chat_template": HUGINN_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"}
        bos = tok.token_to_id("<|begin_text|>")
        gen = {"bos_token_id": bos, "eos_token_id": [bos + 1, bos + 4], "pad_token_id": bos + 5}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump(tok_cfg, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    json.dump(gen, open(os.path.join(out, "generation_config.json"), "w"), indent=2)

    # Shards of about equal size, tensors in order; the index maps every name to its shard.
    def dt_of(kind):  # published checkpoints store every tensor, norms included, in one dtype
        return dtype

    sizes = [int(np.prod(s)) for _, s, _ in tensors]
    per = sum(sizes) / shards
    groups, acc = [[]], 0
    for t, n in zip(tensors, sizes):
        if acc >= per * len(groups) and len(groups) < shards:
            groups.append([])
        groups[-1].append(t)
        acc += n
    names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    weight_map, total = {}, 0
    embed = None
    for g, fn in zip(groups, names):
        w = ShardWriter(os.path.join(out, fn), [(n, dt_of(k), s) for n, s, k in g])
        for n, s, k in g:
            v = values(rng, n, s, k, c, embed)
            if n in ("transformer.wte.weight", "model.embed_tokens.weight"):
                embed = v
            w.write(n, v)
            weight_map[n] = fn
            total += v.size * ShardWriter.SIZES[dt_of(k)]
            del v
        w.close()
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    # The safetensors package reads every shard back (names, dtypes, shapes): the files are real.
    from safetensors import safe_open
    for fn in names:
        with safe_open(os.path.join(out, fn), framework="numpy") as f:
            for n in f.keys():
                sl = f.get_slice(n)
                assert sl.get_dtype() == dt_of("mat") and weight_map[n] == fn, (fn, n)
    return sum(sizes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=["ouro", "huginn"])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=["BF16", "F16", "F32"], help="default BF16 (Ouro), F32 (Huginn, as published)")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--full-size", choices=sorted(FULL), help="the published model's shapes")
    ap.add_argument("--state-gain", type=float, default=1.0,
                    help="huginn: scale of the adapter's columns that read the previous state. Below ~0.3 the "
                         "recurrence contracts towards a fixed point, as the trained model's does; at 1 a random "
                         "core amplifies float32 rounding ~40x over 32 steps")
    ap.add_argument("--layers", type=int, help="ouro: the shared block's layers (num_hidden_layers), 1 to 64")
    ap.add_argument("--core", type=int, help="huginn: the core block's layers (n_layers_in_recurrent_block), 1 to 64")
    ap.add_argument("--steps", type=int,
                    help="the loop count: total_ut_steps (ouro) or mean_recurrence (huginn), 1 to 128")
    a = ap.parse_args()
    if a.full_size and not a.full_size.startswith(a.arch):
        ap.error(f"--full-size {a.full_size} goes with arch {a.full_size.split('-')[0]}")
    c = dict(FULL[a.full_size] if a.full_size else SMALL[a.arch])
    # Depth overrides: absent, the presets (and so their bytes) are unchanged.
    for opt, key, arch, hi in (("layers", "layers", "ouro", 64), ("core", "core", "huginn", 64),
                               ("steps", "steps", None, 128)):
        v = getattr(a, opt)
        if v is None:
            continue
        if arch is not None and a.arch != arch:
            ap.error(f"--{opt}: for arch {arch}")
        if not 1 <= v <= hi:
            ap.error(f"--{opt}: {v} is outside 1 to {hi}")
        c[key] = v
    if a.state_gain != 1.0:
        if a.arch != "huginn" or not 0.0 < a.state_gain <= 1.0:
            ap.error("--state-gain: a value in (0, 1], for arch huginn")
        c["state_gain"] = a.state_gain
    dtype = a.dtype or ("BF16" if a.arch == "ouro" else "F32")
    n_words = 400000 if a.full_size else 20000
    n = write_folder(a.arch, a.out, c, a.seed, dtype, a.shards if not a.full_size else max(a.shards, 4 if a.arch == "huginn" else 3), n_words)
    print(f"wrote {a.out}: {a.arch}, {n:,} parameters, {dtype}")


if __name__ == "__main__":
    main()
