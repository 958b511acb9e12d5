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
