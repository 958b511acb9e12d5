#!/usr/bin/env python3
"""Per-depth evaluation of model-f32.tinyloop (what ships), recipe v3.

For L = 1 .. 2*default_loops: prose validation loss (nats/token, held-out documents of all
three sources, <|endoftext|>-separated, 256-token windows) and greedy exact-match accuracy on
each synthetic task (synth.EVAL_TASKS, seed 2026, prompts prefixed with <|endoftext|>).
Text samples: greedy and sampled (temperature 0.8, top-k 40, seed 0) at several depths.
Writes work/eval.json and work/eval.md.
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import json
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import synth  # noqa: E402
from export import model_from_file  # noqa: E402
from tokenizer import Tokenizer  # noqa: E402

SAMPLE_PROMPTS = ["And God said", "The LORD is my shepherd", "BORE, n.", "hacker"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "model-f32.tinyloop"))
    ap.add_argument("--n-task", type=int, default=200)
    ap.add_argument("--val-windows", type=int, default=128)
    ap.add_argument("--sample-tokens", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(common.WORK, "eval"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    model, header = model_from_file(args.model)
    tok = Tokenizer.from_json(header["tokenizer"])
    hp = model.hp
    n_valid = tok.n_ids
    D = hp.default_loops
    depths = list(range(1, 2 * D + 1))
    val_ids = common.encode_docs(tok, os.path.join(common.WORK, "corpus", "val.txt"))
    kjv_ids = common.encode_docs(tok, os.path.join(common.WORK, "corpus", "val_kjv.txt"))
    wins = common.val_windows(val_ids, 256, args.val_windows)
    kwins = common.val_windows(kjv_ids, 256, args.val_windows // 2)
    vl = common.prose_loss_per_depth(model, wins, depths)
    vk = common.prose_loss_per_depth(model, kwins, depths)
    print(f"prose loss done ({time.time()-t0:.0f}s)", flush=True)
    accs = common.task_accuracy_depths(model, tok, depths, args.n_task, n_valid=n_valid)
    rows = []
    for L in depths:
        rows.append({"L": L, "prose_val_loss": round(vl[L], 4), "kjv_val_loss": round(vk[L], 4),
                     **{k: round(accs[k][L], 4) for k in synth.EVAL_TASKS}})
        print(rows[-1], flush=True)
    samples = []
    for prompt in SAMPLE_PROMPTS[:2] + SAMPLE_PROMPTS[2:]:
        for L in sorted({1, 2, D, 2 * D}):
            if prompt not in SAMPLE_PROMPTS[:2] and L not in (1, D):
                continue
            samples.append({"prompt": prompt, "L": L, "mode": "greedy",
                            "text": common.sample(model, tok, prompt, L, args.sample_tokens, 0.0, n_valid=n_valid)})
            samples.append({"prompt": prompt, "L": L, "mode": "t0.8_k40_seed0",
                            "text": common.sample(model, tok, prompt, L, args.sample_tokens, 0.8, 40, 0, n_valid=n_valid)})
    by = {r["L"]: r for r in rows}
    hard = synth.HARDEST_TASK
    targets = {
        "prose_gap_L1_minus_default": round(by[1]["prose_val_loss"] - by[D]["prose_val_loss"], 4),
        "prose_gap_target": 0.15,
        "hardest_task": hard,
        "hardest_task_gain_points": round(100 * (by[D][hard] - by[1][hard]), 1),
        "hardest_task_gain_target_points": 30,
        "best_task_gain_points": max((round(100 * (by[D][k] - by[1][k]), 1), k) for k in synth.EVAL_TASKS),
        "loss_at_2x_default_minus_default": round(by[2 * D]["prose_val_loss"] - by[D]["prose_val_loss"], 4),
    }
    targets["prose_gap_met"] = targets["prose_gap_L1_minus_default"] >= 0.15
    targets["hardest_task_gain_met"] = targets["hardest_task_gain_points"] >= 30
    res = {"model": os.path.basename(args.model), "default_loops": D, "per_depth": rows,
           "targets": targets, "samples": samples,
           "settings": {"n_per_task": args.n_task, "val_windows": len(wins), "kjv_val_windows": len(kwins),
                        "window": 256, "task_seed": 2026, "sample_seed": 0},
           "eval_seconds": round(time.time() - t0, 1)}
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    cols = ["L", "prose_val_loss", "kjv_val_loss"] + list(synth.EVAL_TASKS)
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        md.append("| " + " | ".join(
            (f"{r[c]:.3f}" if "loss" in c else (f"{100*r[c]:.1f}%" if c != "L" else f"{r[c]}{' (default)' if r[c]==D else ''}"))
            for c in cols) + " |")
    md.append("")
    md.append("Targets: " + json.dumps(targets))
    md.append("")
    for s in samples:
        md.append(f"**L={s['L']} {s['mode']}** prompt `{s['prompt']}`:\n\n```\n{s['prompt']}{s['text']}\n```\n")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md))
    print("\n".join(md[:len(rows) + 4]))
    print(f"eval done in {time.time()-t0:.0f}s")


if __name__ == "__main__":
    main()
