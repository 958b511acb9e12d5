"""Fixtures for the tinyloop_py and server tests.

Run through CTest (python_tests), or by hand:
    PYTHONPATH=build/python TINYLOOP_CLI=build/bin/tinyloop build/pyenv/bin/python -m pytest tests/python -q
A missing binding, CLI or package fails the tests; nothing is skipped.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("TINYLOOP_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SERVER = ROOT / "app" / "serve" / "server.py"

import tinyloop_py as tl  # noqa: E402  (PYTHONPATH=<build>/python; an ImportError fails the run)

# The small random model of the issue (vocab 300 > the tokenizer's 257 ids: a padded vocabulary).
HPARAMS = dict(d_model=64, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=128, vocab=300, n_pre=1, n_loop=1,
               loops=3, max_loops=6, max_seq_len=256)


def cli_path() -> Path:
    p = os.environ.get("TINYLOOP_CLI")
    if p:
        return Path(p)
    for cand in ("build/bin/tinyloop", "build-py/main/bin/tinyloop", "build-py/bin/tinyloop"):
        if (ROOT / cand).exists():
            return ROOT / cand
    found = shutil.which("tinyloop")
    if not found:
        raise RuntimeError("the tinyloop CLI was not found: set TINYLOOP_CLI")
    return Path(found)


@pytest.fixture(scope="session")
def cli() -> Path:
    p = cli_path()
    assert p.exists(), f"TINYLOOP_CLI={p} does not exist"
    return p


@pytest.fixture(scope="session")
def model_path(tmp_path_factory, cli) -> Path:
    """The issue's test model, written by `tinyloop make-random`."""
    out = tmp_path_factory.mktemp("model") / "py.tinyloop"
    args = [str(cli), "make-random", str(out)]
    for k, v in HPARAMS.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=120)
    return out


@pytest.fixture(scope="session")
def model(model_path):
    m = tl.load_model(str(model_path), backend="cpu")
    yield m
    m.free()


def run_cli(cli: Path, *args: str) -> dict:
    p = subprocess.run([str(cli), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"tinyloop {' '.join(args)} failed: {p.stderr}"
    return json.loads(p.stdout)


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RunningServer:
    """`python3 app/serve/server.py MODEL --port P ...` in a subprocess on loopback."""

    def __init__(self, model_path: Path, *extra: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), str(model_path), "--port", str(self.port),
                                      "--log-level", "warning", *extra], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        import httpx
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError("server did not start in 60 s")
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def start_server(model_path):
    servers = []

    def start(*extra: str) -> RunningServer:
        s = RunningServer(model_path, *extra)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def import_hf_folder(cli: Path, out_dir: Path, arch: str, edit_generation=None) -> tuple[Path, Path]:
    """A small random Hugging Face folder of `arch` (tools/make_hf_checkpoint.py) and its
    `tinyloop import --dtype f32` file; `edit_generation(dict)` rewrites generation_config.json
    first."""
    hf = out_dir / ("hf-" + arch)
    subprocess.run([sys.executable, str(ROOT / "tools/make_hf_checkpoint.py"), arch, str(hf)], check=True,
                   capture_output=True, timeout=120)
    if edit_generation is not None:
        g = json.loads((hf / "generation_config.json").read_text())
        edit_generation(g)
        (hf / "generation_config.json").write_text(json.dumps(g))
    out = out_dir / (arch + ".tinyloop")
    subprocess.run([str(cli), "import", str(hf), str(out), "--dtype", "f32"], check=True, capture_output=True,
                   timeout=120)
    return hf, out


@pytest.fixture(scope="session")
def imported_ouro(tmp_path_factory, cli) -> tuple[Path, Path]:
    """(folder, .tinyloop) of a small random Ouro whose generation_config.json lists eos_token_id
    [0, 2] (<|endoftext|>, <|im_end|>) while tokenizer_config.json's eos_token is <|im_end|>."""
    return import_hf_folder(cli, tmp_path_factory.mktemp("imported"), "ouro")
