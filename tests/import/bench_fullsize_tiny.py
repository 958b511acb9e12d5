#!/usr/bin/env python3
"""tools/bench_fullsize.py at a tiny shape, so that the script that made the README's full-size
speed rows keeps running: small random Ouro and Huginn folders (tools/make_hf_checkpoint.py), both
dtypes and thread counts, 8-token prompts and 4 decoded tokens, with the published code as the peer
when TINYLOOP_LOOPED_PEER_DIR names it (laid out as tests/import/looped_peer.py says).

  bench_fullsize_tiny.py TINYLOOP_CLI WORK_DIR

Fails when the script fails (a run that errs, a field missing, a rate that is not positive, or
bench's bytes per token disagreeing with the file's tensors) or when a row the run must have is
missing; prints "SKIPPED: ..." (CTest import.bench_fullsize reports Skipped) after the engine side
passed when the peer is absent.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    cli, work = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for arch in ("ouro", "huginn"):
        subprocess.run([sys.executable, str(ROOT / "tools/make_hf_checkpoint.py"), arch, str(work / arch)],
                       check=True, capture_output=True, timeout=300)
    peer = os.environ.get("TINYLOOP_LOOPED_PEER_DIR", "")
    cmd = [sys.executable, str(ROOT / "tools/bench_fullsize.py"), "--cli", str(cli), "--work", str(work / "files"),
           "--model", str(work / "ouro"), "--model", f"{work / 'huginn'}:4", "--threads", "1,2",
           "--prompt-tokens", "8", "--tokens", "4", "--repeat", "1", "--json", str(work / "rows.json")]
    if peer:
        cmd += ["--peer", peer]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    sys.stderr.write(r.stderr[-4000:])
    out = r.stdout
    skipped = "SKIPPED:" in out
    print(out.replace("SKIPPED:", "(skip line follows)"))
    if r.returncode != 0:
        sys.exit(f"bench_fullsize.py exited {r.returncode}")
    rows = json.load(open(work / "rows.json"))["rows"]
    want = {(m, L, side, d, t) for m, Ls in (("ouro", [3]), ("huginn", [4])) for L in Ls for t in (1, 2)
            for side, d in [("engine", "q8"), ("engine", "q4")] + ([("peer", "bf16")] if peer else [])}
    have = {(x["model"], x["loops"], x["side"], x["dtype"], x["threads"]) for x in rows}
    if want - have:
        sys.exit(f"rows missing: {sorted(want - have)}")
    if "| tinyloop |" not in out or (peer and "| transformers |" not in out):
        sys.exit("the table lacks a side")
    if skipped:
        print("SKIPPED: the published code is not here (TINYLOOP_LOOPED_PEER_DIR is empty); the engine side passed")


if __name__ == "__main__":
    main()
