#!/usr/bin/env python3
"""Speed of imported looped checkpoints against the published modeling code, side by side.

  bench_fullsize.py --cli build/bin/tinyloop --work DIR --model HF_DIR[:L,L,...] [--model ...]
                    [--peer PEER_DIR] [--dtypes q8,q4] [--threads 1,2] [--prompt-tokens 64]
                    [--tokens 32] [--repeat 3] [--rounds 1] [--peer-dtypes bf16[,f32]]
                    [--peer-threads 1[,2]] [--json OUT]

For every Hugging Face folder (Ouro or Huginn-0125, e.g. a random one from
tools/make_hf_checkpoint.py --full-size) and every depth L (default: the model's own):

  engine  the folder imported once per dtype (`tinyloop import HF DIR/NAME-DTYPE.tinyloop --dtype
          q8|q4`, kept in --work and reused while newer than the folder's config.json), then one
          `tinyloop bench FILE --modes plain --threads T --loops L --json` process per dtype x
          thread count: load time (open_model), resident bytes after the runs, the process's peak
          resident bytes (wait4), prefill tok/s (a P-token prompt to its first token) and decode
          tok/s (N greedy tokens after it), medians of --repeat runs; and, in the same process just
          before, this machine's read bandwidth with T threads (a 256 MiB stream read with the
          widest vector loads, bench's `machine` block).
  peer    (with --peer) the published modeling code on the same folder through transformers, in a
          child process of this script with torch.set_num_threads(T): OuroForCausalLM or
          RavenForCausalLM .from_pretrained(HF, torch_dtype=each of --peer-dtypes) (the model cards' way of
          loading), then a P-token forward with a fresh cache and N one-token greedy forwards
          (Ouro: its UniversalTransformerCache, all T steps; Huginn: HuginnDynamicCache,
          num_steps=L, init_scale=0, cache_position given), each timed with the clock around the
          forward calls only; and torch's own read bandwidth with T threads (sum of a 512 MiB
          tensor, best of 3). The published code is outside the repository (PEER_DIR laid out as
          tests/import/looped_peer.py says).

The two sides run alternately, so ratios come from neighbouring runs: per thread count, the engine
at every depth and dtype (one process each), then the peer at every depth (one process, one load);
--rounds repeats the whole sweep.

Derived, per row: weight bytes read per decoded token = unshared blocks (prelude, coda) + (loop
block + adapter) x passes + head (or the tied embedding) + final norm, as stored (engine: from
`tinyloop info --json`, checked against bench's own bytes_per_token; peer: the module's parameter
bytes by the same rule); KV bytes per token at the mean context (engine: bench's; its f32 cache);
bound tok/s = measured read bandwidth / (weight + KV bytes per token); fraction = decode tok/s /
bound. Exit status 1 when a run fails or the two byte counts disagree by more than 0.1%.

Targets printed at the end (issue 36, item 4): decode >= 0.8 of the bound at q4 with two threads;
q4 decode >= 3x the peer's fastest decode at that depth (over its thread counts and dtypes).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class MeasuredPopen(subprocess.Popen):
    """Popen whose wait() records the child's peak resident set (ru_maxrss, KiB on Linux)."""

    def _try_wait(self, wait_flags):
        try:
            pid, sts, ru = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            pid, sts = self.pid, 0
            ru = None
        if ru is not None and pid == self.pid:
            self._tl_maxrss = ru.ru_maxrss * 1024
        return (pid, sts)


def run_child(cmd, env=None, timeout=None):
    p = MeasuredPopen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return 124, out, err, 0
    return p.returncode, out, err, getattr(p, "_tl_maxrss", 0)


# ------------------------------------------------------------------------------ engine side


def stream_read_gbs(threads, nbytes=2 << 30, reps=3):
    """This machine's read bandwidth with `threads` threads: numpy sums of a 2 GiB uint64 array (over
    four times this machine's 480 MiB L3, so DRAM), split in `threads` parts summed by as many Python
    threads (numpy releases the GIL), best of `reps`."""
    import threading

    import numpy as np
    x = np.ones(nbytes // 8, dtype=np.uint64)
    parts = np.array_split(x, threads)
    best = 1e30
    for _ in range(reps):
        out = [0] * threads

        def work(i):
            out[i] = int(parts[i].sum())
        th = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        best = min(best, time.perf_counter() - t0)
        assert sum(out) == x.size
    return x.nbytes / best / 1e9


def import_file(cli, hf, work, dtype, threads):
    out = Path(work) / f"{Path(hf).name}-{dtype}.tinyloop"
    if out.exists() and out.stat().st_mtime >= (Path(hf) / "config.json").stat().st_mtime:
        return out, None
    cmd = [str(cli), "import", str(hf), str(out), "--dtype", dtype, "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    rc, so, se, peak = run_child(cmd)
    if rc != 0:
        raise RuntimeError(f"import {hf} --dtype {dtype} failed ({rc}): {se[-2000:]}")
    j = json.loads(so)
    return out, {"seconds": j["seconds"], "file_bytes": j["file_bytes"], "peak_resident_bytes": peak}


def weight_bytes_per_token(info, L):
    """Bytes of stored weights a decoded token reads at depth L, from `tinyloop info --json`."""
    names = {t["name"] for t in info["tensors"]}
    total = 0
    for t in info["tensors"]:
        n, b = t["name"], t["bytes"]
        if n.startswith(("pre.", "coda.")):
            total += b
        elif n.startswith("loop.") or n == "adapter":
            total += b * L
        elif n == "head" or (n == "embed" and "head" not in names) or n == "final_norm":
            total += b
    return total


def engine_cell(cli, path, dtype, threads, L, a):
    cmd = [str(cli), "bench", str(path), "--modes", "plain", "--threads", str(threads), "--loops", str(L),
           "--prompt-tokens", str(a.prompt_tokens), "--tokens", str(a.tokens), "--repeat", str(a.repeat), "--json"]
    t0 = time.time()
    rc, so, se, peak = run_child(cmd)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({rc}): {se[-2000:]}")
    j = json.loads(so)
    row = [r for r in j["rows"] if r["mode"] == "plain"][0]
    mach = [m for m in j["machine"]["per_threads"] if m["threads"] == threads][0]
    return {"side": "engine", "dtype": dtype, "threads": threads, "loops": L, "load_s": row["load_ms"] / 1e3,
            "resident_bytes": row["resident_bytes"], "peak_resident_bytes": peak,
            "prefill_tok_s": row["prefill_tok_s"], "decode_tok_s": row["decode_tok_s"],
            "bench_bytes_per_token": row["bytes_per_token"], "kv_bytes_per_token": row["kv_bytes_per_token"],
            "bench_read_gbs": mach["read_gbs"], "wall_s": time.time() - t0, "command": " ".join(cmd)}


# ------------------------------------------------------------------------------ peer side


def peer_cells(a, hf, threads, loops, dtype):
    """One peer process (one load) for every depth: a row per depth."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--peer-child", str(a.peer), str(hf), str(threads),
           ",".join(map(str, loops)), str(a.prompt_tokens), str(a.tokens), str(a.repeat), dtype]
    t0 = time.time()
    rc, so, se, peak = run_child(cmd)
    if rc != 0:
        raise RuntimeError(f"peer child failed ({rc}): {se[-3000:]}")
    rows = json.loads(so.strip().splitlines()[-1])
    for r in rows:
        r.update({"side": "peer", "dtype": dtype, "threads": threads, "peak_resident_bytes": peak,
                  "wall_s": time.time() - t0})
    return rows


def peer_child(argv):
    peer, hf, threads, loops, P, N, repeat, dtype_name = argv
    threads, P, N, repeat = int(threads), int(P), int(N), int(repeat)
    loops = [int(x) for x in loops.split(",")]
    peer, hf = Path(peer), Path(hf)
    cfg = json.load(open(hf / "config.json"))
    arch = cfg["architectures"][0]
    # Huginn's caches are written for transformers <= 4.53 (4.54 made key_cache a property of
    # DynamicCache and gave Cache.__init__ a required argument): PEER/huginn-site holds 4.53.x.
    first = [peer / "huginn-site"] if arch == "RavenForCausalLM" and (peer / "huginn-site").is_dir() else []
    sys.path[:0] = [str(p) for p in first + [peer / "site", peer]]
    import torch

    torch.set_num_threads(threads)
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype_name]

    # torch's own read bandwidth with these threads: the sum of a 256 MiB tensor, best of 3.
    x = torch.ones(64 << 20, dtype=torch.float32)
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        float(x.sum())
        best = min(best, time.perf_counter() - t0)
    read_gbs = x.numel() * 4 / best / 1e9
    del x

    fields = {k: v for k, v in cfg.items() if k not in ("architectures", "auto_map", "model_type")}
    t0 = time.perf_counter()
    if arch == "OuroForCausalLM":
        from ouro.configuration_ouro import OuroConfig
        from ouro.modeling_ouro import OuroForCausalLM
        config = OuroConfig(**fields)
        model = OuroForCausalLM.from_pretrained(str(hf), config=config, torch_dtype=dtype,
                                                attn_implementation="sdpa").eval()
    elif arch == "RavenForCausalLM":
        from huginn.raven_config_minimal import RavenConfig
        from huginn.raven_modeling_minimal import RavenForCausalLM
        model = RavenForCausalLM.from_pretrained(str(hf), config=RavenConfig(**fields), torch_dtype=dtype).eval()
    else:
        sys.exit(f"unknown architecture {arch}")
    load_s = time.perf_counter() - t0

    # Bytes of parameters a decoded token reads, by the engine's rule.
    def pbytes(mod):
        return sum(p.numel() * p.element_size() for p in mod.parameters())
    def wbytes(L):
        if arch == "OuroForCausalLM":
            m = model.model
            return (pbytes(m.layers) + pbytes(m.norm) + pbytes(m.early_exit_gate)) * L + pbytes(model.lm_head)
        tr = model.transformer
        return (pbytes(tr.prelude) + pbytes(tr.coda) + (pbytes(tr.core_block) + pbytes(tr.adapter)) * L +
                pbytes(model.lm_head) + pbytes(tr.ln_f))

    import numpy as np
    rng = np.random.default_rng(1)
    vocab = cfg["vocab_size"]
    prompt = torch.tensor([rng.integers(0, min(vocab, 30000), P).tolist()])

    def once(n_tokens, L):
        if arch == "OuroForCausalLM":  # the depth: what OuroModel.forward loops over and sizes its cache by
            model.model.total_ut_steps = config.total_ut_steps = L
        with torch.no_grad():
            if arch == "OuroForCausalLM":
                from ouro.modeling_ouro import UniversalTransformerCache
                cache = UniversalTransformerCache(config.num_hidden_layers * L)
                t0 = time.perf_counter()
                out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t1 = time.perf_counter()
                for _ in range(n_tokens):
                    out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t2 = time.perf_counter()
            else:
                from huginn.raven_modeling_minimal import HuginnStaticCache
                # The preallocated cache of the published code (generate's cache_implementation="static"):
                # one slot per prelude block, core block x step and coda block (negative indices).
                c = model.config
                cache = HuginnStaticCache(max_length=P + n_tokens + 1, num_heads=c.num_key_value_heads,
                                          max_num_steps=c.n_layers_in_prelude + c.n_layers_in_recurrent_block * L +
                                          c.n_layers_in_coda, hidden_dim=c.n_embd // c.num_attention_heads,
                                          dtype=dtype)
                t0 = time.perf_counter()
                out = model(prompt, num_steps=L, past_key_values=cache, use_cache=True, init_scale=0.0,
                            cache_position=torch.arange(P))
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t1 = time.perf_counter()
                for i in range(n_tokens):
                    out = model(nxt, num_steps=L, past_key_values=out.past_key_values, use_cache=True,
                                init_scale=0.0, cache_position=torch.arange(P + i, P + i + 1))
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t2 = time.perf_counter()
        return P / (t1 - t0), n_tokens / (t2 - t1)

    out = []
    for L in loops:
        once(min(N, 2), L)  # warm-up
        runs = [once(N, L) for _ in range(repeat)]
        rss = 0
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        out.append({"loops": L, "load_s": load_s, "resident_bytes": rss,
                    "prefill_tok_s": statistics.median(r[0] for r in runs),
                    "decode_tok_s": statistics.median(r[1] for r in runs),
                    "weight_bytes_per_token": wbytes(L), "torch_read_gbs": read_gbs,
                    "torch": torch.__version__, "transformers": __import__("transformers").__version__})
    print(json.dumps(out))


# ------------------------------------------------------------------------------ report


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b / k:.2f} {unit}"
    return f"{b} B"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer-child":
        return peer_child(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--bandwidth-child":
        print(stream_read_gbs(int(sys.argv[2])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the tinyloop binary")
    ap.add_argument("--work", required=True, help="where the imported files are kept")
    ap.add_argument("--model", action="append", required=True, help="HF_DIR or HF_DIR:L,L,... (depths)")
    ap.add_argument("--peer", help="PEER_DIR: the published code and transformers 4.54.x (tests/import/looped_peer.py)")
    ap.add_argument("--dtypes", default="q8,q4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peer-dtypes", default="bf16", help="bf16, f32 or both (bf16,f32): the peer's weights; "
                    "'vs peer' compares with the fastest")
    ap.add_argument("--import-threads", type=int, default=0)
    ap.add_argument("--peer-threads", help="the peer's thread counts (default: --threads); on a loaded 2-core "
                    "machine torch at 2 threads can run several times slower than at 1")
    ap.add_argument("--json", help="write every row here")
    a = ap.parse_args()
    for name, lo, hi in (("prompt_tokens", 1, 4096), ("tokens", 1, 4096), ("repeat", 1, 100), ("rounds", 1, 100)):
        v = getattr(a, name)
        if not lo <= v <= hi:
            ap.error(f"--{name.replace('_', '-')}: {v} is outside {lo} to {hi}")
    dtypes = a.dtypes.split(",")
    for d in dtypes:
        if d not in ("q8", "q4", "bf16", "f32", "f16"):
            ap.error(f"--dtypes: {d} is not one of q8, q4, bf16, f32, f16")
    threads = [int(t) for t in a.threads.split(",")]
    peer_threads = [int(t) for t in (a.peer_threads or a.threads).split(",")]
    peer_dtypes = a.peer_dtypes.split(",")
    for d in peer_dtypes:
        if d not in ("bf16", "f32"):
            ap.error(f"--peer-dtypes: {d} is not bf16 or f32")
    if a.peer and not (Path(a.peer) / "ouro" / "modeling_ouro.py").exists():
        ap.error(f"--peer: {a.peer} has no ouro/modeling_ouro.py (layout: tests/import/looped_peer.py)")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    rows, failed = [], 0
    imports = {}
    for spec in a.model:
        hf, _, ls = spec.partition(":")
        cfg = json.load(open(Path(hf) / "config.json"))
        default_L = cfg.get("total_ut_steps", cfg.get("mean_recurrence"))
        loops = [int(x) for x in ls.split(",")] if ls else [default_L]
        files = {}
        for d in dtypes:
            files[d], imp = import_file(a.cli, hf, a.work, d, a.import_threads)
            if imp:
                imports[f"{Path(hf).name}-{d}"] = imp
                log(f"imported {hf} -> {files[d]}: {imp['seconds']:.1f} s, {human(imp['file_bytes'])}")
        infos = {d: json.loads(subprocess.run([str(a.cli), "info", str(files[d]), "--json"], check=True,
                                              capture_output=True, text=True).stdout) for d in dtypes}
        for rnd in range(a.rounds):
            for t in threads:
                group = []
                # In a child, so that this process stays small: a child's peak resident set
                # (wait4) starts from its parent's at fork.
                gbs = float(subprocess.run([sys.executable, __file__, "--bandwidth-child", str(t)], check=True,
                                           capture_output=True, text=True).stdout)
                log(f"read bandwidth, {t} thread(s), 2 GiB: {gbs:.2f} GB/s")
                for L in loops:
                    for d in dtypes:
                        r = engine_cell(a.cli, files[d], d, t, L, a)
                        r["weight_bytes_per_token"] = weight_bytes_per_token(infos[d], L)
                        wb = r["bench_bytes_per_token"] - r["kv_bytes_per_token"]
                        if abs(wb - r["weight_bytes_per_token"]) > 1e-3 * r["weight_bytes_per_token"]:
                            log(f"bench counts {wb:.0f} weight bytes per token, the file's tensors "
                                f"{r['weight_bytes_per_token']}: they disagree")
                            failed += 1
                        r.update(model=Path(hf).name, round=rnd, stream_read_gbs=gbs)
                        group.append(r)
                        log(f"{r['model']} L={L} {d} t={t}: prefill {r['prefill_tok_s']:.2f} decode "
                            f"{r['decode_tok_s']:.3f} tok/s")
                for pd in peer_dtypes if a.peer and t in peer_threads else []:
                    for r in peer_cells(a, hf, t, loops, pd):
                        r.update(model=Path(hf).name, round=rnd, kv_bytes_per_token=0, stream_read_gbs=gbs)
                        group.append(r)
                        log(f"{r['model']} L={r['loops']} peer {pd} t={t}: prefill "
                            f"{r['prefill_tok_s']:.2f} decode {r['decode_tok_s']:.3f} tok/s")
                # The bound uses the highest read bandwidth measured for this group (the script's
                # 2 GiB read, bench's 256 MiB read in each engine process): the strictest bound.
                best = max([gbs] + [g["bench_read_gbs"] for g in group if "bench_read_gbs" in g])
                for g in group:
                    g["read_gbs"] = best
                rows += group
                if a.json:  # as it goes: a run cut short keeps its finished groups
                    json.dump({"rows": rows, "imports": imports, "args": vars(a), "partial": True},
                              open(a.json, "w"), indent=1)
    for r in rows:
        r["bytes_per_token"] = r["weight_bytes_per_token"] + r["kv_bytes_per_token"]
        r["bound_tok_s"] = r["read_gbs"] * 1e9 / r["bytes_per_token"]
        r["bound_fraction"] = r["decode_tok_s"] / r["bound_tok_s"]
        for k in ("prefill_tok_s", "decode_tok_s", "load_s", "resident_bytes"):
            if not r[k] > 0:
                log(f"{r['model']} {r['side']} {r['dtype']}: {k} = {r[k]} (must be > 0)")
                failed += 1

    print("| model | L | side | dtype | threads | load s | resident | peak | prefill tok/s | decode tok/s "
          "| weight bytes/token | read GB/s | bound tok/s | of bound | vs peer |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    targets = []
    for r in rows:
        # Against the peer's fastest decode at this depth in this round, over its thread counts and
        # dtypes (its best here; torch at 2 threads on a loaded 2-core machine can be far slower than at 1).
        peer = [p for p in rows if p["side"] == "peer" and p["model"] == r["model"] and p["loops"] == r["loops"]
                and p["round"] == r["round"]]
        vs = (r["decode_tok_s"] / max(p["decode_tok_s"] for p in peer) if peer and r["side"] == "engine"
              else None)
        r["vs_peer_decode"] = vs
        print(f"| {r['model']} | {r['loops']} | {'tinyloop' if r['side'] == 'engine' else 'transformers'} | "
              f"{r['dtype']} | {r['threads']} | {r['load_s']:.3g} | {human(r['resident_bytes'])} | "
              f"{human(r['peak_resident_bytes'])} | {r['prefill_tok_s']:.2f} | {r['decode_tok_s']:.3f} | "
              f"{r['weight_bytes_per_token'] / 1e9:.3g} GB | {r['read_gbs']:.1f} | {r['bound_tok_s']:.3g} | "
              f"{r['bound_fraction']:.2f} | {'' if vs is None else f'{vs:.2f}x'} |")
        if r["side"] == "engine" and r["dtype"] == "q4":
            if r["threads"] == 2:
                targets.append((f"{r['model']} L={r['loops']} q4 2 threads: decode at {r['bound_fraction']:.2f} of "
                                f"the bandwidth bound (target >= 0.8)", r["bound_fraction"] >= 0.8))
            if vs is not None:
                targets.append((f"{r['model']} L={r['loops']} q4 {r['threads']} thread(s): {vs:.2f}x the peer's "
                                f"best decode (target >= 3x)", vs >= 3.0))
    print("\nresident: after the runs, the model open; peak: the process's maximum (wait4), which includes "
          "the 256 MiB array of the read-bandwidth measurement each process makes first. Weight bytes: "
          "read per decoded token as stored (the peer's: its parameters in its dtype); bound: read GB/s / "
          "(weight + KV bytes per token), KV counted for tinyloop (its f32 cache at the mean context) only; "
          "vs peer: decode over the peer's fastest decode at that depth (any thread count or dtype).")
    print()
    for text, ok in targets:
        print(f"{'met    ' if ok else 'NOT MET'}  {text}")
    if imports:
        print("\nimports:", json.dumps(imports))
    if a.json:
        json.dump({"rows": rows, "imports": imports, "args": vars(a)}, open(a.json, "w"), indent=1)
    if failed:
        print(f"FAILED: {failed} check(s)")
        return 1
    if not a.peer:
        print("SKIPPED: the peer (--peer PEER_DIR, the published modeling code) is absent; the engine side ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
