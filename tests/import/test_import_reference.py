"""Imported files against the float64 reference at every pass count 1 .. T+2: small random Hugging
Face folders of each architecture (tools/make_hf_checkpoint.py), imported with `tinyloop import
--dtype f32`, run by the engine; the reference (looped_reference.py) is numpy in float64 reading
the same folder's safetensors with the published code's conventions, so it checks the importer's
transforms and the engine's forward together. Every position's logits (the last token of each
prefix) within max|delta| / max|logit| <= 1e-5 (measured ~1e-6: float32 rounding; a wiring error
is of order 1).

Run by CTest (import.reference_f64) or by hand:
  PYTHONPATH=build/python TINYLOOP_CLI=build/bin/tinyloop build/pyenv/bin/python -m pytest tests/import/test_import_reference.py -q -s
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from looped_reference import reference_logits  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("TINYLOOP_CLI", ROOT / "build/bin/tinyloop"))
TEXT = "the quick 1234 brown fox, café 😀 jumps"
REL_TOL = 1e-5


@pytest.mark.parametrize("arch", ["ouro", "huginn"])
def test_every_pass_count_against_the_float64_reference(arch, tmp_path):
    import tinyloop_py as tl
    hf = tmp_path / "hf"
    subprocess.run([sys.executable, str(ROOT / "tools/make_hf_checkpoint.py"), arch, str(hf)], check=True,
                   capture_output=True, timeout=120)
    out = tmp_path / "m.tinyloop"
    args = [str(CLI), "import", str(hf), str(out), "--dtype", "f32"]
    if arch == "huginn":
        args += ["--state-init", "zeros"]  # the reference's (and the published init_scale=0) state
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    cfg = json.load(open(hf / "config.json"))
    T = cfg["total_ut_steps"] if arch == "ouro" else cfg["mean_recurrence"]
    m = tl.load_model(str(out), backend="cpu")
    assert m.hparams["default_loops"] == T
    ids = m.tokenize(TEXT)
    assert len(ids) >= 8
    passes = list(range(1, T + 3))
    want = reference_logits(hf, ids, passes)
    worst = {}
    for s in passes:
        worst[s] = 0.0
        for p in range(len(ids)):
            got = np.asarray(tl.score_last_token(m, ids[:p + 1], loops=s, top_k=1)["logits"], np.float64)
            ref = want[s][p]
            assert got.shape == ref.shape
            worst[s] = max(worst[s], float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))))
    print(f"{arch}: max over {len(ids)} positions of max|delta|/max|logit| per pass count "
          f"{ {s: f'{r:.2g}' for s, r in worst.items()} }")
    for s, r in worst.items():
        assert r <= REL_TOL, f"{arch} at {s} passes: max|delta|/max|logit| = {r:.3g}"
