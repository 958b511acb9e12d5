"""tinyloop_py: results equal the CLI's, streaming and its abort, errors, scoring, caches."""
from __future__ import annotations

import gc
import json
import math
import os
import threading
from pathlib import Path

import pytest

import tinyloop_py as tl
from conftest import run_cli

PROMPT = "In the beginning"

# (CLI flags, binding keywords) pairs that must decode the same tokens.
CASES = [
    ([], {}),
    (["--loops", "5"], {"loops": 5}),
    (["--temperature", "0.8", "--top-k", "40", "--top-p", "0.9", "--seed", "7"],
     {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7}),
    (["--temperature", "1.2", "--min-p", "0.05", "--seed", "123"], {"temperature": 1.2, "min_p": 0.05, "seed": 123}),
    (["--repetition-penalty", "1.3", "--frequency-penalty", "0.5", "--presence-penalty", "0.4"],
     {"repetition_penalty": 1.3, "frequency_penalty": 0.5, "presence_penalty": 0.4}),
    (["--logit-bias", "78:-100", "--logit-bias", "30:5"], {"logit_bias": {78: -100.0, 30: 5.0}}),
    (["--stop", "g"], {"stop": "g"}),
    (["--cache-window", "8"], {"cache_window": 8}),
]


@pytest.mark.parametrize("flags,kw", CASES, ids=[" ".join(f) or "greedy" for f, _ in CASES])
def test_generate_equals_cli(cli, model_path, model, flags, kw):
    j = run_cli(cli, "generate", str(model_path), "--prompt", PROMPT, "--max-tokens", "24", "--backend", "cpu", *flags)
    r = tl.generate(model, PROMPT, max_tokens=24, **kw)
    assert r["prompt_ids"] == j["prompt_ids"]
    assert r["output_ids"] == j["output_ids"]
    assert r["text"] == j["text"]
    assert r["stats"]["stop_reason"] == j["stats"]["stop_reason"]
    assert r["tokens"] == r["prompt_ids"] + r["output_ids"]


def test_config_object_and_keywords(model):
    cfg = tl.GenerateConfig(max_tokens=10, temperature=0.7, seed=3)
    a = tl.generate(model, PROMPT, cfg)
    b = tl.generate(model, PROMPT, max_tokens=10, temperature=0.7, seed=3)
    assert a["output_ids"] == b["output_ids"]
    c = tl.generate(model, PROMPT, cfg, max_tokens=4)  # keywords win over the config
    assert c["output_ids"] == a["output_ids"][:4]
    assert cfg.max_tokens == 10 and cfg.top_k == 50 and cfg.sample_seed == 3
    d = tl.GenerateConfig()
    assert (d.max_tokens, d.loops, d.temperature, d.top_k, d.top_p, d.repetition_penalty) == (64, 0, 0.0, 50, 1.0, 1.0)
    assert "temperature=0.7" in repr(cfg).replace("0.699999988079071", "0.7")


def test_prompt_as_ids_and_text_agree(model):
    ids = model.tokenize(PROMPT)
    assert tl.generate(model, ids, max_tokens=8)["output_ids"] == tl.generate(model, PROMPT, max_tokens=8)["output_ids"]
    assert model.detokenize(ids) == PROMPT
    assert model.generate(PROMPT, max_tokens=8)["output_ids"] == tl.generate(model, PROMPT, max_tokens=8)["output_ids"]


def test_events_and_lens(model):
    r = tl.generate(model, PROMPT, max_tokens=6, lens=True, lens_top_k=3)
    assert [e["token"] for e in r["events"]] == r["output_ids"]
    for i, e in enumerate(r["events"]):
        assert e["index"] == i and e["position"] == len(r["prompt_ids"]) + i
        assert [l["depth"] for l in e["lens"]] == list(range(1, e["depth"] + 1))
        assert len(e["lens"][-1]["top_ids"]) == 3
        # greedy: the emitted token is the final depth's argmax
        assert e["lens"][-1]["top_ids"][0] == e["token"]


def test_stream_equals_generate(model):
    want = tl.generate(model, PROMPT, max_tokens=30, temperature=0.9, seed=11)
    s = tl.generate_stream(model, PROMPT, max_tokens=30, temperature=0.9, seed=11)
    evs = list(s)
    assert [e["token"] for e in evs] == want["output_ids"]
    # The random model emits invalid UTF-8; see test_stream_pieces_equal_text_with_invalid_utf8.
    assert "".join(e["piece"] for e in evs).replace("\ufffd", "") == want["text"].replace("\ufffd", "")
    assert s.finished and s.result["output_ids"] == want["output_ids"]
    assert s.result["stats"]["stop_reason"] == want["stats"]["stop_reason"]


def test_stream_pieces_equal_text_with_invalid_utf8(model):
    r = tl.generate(model, PROMPT, max_tokens=30, temperature=0.9, seed=11, events=True)
    assert "".join(e["piece"] for e in r["events"]) == r["text"]


def test_stream_break_aborts(model):
    s = tl.generate_stream(model, PROMPT, max_tokens=200, ignore_eos=True, queue_size=2)
    got = []
    for ev in s:
        got.append(ev)
        if len(got) == 3:
            break
    s.close()
    st = s.result["stats"]
    assert st["stop_reason"] == "CALLBACK_ABORT"
    assert 3 <= st["tokens_emitted"] < 200
    assert [e["token"] for e in got] == s.result["output_ids"][:3]
    assert list(s) == []  # nothing after close


def _threads() -> set:
    # the process's thread ids: a test that ran before (the server's, say) may still be ending
    # its own threads, so a count could drop while a stream's worker leaked; new ids cannot
    return set(os.listdir("/proc/self/task"))


def test_stream_gc_and_context_manager_join_the_worker(model):
    tl.generate(model, PROMPT, max_tokens=2)  # start the engine's own thread pool first
    before = _threads()
    for _ in range(5):
        for i, ev in enumerate(tl.generate_stream(model, PROMPT, max_tokens=200, ignore_eos=True, queue_size=1)):
            if i == 2:
                break  # the iterator is released: its destructor aborts and joins
    gc.collect()
    with tl.generate_stream(model, PROMPT, max_tokens=200, ignore_eos=True) as s:
        next(s)
    assert s.finished and s.result["stats"]["stop_reason"] == "CALLBACK_ABORT"
    assert not _threads() - before, "a stream's worker thread outlived its iterator"


def test_stream_errors_raise_at_call(model):
    with pytest.raises(ValueError, match="temperature"):
        tl.generate_stream(model, PROMPT, temperature=-0.5)


def test_stream_from_threads(model):
    want = tl.generate(model, PROMPT, max_tokens=20)["output_ids"]
    out = {}

    def work(i):
        out[i] = [e["token"] for e in tl.generate_stream(model, PROMPT, max_tokens=20)]

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(v == want for v in out.values())


def test_generate_batch(model):
    prompts = [PROMPT, "Hello", model.tokenize("abc")]
    rs = tl.generate_batch(model, prompts, max_tokens=7)
    assert len(rs) == 3
    for p, r in zip(prompts, rs):
        assert r["output_ids"] == tl.generate(model, p, max_tokens=7)["output_ids"]
    with pytest.raises(ValueError, match=r"prompts\[1\]"):
        tl.generate_batch(model, ["a", "b" * 300], max_tokens=7)


def test_generate_batch_results_and_events_per_prompt(model):
    # Sampled, with a stop string: each prompt's result and events equal generate()'s alone,
    # batched (events=True) and one after another (lens=True).
    prompts = [PROMPT, "Hello", "abc", "In"]
    kw = {"max_tokens": 10, "temperature": 0.9, "top_k": 30, "seed": 11, "stop": "e"}
    for extra in ({"events": True}, {"lens": True, "lens_top_k": 2}):
        rs = tl.generate_batch(model, prompts, **kw, **extra)
        assert len(rs) == len(prompts)
        for p, r in zip(prompts, rs):
            want = tl.generate(model, p, **kw, **extra)
            assert r["output_ids"] == want["output_ids"]
            assert r["text"] == want["text"]
            assert r["stats"]["stop_reason"] == want["stats"]["stop_reason"]
            assert [e["token"] for e in r["events"]] == [e["token"] for e in want["events"]]
            assert [e["piece"] for e in r["events"]] == [e["piece"] for e in want["events"]]
            if "lens" in extra:
                assert all(len(e["lens"]) == e["depth"] for e in r["events"])
                assert r["events"][0]["lens"] == want["events"][0]["lens"]
    assert all("events" not in r for r in tl.generate_batch(model, prompts, max_tokens=3))


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,field", [
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"loops": 99}, "loops"),
    ({"max_tokens": 1000}, "max_tokens"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"frequency_penalty": 3.0}, "frequency_penalty"),
    ({"logit_bias": {5: 500.0}}, "logit_bias"),
    ({"logit_bias": {9999: 1.0}}, "logit_bias"),
    ({"temperature": float("nan")}, "temperature"),
])
def test_bad_config_raises_value_error_naming_field(model, kw, field):
    with pytest.raises(ValueError) as e:
        tl.generate(model, PROMPT, **kw)
    assert str(e.value).startswith(field)


def test_bad_types(model):
    with pytest.raises(TypeError, match="temprature"):
        tl.generate(model, PROMPT, temprature=0.5)
    with pytest.raises(TypeError, match="temperature"):
        tl.generate(model, PROMPT, temperature="hot")
    with pytest.raises(TypeError, match="prompt"):
        tl.generate(model, 3.5)
    with pytest.raises(ValueError, match="prompt_len"):
        tl.generate(model, "")
    with pytest.raises(ValueError):
        tl.generate(model, [1, 2, 400])


def test_not_supported_is_not_implemented(model):
    # Features the engine refuses with ErrorCode::NotSupported (which ones shrinks as it grows).
    raised = 0
    with tl.PrefixCache(model, PROMPT) as pc:
        try:
            pc.generate(PROMPT + " x", beam_size=2, max_tokens=3)
        except NotImplementedError as e:
            assert "beam_size" in str(e)
            raised += 1
    try:
        tl.load_model(model.path, backend="cuda").free()
    except NotImplementedError as e:
        assert "cuda" in str(e)
        raised += 1
    except RuntimeError:  # a CUDA build on a machine without a usable device
        pass
    assert raised >= 1


def test_missing_file_is_os_error(tmp_path):
    with pytest.raises(OSError) as e:
        tl.load_model(str(tmp_path / "nope.tinyloop"))
    assert "nope.tinyloop" in str(e.value)


def test_corrupt_files_are_model_file_errors(tmp_path, model_path):
    bad = tmp_path / "garbage.tinyloop"
    bad.write_bytes(b"not a model at all" * 64)
    with pytest.raises(tl.ModelFileError) as e:
        tl.load_model(str(bad))
    assert isinstance(e.value, ValueError) and "garbage.tinyloop" in str(e.value)
    data = model_path.read_bytes()
    cut = tmp_path / "truncated.tinyloop"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(tl.ModelFileError):
        tl.load_model(str(cut))
    with pytest.raises(ValueError, match="backend"):
        tl.load_model(str(model_path), backend="tpu")


def test_free_and_context_manager(model_path):
    with tl.load_model(str(model_path)) as m:
        assert not m.closed and m.info["hparams"]["vocab_size"] == 300
        s = m.generate_stream(PROMPT, max_tokens=50)
        pc = tl.PrefixCache(m, PROMPT)
    assert m.closed
    with pytest.raises(ValueError, match="closed"):
        m.generate(PROMPT)
    # the stream and the cache keep the weights alive
    assert len(list(s)) > 0
    assert pc.generate(PROMPT + " x", max_tokens=3)["stats"]["tokens_emitted"] == 3
    m.free()  # idempotent


def test_info(model, model_path):
    i = model.info
    assert i["path"] == str(model_path) and i["backend"] == "cpu"
    assert i["hparams"]["default_loops"] == 3 and i["hparams"]["max_loops"] == 6
    assert i["parameter_count"] > 0 and i["file_bytes"] == model_path.stat().st_size
    assert i["tokenizer"]["eos_id"] == model.eos_id
    assert model.vram_usage_bytes() == 0


def test_write_random_model(tmp_path):
    p = tmp_path / "w.tinyloop"
    tl.write_random_model(str(p), vocab_size=260, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_seq_len=64)
    with tl.load_model(str(p)) as m:
        assert m.hparams["d_model"] == 32 and m.vocab_size == 260
        assert m.hparams["loop_input"] == "none"
        assert len(m.generate("hi", max_tokens=4)["output_ids"]) == 4
    # Input injection (FORMAT.md 1a): a version-2 file, reported in hparams and info.
    q = tmp_path / "inject.tinyloop"
    tl.write_random_model(str(q), vocab_size=260, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_seq_len=64,
                          loop_input="add")
    assert int.from_bytes(q.read_bytes()[8:12], "little") == 2
    with tl.load_model(str(q)) as m:
        assert m.hparams["loop_input"] == "add" and m.info["hparams"]["loop_input"] == "add"
        assert len(m.generate("hi", max_tokens=4)["output_ids"]) == 4
    with pytest.raises(ValueError, match="loop_input"):
        tl.write_random_model(str(q), loop_input="concat")


def test_stream_decoder(model):
    d = tl.StreamDecoder(model)
    ids = model.tokenize("héllo")
    assert "".join(d.push(i) for i in ids) + d.flush() == "héllo"


# ---- scoring -----------------------------------------------------------------------------------


def test_scoring_family(model):
    ids = model.tokenize(PROMPT)
    n = len(ids)
    s = tl.score(model, ids)
    assert len(s["token_logprobs"]) == n - 1 and s["loops"] == 3
    assert math.isclose(s["total_nll"], -sum(s["token_logprobs"]), rel_tol=1e-4)
    assert math.isclose(s["perplexity"], math.exp(s["total_nll"] / (n - 1)), rel_tol=1e-4)
    assert tl.score(model, PROMPT)["token_logprobs"] == s["token_logprobs"]

    last = tl.score_last_token(model, ids, top_k=4)
    assert len(last["logits"]) == 300 and len(last["top_ids"]) == 4
    assert "logits" not in tl.score_last_token(model, ids, logits=False)

    lens = tl.score_logit_lens(model, ids, top_k=3)
    assert lens["n_positions"] == n and lens["loops"] == 3 and len(lens["cells"][0]) == 3
    for i in range(n - 1):  # the lens at the final depth is the model's output
        assert math.isclose(math.log(lens["cells"][i][2]["p_next"]), s["token_logprobs"][i], rel_tol=1e-4, abs_tol=1e-5)
    assert lens["cells"][-1][2]["top_ids"] == last["top_ids"][:3]

    u = tl.score_with_uncertainty(model, ids)
    assert len(u["entropy"]) == n and len(u["margin"]) == n and len(u["prediction_depth"]) == n

    e = tl.score_with_consistency_escalation(model, ids, depths=[1, 3, 6], signal="entropy", threshold=0.5)
    assert len(e["depth_used"]) == n - 1 and set(e["depth_used"]) <= {1, 3, 6}
    with pytest.raises(ValueError, match="signal"):
        tl.score_with_consistency_escalation(model, ids, signal="vibes")
    with pytest.raises(ValueError, match="loops"):
        tl.score(model, ids, loops=50)


# ---- caches ------------------------------------------------------------------------------------


def test_prefix_cache(model):
    with tl.PrefixCache(model, PROMPT) as pc:
        assert pc.length == len(model.tokenize(PROMPT)) and pc.nbytes > 0
        want = tl.generate(model, PROMPT + " and", max_tokens=12)
        got = tl.generate_with_prefix(model, pc, PROMPT + " and", max_tokens=12)
        assert got["output_ids"] == want["output_ids"]
        with pytest.raises(ValueError):
            pc.generate("something else", max_tokens=3)
    assert pc.freed
    with pytest.raises(ValueError, match="freed"):
        pc.generate(PROMPT, max_tokens=3)


def test_resume_handle(model):
    h = tl.ResumeHandle(model, PROMPT, loops=2)
    assert h.loops == 2 and h.nbytes > 0
    small = h.nbytes
    for L in (2, 5, 3):
        got = tl.resume_generate(h, loops=L, max_tokens=10)
        assert got["output_ids"] == tl.generate(model, PROMPT, loops=L, max_tokens=10)["output_ids"]
    assert h.loops == 5 and h.nbytes >= small
    h.free()


def test_prefix_pool(model):
    pool = tl.PrefixPool(model)
    assert pool.add("In the") == 0 and pool.add(PROMPT) == 1
    assert pool.nbytes > 0
    got = tl.generate_with_pool(pool, PROMPT + " was", max_tokens=10)
    assert got["reused_tokens"] == len(model.tokenize(PROMPT))
    assert got["output_ids"] == tl.generate(model, PROMPT + " was", max_tokens=10)["output_ids"]
    assert pool.generate("zzz", max_tokens=3)["reused_tokens"] == 0
    pool.free()


def test_speculative_equals_greedy(model):
    want = tl.generate(model, PROMPT, loops=5, max_tokens=30)["output_ids"]
    s = tl.generate_speculative(model, PROMPT, verify_loops=5, draft_loops=2, draft_ahead=3, max_tokens=30, events=True)
    assert s["output_ids"] == want
    st = s["stats"]
    assert st["spec_cycles"] > 0 and 0 <= st["spec_accepted"] <= st["spec_tested"]
    assert sum(st["spec_accept_hist"]) == st["spec_cycles"]
    assert any("cycle" in e for e in s["events"])
    t = tl.generate_tree_speculative(model, PROMPT, verify_loops=5, draft_loops=1, draft_ahead=2, K_branches=2,
                                     max_tokens=30)
    assert t["output_ids"] == want
    stream = tl.generate_speculative(model, PROMPT, verify_loops=5, max_tokens=30, stream=True)
    assert [e["token"] for e in stream] == want
    # Knobs left out are the engine resolver's (resolve_run), not defaults of the binding's own:
    # verify at the model's default depth with the resolved draft depth and draft length.
    run = tl.resolve_run(model, "speculative")["speculation"]
    assert run["verify_loops"] == model.info["hparams"]["default_loops"]
    dflt = tl.generate_speculative(model, PROMPT, max_tokens=12)
    assert dflt["stats"]["loops_used"] == run["verify_loops"]
    assert len(dflt["stats"]["spec_accept_hist"]) == run["draft_ahead"] + 1
    tree_run = tl.resolve_run(model, "tree")["speculation"]
    tree = tl.generate_tree_speculative(model, PROMPT, max_tokens=12)
    assert tree["stats"]["loops_used"] == tree_run["verify_loops"]
    assert tree["output_ids"] == dflt["output_ids"]  # greedy at the same depth
    with pytest.raises(ValueError, match="verify_loops"):
        tl.generate_speculative(model, PROMPT, verify_loops=8)  # > max_loops 6
    sampled = tl.generate_speculative(model, PROMPT, verify_loops=4, temperature=0.8, seed=3, max_tokens=20)
    assert sampled["output_ids"] == tl.generate_speculative(model, PROMPT, verify_loops=4, temperature=0.8, seed=3,
                                                            max_tokens=20)["output_ids"]
    # Pipelined over depth: plain greedy's tokens; the wave's sweeps in the stats, events streamed.
    wave = tl.generate_pipelined(model, PROMPT, verify_loops=5, draft_loops=1, max_tokens=30)
    assert wave["output_ids"] == want
    assert wave["stats"]["spec_sweeps"] >= 5 and wave["stats"]["spec_tested"] >= wave["stats"]["spec_accepted"]
    assert [e["token"] for e in tl.generate_pipelined(model, PROMPT, verify_loops=5, max_tokens=30, stream=True)] == want
    assert tl.resolve_run(model, "pipelined")["speculation"]["verify_loops"] == run["verify_loops"]
    with pytest.raises(ValueError, match="draft_loops"):
        tl.generate_pipelined(model, PROMPT, verify_loops=3, draft_loops=3)


def test_stub_and_docstrings_cover_the_module():
    import ast
    stub = Path(tl.__file__).with_name("tinyloop_py.pyi")
    if not stub.exists():
        stub = Path(__file__).resolve().parents[2] / "engine" / "python" / "tinyloop_py.pyi"
    tree = ast.parse(stub.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(tl) if not n.startswith("_")}
    assert public - declared == set(), "missing from the .pyi"
    assert declared - public <= {"LensDepth", "TokenEvent", "_TokenEventBase", "GenerateStats", "_ResultBase",
                                 "GenerateResult", "ReturnedSequence"}
    for n in public:
        assert getattr(tl, n).__doc__, n


def test_grammar_and_new_fields(model):
    g = tl.Grammar('root ::= [a-c]+ "!"')
    r = tl.generate(model, "Hi", max_tokens=20, grammar=g)
    import re
    assert re.fullmatch(r"[a-c]+!?", r["text"]), r["text"]
    assert r["stats"]["stop_reason"] in ("EOS", "MAX_TOKENS", "GRAMMAR_DEAD_END")
    s = tl.generate_stream(model, "Hi", max_tokens=20, grammar='root ::= "yes" | "no"')
    assert "".join(e["piece"] for e in s) in ("yes", "no")
    with pytest.raises(ValueError, match="grammar:1:"):
        tl.Grammar("root ::= (")
    with pytest.raises(OSError):
        tl.Grammar.from_file("/nonexistent/g.gbnf")
    with pytest.raises(TypeError, match="grammar"):
        tl.GenerateConfig(grammar="root ::= \"a\"")
    plain = tl.generate(model, PROMPT, max_tokens=12)["output_ids"]
    banned = tl.generate(model, PROMPT, max_tokens=12, bad_words=[[plain[0]]])["output_ids"]
    assert plain[0] not in banned
    r = tl.generate(model, PROMPT, max_tokens=40, no_repeat_ngram_size=2)
    t, n0 = r["tokens"], len(r["prompt_ids"])
    for i in range(n0, len(t)):  # no emitted token completes a 2-gram seen before
        assert tuple(t[i - 1:i + 1]) not in {tuple(t[j - 1:j + 1]) for j in range(1, i)}
    with pytest.raises(ValueError, match="max_time"):
        tl.generate(model, PROMPT, max_time=-1.0)


def test_quantize_model_file(model_path, tmp_path):
    out = tmp_path / "q8.tinyloop"
    r = tl.quantize_model_file(str(model_path), str(out), "q8")
    assert r["file_bytes_out"] < r["file_bytes_in"] and out.stat().st_size == r["file_bytes_out"]
    assert all(t["rel_error"] < 0.05 for t in r["tensors"] if t["to"] == "q8")
    with tl.load_model(str(out)) as q:
        assert len(q.generate(PROMPT, max_tokens=4)["output_ids"]) == 4


def test_hugging_face_knobs(model):
    c = tl.GenerateConfig(beam_size=2, early_stopping="never", renormalize_logits=True, min_new_tokens=3, min_length=4)
    assert (c.early_stopping, c.renormalize_logits, c.min_new_tokens, c.min_length) == ("never", True, 3, 4)
    assert tl.GenerateConfig(early_stopping=True).early_stopping is True
    assert tl.GenerateConfig().to_dict()["early_stopping"] is False
    with pytest.raises(ValueError, match="early_stopping: expected True, False or \"never\""):
        tl.GenerateConfig(early_stopping="sometimes")
    with pytest.raises(ValueError, match="early_stopping: only applies to beam search"):
        tl.generate(model, PROMPT, max_tokens=4, early_stopping=True)
    with pytest.raises(ValueError, match=r"min_new_tokens: -1 is outside \[0, "):
        tl.generate(model, PROMPT, max_tokens=4, min_new_tokens=-1)
    r = tl.generate(model, PROMPT, max_tokens=8, config=c)
    assert len(r["output_ids"]) >= 3


def test_token_id_rule_takes_ints_of_any_size(model):
    """The engine's one token-id rule (check_token_id), as the server's request fields use it."""
    vocab = model.info["hparams"]["vocab_size"]
    tl.check_token_id(0, vocab, "prompt")
    tl.check_token_id(vocab - 1, vocab, "prompt")
    tl.check_token_ids([0, vocab - 1], vocab, "suppress_tokens")
    tl.check_token_ids([], vocab, "suppress_tokens")
    for bad_id in (vocab, -1, 2**31, 2**63, 2**64, 2**70, -(2**70)):
        want = "prompt: token id %d is outside the vocabulary [0, %d)" % (bad_id, vocab)
        with pytest.raises(ValueError) as err:
            tl.check_token_id(bad_id, vocab, "prompt")
        assert str(err.value) == want
    with pytest.raises(ValueError) as err:
        tl.check_token_ids([1, vocab - 1, 2**70], vocab, "suppress_tokens")
    assert str(err.value) == "suppress_tokens[2]: token id %d is outside the vocabulary [0, %d)" % (2**70, vocab)
    # The same words as the engine's own refusal of a config's ids.
    with pytest.raises(ValueError) as engine:
        tl.generate(model, PROMPT, max_tokens=1, suppress_tokens=[5, vocab])
    with pytest.raises(ValueError) as binding:
        tl.check_token_ids([5, vocab], vocab, "suppress_tokens")
    assert str(engine.value) == str(binding.value)
    for not_int in (True, 1.0, "3", None):
        with pytest.raises(TypeError, match="prompt: expected an int token id"):
            tl.check_token_id(not_int, vocab, "prompt")


def test_hugging_face_sampling_knobs(model):
    c = tl.GenerateConfig(suppress_tokens=[3, 9], begin_suppress_tokens=[5], forced_eos_token_id=7,
                          exponential_decay_length_penalty=(4, 1.5), typical_p=0.9, epsilon_cutoff=0.01,
                          eta_cutoff=0.002)
    assert c.exponential_decay_length_penalty == (4, 1.5) and c.suppress_tokens == [3, 9]
    assert c.to_dict()["exponential_decay_length_penalty"] == [4, 1.5]
    assert tl.GenerateConfig().exponential_decay_length_penalty is None
    with pytest.raises(ValueError, match=r"typical_p: 0 is outside \(0, 1\]"):
        tl.generate(model, PROMPT, max_tokens=4, typical_p=0.0)
    with pytest.raises(ValueError, match=r"suppress_tokens\[0\]: token id -1 is outside the vocabulary"):
        tl.generate(model, PROMPT, max_tokens=4, suppress_tokens=[-1])
    r = tl.generate(model, PROMPT, max_tokens=5, ignore_eos=True, config=c)
    assert r["output_ids"][-1] == 7 and r["output_ids"][0] != 5 and not {3, 9} & set(r["output_ids"])
    # next_token_distribution: the sampler's distribution, 1 at the argmax when greedy.
    ids = model.tokenize(PROMPT)
    greedy = tl.next_token_distribution(model, ids)
    assert greedy.index(1.0) == tl.generate(model, ids, max_tokens=1)["output_ids"][0] and sum(greedy) == 1.0
    p = tl.next_token_distribution(model, ids, temperature=0.9, top_k=20, typical_p=0.5)
    assert abs(sum(p) - 1) < 1e-5 and 0 < sum(x > 0 for x in p) < 20
    ids_after = ids + [int(max(range(len(p)), key=p.__getitem__))]
    forced = tl.next_token_distribution(model, ids_after, emitted=1, max_tokens=2, forced_eos_token_id=7)
    assert forced[7] == 1.0
    with pytest.raises(ValueError, match=r"emitted: 5 is outside \[0, "):
        tl.next_token_distribution(model, ids[:3], emitted=5)


def test_forced_words_in_huggingfaces_form(model):
    c = tl.GenerateConfig(beam_size=3, force_words=[[65], [[66, 67], [68]]])
    assert c.force_words == [[65], [[66, 67], [68]]] and c.to_dict()["force_words"] == c.force_words
    c.force_words = [[70, 71]]
    assert c.force_words == [[70, 71]]
    out = tl.generate(model, PROMPT, max_tokens=8, config=c)["output_ids"]
    assert any(out[i:i + 2] == [70, 71] for i in range(len(out))), out
    with pytest.raises(ValueError, match=r"force_words\[0\]\[1\]: expected an integer"):
        tl.GenerateConfig(force_words=[[1, "x"]])
    with pytest.raises(ValueError, match="force_words: constrained beam search needs beam_size >= 2"):
        tl.generate(model, PROMPT, max_tokens=4, force_words=[[65]])


def test_several_outputs_are_a_list(model):
    r = tl.generate(model, PROMPT, max_tokens=5, beam_size=4, num_beam_groups=2, diversity_penalty=0.5,
                    num_return_sequences=3)
    assert [sorted(q) for q in r["sequences"]] == [["output_ids", "score", "stop_reason", "text"]] * 3
    assert r["sequences"][0]["output_ids"] == r["output_ids"] and r["sequences"][0]["text"] == r["text"]
    assert r["sequences"][0]["score"] >= r["sequences"][1]["score"] >= r["sequences"][2]["score"]
    s = tl.generate(model, PROMPT, max_tokens=5, temperature=1.0, seed=9, num_return_sequences=2)
    assert s["sequences"][1]["output_ids"] == tl.generate(model, PROMPT, max_tokens=5, temperature=1.0,
                                                          seed=10)["output_ids"]
    assert "sequences" not in tl.generate(model, PROMPT, max_tokens=3)
    with pytest.raises(ValueError, match=r"num_return_sequences: 5 is outside \[1, beam_size = 4\]"):
        tl.generate(model, PROMPT, max_tokens=4, beam_size=4, num_return_sequences=5)


def test_gate_and_huginn_criteria_by_name(model):
    # the names of the exit-gate and Huginn criteria go through the binding as the engine spells them
    for name in ("gate_stop", "gate_select", "reverse_kl", "minp_kl"):
        assert tl.resolve_early_exit(model, early_exit_criterion=name)[0]["early_exit_criterion"] == name
    assert tl.resolve_early_exit(model, early_exit_criterion="gate")[0]["early_exit_criterion"] == "gate_stop"
    # the bundled model has no exit gate: refused by name, not run without it
    with pytest.raises(ValueError, match=r"early_exit_criterion: gate_select needs a model with an exit gate"):
        tl.generate(model, PROMPT, max_tokens=3, early_exit_patience=1, early_exit_criterion="gate_select",
                    early_exit_threshold=0.9)
    out = tl.generate(model, PROMPT, max_tokens=4, early_exit_patience=1, early_exit_criterion="minp_kl",
                      early_exit_threshold=1e-5)
    assert len(out["output_ids"]) == 4


def test_recommendation_and_its_resolvers(model, model_path, tmp_path):
    assert model.recommendation == {}
    fields, source = tl.resolve_early_exit(model)
    assert fields["early_exit_criterion"] == "hidden_l2" and fields["early_exit_min_L"] == 2
    assert abs(fields["early_exit_threshold"] - 0.05) < 1e-7 and set(source.values()) == {"built-in"}
    out = tmp_path / "rec.tinyloop"
    rec = {"early_exit": {"criterion": "kl", "threshold": 0.25, "patience": 2, "min_L": 1, "peek_every": 1},
           "speculation": {"draft_loops": 1, "draft_ahead": 5}}
    tl.write_model_metadata(str(model_path), str(out), json.dumps({"recommended": rec}))
    with tl.load_model(str(out), backend="cpu") as m:
        assert m.recommendation["early_exit"]["criterion"] == "kl"
        assert m.recommendation["speculation"]["draft_ahead"] == 5
        fields, source = tl.resolve_early_exit(m, early_exit_threshold=0.5)
        assert fields["early_exit_criterion"] == "kl" and fields["early_exit_patience"] == 2
        assert fields["early_exit_threshold"] == 0.5 and source["early_exit_threshold"] == "user"
        assert source["early_exit_min_L"] == "model"
        # another criterion than the model's: the model's values do not apply
        fields, source = tl.resolve_early_exit(m, early_exit_criterion="argmax")
        assert fields["early_exit_min_L"] == 2 and source["early_exit_min_L"] == "built-in"
        assert tl.resolve_speculation(m, verify_loops=3) == {"verify_loops": 3, "draft_loops": 1, "draft_ahead": 5,
                                                             "branches": 2}
        assert tl.resolve_speculation(m, mode="tree", draft_ahead=2)["draft_ahead"] == 2
    with pytest.raises(TypeError, match="early_exit_bogus"):
        tl.resolve_early_exit(model, early_exit_bogus=1)
    with pytest.raises(ValueError, match="mode"):
        tl.resolve_speculation(model, mode="draft")


def test_resolve_run_is_the_engines_resolver(model, model_path, tmp_path):
    run = tl.resolve_run(model, "sample")
    assert run["mode"] == "sample" and abs(run["config"]["temperature"] - 0.8) < 1e-6
    assert run["source"]["temperature"] == "built-in" and run["source"]["loops"] == "model"
    assert run["config"]["loops"] == model.hparams["default_loops"]
    assert "temperature: 0.8 (built-in)" in run["messages"]
    run = tl.resolve_run(model, "sampling", temperature=1.2)  # an alias in, the canonical name out
    assert run["mode"] == "sample" and run["source"]["temperature"] == "user"
    assert tl.resolve_run(model, "beam")["config"]["beam_size"] == 4
    with pytest.raises(ValueError, match="temperature"):
        tl.resolve_run(model, "greedy", temperature=0.7)
    with pytest.raises(ValueError, match="branches"):
        tl.resolve_run(model, "tree", speculation={"branches": 9})
    out = tmp_path / "rec.tinyloop"
    rec = {"early_exit": {"criterion": "kl", "threshold": 0.25, "patience": 2, "min_L": 1, "peek_every": 1},
           "speculation": {"draft_loops": 1, "tree_draft_ahead": 3, "branches": 3}}
    tl.write_model_metadata(str(model_path), str(out), json.dumps({"recommended": rec}))
    with tl.load_model(str(out), backend="cpu") as m:
        run = tl.resolve_run(m, "early-exit", early_exit_min_L=2)
        assert run["config"]["early_exit_criterion"] == "kl" and run["config"]["early_exit_patience"] == 2
        assert run["source"]["early_exit_threshold"] == "model" and run["source"]["early_exit_min_L"] == "user"
        run = tl.resolve_run(m, "tree")
        assert run["speculation"]["branches"] == 3 and run["speculation"]["draft_ahead"] == 3
        assert run["source"]["speculation.branches"] == "model"
        # the resolved run decodes as generate() does with the same settings
        cfg = dict(run["config"], max_tokens=6)
        assert tl.generate(m, PROMPT, **{k: cfg[k] for k in ("max_tokens", "loops", "temperature")})["output_ids"] \
            == tl.generate(m, PROMPT, max_tokens=6)["output_ids"]
