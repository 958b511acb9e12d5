#!/usr/bin/env python3
"""The `gate_select` early exit against Ouro's published threshold exit, teacher-forced.

  ouro_gate_select_peer.py PEER_DIR TINYLOOP_CLI WORK_DIR

makes a random Ouro folder (tools/make_hf_checkpoint.py) in WORK_DIR, imports it (f32), and for
several q compares, per position of a 32-token sequence, the exit pass and the next-token
log-probability of `tinyloop score --early-exit gate-select --early-exit-threshold q` with
OuroForCausalLM.forward(exit_threshold=q) of the published modeling_ouro.py (its exit passes are
recomputed from the gate values model.model returns, by the same cumulative rule). PEER_DIR is
laid out as tests/import/looped_peer.py says; torch from the running interpreter. Exits 1 when an
exit pass differs or a log-probability differs by more than 1e-4.
"""
import json, subprocess, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
PEER, CLI, W = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
W.mkdir(parents=True, exist_ok=True)
hf, out = W / "hf", W / "ouro.tinyloop"
if not out.exists():
    subprocess.run([sys.executable, str(ROOT / "tools/make_hf_checkpoint.py"), "ouro", str(hf)], check=True,
                   capture_output=True)
    subprocess.run([str(CLI), "import", str(hf), str(out), "--dtype", "f32"], check=True, capture_output=True)
sys.path[:0] = [str(PEER / "site"), str(PEER)]
import torch, numpy as np
from safetensors.torch import load_file
from ouro.configuration_ouro import OuroConfig
from ouro.modeling_ouro import OuroForCausalLM
cfg = json.load(open(hf / "config.json"))
fields = {k: v for k, v in cfg.items() if k not in ("architectures", "auto_map", "model_type")}
sd = {}
for shard in sorted(set(json.load(open(hf / "model.safetensors.index.json"))["weight_map"].values())):
    sd.update({k: v.float() for k, v in load_file(str(hf / shard)).items()})
config = OuroConfig(**fields); config._attn_implementation = "eager"
model = OuroForCausalLM(config).float().eval(); model.load_state_dict(sd, strict=False)
T = model.model.total_ut_steps
rng = np.random.default_rng(1); ids = [int(x) for x in rng.integers(0, 250, 32)]
bad = 0
for q in (0.3, 0.5, 0.7, 0.9, 0.99, 1.0):
    with torch.no_grad():
        x = torch.tensor([ids])
        logits = model(input_ids=x, use_cache=False, exit_threshold=q).logits[0].double()
        _, hs, gates = model.model(input_ids=x, use_cache=False)
        lam = [torch.sigmoid(g.squeeze(-1))[0].double() for g in gates]
        rem = torch.ones_like(lam[0]); pdf = []
        for i, l in enumerate(lam):
            pdf.append(l * rem if i < len(lam) - 1 else rem); rem = rem * (1 - l)
        cum = torch.cumsum(torch.stack(pdf, 1), 1)
        mask = cum >= q
        steps = [int(torch.argmax(mask[p].float())) + 1 if bool(mask[p].any()) else T for p in range(len(ids))]
    lp_hf = torch.log_softmax(logits, -1)
    hf_lp = [float(lp_hf[p, ids[p + 1]]) for p in range(len(ids) - 1)]
    j = json.loads(subprocess.run([str(CLI), "score", str(out), "--ids", ",".join(map(str, ids)),
                                   "--loops", str(T), "--early-exit", "gate-select", "--early-exit-threshold", str(q),
                                   "--json"], check=True, capture_output=True, text=True).stdout)
    eng_steps = j["early_exit"]["depth_used"]
    eng_lp = j["token_logprobs"]
    d = max(abs(a - b) for a, b in zip(eng_lp, hf_lp))
    same = sum(a == b for a, b in zip(eng_steps, steps))
    print(f"q={q}: exit passes equal at {same}/{len(ids)} positions (published: {steps[:12]}..., engine: {eng_steps[:12]}...), "
          f"max |logprob diff| {d:.2e}, distinct passes {sorted(set(steps))}")
    bad += same != len(ids) or d > 1e-4
sys.exit(1 if bad else 0)
