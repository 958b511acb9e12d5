#!/usr/bin/env python3
"""The prose model's targets (issue 19), measured on a shipped file through the engine's CLI.

    measure.py [--model model-f32.tinyloop] [--repeat 7] [--no-bench]

One thread throughout; run it on a quiet machine (no build or training), the bench's ratios are
medians side by side within one `tinyloop bench` run. What it measures:

  - per-depth NLL per token on val-sample.txt (the score_sample.py protocol: 1,200-character
    chunks, no special token) at every depth 1 .. 2 x default, from `tinyloop lens --json`
    (p_next at each depth from one prefill per chunk); the default depth is cross-checked with
    `tinyloop score` (score_sample.py);
  - early exit at the file's default setting (its recommended policy; `score --early-exit model`
    and `--early-exit l2` when the recommendation is hidden_l2): teacher-forced NLL and mean depth
    against the fixed default depth;
  - speed: `tinyloop bench --modes plain,early-exit,speculative,tree` with bench's defaults (the
    file's recommended draft depth, draft length and tree width, else the built-in ones): decode
    tok/s ratios against plain greedy, token identity, acceptance;
  - the file's size.

--candidates 4,6,8 compares default depths before one is shipped: work/ckpt.pt exported with
each (export.py --default-loops), each given its own recommendation, each measured as above.

Writes work/measure.json and prints the targets table as markdown. TINYLOOP (env) names the
CLI; the default is the repository's build/bin/tinyloop.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TL = os.environ.get("TINYLOOP", os.path.normpath(os.path.join(HERE, "..", "..", "..", "build", "bin", "tinyloop")))
PY = sys.executable


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(argv)}\n{r.stderr.strip()}")
    return r.stdout


def load_avg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def chunks():
    text = open(os.path.join(HERE, "val-sample.txt"), encoding="utf-8").read()
    return [text[i:i + 1200] for i in range(0, len(text), 1200)]


def per_depth_nll(model, lmax):
    tot = [0.0] * (lmax + 1)
    n = 0
    for c in chunks():
        j = json.loads(run([TL, "lens", model, "--text", c, "--loops", str(lmax), "--top-k", "1", "--json",
                            "--threads", "1"]))
        for pos in j["positions"]:
            if pos["next_token"] is None:
                continue
            n += 1
            for dep in pos["depths"]:
                tot[dep["depth"]] += -math.log(max(dep["p_next"], 1e-30))
    return n, {L: tot[L] / n for L in range(1, lmax + 1)}


def score_sample(model, extra):
    out = run([PY, os.path.join(HERE, "score_sample.py"), TL, model] + extra + ["--threads", "1"]).strip()
    # "<file>: 2.9436 nats/token over 11217 tokens[, mean depth 1.93]"
    nll = float(out.split(": ")[1].split()[0])
    depth = float(out.rsplit("mean depth ", 1)[1]) if "mean depth" in out else None
    return {"line": out, "nll": nll, "mean_depth": depth}


def measure(model, repeat, no_bench, nll=None, n=None):
    """Every measure of one file; `nll` (depth -> NLL, up to 2 x its default) may be passed in."""
    info = json.loads(run([TL, "info", model, "--json"]))
    L = info["hparams"]["default_loops"]
    meta = info.get("metadata") or {}
    rec = meta.get("recommended", {}) if isinstance(meta, dict) else {}
    res = {"model": model, "default_loops": L, "recommended": rec, "load_before": load_avg(),
           "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if nll is None:
        n, nll = per_depth_nll(model, 2 * L)
    res["nll_tokens"] = n
    res["nll"] = {d: nll[d] for d in range(1, 2 * L + 1)}
    res["score_fixed"] = score_sample(model, ["--loops", str(L)])
    res["score_early_exit_model"] = score_sample(model, ["--loops", str(L), "--early-exit", "model"])
    crit = (rec.get("early_exit") or {}).get("criterion")
    if crit == "hidden_l2":
        res["score_early_exit_l2"] = score_sample(model, ["--loops", str(L), "--early-exit", "l2"])
    if not no_bench:
        argv = [TL, "bench", model, "--modes", "plain,early-exit,speculative,tree", "--repeat", str(repeat),
                "--threads", "1", "--no-machine", "--json"]
        res["bench_argv"] = argv
        j = json.loads(run(argv))
        res["bench"] = {row["mode"]: {k: row.get(k) for k in (
            "decode_tok_s", "speedup_vs_plain", "mean_depth", "acceptance_rate", "mean_accepted", "identical",
            "draft_loops", "draft_ahead", "branches", "early_exit", "early_exit_threshold")} for row in j["rows"]}
    res["load_after"] = load_avg()
    res["rows"] = target_rows(res)
    return res


def target_rows(res):
    L, nll = res["default_loops"], res["nll"]
    steps = [nll[d + 1] - nll[d] for d in range(1, L)]
    rows = [("per-depth NLL, L=1 .. " + str(L), " ".join(f"{nll[d]:.4f}" for d in range(1, L + 1)),
             "non-increasing, each step <= +0.002", all(x <= 0.002 for x in steps)),
            (f"NLL at 2x default (L={2 * L}) - default", f"{nll[2 * L] - nll[L]:+.4f}", "<= +0.03",
             nll[2 * L] - nll[L] <= 0.03),
            ("NLL L=1 -> default", f"{nll[1] - nll[L]:.4f} lower", ">= 0.15 lower (stretch)", nll[1] - nll[L] >= 0.15),
            ("NLL at the default depth (val-sample, score)", f"{res['score_fixed']['nll']:.4f}", "<= 2.95",
             res["score_fixed"]["nll"] <= 2.95)]
    ee, fx = res["score_early_exit_model"], res["score_fixed"]
    rel = ee["nll"] / fx["nll"] - 1
    rows.append(("early exit (model's policy): NLL vs fixed default",
                 f"{rel * 100:+.2f}% at mean depth {ee['mean_depth']}", "within 1%", abs(rel) <= 0.01))
    if "bench" in res:
        b = res["bench"]
        ex, ch, tr = b.get("early-exit", {}), b.get("speculative", {}), b.get("tree", {})
        rows.append(("early exit vs fixed default, decode",
                     f"{ex.get('speedup_vs_plain') or 0:.2f}x (depth {ex.get('mean_depth')})",
                     ">= 1.5x", (ex.get("speedup_vs_plain") or 0) >= 1.5))
        rows.append(("chain vs plain greedy (bench defaults)",
                     f"{ch.get('speedup_vs_plain') or 0:.2f}x, identical {ch.get('identical')}",
                     ">= 1.8x", (ch.get("speedup_vs_plain") or 0) >= 1.8 and bool(ch.get("identical"))))
        rows.append(("tree vs plain greedy", f"{tr.get('speedup_vs_plain') or 0:.2f}x, identical {tr.get('identical')}",
                     ">= chain", (tr.get("speedup_vs_plain") or 0) >= (ch.get("speedup_vs_plain") or 0)))
    return rows


def print_targets(res, flush=False):
    print(f"{os.path.basename(res['model'])}, default depth {res['default_loops']}, {res['nll_tokens']} tokens of "
          f"val-sample.txt, one thread, load {res['load_before']} -> {res['load_after']}")
    print("| measure | measured | target | met? |\n| --- | --- | --- | --- |")
    for name, got, target, ok in res["rows"]:
        print(f"| {name} | {got} | {target} | {'met' if ok else '**missed**'} |")
    print("", flush=flush)


def candidate_file(L, recipe):
    """work/cand-L{L}.tinyloop: work/ckpt.pt exported with default depth L, with its own recommendation."""
    out = os.path.join(HERE, "work", f"cand-L{L}.tinyloop")
    run([PY, os.path.join(HERE, "export.py"), "--default-loops", str(L), "--out", out] +
        (["--recipe", recipe] if recipe else []))
    tune = os.path.join(HERE, "work", "tune.txt")
    open(tune, "w", encoding="utf-8").write(open(os.path.join(HERE, "val-sample.txt"), encoding="utf-8").read()[:1700])
    rec = run([TL, "recommend", out, "--file", tune, "--threads", "1", "--write"])
    open(os.path.join(HERE, "work", f"cand-L{L}-recommend.txt"), "w").write(rec)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "model-f32.tinyloop"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-bench", action="store_true", help="NLL and early exit only (a busy machine)")
    ap.add_argument("--candidates", default="",
                    help="default depths to compare before shipping, e.g. 4,6,8: work/ckpt.pt exported with each "
                         "(work/cand-L*.tinyloop), given its own `tinyloop recommend --write`, and measured")
    ap.add_argument("--recipe", default="", help="with --candidates: export.py --recipe")
    ap.add_argument("--out", default=os.path.join(HERE, "work", "measure.json"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)

    if a.candidates:
        Ls = [int(x) for x in a.candidates.split(",")]
        files, results = {}, {}
        for L in Ls:  # one candidate at a time, saved as it goes (a long run may be cut)
            files[L] = candidate_file(L, a.recipe)
            if L == Ls[0]:
                n, nll = per_depth_nll(files[L], 16)
            results[L] = measure(files[L], a.repeat, a.no_bench, nll, n)
            json.dump({str(k): r for k, r in results.items()}, open(a.out, "w"), indent=1)
            print_targets(results[L], flush=True)
        print("| L | " + " | ".join(str(d) for d in range(1, 17)) + " |")
        print("| --- " * 17 + "|")
        print("| NLL | " + " | ".join(f"{nll[d]:.4f}" for d in range(1, 17)) + " |")
        return

    res = measure(a.model, a.repeat, a.no_bench)
    json.dump(res, open(a.out, "w"), indent=1)
    print_targets(res)
    L = res["default_loops"]
    print("\n| L | " + " | ".join(str(d) for d in range(1, 2 * L + 1)) + " |")
    print("| --- " * (2 * L + 1) + "|")
    print("| NLL | " + " | ".join(f"{res['nll'][d]:.4f}" for d in range(1, 2 * L + 1)) + " |")
    print(f"\nf32 file: {os.path.getsize(a.model):,} bytes (target <= 25 MB)")


if __name__ == "__main__":
    main()
