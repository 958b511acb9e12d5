"""llama.cpp parity in every CI run, through llama-cpp-python's low-level API (its ctypes binding
of llama.h; no high-level Llama object, no sampling of its own).

`tinyloop export-gguf` unrolls a model at a depth into an ordinary llama GGUF. llama.cpp loads it
and runs its own graph (f32 KV cache, one thread), and we compare, position by position, its
logits with ours on the same token ids, and its greedy continuation with ours:

  * the bundled model (tinyloop-kjv, f32) at depth 6, its tokenizer through llama.cpp's;
  * a random model of the d512 shape (README, Performance: d_model 512, 8 heads, d_ff 1408, vocab
    4096, 2 + 2 layers) at depth 7.

Tolerances (relative to the largest |logit| of our f32 run, over every position):
  f32  GGUF   1e-4: the same weights, float rounding only; greedy tokens identical (16 tokens; the
              f32 model never takes the int8-activation path, which is for q8/q4 weights).
  q8_0 GGUF   ggml re-quantizes the matrices to its symmetric blocks of 32 (and its q8_0 product
  q4_0 GGUF   quantizes the activations to 8 bits), so its logits differ from the f32 ones by the
              quantization itself, which grows with depth on a random model (d512 q4 at depth 7:
              ~0.4 of the largest logit). The bound is relative to our own quantizer on the same
              weights: llama.cpp's distance from our f32 logits must be at most 1.5x the distance
              of our q8/q4 model (`tinyloop quantize`, groups of 32) from them. Measured here:
              kjv q8 1.01x, q4 1.30x; d512 q8 0.82x, q4 1.15x. A wrong block layout, scale or
              nibble order in the exporter gives logits unrelated to the model's (far above 1.5x).
Greedy tokens are compared over the ids the tokenizer can produce (a padded vocabulary's other
ids are never sampled here, FORMAT.md §3), which is what llama.cpp's argmax is restricted to.

llama-cpp-python comes from tests/python/requirements-llama-cpp.txt, built once into the wheel
cache by packaging/setup.sh test; a missing one fails the test with the reason, it never skips.
"""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, tl

import llama_cpp as L  # noqa: E402  (an ImportError fails the run: see the docstring)

F32_TOLERANCE = 1e-4
QUANT_RATIO = 1.5  # llama.cpp's quantized distance / ours (see the docstring)
OUR_DTYPE = {"q8_0": "q8", "q4_0": "q4"}
GREEDY_TOKENS = 16

KJV = ROOT / "resources" / "models" / "tinyloop-kjv" / "model-f32.tinyloop"
VERSE = "In the beginning God created the heaven and the earth. And the earth was without form, and void."


@pytest.fixture(scope="module", autouse=True)
def backend():
    L.llama_log_set(_QUIET, ctypes.c_void_p())
    L.llama_backend_init()
    yield
    L.llama_backend_free()


GGML_LOG_LEVEL_ERROR = 3  # ggml.h's enum ggml_log_level


@L.llama_log_callback
def _QUIET(level, text, user_data):  # llama.cpp's load chatter off; its errors still reach stderr
    if level == GGML_LOG_LEVEL_ERROR:
        print(text.decode("utf-8", "replace"), end="")


class LlamaModel:
    def __init__(self, path: Path):
        self.model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
        assert self.model, f"llama.cpp cannot load {path}"
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def close(self):
        L.llama_model_free(self.model)

    def tokenize(self, text: str) -> list[int]:
        b = text.encode()
        buf = (L.llama_token * (len(b) + 8))()
        n = L.llama_tokenize(self.vocab, b, len(b), buf, len(buf), False, False)
        assert n >= 0, f"llama_tokenize: {n}"
        return list(buf[:n])

    def context(self, n_ctx: int):
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = p.n_ubatch = n_ctx
        p.n_threads = p.n_threads_batch = 1
        p.type_k = p.type_v = L.GGML_TYPE_F32  # our cache is f32
        if hasattr(p, "flash_attn_type"):
            p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        else:
            p.flash_attn = False
        ctx = L.llama_init_from_model(self.model, p)
        assert ctx, "llama.cpp cannot make a context"
        return ctx

    def decode(self, ctx, ids: list[int], pos0: int, all_logits: bool) -> np.ndarray:
        """Feeds ids at positions pos0...; returns the logits of every fed position (or the last)."""
        n = len(ids)
        batch = L.llama_batch_init(n, 0, 1)
        try:
            for i, t in enumerate(ids):
                batch.token[i] = t
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if (all_logits or i == n - 1) else 0
            batch.n_tokens = n
            rc = L.llama_decode(ctx, batch)
            assert rc == 0, f"llama_decode: {rc}"
            rows = range(n) if all_logits else [n - 1]
            return np.array([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(self.n_vocab,))
                             for i in rows], dtype=np.float64)
        finally:
            L.llama_batch_free(batch)

    def logits(self, ids: list[int]) -> np.ndarray:
        ctx = self.context(len(ids))
        try:
            return self.decode(ctx, ids, 0, True)
        finally:
            L.llama_free(ctx)

    def greedy(self, ids: list[int], n: int, n_allowed: int) -> list[int]:
        """n greedy tokens, argmax over ids [0, n_allowed)."""
        ctx = self.context(len(ids) + n)
        try:
            out = []
            last = self.decode(ctx, ids, 0, False)[-1]
            for k in range(n):
                t = int(np.argmax(last[:n_allowed]))
                out.append(t)
                if k + 1 < n:
                    last = self.decode(ctx, [t], len(ids) + k, False)[-1]
            return out
        finally:
            L.llama_free(ctx)


def our_logits(model, ids: list[int], loops: int) -> np.ndarray:
    """Every position's logits: the last token's of each prefix (score_last_token)."""
    return np.array([tl.score_last_token(model, ids[:k + 1], loops=loops, top_k=1, logits=True)["logits"]
                     for k in range(len(ids))], dtype=np.float64)


def export(cli: Path, model: Path, out: Path, loops: int, dtype: str) -> Path:
    r = subprocess.run([str(cli), "export-gguf", str(model), str(out), "--loops", str(loops), "--dtype", dtype],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def check(cli: Path, tmp: Path, model_path: Path, loops: int, dtype: str, ids: list[int] | None, text: str | None):
    gguf = export(cli, model_path, tmp / f"{model_path.stem}-{dtype}.gguf", loops, dtype)
    ours = tl.load_model(str(model_path), backend="cpu", threads=1)
    theirs = LlamaModel(gguf)
    try:
        assert theirs.n_vocab == ours.vocab_size, "the GGUF's vocabulary size differs from the model's"
        if text is not None:
            ids = ours.tokenize(text)
            assert theirs.tokenize(text) == ids, "llama.cpp's tokenizer gives other ids"
        mine = our_logits(ours, ids, loops)
        got = theirs.logits(ids)
        scale = float(np.max(np.abs(mine)))
        rel = float(np.max(np.abs(mine - got))) / scale
        agree = int(np.sum(np.argmax(mine, axis=1) == np.argmax(got, axis=1)))
        if dtype == "f32":
            bound, how = F32_TOLERANCE, "tolerance"
        else:
            qpath = tmp / f"{model_path.stem}-{OUR_DTYPE[dtype]}.tinyloop"
            r = subprocess.run([str(cli), "quantize", str(model_path), str(qpath), "--dtype", OUR_DTYPE[dtype]],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            twin = tl.load_model(str(qpath), backend="cpu", threads=1)
            try:
                ours_q = float(np.max(np.abs(our_logits(twin, ids, loops) - mine))) / scale
            finally:
                twin.free()
            bound, how = QUANT_RATIO * ours_q, f"{QUANT_RATIO}x our {OUR_DTYPE[dtype]}'s {ours_q:.3g}"
        print(f"{model_path.name} {dtype} depth {loops}: {len(ids)} positions, max |ours - llama.cpp| / max |ours| "
              f"= {rel:.3g} (bound {bound:.3g}: {how}), argmax agrees at {agree}/{len(ids)}")
        assert rel <= bound, f"{dtype}: relative logit difference {rel:.3g} > {bound:.3g} ({how})"
        if dtype == "f32":
            assert agree == len(ids)
            res = tl.generate(ours, ids, max_tokens=GREEDY_TOKENS, loops=loops, temperature=0.0, ignore_eos=True)
            want = res["output_ids"]
            assert len(want) == GREEDY_TOKENS
            got_ids = theirs.greedy(ids, GREEDY_TOKENS, ours.info["tokenizer_vocab"])
            print(f"  greedy {GREEDY_TOKENS} tokens: ours {want}, llama.cpp {got_ids}")
            assert got_ids == want, "greedy continuations differ"
    finally:
        theirs.close()
        ours.free()


@pytest.fixture(scope="module")
def d512(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("llama_cpp_peer") / "d512.tinyloop"
    tl.write_random_model(str(p), vocab_size=4096, d_model=512, n_heads=8, n_kv_heads=8, head_dim=64, d_ff=1408,
                          n_pre_blocks=2, n_loop_layers=2, default_loops=7, max_loops=8, max_seq_len=256, seed=5)
    return p


@pytest.mark.parametrize("dtype", ["f32", "q8_0", "q4_0"])
def test_bundled_model(cli, tmp_path, dtype):
    check(cli, tmp_path, KJV, 6, dtype, None, VERSE)


@pytest.mark.parametrize("dtype", ["f32", "q8_0", "q4_0"])
def test_random_d512(cli, tmp_path, d512, dtype):
    rng = np.random.default_rng(11)
    ids = [int(t) for t in rng.integers(0, 4096, size=24)]
    check(cli, tmp_path, d512, 7, dtype, ids, None)
