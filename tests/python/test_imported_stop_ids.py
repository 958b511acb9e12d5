"""Stop ids of an imported checkpoint: generation_config.json's eos_token_id list ends generation
on any of its ids, in the engine (FORMAT.md §3b `stop_ids`), so the binding, the CLI and every
decode mode stop there without code of their own. The small random Ouro lists [0, 2]
(<|endoftext|>, <|im_end|>) while its tokenizer's eos is <|im_end|> (2): a logit bias forces the
other one."""
from __future__ import annotations

import json
import subprocess

import tinyloop_py as tl
from conftest import import_hf_folder

ENDOFTEXT, IM_END = 0, 2


def greedy(model, prompt, bias, **kw):
    cfg = tl.GenerateConfig(max_tokens=6, temperature=0.0, logit_bias=bias, **kw)
    return model.generate(model.tokenize(prompt), cfg)


def test_the_file_carries_every_stop_id(imported_ouro, cli):
    _, path = imported_ouro
    m = tl.load_model(str(path), backend="cpu")
    tok = m.info["tokenizer"]
    assert tok["eos_id"] == IM_END and tok["stop_ids"] == [ENDOFTEXT, IM_END]
    info = json.loads(subprocess.run([str(cli), "info", str(path), "--json"], check=True, capture_output=True,
                                     text=True, timeout=60).stdout)
    assert info["tokenizer"]["stop_ids"] == [ENDOFTEXT, IM_END]


def test_generation_stops_on_either_id(imported_ouro):
    _, path = imported_ouro
    m = tl.load_model(str(path), backend="cpu")
    for stop in (ENDOFTEXT, IM_END):
        r = greedy(m, "hello there", {stop: 100.0})
        assert r["output_ids"] == [stop] and r["stats"]["stop_reason"] == "EOS", (stop, r["output_ids"])
        # min_new_tokens bans every stop id, as transformers' processor given an eos_token_id list
        r = greedy(m, "hello there", {stop: 100.0}, min_new_tokens=3)
        assert stop not in r["output_ids"][:3] and len(r["output_ids"]) >= 3
        # beam search ends its hypotheses on them too
        r = greedy(m, "hello there", {stop: 100.0}, beam_size=2)
        assert r["output_ids"][-1] == stop and len(r["output_ids"]) == 1
    # ignore_eos: none of them stops the output
    r = greedy(m, "hello there", {ENDOFTEXT: 100.0}, ignore_eos=True)
    assert r["output_ids"] == [ENDOFTEXT] * 6 and r["stats"]["stop_reason"] == "MAX_TOKENS"


def test_the_cli_stops_there(imported_ouro, cli):
    _, path = imported_ouro
    out = subprocess.run([str(cli), "generate", str(path), "--prompt", "hello there", "--max-tokens", "6",
                          "--temperature", "0", "--logit-bias", f"{ENDOFTEXT}:100", "--json"],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    r = json.loads(out)
    assert r["stats"]["stop_reason"] == "EOS" and r["stats"]["tokens_emitted"] == 1, r["stats"]


def test_a_single_eos_token_id_keeps_the_tokenizers_eos_only(tmp_path, cli):
    # generation_config.json naming only <|im_end|>: <|endoftext|> is an ordinary token again,
    # as in a file imported before stop ids existed.
    _, path = import_hf_folder(cli, tmp_path, "ouro", lambda g: g.update(eos_token_id=IM_END))
    m = tl.load_model(str(path), backend="cpu")
    assert m.info["tokenizer"]["stop_ids"] == [IM_END]
    raw = path.read_bytes()
    assert b'"stop_ids"' in raw[:1 << 20]
    r = greedy(m, "hello there", {ENDOFTEXT: 100.0})
    assert r["output_ids"] == [ENDOFTEXT] * 6 and r["stats"]["stop_reason"] == "MAX_TOKENS"
