"""`tinyloop export-gguf`: the export read back with the `gguf` package (llama.cpp's own Python
reader, from PyPI) and every tensor checked against the source model, read here from the
.tinyloop file itself (docs/FORMAT.md §2) rather than through the engine."""
from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import quants

# Grouped-query attention (4 query heads over 2 kv heads), a padded vocabulary.
SHAPE = dict(d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96, vocab=300, n_pre=1, n_loop=2,
             loops=3, max_loops=6, max_seq_len=128)


def read_tinyloop(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and every tensor as float32, dequantized per FORMAT.md §2."""
    raw = path.read_bytes()
    assert raw[:8] == b"TINYLOOP"
    (header_bytes,) = struct.unpack_from("<Q", raw, 16)
    header = json.loads(raw[24:24 + header_bytes])
    data_start = (24 + header_bytes + 63) // 64 * 64
    out = {}
    for name, t in header["tensors"].items():
        shape = t["shape"]
        n = int(np.prod(shape))
        at = data_start + t["offset"]
        if t["dtype"] == "f32":
            v = np.frombuffer(raw, np.float32, n, at)
        elif t["dtype"] == "f16":
            v = np.frombuffer(raw, np.float16, n, at).astype(np.float32)
        elif t["dtype"] == "bf16":  # the upper half of a binary32
            v = (np.frombuffer(raw, np.uint16, n, at).astype(np.uint32) << 16).view(np.float32)
        else:
            bits = {"q8": 8, "q4": 4, "q2": 2}[t["dtype"]]
            rows, cols = shape
            g = t["group_size"]
            codes = np.frombuffer(raw, np.uint8, n * bits // 8, at)
            q = np.stack([(codes >> (bits * k)) & ((1 << bits) - 1) for k in range(8 // bits)], axis=-1).reshape(-1)
            scales = np.frombuffer(raw, np.float16, n // g, data_start + t["scales_offset"]).astype(np.float32)
            zeros = np.frombuffer(raw, np.float16, n // g, data_start + t["zeros_offset"]).astype(np.float32)
            v = (np.repeat(scales, g) * (q.astype(np.float32) - np.repeat(zeros, g)))
        out[name] = v.reshape(shape).astype(np.float32)
    return header, out


def to_adjacent_pairs(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    """Rows of each head from pairs (i, i + head_dim/2) to pairs (2i, 2i+1), as llama.cpp ropes."""
    cols = w.shape[1]
    return w.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(heads * head_dim, cols)


def make_model(cli: Path, out: Path, extra: list[str] = ()) -> Path:
    args = [str(cli), "make-random", str(out)]
    for k, v in SHAPE.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args + list(extra), check=True, capture_output=True, text=True, timeout=120)
    return out


def export(cli: Path, model: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "export-gguf", str(model), str(out), *flags], capture_output=True,
                          text=True, timeout=120)


def field(reader: gguf.GGUFReader, key: str):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [int(f.parts[i][0]) for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def expected_tensors(header: dict, src: dict[str, np.ndarray], loops: int) -> dict[str, np.ndarray]:
    hp = header["hparams"]
    exp = {"token_embd.weight": src["embed"], "output_norm.weight": src["final_norm"]}
    if not hp["tie_embeddings"]:
        exp["output.weight"] = src["head"]
    names = dict(attn_norm="attn_norm", attn_q="wq", attn_k="wk", attn_v="wv", attn_output="wo",
                 ffn_norm="mlp_norm", ffn_gate="w_gate", ffn_up="w_up", ffn_down="w_down")
    layers = hp["n_pre_blocks"] + loops * hp["n_loop_layers"]
    for i in range(layers):
        p = f"pre.{i}" if i < hp["n_pre_blocks"] else f"loop.{(i - hp['n_pre_blocks']) % hp['n_loop_layers']}"
        for g, s in names.items():
            w = src[f"{p}.{s}"]
            if s == "wq":
                w = to_adjacent_pairs(w, hp["n_heads"], hp["head_dim"])
            elif s == "wk":
                w = to_adjacent_pairs(w, hp["n_kv_heads"], hp["head_dim"])
            exp[f"blk.{i}.{g}.weight"] = w
    return exp


@pytest.fixture(scope="module")
def source(cli, tmp_path_factory) -> Path:
    return make_model(cli, tmp_path_factory.mktemp("gguf") / "src.tinyloop")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0", "q4_0"])
def test_every_tensor_matches_the_source(cli, source, tmp_path, dtype):
    out = tmp_path / f"m-{dtype}.gguf"
    r = export(cli, source, out, "--loops", "3", "--dtype", dtype, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    header, src = read_tinyloop(source)
    hp = header["hparams"]
    assert report["layers"] == 1 + 3 * 2 and report["dtype"] == dtype
    assert report["file_bytes"] == out.stat().st_size

    reader = gguf.GGUFReader(out)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.block_count") == 7
    for key, want in [("llama.embedding_length", hp["d_model"]), ("llama.feed_forward_length", hp["d_ff"]),
                      ("llama.attention.head_count", hp["n_heads"]),
                      ("llama.attention.head_count_kv", hp["n_kv_heads"]),
                      ("llama.rope.dimension_count", hp["head_dim"]),
                      ("llama.context_length", hp["max_seq_len"])]:
        assert field(reader, key) == want, key
    assert field(reader, "llama.rope.freq_base") == pytest.approx(hp["rope_theta"])
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(hp["norm_eps"])

    exp = expected_tensors(header, src, loops=3)
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(exp)
    kind = getattr(gguf.GGMLQuantizationType, dtype.upper())
    for name, want in exp.items():
        t = got[name]
        assert list(t.shape) == list(reversed(want.shape)), name  # ggml's ne[0] is the row length
        if want.ndim == 1:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
            np.testing.assert_array_equal(np.asarray(t.data), want, err_msg=name)
            continue
        assert t.tensor_type == kind, name
        if dtype == "f32":
            np.testing.assert_array_equal(np.asarray(t.data).reshape(want.shape), want, err_msg=name)
        elif dtype == "f16":
            np.testing.assert_array_equal(np.asarray(t.data).reshape(want.shape), want.astype(np.float16),
                                          err_msg=name)
        elif dtype == "bf16":
            # ggml's own rounding (gguf's numpy port of ggml_compute_fp32_to_bf16), byte for byte.
            np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                          quants.quantize(want, kind).reshape(-1), err_msg=name)
            back = quants.dequantize(np.asarray(t.data), kind).reshape(want.shape)
            assert np.abs(back - want).max() <= np.abs(want).max() * 2.0**-8, name
        else:
            # The blocks exactly as ggml's reference quantizer (gguf's numpy port) makes them.
            np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                          quants.quantize(want, kind).reshape(-1), err_msg=name)
            back = quants.dequantize(np.asarray(t.data), kind).reshape(want.shape)
            tol = np.abs(want).max() / (127 if dtype == "q8_0" else 7)
            assert np.abs(back - want).max() <= tol, name


def test_bf16_model_exports_its_values_exactly(cli, tmp_path):
    """A bf16 model (what an imported checkpoint is) goes to GGUF BF16 by default, every matrix
    value unchanged: the rounding happened once, when the model was made."""
    model = make_model(cli, tmp_path / "bf16.tinyloop", ["--dtype", "bf16"])
    out = tmp_path / "bf16.gguf"
    r = export(cli, model, out, "--loops", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["dtype"] == "bf16"
    header, src = read_tinyloop(model)
    assert header["tensors"]["loop.0.wq"]["dtype"] == "bf16"
    reader = gguf.GGUFReader(out)
    assert field(reader, "general.file_type") == 32  # LLAMA_FTYPE_MOSTLY_BF16
    exp = expected_tensors(header, src, loops=2)
    for t in reader.tensors:
        want = exp[t.name]
        if want.ndim == 1:
            continue
        assert t.tensor_type == gguf.GGMLQuantizationType.BF16, t.name
        back = quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.BF16).reshape(want.shape)
        np.testing.assert_array_equal(back, want, err_msg=t.name)


def test_tokenizer_spells_every_id(cli, source, tmp_path):
    out = tmp_path / "tok.gguf"
    assert export(cli, source, out, "--loops", "2").returncode == 0
    header, _ = read_tinyloop(source)
    tok = header["tokenizer"]
    reader = gguf.GGUFReader(out)
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert len(tokens) == len(types) == header["hparams"]["vocab_size"]
    assert len(set(tokens)) == len(tokens)
    # GPT-2's byte-to-unicode map, written out independently of the exporter.
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cps = keep + [256 + i for i in range(256 - len(keep))]
    byte_char = dict(zip(keep + [b for b in range(256) if b not in keep], [chr(c) for c in cps]))
    assert tokens[ord(" ")] == "Ġ" and tokens[ord("\n")] == "Ċ" and tokens[ord("a")] == "a"
    assert all(tokens[b] == byte_char[b] and types[b] == 1 for b in range(256))
    assert len(field(reader, "tokenizer.ggml.merges")) == len(tok["merges"])
    for s, i in tok["special_tokens"].items():
        assert tokens[i] == s and types[i] == 3
    assert field(reader, "tokenizer.ggml.eos_token_id") == tok["eos_id"]
    n_ids = 256 + len(tok["merges"]) + len(tok["special_tokens"])
    assert all(t == 5 for t in types[n_ids:])  # padding ids: unused


def test_bundled_q4_model(cli, tmp_path):
    """A trained model stored as q4: its dequantized weights exported as f32, and its merges each
    the concatenation of two earlier tokens' texts."""
    root = Path(__file__).resolve().parents[2]
    model = root / "resources" / "models" / "tinyloop-kjv" / "model-q4.tinyloop"
    out = tmp_path / "kjv.gguf"
    r = export(cli, model, out, "--loops", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["dtype"] == "q4_0"  # nearest to the model's q4
    r = export(cli, model, out, "--loops", "2", "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    header, src = read_tinyloop(model)
    reader = gguf.GGUFReader(out)
    got = {t.name: np.asarray(t.data) for t in reader.tensors}
    exp = expected_tensors(header, src, loops=2)
    assert sorted(got) == sorted(exp)
    for name, want in exp.items():
        np.testing.assert_allclose(got[name].reshape(want.shape), want, rtol=1e-6, atol=1e-7, err_msg=name)
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = field(reader, "tokenizer.ggml.merges")
    assert merges
    for k, m in enumerate(merges):
        a, b = m.split(" ")
        assert tokens[256 + k] == a + b
        assert tokens.index(a) < 256 + k and tokens.index(b) < 256 + k


def test_refusals(cli, source, tmp_path):
    v2 = make_model(cli, tmp_path / "v2.tinyloop", ["--loop-input", "add"])
    out = tmp_path / "x.gguf"
    r = export(cli, v2, out, "--loops", "2")
    assert r.returncode == 2 and "version-2" in r.stderr and 'loop_input "add"' in r.stderr, r.stderr
    assert not out.exists()
    for flags, message in [(["--loops", "7"], "--loops: 7 is outside [1, 6]"), ([], "missing --loops"),
                           (["--loops", "0"], "--loops"),
                           (["--loops", "2", "--dtype", "q4"], "--dtype: expected one of f32, f16, bf16, q8_0, q4_0")]:
        r = export(cli, source, out, *flags)
        assert r.returncode == 2 and message in r.stderr, (flags, r.stderr)
        assert r.stderr.startswith("tinyloop export-gguf: ")
        assert not out.exists()


def test_rows_not_whole_blocks_are_refused(cli, tmp_path):
    model = tmp_path / "odd.tinyloop"
    args = [str(cli), "make-random", str(model), "--d-model", "48", "--n-heads", "3", "--n-kv-heads", "3", "--head-dim", "16",
            "--d-ff", "80", "--vocab", "300", "--n-pre", "0", "--n-loop", "1"]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    out = tmp_path / "odd.gguf"
    r = export(cli, model, out, "--loops", "1", "--dtype", "q8_0")
    assert r.returncode == 2 and "not a multiple of its block of 32" in r.stderr, r.stderr
    assert not out.exists()
    assert export(cli, model, out, "--loops", "1", "--dtype", "f16").returncode == 0
