#!/usr/bin/env python3
"""Short equal-budget ablation runs that choose the prose model's shape (ABLATIONS-v4.md).

Each shape is trained by train.py for the same number of steps (--steps: the same training
tokens whatever the machine's load), exported to work/ablate/SHAPE/, and measured through the
project's engine (the built `tinyloop` CLI), never through torch:

  - per-depth NLL per token on val-sample.txt (the score_sample.py protocol: 1,200-character
    chunks, no special token), read from `tinyloop lens --json` (p_next at every depth 1..16
    from one prefill per chunk; the lens at depth l is the model at depth l, FORMAT.md section 1);
  - early exit: `tinyloop recommend --skip speculation` on the card's tuning text (the first
    1,700 characters of val-sample.txt) finds the policy, written into a copy of the file; then
    `score_sample.py ... --early-exit model` gives its teacher-forced NLL and mean depth;
  - speed: `tinyloop bench --modes plain,early-exit,speculative,tree` on that copy (bench's
    default 256-token prompt and 128 decoded tokens), one thread, ratios of medians within one
    run (speculative and tree must be token-identical to greedy).

    ablate.py train SHAPE [--steps N] [--threads T]     # nice -n 19 is up to the caller
    ablate.py nll SHAPE                                 # per-depth NLL through the engine
    ablate.py exit SHAPE [--loops L]                    # early-exit policy + its NLL at default L
    ablate.py bench SHAPE [--loops L] [--draft-loops D]  # speed, side by side, one run
    ablate.py measure SHAPE [--loops 4,8] [--drafts 1,2] [--no-bench]   # all of the above
    ablate.py table                                     # markdown of everything measured

Results go to work/ablate/SHAPE/*.json (git-ignored). TINYLOOP (env) names the CLI; the default
is the repository's build/bin/tinyloop.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work", "ablate")
TL = os.environ.get("TINYLOOP", os.path.normpath(os.path.join(HERE, "..", "..", "..", "build", "bin", "tinyloop")))
PY = sys.executable

# Every shape: d_model 256, 4 heads / 2 KV heads, d_ff 704, vocab 2048 -> 2,000,128 parameters
# (two blocks + the tied embedding), so the shapes differ only in where the compute goes and
# in the loop's objective.
SHAPES = {
    "v3": {
        "args": [],
        "about": "recipe v3: 1 prelude block + 1 shared layer, depth 2..6, no injection",
    },
    "loop2": {
        "args": ["--n-pre-blocks", "0", "--n-loop-layers", "2"],
        "about": "no prelude, 2 shared layers per pass (the loop carries all block compute), depth 2..6",
    },
    "loop2-inject": {
        "args": ["--n-pre-blocks", "0", "--n-loop-layers", "2", "--loop-input", "add"],
        "about": "loop2 + input injection (the embedding added before every pass after the first)",
    },
    "loop2-inject-deep": {
        "args": ["--n-pre-blocks", "0", "--n-loop-layers", "2", "--loop-input", "add",
                 "--max-train-loops", "8"],
        "about": "loop2-inject trained at depths 2..8 (mean 5 passes instead of 4)",
    },
    # Not run yet: the combination ABLATIONS-v4.md recommends checking before the long run.
    "loop2-deep": {
        "args": ["--n-pre-blocks", "0", "--n-loop-layers", "2", "--max-train-loops", "8"],
        "about": "loop2 trained at depths 2..8, no injection",
    },
}
DEPTHS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16]


def sdir(shape):
    d = os.path.join(WORK, shape)
    os.makedirs(d, exist_ok=True)
    return d


def load_avg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def cmd_train(a):
    d = sdir(a.shape)
    argv = [PY, os.path.join(HERE, "train.py"), "--steps", str(a.steps), "--threads", str(a.threads),
            "--eval-every", "100000", "--out", os.path.join(d, "ckpt.pt")] + SHAPES[a.shape]["args"]
    t0 = time.time()
    with open(os.path.join(d, "train.log"), "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=HERE)
    if r.returncode:
        sys.exit(f"train.py failed ({r.returncode}): see {d}/train.log")
    json.dump({"argv": argv, "wall_s": time.time() - t0, "load_after": load_avg()},
              open(os.path.join(d, "train.json"), "w"), indent=1)
    model_path(a.shape, 4)


def model_path(shape, L):
    """The exported file with default_loops = L (only that header field differs between L)."""
    d = sdir(shape)
    out = os.path.join(d, f"model-L{L}.tinyloop")
    if not os.path.exists(out):
        sys.path.insert(0, HERE)
        import torch
        ck = torch.load(os.path.join(d, "ckpt.pt"), map_location="cpu", weights_only=False)
        ck["hparams"]["default_loops"] = L
        tmp = os.path.join(d, f"ckpt-L{L}.pt")
        torch.save(ck, tmp)
        r = subprocess.run([PY, os.path.join(HERE, "export.py"), "--ckpt", tmp, "--out", out,
                            "--eval", os.path.join(d, "none.json")], capture_output=True, text=True, cwd=HERE)
        os.remove(tmp)
        if r.returncode:
            sys.exit(f"export failed: {r.stdout}\n{r.stderr}")
    return out


def chunks():
    text = open(os.path.join(HERE, "val-sample.txt"), encoding="utf-8").read()
    return [text[i:i + 1200] for i in range(0, len(text), 1200)]


def cmd_nll(a):
    model = model_path(a.shape, 4)
    Lmax = max(DEPTHS)
    tot = {L: 0.0 for L in DEPTHS}
    n = 0
    for c in chunks():
        r = subprocess.run([TL, "lens", model, "--text", c, "--loops", str(Lmax), "--top-k", "1",
                            "--json", "--threads", "1"], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"tinyloop lens failed: {r.stderr}")
        j = json.loads(r.stdout)
        for pos in j["positions"]:
            if pos["next_token"] is None:
                continue
            n += 1
            for dep in pos["depths"]:
                if dep["depth"] in tot:
                    tot[dep["depth"]] += -math.log(max(dep["p_next"], 1e-30))
    res = {"tokens": n, "nll": {str(L): tot[L] / n for L in DEPTHS}}
    # Cross-check one depth against `tinyloop score` (the lens's p_next is printed, not exact).
    r = subprocess.run([PY, os.path.join(HERE, "score_sample.py"), TL, model, "--loops", "4", "--threads", "1"],
                       capture_output=True, text=True)
    res["score_sample_L4"] = r.stdout.strip()
    json.dump(res, open(os.path.join(sdir(a.shape), "nll.json"), "w"), indent=1)
    print(a.shape, json.dumps(res))


def cmd_exit(a):
    d = sdir(a.shape)
    base = model_path(a.shape, a.loops)
    rec = os.path.join(d, f"model-L{a.loops}-rec.tinyloop")
    tune = os.path.join(d, "tune.txt")
    open(tune, "w", encoding="utf-8").write(open(os.path.join(HERE, "val-sample.txt"), encoding="utf-8").read()[:1700])
    argv = [TL, "recommend", base, "--file", tune, "--skip", "speculation", "--out", rec, "--json", "--threads", "1"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"recommend failed: {r.stderr}")
    j = json.loads(r.stdout)
    res = {"recommend_argv": argv, "chosen": j["early_exit"].get("chosen"),
           "nll_tune_at_default": j["early_exit"].get("nll_per_token_at_loops")}
    for label, extra in (("fixed", ["--loops", str(a.loops)]),
                         ("early_exit", ["--loops", str(a.loops), "--early-exit", "model"])):
        r = subprocess.run([PY, os.path.join(HERE, "score_sample.py"), TL, rec] + extra + ["--threads", "1"],
                           capture_output=True, text=True)
        res[label] = r.stdout.strip() or r.stderr.strip()
    json.dump(res, open(os.path.join(d, f"exit-L{a.loops}.json"), "w"), indent=1)
    print(a.shape, json.dumps(res))


def cmd_bench(a):
    d = sdir(a.shape)
    rec = os.path.join(d, f"model-L{a.loops}-rec.tinyloop")
    model = rec if os.path.exists(rec) else model_path(a.shape, a.loops)
    argv = [TL, "bench", model, "--modes", "plain,early-exit,speculative,tree", "--tokens", "128",
            "--prompt-tokens", "256", "--repeat", str(a.repeat), "--threads", "1", "--no-machine",
            "--loops", str(a.loops), "--draft-loops", str(a.draft_loops), "--draft-ahead", str(a.draft_ahead),
            "--json"]
    before = load_avg()
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench failed: {r.stderr}")
    j = json.loads(r.stdout)
    rows = {row["mode"]: {k: row.get(k) for k in ("decode_tok_s", "speedup_vs_plain", "mean_depth",
                                                   "acceptance_rate", "mean_accepted", "identical")}
            for row in j["rows"]}
    res = {"argv": argv, "load_before": before, "load_after": load_avg(), "rows": rows}
    name = f"bench-L{a.loops}-D{a.draft_loops}-K{a.draft_ahead}.json"
    json.dump(res, open(os.path.join(d, name), "w"), indent=1)
    print(a.shape, json.dumps(res))


def cmd_measure(a):
    """nll, then for every L in --loops: exit, and bench at every draft depth in --drafts (< L)."""
    cmd_nll(a)
    for L in [int(x) for x in a.loops.split(",")]:
        cmd_exit(argparse.Namespace(shape=a.shape, loops=L))
        if a.no_bench:
            continue
        for D in [int(x) for x in a.drafts.split(",")]:
            if D < L:
                cmd_bench(argparse.Namespace(shape=a.shape, loops=L, draft_loops=D, draft_ahead=a.draft_ahead,
                                             repeat=a.repeat))


def _load(shape, name):
    p = os.path.join(WORK, shape, name)
    return json.load(open(p)) if os.path.exists(p) else None


def cmd_table(a):
    """Markdown tables of what has been measured (missing cells: '-')."""
    shapes = [s for s in SHAPES if os.path.isdir(os.path.join(WORK, s))]
    print("| shape | tokens | wall min | " + " | ".join(f"L={L}" for L in DEPTHS) + " |")
    print("|---|---|---|" + "---|" * len(DEPTHS))
    for s in shapes:
        nll, tr = _load(s, "nll.json"), _load(s, "train.json")
        cells = [f"{nll['nll'][str(L)]:.3f}" if nll else "-" for L in DEPTHS]
        toks = "-"
        log = os.path.join(WORK, s, "train.log")
        if os.path.exists(log):
            done = [l for l in open(log) if l.startswith("done:")]
            toks = done[-1].split()[3] if done else "-"
        wall = f"{tr['wall_s'] / 60:.1f}" if tr else "-"
        print(f"| {s} | {toks} | {wall} | " + " | ".join(cells) + " |")
    print()
    print("| shape | L | early exit policy (recommend) | fixed L | early exit |")
    print("|---|---|---|---|---|")
    for s in shapes:
        for f in sorted(os.listdir(os.path.join(WORK, s))):
            if f.startswith("exit-L") and f.endswith(".json"):
                e = _load(s, f)
                c = e["chosen"] or {}
                pol = f"{c.get('criterion')} < {c.get('threshold')}, patience {c.get('patience')}, from {c.get('min_L')}"
                print(f"| {s} | {f[6:-5]} | {pol} | {e['fixed']} | {e['early_exit']} |")
    print()
    print("| shape | bench | load before/after | plain tok/s | early exit | chain | tree | chain accept | tree accept | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        for f in sorted(os.listdir(os.path.join(WORK, s))):
            if f.startswith("bench-") and f.endswith(".json"):
                b = _load(s, f)
                r = b["rows"]
                def sp(m):
                    return f"{r[m]['speedup_vs_plain']:.2f}x" if m in r and r[m]["speedup_vs_plain"] else "-"
                def acc(m):
                    return f"{r[m]['acceptance_rate']:.2f}" if m in r and r[m]["acceptance_rate"] is not None else "-"
                ee = r.get("early-exit", {})
                same = all(r[m]["identical"] for m in ("speculative", "tree") if m in r)
                print(f"| {s} | {f[6:-5]} | {b['load_before']} / {b['load_after']} | {r['plain']['decode_tok_s']:.0f} | "
                      f"{sp('early-exit')} (depth {ee.get('mean_depth') or 0:.2f}) | {sp('speculative')} | {sp('tree')} | "
                      f"{acc('speculative')} | {acc('tree')} | {'yes' if same else 'NO'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("train", "nll", "exit", "bench"):
        p = sub.add_parser(name)
        p.add_argument("shape", choices=sorted(SHAPES))
        if name == "train":
            p.add_argument("--steps", type=int, default=400)
            p.add_argument("--threads", type=int, default=1)
        if name in ("exit", "bench"):
            p.add_argument("--loops", type=int, default=4)
        if name == "bench":
            p.add_argument("--draft-loops", type=int, default=1)
            p.add_argument("--draft-ahead", type=int, default=4)
            p.add_argument("--repeat", type=int, default=5)
    p = sub.add_parser("measure")
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("--loops", default="4", help="default depths to measure early exit and speed at, e.g. 4,8")
    p.add_argument("--drafts", default="1,2", help="draft depths of the speculation benches")
    p.add_argument("--draft-ahead", type=int, default=4)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-bench", action="store_true", help="NLL and early-exit policy only (a busy machine)")
    sub.add_parser("table")
    a = ap.parse_args()
    {"train": cmd_train, "nll": cmd_nll, "exit": cmd_exit, "bench": cmd_bench, "measure": cmd_measure,
     "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
