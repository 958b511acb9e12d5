#!/usr/bin/env python3
"""Evaluate model-f32.tinyloop THROUGH THE ENGINE (the tinyloop_py binding, one thread, greedy)
on heldout.jsonl, and cross-check a few answers with the `tinyloop generate` CLI.

- exact-match accuracy (the output is `=`, the answer digit, <|endoftext|>) at every depth 1..max_depth,
  per size and overall;
- per size: the shallowest depth from which the size is solved (accuracy >= 90% there and at
  every deeper depth measured);
- early exit at the default depth: for each candidate criterion/threshold, accuracy, the mean
  exit depth of the answer token (the token decoded at `=`) per size, and the Spearman rank
  correlation of exit depth with size over all problems; the recommended setting is the
  cheapest (lowest mean exit depth) with Spearman >= 0.8 and accuracy within 2 points of the
  default depth.
Writes work/eval.json and work/eval.md.  Needs no torch: run it with the interpreter the
binding was built for, PYTHONPATH=<build>/python.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import task  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))
import tinyloop_py as tl  # noqa: E402

# (name, CLI criterion, binding criterion, threshold, patience)
EXIT_CANDIDATES = [
    ("argmax p1", "argmax", "argmax_stable", 0.05, 1),
    ("argmax p2", "argmax", "argmax_stable", 0.05, 2),
    ("l2 0.02", "l2", "hidden_l2", 0.02, 1),
    ("l2 0.05", "l2", "hidden_l2", 0.05, 1),
    ("l2 0.1", "l2", "hidden_l2", 0.1, 1),
    ("l2 0.2", "l2", "hidden_l2", 0.2, 1),
    ("kl 0.01", "kl", "kl", 0.01, 1),
    ("kl 0.1", "kl", "kl", 0.1, 1),
    ("margin 2", "margin", "logit_margin", 2.0, 1),
    ("margin 3", "margin", "logit_margin", 3.0, 1),
    ("margin 4", "margin", "logit_margin", 4.0, 1),
    ("margin 5", "margin", "logit_margin", 5.0, 1),
    ("margin 8", "margin", "logit_margin", 8.0, 1),
]


def expected_ids(p):
    return task.encode(task.completion(p["answer"])) + [task.EOS]


def spearman(xs, ys):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else 0.0


def run(model, probs, **cfg):
    """Per problem: (correct, exit depth of the answer token)."""
    out = []
    for p in probs:
        r = model.generate(p["prompt"], max_tokens=4, temperature=0.0, **cfg)
        d = r["stats"]["depth_per_token"]
        out.append((r["output_ids"] == expected_ids(p), d[1] if len(d) > 1 else d[0]))
    return out


def by_size(probs, values):
    acc = {}
    for p, v in zip(probs, values):
        acc.setdefault(p["size"], []).append(v)
    return {s: sum(v) / len(v) for s, v in sorted(acc.items())}


def cli_check(cli, model, model_path, probs, rec):
    """`tinyloop generate` gives the binding's output ids and depths on a few problems, at the
    default depth and with the recommended early exit; returns the number of runs compared."""
    checked = 0
    ee = dict(early_exit_patience=rec["patience"], early_exit_criterion=rec["criterion"],
              early_exit_threshold=rec["threshold"])
    for p in probs:
        base = [cli, "generate", model_path, "--prompt", p["prompt"], "--temperature", "0", "--threads", "1",
                "--max-tokens", "4", "--json", "--quiet"]
        for extra, kw in (([], {}), (["--early-exit", rec["cli"], "--early-exit-threshold", str(rec["threshold"]),
                                      "--early-exit-patience", str(rec["patience"])], ee)):
            j = json.loads(subprocess.run(base + extra, check=True, capture_output=True, text=True).stdout)
            r = model.generate(p["prompt"], max_tokens=4, temperature=0.0, **kw)
            if (j["output_ids"], j["stats"]["depth_per_token"]) != (r["output_ids"], r["stats"]["depth_per_token"]):
                raise SystemExit(f"CLI and binding differ on {p['prompt']!r} {extra}: {j['output_ids']} "
                                 f"{j['stats']['depth_per_token']} vs {r['output_ids']} {r['stats']['depth_per_token']}")
            checked += 1
    return checked


def parity(model, path):
    """Largest |engine - torch reference| over the last-position logits export_model.py wrote,
    relative to the largest logit magnitude of each row; and whether every argmax agrees."""
    worst, same = 0.0, True
    for c in json.load(open(path)):
        got = model.score_last_token(c["prompt"], loops=c["loops"], top_k=1, logits=True)["logits"]
        want = c["logits"]
        worst = max(worst, max(abs(a - b) for a, b in zip(got, want)) / max(abs(b) for b in want))
        same &= max(range(len(got)), key=got.__getitem__) == max(range(len(want)), key=want.__getitem__)
    return worst, same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "model-f32.tinyloop"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("--cli", default=os.path.join(BUILD, "bin", "tinyloop"))
    ap.add_argument("--out", default=os.path.join(HERE, "work", "eval"))
    args = ap.parse_args()
    t0 = time.time()
    probs = task.read_heldout(args.heldout)
    model = tl.load_model(args.model, backend="cpu", threads=1)
    hp = model.hparams
    par = os.path.join(HERE, "work", "parity.json")
    parity_err, parity_argmax = parity(model, par) if os.path.exists(par) else (None, None)
    print(f"engine vs torch reference logits: max relative error {parity_err}, argmax agree {parity_argmax}")
    D, max_depth = hp["default_loops"], min(hp["max_loops"], 2 * hp["default_loops"])
    depths = list(range(1, D + 1)) + [L for L in (12, 16, 20, 24) if D < L <= max_depth]
    table, overall = {}, {}
    for L in depths:
        res = run(model, probs, loops=L)
        table[L] = by_size(probs, [c for c, _ in res])
        overall[L] = sum(c for c, _ in res) / len(res)
        print(f"L={L}: {100 * overall[L]:.1f}%  by size {[round(100 * a) for a in table[L].values()]}", flush=True)
    sizes = sorted(table[D])
    solved_from = {}
    for s in sizes:
        ok = [L for L in depths if all(table[M][s] >= 0.9 for M in depths if M >= L)]
        solved_from[s] = min(ok) if ok else None
    exits = []
    for name, cli_c, crit, thr, pat in EXIT_CANDIDATES:
        res = run(model, probs, loops=D, early_exit_patience=pat, early_exit_criterion=crit,
                  early_exit_threshold=thr)
        acc = sum(c for c, _ in res) / len(res)
        rho = spearman([p["size"] for p in probs], [d for _, d in res])
        mean_depth = sum(d for _, d in res) / len(res)
        exits.append({"name": name, "cli": cli_c, "criterion": crit, "threshold": thr, "patience": pat,
                      "accuracy": round(acc, 4), "spearman_size_vs_exit_depth": round(rho, 4),
                      "mean_exit_depth": round(mean_depth, 3),
                      "mean_exit_depth_by_size": {s: round(v, 2) for s, v in by_size(probs, [d for _, d in res]).items()},
                      "accuracy_by_size": {s: round(v, 3) for s, v in by_size(probs, [c for c, _ in res]).items()}})
        print(f"early exit {name}: acc {100 * acc:.1f}% spearman {rho:.3f} mean depth {mean_depth:.2f} "
              f"{exits[-1]['mean_exit_depth_by_size']}", flush=True)
    good = [e for e in exits if e["spearman_size_vs_exit_depth"] >= 0.8 and e["accuracy"] >= overall[D] - 0.02]
    rec = min(good, key=lambda e: e["mean_exit_depth"]) if good else max(exits, key=lambda e: e["accuracy"])
    recommended = {"criterion": rec["criterion"], "cli": rec["cli"], "threshold": rec["threshold"],
                   "patience": rec["patience"], "min_L": 2, "peek_every": 1, "loops": D}
    n_cli = cli_check(args.cli, model, args.model, probs[::25], recommended) if os.path.exists(args.cli) else 0
    targets = {
        "accuracy_default_depth": round(overall[D], 4), "accuracy_default_depth_target": 0.95,
        "accuracy_L1": round(overall[1], 4), "accuracy_L1_target_at_most": 0.30,
        "solved_from_depth_by_size": solved_from,
        "early_exit_spearman": rec["spearman_size_vs_exit_depth"], "early_exit_spearman_target": 0.8,
        "early_exit_accuracy_minus_default": round(rec["accuracy"] - overall[D], 4),
    }
    res = {"model": os.path.basename(args.model), "default_loops": D, "n_problems": len(probs),
           "accuracy_by_depth": {L: round(a, 4) for L, a in overall.items()},
           "accuracy_by_size_and_depth": {L: {s: round(a, 3) for s, a in t.items()} for L, t in table.items()},
           "early_exit": {"candidates": exits, "recommended": recommended, "chosen": rec["name"]},
           "targets": targets, "cli_cross_checks": n_cli,
           "parity_vs_torch": {"max_relative_error": parity_err, "argmax_agree": parity_argmax,
                               "cases": "8 held-out prompts x depths 1, 2, default, max"}, "engine": "tinyloop_py, cpu, 1 thread, greedy",
           "eval_seconds": round(time.time() - t0, 1)}
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(res, depths, sizes))
    print(json.dumps(targets))
    print(f"eval done in {time.time() - t0:.0f}s")


def markdown(res, depths, sizes):
    D = res["default_loops"]
    md = ["| size \\ L | " + " | ".join(f"{L}{'*' if L == D else ''}" for L in depths) + " |",
          "|---|" + "---|" * len(depths)]
    for s in sizes:
        md.append(f"| {s} | " + " | ".join(f"{round(100 * res['accuracy_by_size_and_depth'][L][s])}" for L in depths) + " |")
    md.append("| all | " + " | ".join(f"{100 * res['accuracy_by_depth'][L]:.1f}" for L in depths) + " |")
    md += ["", "| early exit | accuracy | Spearman | mean exit depth | " +
           " | ".join(f"size {s}" for s in sizes) + " |", "|---|---|---|---|" + "---|" * len(sizes)]
    for e in res["early_exit"]["candidates"]:
        md.append(f"| {e['name']} | {100 * e['accuracy']:.1f}% | {e['spearman_size_vs_exit_depth']:.3f} | "
                  f"{e['mean_exit_depth']:.2f} | " +
                  " | ".join(f"{e['mean_exit_depth_by_size'][s]:.2f}" for s in sizes) + " |")
    md += ["", "Recommended: " + json.dumps(res["early_exit"]["recommended"]), "",
           "Parity with the torch reference: " + json.dumps(res["parity_vs_torch"]), "",
           f"CLI cross-checks (identical output ids and depths): {res['cli_cross_checks']}", "",
           "Targets: " + json.dumps(res["targets"]), ""]
    return "\n".join(md)


if __name__ == "__main__":
    main()
