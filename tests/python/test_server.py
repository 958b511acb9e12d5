"""app/serve/server.py: OpenAI request/response shapes, errors, streaming, disconnect, 503."""
from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

import tinyloop_py as tl
from conftest import ROOT

sys.path.insert(0, str(ROOT / "app" / "serve"))
import server  # noqa: E402

PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(server.create_app(model)) as c:
        yield c


def post(client, **body):
    return client.post("/v1/completions", json=body)


def sse(lines) -> list:
    """The JSON chunks of an SSE body; asserts it ends with [DONE]."""
    out, done = [], False
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        assert not done, "data after [DONE]"
        out.append(json.loads(data))
    assert done, "no data: [DONE]"
    return out


def pieces_text(model, prompt, **kw) -> str:
    r = tl.generate(model, prompt, events=True, **kw)
    return "".join(e["piece"] for e in r["events"])


def ascii_stop(full: str, start: int) -> str:
    """Two printable ASCII characters of `full` at or after `start` (a stop string that is sure to
    match the token bytes; the random model also emits invalid UTF-8, shown as U+FFFD)."""
    for i in range(start, len(full) - 1):
        if all(32 < ord(ch) < 127 for ch in full[i:i + 2]):
            return full[i:i + 2]
    raise AssertionError("no ASCII pair in %r" % full)


def test_models(client):
    j = client.get("/v1/models").json()
    assert j["object"] == "list" and j["data"][0]["id"] == "py" and j["data"][0]["object"] == "model"
    assert client.get("/v1/models/py").status_code == 200
    e = client.get("/v1/models/gpt-4").json()["error"]
    assert e["code"] == "model_not_found"


def test_plain_completion_matches_binding(client, model):
    r = post(client, model="py", prompt=PROMPT, max_tokens=20, temperature=0)
    assert r.status_code == 200
    j = r.json()
    assert j["object"] == "text_completion" and j["id"].startswith("cmpl-") and j["model"] == "py"
    want = tl.generate(model, PROMPT, max_tokens=20)
    c = j["choices"][0]
    assert c["index"] == 0 and c["logprobs"] is None and c["finish_reason"] == "length"
    assert c["text"] == pieces_text(model, PROMPT, max_tokens=20)
    n_prompt = len(model.tokenize(PROMPT))
    assert j["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 20, "total_tokens": n_prompt + 20}
    st = j["tinyloop_stats"][0]
    assert st["tokens_emitted"] == 20 and st["stop_reason"] == "MAX_TOKENS" and st["loops_used"] == 3
    assert st["depth_per_token"] == [3] * 20 and want["stats"]["tokens_emitted"] == 20


def test_defaults_are_openai(client):
    j = post(client, prompt=PROMPT, seed=5).json()  # max_tokens 16, temperature 1
    assert j["usage"]["completion_tokens"] <= 16
    assert j["choices"][0]["text"] == post(client, prompt=PROMPT, seed=5).json()["choices"][0]["text"]


def test_sampling_fields_match_binding(client, model):
    body = dict(prompt=PROMPT, max_tokens=24, temperature=0.8, top_p=0.9, seed=42, frequency_penalty=0.5,
                presence_penalty=0.3, logit_bias={"78": -100, "30": 2.5}, top_k=40, min_p=0.01,
                repetition_penalty=1.2, loops=4)
    j = post(client, **body).json()
    want = pieces_text(model, PROMPT, max_tokens=24, temperature=0.8, top_p=0.9, seed=42, frequency_penalty=0.5,
                       presence_penalty=0.3, logit_bias={78: -100.0, 30: 2.5}, top_k=40, min_p=0.01,
                       repetition_penalty=1.2, loops=4)
    assert j["choices"][0]["text"] == want
    assert j["tinyloop_stats"][0]["loops_used"] == 4


def test_stop_strings_excluded(client, model):
    full = pieces_text(model, PROMPT, max_tokens=40)
    stop = ascii_stop(full, 3)
    j = post(client, prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop, "zzzz"]).json()
    c = j["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] == full[: full.index(stop)]
    assert j["tinyloop_stats"][0]["stop_reason"] == "STOP_STRING"
    j2 = post(client, prompt=PROMPT, max_tokens=40, temperature=0, stop=stop).json()
    assert j2["choices"][0]["text"] == c["text"]


def test_prompt_list_n_and_echo(client, model):
    j = post(client, prompt=[PROMPT, "Hello"], max_tokens=5, temperature=0, n=2, echo=True).json()
    assert [c["index"] for c in j["choices"]] == [0, 1, 2, 3]
    assert j["choices"][0]["text"] == PROMPT + pieces_text(model, PROMPT, max_tokens=5)
    assert j["choices"][0]["text"] == j["choices"][1]["text"]
    assert j["choices"][2]["text"] == "Hello" + pieces_text(model, "Hello", max_tokens=5)
    assert j["usage"]["prompt_tokens"] == len(model.tokenize(PROMPT)) + len(model.tokenize("Hello"))
    assert j["usage"]["completion_tokens"] == 20 and len(j["tinyloop_stats"]) == 4
    ids = model.tokenize(PROMPT)
    j = post(client, prompt=ids, max_tokens=5, temperature=0).json()
    assert j["choices"][0]["text"] == pieces_text(model, PROMPT, max_tokens=5)
    j = post(client, prompt=[ids, ids], max_tokens=5, temperature=0).json()
    assert len(j["choices"]) == 2
    # n > 1 with sampling: different seeds per choice
    j = post(client, prompt=PROMPT, max_tokens=20, temperature=1.0, n=3, seed=1).json()
    assert len({c["text"] for c in j["choices"]}) > 1


def test_logprobs(client, model):
    j = post(client, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3).json()
    lp = j["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 6 and len(lp["token_logprobs"]) == 6 and len(lp["top_logprobs"]) == 6
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    ids = model.tokenize(PROMPT)
    last = tl.score_last_token(model, ids, top_k=3, logits=False)
    first_top = lp["top_logprobs"][0]
    assert 3 <= len(first_top) <= 4
    # greedy: the emitted token is the top one, and its logprob is the engine's
    assert math.isclose(lp["token_logprobs"][0], math.log(last["top_probs"][0]), rel_tol=1e-5)
    assert max(first_top.values()) == pytest.approx(lp["token_logprobs"][0])
    # echo: the prompt's tokens first, the first without a logprob
    j = post(client, prompt=PROMPT, max_tokens=2, temperature=0, logprobs=1, echo=True).json()
    lp = j["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(ids) + 2 and lp["token_logprobs"][0] is None
    sc = tl.score(model, ids)
    for a, b in zip(lp["token_logprobs"][1:len(ids)], sc["token_logprobs"]):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
    assert "".join(lp["tokens"][: len(ids)]) == PROMPT


def test_streaming(client, model):
    body = dict(prompt=[PROMPT, "Hello"], max_tokens=12, temperature=0, stream=True, n=1,
                stream_options={"include_usage": True}, logprobs=2)
    with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = sse(r.iter_lines())
    for i, p in enumerate([PROMPT, "Hello"]):
        mine = [c for c in chunks if c["choices"] and c["choices"][0]["index"] == i]
        assert "".join(c["choices"][0]["text"] for c in mine) == pieces_text(model, p, max_tokens=12)
        assert [c["choices"][0]["finish_reason"] for c in mine][-1] == "length"
        assert all(c["choices"][0]["finish_reason"] is None for c in mine[:-1])
        # usage once, in the include_usage chunk only (a consumer summing usage counts each token once)
        assert "usage" not in mine[-1] and mine[-1]["tinyloop_stats"]["tokens_emitted"] == 12
        assert sum(len(c["choices"][0]["logprobs"]["tokens"]) for c in mine if c["choices"][0]["logprobs"]) == 12
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 24
    assert [c for c in chunks if "usage" in c] == [last]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)


def test_streaming_stop_string(client, model):
    full = pieces_text(model, PROMPT, max_tokens=40)
    stop = ascii_stop(full, 5)
    with client.stream("POST", "/v1/completions",
                       json=dict(prompt=PROMPT, max_tokens=40, temperature=0, stream=True, stop=stop)) as r:
        chunks = sse(r.iter_lines())
    assert "".join(c["choices"][0]["text"] for c in chunks) == full[: full.index(stop)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("body,param", [
    ({"max_tokens": 5}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [1, 2, 999]}, "prompt"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 5000}, "max_tokens"),
    ({"prompt": "x", "temperature": 2.5}, "temperature"),
    ({"prompt": "x", "temperature": True}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "x", "stop": [""]}, "stop"),
    ({"prompt": "x", "stop": 5}, "stop"),
    ({"prompt": "x", "frequency_penalty": 2.5}, "frequency_penalty"),
    ({"prompt": "x", "presence_penalty": -3}, "presence_penalty"),
    ({"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"300": 1}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": [1]}, "logit_bias"),
    ({"prompt": "x", "seed": -1}, "seed"),
    ({"prompt": "x", "logprobs": 6}, "logprobs"),
    ({"prompt": "x", "echo": "yes"}, "echo"),
    ({"prompt": "x", "stream": 1}, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "loops": 7}, "loops"),
    ({"prompt": "x", "top_k": 0}, "top_k"),
    ({"prompt": "x", "min_p": 1.5}, "min_p"),
    ({"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
    ({"prompt": "x", "early_exit": {"patience": -1}}, "early_exit.patience"),
    ({"prompt": "x", "early_exit": {"criterion": "vibes"}}, "early_exit"),
    ({"prompt": "x", "early_exit": {"bogus": 1}}, "early_exit"),
    ({"prompt": "x", "suffix": "y"}, "suffix"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "frobnicate": 1}, "frobnicate"),
    ({"prompt": "x", "grammar": "root ::= ("}, "grammar"),
    ({"prompt": "x", "grammar": 5}, "grammar"),
    ({"prompt": "x", "beam_size": 100}, "beam_size"),
    ({"prompt": "x", "max_time": -1}, "max_time"),
    ({"prompt": "x", "beam_size": 2, "early_stopping": "sometimes"}, "early_stopping"),
    ({"prompt": "x", "early_stopping": True}, "early_stopping"),
    ({"prompt": "x", "renormalize_logits": 1}, "renormalize_logits"),
    ({"prompt": "x", "min_new_tokens": -1}, "min_new_tokens"),
    ({"prompt": "x", "min_length": 100000}, "min_length"),
    ({"prompt": "x", "typical_p": 0}, "typical_p"),
    ({"prompt": "x", "epsilon_cutoff": 1}, "epsilon_cutoff"),
    ({"prompt": "x", "eta_cutoff": "a"}, "eta_cutoff"),
    ({"prompt": "x", "suppress_tokens": [1, "a"]}, "suppress_tokens"),
    ({"prompt": "x", "begin_suppress_tokens": [100000]}, "begin_suppress_tokens"),
    ({"prompt": "x", "forced_eos_token_id": -3}, "forced_eos_token_id"),
    ({"prompt": "x", "exponential_decay_length_penalty": [1]}, "exponential_decay_length_penalty"),
    ({"prompt": "x", "exponential_decay_length_penalty": [1, 0]}, "exponential_decay_length_penalty"),
    ({"prompt": "x", "beam_size": 2, "n": 3}, "n"),
    ({"prompt": "x", "beam_size": 4, "n": 2, "stream": True}, "n"),
    ({"prompt": "x", "beam_size": 4, "n": 2, "logprobs": 1}, "logprobs"),
    ({"prompt": "x", "n": 2, "num_return_sequences": 3}, "num_return_sequences"),
    ({"prompt": "x", "beam_size": 4, "num_beam_groups": 3}, "num_beam_groups"),
    ({"prompt": "x", "beam_size": 4, "diversity_penalty": 1.0}, "diversity_penalty"),
    ({"prompt": "x", "beam_size": 4, "num_beam_groups": 2, "diversity_penalty": -1}, "diversity_penalty"),
    ({"prompt": "x", "force_words": [[5]]}, "force_words"),
    ({"prompt": "x", "beam_size": 4, "force_words": 5}, "force_words"),
    ({"prompt": "x", "beam_size": 4, "force_words_ids": [[5, -1]]}, "force_words"),
    ({"prompt": "x", "beam_size": 4, "force_words": [[[5], []]]}, "force_words"),
    ({"prompt": "x", "beam_size": 4, "force_words": [[5]], "force_words_ids": [[5]]}, "force_words"),
])
def test_bad_requests_name_the_field(client, body, param):
    r = post(client, **body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and e["param"] == param and e["code"] is None
    assert e["message"]


def test_speculative_extension(client):
    r = post(client, prompt="x", max_tokens=4, speculative={"draft_loops": 1, "draft_ahead": 2})
    if hasattr(tl, "generate_speculative"):
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
        assert "not supported yet" in r.json()["error"]["message"]


def test_early_exit_extension(client):
    r = post(client, prompt=PROMPT, max_tokens=8, temperature=0,
             early_exit={"patience": 1, "min_L": 1, "criterion": "argmax", "threshold": 0.5})
    if r.status_code == 200:
        assert all(1 <= d <= 6 for d in r.json()["tinyloop_stats"][0]["depth_per_token"])
    else:  # an engine without early exit says so, naming the field
        assert r.status_code == 400 and r.json()["error"]["param"] == "early_exit"


def test_invalid_json_and_unknown_route(client):
    r = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()
    assert client.get("/health").json()["active"] == 0


# ---- a real uvicorn -----------------------------------------------------------------------------


def _active(base) -> dict:
    return httpx.get(base + "/health", timeout=5).json()


def test_disconnect_aborts_generation(start_server):
    s = start_server("--debug-token-delay-ms", "20")
    body = dict(prompt=PROMPT, max_tokens=200, temperature=0, stream=True, ignore_eos=True)
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", s.base + "/v1/completions", json=body) as r:
            n = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    n += 1
                if n == 3:
                    break  # leave: closing the response drops the connection
    deadline = time.time() + 20
    while time.time() < deadline:
        h = _active(s.base)
        done = [x for x in h["recent"] if x["choices"]]
        if h["active"] == 0 and done:
            break
        time.sleep(0.1)
    assert h["active"] == 0 and h["aborted_total"] == 1
    ch = done[-1]["choices"][-1]
    assert ch["stop_reason"] == "CALLBACK_ABORT" and ch["tokens"] < 200


def test_queue_full_answers_503(start_server):
    s = start_server("--max-queue", "2", "--max-concurrent", "1", "--debug-token-delay-ms", "50")
    body = dict(prompt=PROMPT, max_tokens=100, temperature=0, stream=True, ignore_eos=True)
    results = {}
    started = threading.Barrier(3)

    def hold(i):
        with httpx.Client(timeout=60) as c:
            with c.stream("POST", s.base + "/v1/completions", json=body) as r:
                results[i] = r.status_code
                started.wait()
                for _ in r.iter_lines():
                    pass

    ts = [threading.Thread(target=hold, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    started.wait(timeout=30)
    assert _active(s.base)["active"] == 2
    r = httpx.post(s.base + "/v1/completions", json=dict(prompt=PROMPT, max_tokens=2), timeout=30)
    assert r.status_code == 503
    e = r.json()["error"]
    assert e["type"] == "server_error" and "busy" in e["message"]
    for t in ts:
        t.join(timeout=60)
    assert results == {0: 200, 1: 200}
    assert httpx.post(s.base + "/v1/completions", json=dict(prompt=PROMPT, max_tokens=2), timeout=30).status_code == 200
    h = _active(s.base)
    assert h["active"] == 0 and h["refused_total"] == 1


def test_speculative_matches_greedy(client, model):
    assert hasattr(tl, "generate_speculative")
    want = pieces_text(model, PROMPT, max_tokens=20, loops=5)
    for sp in ({"draft_loops": 2, "draft_ahead": 3}, {"mode": "tree", "branches": 2, "draft_ahead": 2},
               {"mode": "pipelined", "draft_loops": 1}):
        j = post(client, prompt=PROMPT, max_tokens=20, temperature=0, loops=5, speculative=sp).json()
        assert j["choices"][0]["text"] == want, sp
        st = j["tinyloop_stats"][0]
        assert st["spec_cycles"] > 0 and st["spec_tested"] >= st["spec_accepted"]
        if sp.get("mode") == "pipelined":
            assert st["spec_sweeps"] > 0, st
        with client.stream("POST", "/v1/completions", json=dict(prompt=PROMPT, max_tokens=20, temperature=0, loops=5,
                                                                 stream=True, speculative=sp)) as r:
            chunks = sse(r.iter_lines())
        assert "".join(c["choices"][0]["text"] for c in chunks) == want
    for body, param in [({"speculative": {"verify_loops": 9}}, "speculative.verify_loops"),
                        ({"speculative": {"draft_loops": 5, "verify_loops": 4}}, "speculative.draft_loops"),
                        ({"speculative": {}, "loops": 1}, "speculative.verify_loops"),
                        ({"speculative": {"mode": "tree"}, "temperature": 0.5}, "temperature"),
                        ({"speculative": {"mode": "pipelined", "draft_ahead": 2}}, "speculative"),
                        ({"speculative": {}, "stop": "x"}, "stop"),
                        ({"speculative": {}, "typical_p": 0.5}, "typical_p"),
                        ({"speculative": {"bogus": 1}}, "speculative")]:
        r = post(client, prompt=PROMPT, max_tokens=4, **body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)
    # pipelined samples too: the request's seed, temperature, top_k and top_p reach the wave
    sp = {"mode": "pipelined", "draft_loops": 1}
    j = post(client, prompt=PROMPT, max_tokens=20, temperature=0.9, top_k=40, top_p=0.95, seed=11, loops=5,
             ignore_eos=True, speculative=sp).json()
    want = tl.generate_pipelined(model, PROMPT, max_tokens=20, draft_loops=1, verify_loops=5, temperature=0.9,
                                 seed=11, top_k=40, top_p=0.95, ignore_eos=True)
    assert j["choices"][0]["text"] == want["text"], (j, want["text"])
    assert j["tinyloop_stats"][0]["spec_sweeps"] == want["stats"]["spec_sweeps"] > 0


def test_hugging_face_sampling_extensions(client, model):
    plain = tl.generate(model, PROMPT, max_tokens=6)["output_ids"]
    forced = next(t for t in range(3, 50) if t != plain[1])
    for hf in (dict(temperature=0, suppress_tokens=[plain[1]], begin_suppress_tokens=[plain[0]],
                    forced_eos_token_id=forced, exponential_decay_length_penalty=[2, 1.1]),
               dict(temperature=0.9, top_k=50, seed=4, typical_p=0.9, epsilon_cutoff=1e-3, eta_cutoff=1e-3)):
        j = post(client, prompt=PROMPT, max_tokens=6, **hf).json()
        kw = {**hf, "exponential_decay_length_penalty": (2, 1.1)} if "suppress_tokens" in hf else hf
        assert j["choices"][0]["text"] == tl.generate(model, PROMPT, max_tokens=6, **kw)["text"], hf


def test_grammar_and_beam_extensions(client, model):
    j = post(client, prompt="Hi", max_tokens=10, temperature=0, grammar='root ::= "yes" | "no"').json()
    assert j["choices"][0]["text"] in ("yes", "no")
    j = post(client, prompt=PROMPT, max_tokens=6, beam_size=3).json()
    assert j["choices"][0]["text"] == tl.generate(model, PROMPT, max_tokens=6, beam_size=3)["text"]
    hf = dict(beam_size=3, early_stopping="never", renormalize_logits=True, min_new_tokens=4, min_length=5)
    j = post(client, prompt=PROMPT, max_tokens=6, **hf).json()
    assert j["choices"][0]["text"] == tl.generate(model, PROMPT, max_tokens=6, **hf)["text"]
    # n with beam search: the n best hypotheses of one search (num_return_sequences), best first.
    for hf in (dict(beam_size=4), dict(beam_size=4, num_beam_groups=2, diversity_penalty=1.0)):
        ours = tl.generate(model, PROMPT, max_tokens=6, num_return_sequences=3, **hf)["sequences"]
        j = post(client, prompt=PROMPT, max_tokens=6, n=3, **hf).json()
        assert [c["text"] for c in j["choices"]] == [q["text"] for q in ours], (hf, j)
        assert [c["index"] for c in j["choices"]] == [0, 1, 2]
        assert [c["tinyloop_score"] for c in j["choices"]] == [q["score"] for q in ours]
        assert j["usage"]["completion_tokens"] == sum(len(q["output_ids"]) for q in ours)
        j2 = post(client, prompt=PROMPT, max_tokens=6, num_return_sequences=3, **hf).json()
        assert [c["text"] for c in j2["choices"]] == [c["text"] for c in j["choices"]]
    # Constrained beam search: force_words (or HF's force_words_ids) in HF's form.
    words = [[65], [[66, 67], [68]]]
    ours = tl.generate(model, PROMPT, max_tokens=8, beam_size=3, force_words=words)
    for key in ("force_words", "force_words_ids"):
        j = post(client, prompt=PROMPT, max_tokens=8, beam_size=3, **{key: words}).json()
        assert j["choices"][0]["text"] == ours["text"], (key, j)


# A copy of the test model whose metadata recommends an early-exit policy that exits at once
# (hidden_l2 below a huge threshold from depth 1) and chain / tree speculation knobs.
RECOMMENDED = {"early_exit": {"criterion": "hidden_l2", "threshold": 1000.0, "patience": 1, "min_L": 1,
                              "peek_every": 1},
               "speculation": {"draft_loops": 1, "draft_ahead": 3, "tree_draft_ahead": 2, "branches": 3}}


@pytest.fixture(scope="module")
def recommending(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("recommending") / "rec.tinyloop"
    tl.write_model_metadata(str(model_path), str(out), json.dumps({"recommended": RECOMMENDED}))
    m = tl.load_model(str(out), backend="cpu")
    yield m
    m.free()


def test_requests_without_early_exit_values_use_the_models(recommending):
    ee = {"early_exit_" + k: v for k, v in RECOMMENDED["early_exit"].items()}
    want = tl.generate(recommending, PROMPT, max_tokens=8, **ee)["stats"]["depth_per_token"]
    builtin = tl.generate(recommending, PROMPT, max_tokens=8, early_exit_patience=1)  # the built-in policy's
    with TestClient(server.create_app(recommending)) as c:
        card = c.get("/v1/models").json()["data"][0]
        assert card["recommended"]["early_exit"]["threshold"] == 1000.0
        got = post(c, prompt=PROMPT, max_tokens=8, temperature=0, early_exit={}).json()
        assert got["tinyloop_stats"][0]["depth_per_token"] == want
        assert want != builtin["stats"]["depth_per_token"]  # the model's policy is not the built-in one
        # an explicit value overrides the model's; the fields left out stay the model's
        strict = post(c, prompt=PROMPT, max_tokens=8, temperature=0, early_exit={"threshold": 1e-9}).json()
        want_strict = tl.generate(recommending, PROMPT, max_tokens=8, **dict(ee, early_exit_threshold=1e-9))
        assert strict["tinyloop_stats"][0]["depth_per_token"] == want_strict["stats"]["depth_per_token"]
        assert strict["tinyloop_stats"][0]["depth_per_token"] != want
        # another criterion than the model's: its threshold does not carry over (built-in 0.05)
        other = post(c, prompt=PROMPT, max_tokens=8, temperature=0, early_exit={"criterion": "kl"}).json()
        want_other = tl.generate(recommending, PROMPT, max_tokens=8, early_exit_patience=1, early_exit_criterion="kl")
        assert other["tinyloop_stats"][0]["depth_per_token"] == want_other["stats"]["depth_per_token"]


def test_speculative_requests_without_knobs_use_the_models(recommending, model):
    with TestClient(server.create_app(recommending)) as c:
        ids = recommending.tokenize(PROMPT)
        for sp, fn, knobs in (({}, tl.generate_speculative, dict(draft_loops=1, draft_ahead=3)),
                              ({"mode": "tree"}, tl.generate_tree_speculative,
                               dict(draft_loops=1, draft_ahead=2, K_branches=3))):
            want = fn(recommending, ids, max_tokens=12, verify_loops=3, ignore_eos=True, **knobs)["stats"]
            got = post(c, prompt=PROMPT, max_tokens=12, temperature=0, ignore_eos=True, speculative=sp).json()
            st = got["tinyloop_stats"][0]
            assert (st["spec_cycles"], st["spec_drafted"]) == (want["spec_cycles"], want["spec_drafted"]), sp
            # the built-in knobs (what a model without a recommendation gets) would run otherwise
            builtin_knobs = {k: v for k, v in tl.resolve_speculation(model).items() if k != "verify_loops"}
            builtin_knobs = dict(draft_loops=builtin_knobs["draft_loops"], draft_ahead=builtin_knobs["draft_ahead"],
                                 **({"K_branches": builtin_knobs["branches"]} if sp else {}))
            builtin = fn(recommending, ids, max_tokens=12, verify_loops=3, ignore_eos=True, **builtin_knobs)["stats"]
            assert (builtin["spec_cycles"], builtin["spec_drafted"]) != (want["spec_cycles"], want["spec_drafted"])
            # the binding without knobs asks the same resolver as the server
            bare = fn(recommending, ids, max_tokens=12, verify_loops=3, ignore_eos=True)["stats"]
            assert (bare["spec_cycles"], bare["spec_drafted"]) == (want["spec_cycles"], want["spec_drafted"]), sp
            # an explicit knob wins
            mine = post(c, prompt=PROMPT, max_tokens=12, temperature=0, ignore_eos=True,
                        speculative=dict(sp, draft_ahead=1)).json()["tinyloop_stats"][0]
            want1 = fn(recommending, ids, max_tokens=12, verify_loops=3, ignore_eos=True, **dict(knobs, draft_ahead=1))
            assert (mine["spec_cycles"], mine["spec_drafted"]) == (want1["stats"]["spec_cycles"],
                                                                  want1["stats"]["spec_drafted"]), sp
    # a model without a recommendation: the built-in knobs, as before
    assert tl.resolve_speculation(model) == {"verify_loops": 3, "draft_loops": 2, "draft_ahead": 4, "branches": 2}
