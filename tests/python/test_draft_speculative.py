"""tinyloop_py.generate_draft_speculative on the bundled model with its q4 file as the draft."""
from __future__ import annotations

import pytest

import tinyloop_py as tl
from conftest import ROOT

F32 = ROOT / "resources" / "models" / "tinyloop-kjv" / "model-f32.tinyloop"
Q4 = ROOT / "resources" / "models" / "tinyloop-kjv" / "model-q4.tinyloop"
PROMPT = "And God said,"


@pytest.fixture(scope="module")
def pair():
    with tl.load_model(str(F32)) as target, tl.load_model(str(Q4)) as draft:
        yield target, draft


def test_draft_greedy_equals_greedy(pair):
    target, draft = pair
    plain = tl.generate(target, PROMPT, max_tokens=40, repetition_penalty=1.2)
    for gamma in (1, 4, 6):
        r = tl.generate_draft_speculative(target, draft, PROMPT, gamma=gamma, max_tokens=40,
                                          repetition_penalty=1.2, events=True)
        assert r["output_ids"] == plain["output_ids"]
        assert r["text"] == plain["text"]
        st = r["stats"]
        assert st["spec_cycles"] > 0
        assert 0 < st["spec_accepted"] <= st["spec_tested"]
        assert len(r["events"]) == len(r["output_ids"])


def test_draft_stream_and_seeded_sampling(pair):
    target, draft = pair
    kw = dict(max_tokens=30, temperature=0.8, seed=11)
    a = tl.generate_draft_speculative(target, draft, PROMPT, **kw)
    b = tl.generate_draft_speculative(target, draft, PROMPT, **kw)
    assert a["output_ids"] == b["output_ids"]
    with tl.generate_draft_speculative(target, draft, PROMPT, max_tokens=20, stream=True) as s:
        toks = [ev["token"] for ev in s]
    assert toks == tl.generate(target, PROMPT, max_tokens=20)["output_ids"]


def test_draft_refusals(pair, model):
    target, draft = pair
    with pytest.raises(ValueError, match="gamma"):
        tl.generate_draft_speculative(target, draft, PROMPT, gamma=0)
    with pytest.raises(ValueError, match="vocab_size"):
        tl.generate_draft_speculative(target, model, PROMPT)


def test_server_draft_mode(pair):
    import sys

    from fastapi.testclient import TestClient

    sys.path.insert(0, str(ROOT / "app" / "serve"))
    import server

    target, draft = pair
    body = dict(prompt=PROMPT, max_tokens=24, temperature=0, repetition_penalty=1.2, stop=["Moses"])
    spec = dict(body, speculative={"mode": "draft", "gamma": 3})
    with TestClient(server.create_app(target, draft=draft)) as c:
        plain = c.post("/v1/completions", json=body)
        assert plain.status_code == 200, plain.text
        r = c.post("/v1/completions", json=spec)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]
        st = r.json()["tinyloop_stats"][0]
        assert st["spec_cycles"] > 0 and st["spec_accepted"] > 0
        for sp, param in (({"mode": "draft", "gamma": 0}, "speculative.gamma"),
                          ({"mode": "draft", "draft_loops": 99}, "speculative.draft_loops"),
                          ({"mode": "draft", "draft_ahead": 2}, "speculative"),
                          ({"gamma": 2}, "speculative")):
            bad = c.post("/v1/completions", json=dict(body, speculative=sp))
            assert bad.status_code == 400, bad.text
            assert bad.json()["error"]["param"] == param
    with TestClient(server.create_app(target)) as c:  # no --draft-model
        bad = c.post("/v1/completions", json=spec)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "speculative.mode"
