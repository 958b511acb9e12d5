#!/usr/bin/env python3
"""Runs the published modeling code of a looped model on a Hugging Face folder and writes what
the TinyLoop peer test compares against: the last position's logits at several pass counts and
greedy tokens. The published code stays outside the repository (PEER_DIR):

  PEER_DIR/ouro/modeling_ouro.py           ByteDance's remote code (a copy: Eagle4398/ouro-nixpkgs)
  PEER_DIR/ouro/configuration_ouro.py      the small configuration class it imports (not published)
  PEER_DIR/huginn/raven_modeling_minimal.py, raven_config_minimal.py   (seal-rg/recurrent-pretraining)
  PEER_DIR/site/                           transformers 4.54.x (pip install --no-deps --target)
  PEER_DIR/huginn-site/                    transformers 4.53.x, only for tools/bench_fullsize.py: Huginn's
                                           caches (HuginnDynamicCache, HuginnStaticCache) fail on 4.54

torch comes from the running interpreter (the venv's, tests/python/requirements-peer.txt).

  looped_peer.py PEER_DIR HF_DIR OUT.json --ids 5,9,... --steps 1,2,3 [--greedy 64 --greedy-steps T] [--float64]

Ouro: per-step logits are lm_head(h_t), h_t the normed hidden state after pass t that the model's
forward returns (hidden_states_list); greedy tokens from OuroForCausalLM.forward (exit threshold
1.0: the last step). Huginn: forward(num_steps=n, init_scale=0.0), a zero initial state.
Everything in float32, eager attention, no cache (each greedy step recomputes the whole prefix).

--float64 (Huginn): the published code with the model cast to float64, as the exact value both
float32 runs are measured against. The code computes three things in float32 whatever the model's
dtype: RMSNorm (`self._norm(x.float())`), the RoPE table (`precompute_freqs_cis`, and the
checkpoint's `freqs_cis` buffer) and the rotation (`apply_rotary_emb_complex_like` casts q and k
with `.float()`); those three are replaced by the same formulas in float64 and nothing else is
changed (the logits' final `.float()` rounds only the output, ~6e-8 relative).
"""
import argparse
import json
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer_dir")
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--greedy-steps", type=int, default=0)
    ap.add_argument("--float64", action="store_true")
    a = ap.parse_args()
    peer, hf = Path(a.peer_dir), Path(a.hf_dir)
    sys.path[:0] = [str(peer / "site"), str(peer)]
    import torch
    import transformers
    from safetensors.torch import load_file

    torch.manual_seed(0)
    cfg = json.load(open(hf / "config.json"))
    arch = cfg["architectures"][0]
    fields = {k: v for k, v in cfg.items() if k not in ("architectures", "auto_map", "model_type")}
    sd = {}
    for shard in sorted(set(json.load(open(hf / "model.safetensors.index.json"))["weight_map"].values())):
        sd.update({k: v.float() for k, v in load_file(str(hf / shard)).items()})
    if arch == "OuroForCausalLM":
        from ouro.configuration_ouro import OuroConfig
        from ouro.modeling_ouro import OuroForCausalLM
        config = OuroConfig(**fields)
        config._attn_implementation = "eager"
        model = OuroForCausalLM(config).float().eval()
    elif arch == "RavenForCausalLM":
        from huginn.raven_config_minimal import RavenConfig
        from huginn.raven_modeling_minimal import RavenForCausalLM
        model = RavenForCausalLM(RavenConfig(**fields)).float().eval()
    else:
        sys.exit(f"unknown architecture {arch}")
    if a.float64:
        if arch != "RavenForCausalLM":
            sys.exit("--float64 is implemented for Huginn (RavenForCausalLM) only")
        import huginn.raven_modeling_minimal as rm

        def norm64(self, x):
            return self._norm(x) * self.weight

        def rope64(q, k, freqs_cis):
            qk = torch.cat([q, k], dim=2).unflatten(dim=-1, sizes=(-1, 2))
            f = freqs_cis
            r = torch.stack([qk[..., 0] * f[..., 0] - qk[..., 1] * f[..., 1],
                             qk[..., 1] * f[..., 0] + qk[..., 0] * f[..., 1]], -1).flatten(3)
            return torch.split(r, q.shape[2], dim=2)

        rm.RMSNorm.forward = norm64
        rm.apply_rotary_emb_complex_like = rope64
        model = model.double()
        sd = {k: v.double() for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if a.float64:
        c = model.config
        hd = c.n_embd // c.num_attention_heads
        inv = 1.0 / (c.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.outer(torch.arange(c.block_size, dtype=torch.float64), inv)
        model.freqs_cis = torch.stack([torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]], dim=4)
    missing = [m for m in missing if m != "lm_head.weight" or not getattr(model.config, "tie_word_embeddings", False)]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")

    ids = [int(x) for x in a.ids.split(",")]
    steps = [int(x) for x in a.steps.split(",")]
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "architecture": arch, "ids": ids,
           "dtype": "float64" if a.float64 else "float32",
           "logits": {}, "greedy": []}

    def last_logits(seq, n):
        x = torch.tensor([seq])
        if arch == "OuroForCausalLM":
            model.model.total_ut_steps = n
            _, hs, _ = model.model(input_ids=x, use_cache=False)
            return [model.lm_head(h)[0, -1] for h in hs]
        return [model(input_ids=x, num_steps=n, init_scale=0.0).logits[0, -1]]

    with torch.no_grad():
        if arch == "OuroForCausalLM":  # one forward at the most steps gives every step's state
            per = last_logits(ids, max(steps))
            for s in steps:
                out["logits"][str(s)] = per[s - 1].tolist()
        else:
            for s in steps:
                out["logits"][str(s)] = last_logits(ids, s)[0].tolist()
        seq = list(ids)
        for _ in range(a.greedy):
            if arch == "OuroForCausalLM":
                model.model.total_ut_steps = a.greedy_steps
                logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            else:
                logits = last_logits(seq, a.greedy_steps)[0]
            seq.append(int(torch.argmax(logits)))
        out["greedy"] = seq[len(ids):]
    json.dump(out, open(a.out, "w"))


if __name__ == "__main__":
    main()
