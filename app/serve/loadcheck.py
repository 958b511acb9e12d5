#!/usr/bin/env python3
"""Load check for `tinyloop serve` (not a timed test): a bounded burst on loopback.

    PYTHONPATH=build/python build/pyenv/bin/python app/serve/loadcheck.py MODEL \
        [--requests 300] [--concurrency 8] [--max-queue 6] [--stream-ratio 0.5]

Starts the server on a free loopback port (python3 app/serve/server.py MODEL --max-queue N),
warms it up, then sends --requests greedy completions, --concurrency at a time, a mix of
streamed and plain ones over a few prompts and lengths. Every request must either complete with
exactly the text the binding computes for it (greedy, so it is known in advance) or be refused
with 503; anything else (another status, a broken stream, a wrong text) counts as lost or
corrupted. The server's VmRSS is read from /proc before and after the burst (after a warm-up
burst of the same shape), and must stay flat. Prints the figures; exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

import tinyloop_py as tl

HERE = Path(__file__).resolve().parent
PROMPTS = ["In the beginning", "Hello, world", "The quick brown fox", "0123456789", "a", "Once upon a time there was",
           "To be or not to be", "TinyLoop"]
LENGTHS = [1, 8, 32, 64]


def vm_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected_texts(model_path: str) -> dict:
    """(prompt, max_tokens) -> the greedy text as the server streams it (the events' pieces)."""
    out = {}
    with tl.load_model(model_path) as m:
        for p in PROMPTS:
            for n in LENGTHS:
                r = m.generate(p, max_tokens=n, events=True)
                out[(p, n)] = "".join(e["piece"] for e in r["events"])
    return out


async def one(client: httpx.AsyncClient, base: str, prompt: str, n: int, stream: bool, want: str) -> tuple[str, float]:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": stream}
    t0 = time.perf_counter()
    try:
        if not stream:
            r = await client.post(base + "/v1/completions", json=body)
            if r.status_code == 503:
                return "refused", time.perf_counter() - t0
            if r.status_code != 200:
                return f"status {r.status_code}: {r.text[:200]}", 0.0
            j = r.json()
            text = j["choices"][0]["text"]
            if j["usage"]["completion_tokens"] > n:
                return "usage over max_tokens", 0.0
        else:
            async with client.stream("POST", base + "/v1/completions", json=body) as r:
                if r.status_code == 503:
                    await r.aread()
                    return "refused", time.perf_counter() - t0
                if r.status_code != 200:
                    return f"status {r.status_code}", 0.0
                parts, done = [], False
                async for line in r.aiter_lines():
                    if not line:
                        continue
                    if not line.startswith("data: "):
                        return f"bad SSE line {line[:80]!r}", 0.0
                    data = line[6:]
                    if data == "[DONE]":
                        done = True
                        continue
                    c = json.loads(data)
                    if "error" in c:
                        return "error event: " + c["error"]["message"], 0.0
                    parts.append(c["choices"][0]["text"])
                if not done:
                    return "stream ended without [DONE]", 0.0
                text = "".join(parts)
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}", 0.0
    if text != want:
        return f"corrupted text for {prompt!r}/{n}: {text!r} != {want!r}", 0.0
    return "ok", time.perf_counter() - t0


async def burst(base: str, want: dict, total: int, concurrency: int, stream_ratio: float, seed: int,
                sample_pid: int | None = None) -> dict:
    rng = random.Random(seed)
    jobs = [(rng.choice(PROMPTS), rng.choice(LENGTHS), rng.random() < stream_ratio) for _ in range(total)]
    sem = asyncio.Semaphore(concurrency)
    results: list[tuple[str, float, bool]] = []
    peak = [0]

    async def run(job):
        async with sem:
            p, n, s = job
            status, dt = await one(client, base, p, n, s, want[(p, n)])
            results.append((status, dt, s))
            if sample_pid:
                peak[0] = max(peak[0], vm_rss_kb(sample_pid))

    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(run(j) for j in jobs))
        wall = time.perf_counter() - t0
    ok = [r for r in results if r[0] == "ok"]
    return {
        "sent": total, "completed": len(ok), "refused": sum(1 for r in results if r[0] == "refused"),
        "failed": [r[0] for r in results if r[0] not in ("ok", "refused")],
        "streamed_ok": sum(1 for r in ok if r[2]), "wall_s": wall,
        "lat_p50_ms": 1000 * statistics.median([r[1] for r in ok]) if ok else 0.0,
        "lat_p95_ms": 1000 * sorted(r[1] for r in ok)[int(0.95 * (len(ok) - 1))] if ok else 0.0,
        "peak_rss_kb": peak[0], "answered": len(results),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-queue", type=int, default=6, help="the server's --max-queue (below --concurrency: some 503s)")
    ap.add_argument("--max-concurrent", type=int, default=4)
    ap.add_argument("--stream-ratio", type=float, default=0.5)
    ap.add_argument("--rss-tolerance-kb", type=int, default=8192, help="allowed VmRSS growth over the burst")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    want = expected_texts(a.model)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, str(HERE / "server.py"), a.model, "--port", str(port), "--max-queue",
                             str(a.max_queue), "--max-concurrent", str(a.max_concurrent), "--log-level", "warning"])
    try:
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                print("server did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
        warm = asyncio.run(burst(base, want, a.requests, a.concurrency, a.stream_ratio, a.seed + 1000))
        time.sleep(0.5)
        rss0 = vm_rss_kb(proc.pid)
        res = asyncio.run(burst(base, want, a.requests, a.concurrency, a.stream_ratio, a.seed, proc.pid))
        time.sleep(0.5)
        rss1 = vm_rss_kb(proc.pid)
        health = httpx.get(base + "/health", timeout=5).json()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()

    lost = a.requests - res["answered"]
    print(f"load check: {a.model}  requests={a.requests} concurrency={a.concurrency} server --max-queue "
          f"{a.max_queue} --max-concurrent {a.max_concurrent}, stream ratio {a.stream_ratio}")
    print(f"  warm-up burst : completed {warm['completed']}, refused(503) {warm['refused']}, failed {len(warm['failed'])}")
    print(f"  measured burst: completed {res['completed']} ({res['streamed_ok']} streamed), refused(503) "
          f"{res['refused']}, failed {len(res['failed'])}, lost {lost}")
    print(f"  wall {res['wall_s']:.2f} s, {res['completed'] / res['wall_s']:.1f} completed req/s, latency p50 "
          f"{res['lat_p50_ms']:.1f} ms p95 {res['lat_p95_ms']:.1f} ms")
    print(f"  server VmRSS before {rss0} kB, after {rss1} kB (delta {rss1 - rss0:+d} kB), peak during {res['peak_rss_kb']} kB")
    print(f"  server after: active {health['active']}, served {health['served_total']}, refused "
          f"{health['refused_total']}, aborted {health['aborted_total']}")
    for f in (warm["failed"] + res["failed"])[:10]:
        print("  FAILED:", f)
    ok = (not res["failed"] and not warm["failed"] and lost == 0 and health["active"] == 0
          and res["completed"] + res["refused"] == a.requests and rss1 - rss0 <= a.rss_tolerance_kb)
    print("  result:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
