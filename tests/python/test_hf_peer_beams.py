"""Hugging Face generate() parity for the knobs with several outputs, several beam groups or
forced words.

num_return_sequences (beam search and sampling) against transformers 5 in this process, as
test_hf_peer.py does: beam search's N outputs and their scores token for token, sampling's N
outputs by shape and by each token's probability under transformers' distribution.

Diverse (group) beam search, num_beam_groups with diversity_penalty: transformers 5 moved
_group_beam_search to a Hub `custom_generate` repository, which CI cannot reach, so the peer is
transformers 4.53.3, the last release line with it in the library, installed by packaging/setup.sh
into <build>/hf4-peer (tests/python/requirements-peer-hf4.txt, `pip install --target`) and run in
a subprocess with this venv's torch (hf4_beam_peer.py). A missing install fails the test with the
reason; it never skips. Constrained beam search (force_words, HF's force_words_ids) is compared
with the same transformers 4.53.3, whose _constrained_beam_search transformers 5 also moved out.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, tl
from test_hf_peer import KJV, P_BIAS, P_EOS, P_REP, kjv, peer_libs, random_peer  # noqa: F401 (fixtures)

HF4_DIR = Path(os.environ.get("TINYLOOP_HF4_PEER_DIR", ROOT / "build" / "hf4-peer"))
HF4_SCRIPT = Path(__file__).resolve().parent / "hf4_beam_peer.py"

GROUPS = [
    {"beam_size": 4, "num_beam_groups": 2, "diversity_penalty": 0.5, "num_return_sequences": 4},
    {"beam_size": 4, "num_beam_groups": 4, "diversity_penalty": 1.0, "num_return_sequences": 2},
    {"beam_size": 6, "num_beam_groups": 3, "diversity_penalty": 2.0, "num_return_sequences": 3,
     "length_penalty": 0.5},
    {"beam_size": 4, "num_beam_groups": 2, "diversity_penalty": 0.8, "early_stopping": True},
    {"beam_size": 4, "num_beam_groups": 2, "diversity_penalty": 0.8, "early_stopping": "never",
     "repetition_penalty": 1.2, "num_return_sequences": 2},
    {"beam_size": 8, "num_beam_groups": 2, "diversity_penalty": 0.3, "num_return_sequences": 5},
    {"beam_size": 4, "num_beam_groups": 2, "diversity_penalty": 1.5, "no_repeat_ngram_size": 2,
     "min_new_tokens": 5, "logit_bias": {59: 1.0}},
]
RANDOM_PROMPTS = [[10, 20, 30, 40], [5, 6, 7]]
KJV_PROMPTS = [P_REP, P_EOS, P_BIAS]

# Constrained beam search (force_words, HF's force_words_ids in its own form: [ids] a word,
# [[ids], [ids]] alternatives) against transformers 4.53.3's _constrained_beam_search, which
# transformers 5 moved to the Hub as well. Words that the plain search does not emit, words that
# the prompt already holds, alternatives sharing a prefix (HF's shared progress list), with the
# other beam knobs.
KJV_CONSTRAINED = [
    {"beam_size": 4, "force_words": [[1085, 259]]},
    {"beam_size": 4, "force_words": [[312], [44, 269]], "num_return_sequences": 2},
    {"beam_size": 3, "force_words": [[[44, 269], [44, 312], [1085]]], "length_penalty": 0.5, "early_stopping": True},
    {"beam_size": 5, "force_words": [[[418, 422], [418, 61, 49]], [37]], "early_stopping": "never",
     "num_return_sequences": 3},
    {"beam_size": 4, "force_words": [[49, 48]], "repetition_penalty": 1.2, "no_repeat_ngram_size": 3},
]
RANDOM_CONSTRAINED = [
    {"beam_size": 4, "force_words": [[65]]},
    {"beam_size": 4, "force_words": [[66, 67], [[70, 71], [70, 72, 73]]], "num_return_sequences": 2},
    {"beam_size": 3, "force_words": [[[100], [101, 102]]], "early_stopping": True},
    {"beam_size": 6, "force_words": [[30, 40], [50]], "early_stopping": "never", "num_return_sequences": 4,
     "length_penalty": 0.8},
]


def hf_config(kw):
    """tinyloop's knobs as GenerationConfig fields."""
    kw = dict(kw)
    kw["num_beams"] = kw.pop("beam_size")
    if "force_words" in kw:
        kw["force_words_ids"] = kw.pop("force_words")
    if "logit_bias" in kw:
        kw["sequence_bias"] = [[[i], b] for i, b in kw.pop("logit_bias").items()]
    return kw


def hf_run(peer, prompt, max_tokens, **kw):
    """transformers 5's generate on `prompt` with tinyloop's knobs (torch imported once the
    fixtures have checked it is there)."""
    import torch
    ids = torch.tensor([prompt])
    with torch.no_grad():
        return peer.hf.generate(ids, attention_mask=torch.ones_like(ids), output_scores=True,
                                return_dict_in_generate=True, generation_config=peer.hf_config(max_tokens, **kw))


def ours(peer, prompt, max_tokens, kw):
    """Every output of tinyloop's run (one without num_return_sequences) and the scores."""
    r = tl.generate(peer.ours, prompt, max_tokens=max_tokens, loops=peer.loops, **kw)
    seqs = r.get("sequences") or [{"output_ids": r["output_ids"], "score": None}]
    return [s["output_ids"] for s in seqs], [s["score"] for s in seqs]


def agree(tag, ours_seqs, ours_scores, hf_seqs, hf_scores):
    """'' when both sides return the same sequences (and, where tinyloop reports them, scores)."""
    if ours_seqs != hf_seqs:
        return f"{tag}: ours {ours_seqs}, transformers {hf_seqs}"
    for a, b in zip(ours_scores, hf_scores):
        if a is not None and abs(a - b) > 2e-4 * max(1.0, abs(b)):
            return f"{tag}: scores ours {ours_scores}, transformers {hf_scores}"
    return ""


@pytest.fixture(scope="module")
def hf4(kjv, random_peer):
    """transformers 4.53.3's answers to every GROUPS case on both models, from one subprocess."""
    if not (HF4_DIR / "transformers").is_dir():
        pytest.fail(f"the group beam search peer needs transformers 4.x in {HF4_DIR} (packaging/setup.sh test "
                    f"installs tests/python/requirements-peer-hf4.txt there; or set TINYLOOP_HF4_PEER_DIR)",
                    pytrace=False)
    request = []
    for peer, prompts, constrained in ((kjv, KJV_PROMPTS, KJV_CONSTRAINED),
                                       (random_peer, RANDOM_PROMPTS, RANDOM_CONSTRAINED)):
        runs = [{"prompt": p, "max_new_tokens": 16, "config": hf_config(kw)}
                for kw in GROUPS + constrained for p in prompts]
        request.append({"model": str(peer.path), "loops": peer.loops, "runs": runs})
    proc = subprocess.run([sys.executable, str(HF4_SCRIPT), str(HF4_DIR)], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert proc.returncode == 0, f"hf4_beam_peer.py failed:\n{proc.stderr[-3000:]}"
    answer = json.loads(proc.stdout)
    assert answer["version"] == "4.53.3", answer["version"]
    return answer["models"]


def compare(peer, prompts, cases, runs):
    """tinyloop's outputs for `cases` x `prompts` against transformers 4.53.3's `runs`."""
    mismatches = []
    it = iter(runs)
    for kw in cases:
        for p in prompts:
            hf = next(it)
            seqs, scores = ours(peer, p, 16, kw)
            why = agree(f"{kw} prompt {p}", seqs, scores, hf["sequences"], hf["scores"])
            if why:
                mismatches.append(why)
    assert not mismatches, "\n".join(mismatches)


def test_group_beam_search_matches_transformers_4(kjv, hf4):
    compare(kjv, KJV_PROMPTS, GROUPS, hf4[0])


def test_group_beam_search_on_a_random_model_matches_transformers_4(random_peer, hf4):
    compare(random_peer, RANDOM_PROMPTS, GROUPS, hf4[1])


def test_constrained_beam_search_matches_transformers_4(kjv, hf4):
    compare(kjv, KJV_PROMPTS, KJV_CONSTRAINED, hf4[0][len(GROUPS) * len(KJV_PROMPTS):])


def test_constrained_beam_search_on_a_random_model_matches_transformers_4(random_peer, hf4):
    compare(random_peer, RANDOM_PROMPTS, RANDOM_CONSTRAINED, hf4[1][len(GROUPS) * len(RANDOM_PROMPTS):])


def test_forced_words_change_the_outputs_and_appear_in_them(kjv):
    plain, _ = ours(kjv, P_EOS, 16, {"beam_size": 4})
    forced, _ = ours(kjv, P_EOS, 16, {"beam_size": 4, "force_words": [[312], [[44, 269], [1085]]]})
    assert plain != forced
    out = forced[0]
    assert 312 in out and (any(out[i:i + 2] == [44, 269] for i in range(len(out))) or 1085 in out), out


def test_diversity_penalty_changes_the_outputs(kjv):
    plain, _ = ours(kjv, P_REP, 16, {"beam_size": 4, "num_beam_groups": 2, "num_return_sequences": 4})
    diverse, _ = ours(kjv, P_REP, 16, {"beam_size": 4, "num_beam_groups": 2, "num_return_sequences": 4,
                                       "diversity_penalty": 2.0})
    assert plain != diverse


BEAM_N = [
    {"beam_size": 4, "num_return_sequences": 4},
    {"beam_size": 4, "num_return_sequences": 2, "early_stopping": True},
    {"beam_size": 3, "num_return_sequences": 3, "length_penalty": 0.5, "early_stopping": "never"},
    {"beam_size": 4, "num_return_sequences": 3, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3},
]


def test_beam_num_return_sequences_matches_transformers(kjv):
    mismatches = []
    for kw in BEAM_N:
        for p in (P_REP, P_EOS, P_BIAS):
            out = hf_run(kjv, p, 20, **kw)
            hf = [row[:row.index(kjv.eos) + 1] if kjv.eos in row else row
                  for row in out.sequences[:, len(p):].tolist()]
            seqs, scores = ours(kjv, p, 20, kw)
            why = agree(f"{kw} prompt {p}", seqs, scores, hf, out.sequences_scores.tolist())
            if why:
                mismatches.append(why)
    assert not mismatches, "\n".join(mismatches)


def test_sampled_num_return_sequences_match_transformers_by_shape_and_distribution(kjv):
    kw = {"temperature": 0.9, "top_k": 40, "repetition_penalty": 1.1}
    prompt = kjv.ours.tokenize("And God said")
    out = hf_run(kjv, prompt, 6, num_return_sequences=3, **kw).sequences
    assert tuple(out.shape) == (3, len(prompt) + 6)  # N rows of one prompt
    r = tl.generate(kjv.ours, prompt, max_tokens=6, loops=kjv.loops, seed=5, num_return_sequences=3, **kw)
    assert len(r["sequences"]) == 3 and r["sequences"][0]["output_ids"] == r["output_ids"]
    assert len({tuple(s["output_ids"]) for s in r["sequences"]}) > 1
    worst = 0.0
    for s in r["sequences"]:
        ctx, logp = list(prompt), 0.0
        for t in s["output_ids"]:
            p_hf = float(kjv.hf_probs(ctx, **kw)[t])
            assert p_hf > 0, f"token {t} after {ctx} is outside transformers' support"
            logp += math.log(p_hf)
            ctx.append(t)
        worst = max(worst, abs(logp - s["score"]))  # the score is the sum of the drawn tokens' log-probs
    assert worst < 1e-3, worst

