"""Hugging Face generate() parity, against transformers itself.

A version-1 model (the bundled tinyloop-kjv, and a random one) is unrolled into a
LlamaForCausalLM: the prelude blocks, then the loop block's layers repeated `loops` times, the
same weights in every copy (FORMAT.md section 1 is Llama's block: pre-norm RMSNorm, rotate-half
RoPE, grouped-query attention, SwiGLU). Every knob the engine shares with GenerationConfig is run
on both and compared token for token, alone and together: greedy, beam search with each
early_stopping, the processors. Sampled runs cannot share a seed, so they are compared by
distribution: each sampled token's probability (the event's prob) against the probability
transformers' processors and warpers give it after the same prefix, and the first token's
frequencies over many seeds against that distribution.

The one deliberate difference (README, Semantics): transformers drops a bad_words_ids entry
equal to [eos]; tinyloop bans EOS then. Both sides of it are checked here.

transformers and torch come from tests/python/requirements-peer.txt; a missing one fails the
tests with the reason (it never skips).
"""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

from conftest import ROOT, tl

sys.path.insert(0, str(ROOT / "resources" / "models" / "tinyloop-kjv"))
from tinyloop_file import read_tinyloop  # noqa: E402

try:
    import torch
    import transformers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    IMPORT_ERROR = None
except ImportError as e:  # reported by the fixture: the tests fail, they do not skip
    IMPORT_ERROR = e

KJV = ROOT / "resources" / "models" / "tinyloop-kjv" / "model-f32.tinyloop"
KJV_LOOPS = 4  # 1 prelude block + 4 passes of 1 loop layer: a 5-layer Llama


def unroll(path, loops):
    """The .tinyloop file at `path`, run at depth `loops`, as a float32 LlamaForCausalLM."""
    header, t = read_tinyloop(str(path))
    hp = header["hparams"]
    layers = [f"pre.{i}" for i in range(hp["n_pre_blocks"])]
    layers += [f"loop.{j}" for _ in range(loops) for j in range(hp["n_loop_layers"])]
    eos = header["tokenizer"]["eos_id"]
    cfg = LlamaConfig(
        vocab_size=hp["vocab_size"], hidden_size=hp["d_model"], intermediate_size=hp["d_ff"],
        num_hidden_layers=len(layers), num_attention_heads=hp["n_heads"],
        num_key_value_heads=hp["n_kv_heads"], head_dim=hp["head_dim"], rms_norm_eps=hp["norm_eps"],
        # transformers 5 spells RoPE rope_parameters; 4.x (the group / constrained beam peer) rope_theta
        **({"rope_parameters": {"rope_type": "default", "rope_theta": hp["rope_theta"]}}
           if int(transformers.__version__.split(".")[0]) >= 5 else {"rope_theta": hp["rope_theta"]}),
        max_position_embeddings=hp["max_seq_len"], tie_word_embeddings=hp["tie_embeddings"],
        attention_bias=False, mlp_bias=False, bos_token_id=None, eos_token_id=eos, pad_token_id=eos)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).float().eval()

    def w(name):
        shape, a = t[name]
        return torch.frombuffer(bytearray(a.tobytes()), dtype=torch.float32).reshape(shape)

    sd = {"model.embed_tokens.weight": w("embed"), "model.norm.weight": w("final_norm"),
          "lm_head.weight": w("embed" if hp["tie_embeddings"] else "head")}
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
             "self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv",
             "self_attn.o_proj": "wo", "mlp.gate_proj": "w_gate", "mlp.up_proj": "w_up",
             "mlp.down_proj": "w_down"}
    for i, src in enumerate(layers):
        for hf, ours in names.items():
            sd[f"model.layers.{i}.{hf}.weight"] = w(f"{src}.{ours}")
    model.load_state_dict(sd, strict=True)
    return model, eos


class Peer:
    """One model on both sides: tinyloop at depth `loops` and its unrolled Llama."""

    def __init__(self, path, loops):
        self.hf, self.eos = unroll(path, loops)
        self.path = path
        self.ours = tl.load_model(str(path), backend="cpu")
        self.loops = loops

    def hf_config(self, max_tokens, **kw):
        kw = dict(kw)
        if "logit_bias" in kw:
            kw["sequence_bias"] = [[[i], b] for i, b in kw.pop("logit_bias").items()]
        if "bad_words" in kw:
            kw["bad_words_ids"] = kw.pop("bad_words")
        if "beam_size" in kw:
            kw["num_beams"] = kw.pop("beam_size")
        if "temperature" in kw:
            kw["do_sample"] = True
        kw.pop("seed", None)
        return GenerationConfig(max_new_tokens=max_tokens, eos_token_id=self.eos, pad_token_id=self.eos,
                                bos_token_id=None, **{"do_sample": False, **kw})

    def hf_generate(self, prompt, max_tokens, **kw):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = self.hf.generate(ids, attention_mask=torch.ones_like(ids),
                                   generation_config=self.hf_config(max_tokens, **kw))
        return out[0, len(prompt):].tolist()

    def hf_probs(self, context, **kw):
        """transformers' sampling distribution for the token after `context` (processors and
        warpers of a sampled generate, max_new_tokens 1, output_scores)."""
        ids = torch.tensor([context])
        with torch.no_grad():
            out = self.hf.generate(ids, attention_mask=torch.ones_like(ids), output_scores=True,
                                   return_dict_in_generate=True, generation_config=self.hf_config(1, **kw))
        return torch.softmax(out.scores[0][0].double(), dim=-1)

    def ours_probs(self, context, **kw):
        """tinyloop's sampling distribution for the token after `context` (the whole context as the
        prompt, as hf_probs has it)."""
        return torch.tensor(tl.next_token_distribution(self.ours, context, loops=self.loops, **kw), dtype=torch.float64)

    def ours_generate(self, prompt, max_tokens, **kw):
        r = tl.generate(self.ours, prompt, max_tokens=max_tokens, loops=self.loops, **kw)
        return r["output_ids"]


@pytest.fixture(scope="module")
def peer_libs():
    if IMPORT_ERROR is not None:
        pytest.fail(f"the peer test needs torch and transformers in the test venv "
                    f"(pip install -r tests/python/requirements-peer.txt): {IMPORT_ERROR}", pytrace=False)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()


@pytest.fixture(scope="module")
def kjv(peer_libs):
    return Peer(KJV, KJV_LOOPS)


@pytest.fixture(scope="module")
def random_peer(peer_libs, cli, tmp_path_factory):
    """A random version-1 model whose vocabulary is exactly its tokenizer's ids (bytes + EOS)."""
    out = tmp_path_factory.mktemp("peer") / "random.tinyloop"
    subprocess.run([str(cli), "make-random", str(out), "--vocab", "257", "--d-model", "64", "--n-heads", "4",
                    "--n-kv-heads", "2", "--head-dim", "16", "--d-ff", "128", "--n-pre", "1", "--n-loop", "2",
                    "--loops", "3", "--max-loops", "6", "--max-seq-len", "128", "--seed", "5"],
                   check=True, capture_output=True, text=True, timeout=120)
    return Peer(out, 3)


# The issue's prompts (the first two split from transformers before: beam with a repetition
# penalty, and early_stopping), then a few more.
P_REP = [1059, 259, 1937, 1085]
P_EOS = [2047, 37, 49, 48, 49, 49, 48, 61]
P_BIAS = [312, 422, 418]
P_TEXT = "And the LORD spake unto Moses, saying,"

GREEDY = [
    {},
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.8},
    {"no_repeat_ngram_size": 2},
    {"no_repeat_ngram_size": 3},
    {"bad_words": [[259], [44, 269]]},
    {"logit_bias": {259: -100.0, 383: 3.0}},
    {"repetition_penalty": 1.5, "logit_bias": {259: 4.0}},
    {"min_new_tokens": 12},
    {"min_length": 20},
    {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3, "bad_words": [[44]], "logit_bias": {13: 2.0},
     "min_new_tokens": 6},
]

BEAM = [
    {"beam_size": 4, "length_penalty": 1.0},
    {"beam_size": 4, "length_penalty": 1.0, "early_stopping": True},
    {"beam_size": 4, "length_penalty": 1.0, "early_stopping": "never"},
    {"beam_size": 3, "length_penalty": 0.5},
    {"beam_size": 3, "length_penalty": 2.0, "early_stopping": "never"},
    {"beam_size": 3, "length_penalty": 0.0, "early_stopping": "never"},
    {"beam_size": 4, "repetition_penalty": 1.3},
    {"beam_size": 4, "no_repeat_ngram_size": 2, "early_stopping": True},
    {"beam_size": 3, "logit_bias": {259: 1.5}, "repetition_penalty": 1.2},
    {"beam_size": 4, "min_new_tokens": 8, "renormalize_logits": True},
    {"beam_size": 2, "repetition_penalty": 1.2, "no_repeat_ngram_size": 3, "bad_words": [[44]],
     "min_length": 14, "renormalize_logits": True, "early_stopping": "never"},
]


def prompts(peer):
    if peer.eos == 2047:
        return [P_REP, P_EOS, P_BIAS]
    return [[10, 20, 30, 40], [5, 6, 7], [200, 1, 100, 50, 3]]


def compare(peer, cases, max_tokens):
    mismatches = []
    for kw in cases:
        for p in prompts(peer):
            ours = peer.ours_generate(p, max_tokens, **kw)
            hf = peer.hf_generate(p, max_tokens, **kw)
            if ours != hf:
                mismatches.append(f"{kw} prompt {p}: ours {ours}, transformers {hf}")
    assert not mismatches, "\n".join(mismatches)


def test_greedy_knobs_match_transformers(kjv):
    compare(kjv, GREEDY, 24)


def test_beam_search_matches_transformers(kjv):
    compare(kjv, BEAM, 20)


def test_issue_cases(kjv):
    # Beam with a repetition penalty: transformers' 268 first (penalty on log-probs).
    assert kjv.ours_generate(P_REP, 24, beam_size=4, repetition_penalty=1.3)[0] == 268
    # early_stopping false (the default) ends where transformers does.
    assert kjv.ours_generate(P_EOS, 48, beam_size=4) == [48, 2047]


def test_random_model_matches_transformers(random_peer):
    compare(random_peer, GREEDY[:1] + GREEDY[3:5] + GREEDY[8:] + BEAM[:3] + BEAM[6:8] + BEAM[9:], 20)  # ids < 257


def test_bad_words_eos_is_the_documented_difference(kjv):
    # transformers drops [eos] from bad_words_ids: the same as no entry at all ...
    kw = {"min_new_tokens": 0, "logit_bias": {kjv.eos: 6.0}}
    assert kjv.hf_generate(P_EOS, 12, bad_words=[[kjv.eos]], **kw) == kjv.hf_generate(P_EOS, 12, **kw)
    assert kjv.eos in kjv.hf_generate(P_EOS, 12, **kw)
    # ... tinyloop bans EOS.
    assert kjv.eos not in kjv.ours_generate(P_EOS, 12, bad_words=[[kjv.eos]], **kw)
    assert kjv.eos in kjv.ours_generate(P_EOS, 12, **kw)


SAMPLED = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.2, "logit_bias": {259: 1.0},
           "no_repeat_ngram_size": 3, "min_p": 0.02}


def test_sampled_token_probabilities_match_transformers(kjv):
    """Each token a sampled run emits has the probability transformers gives it after the same
    prefix (both sides' processors and warpers), to float32 precision."""
    worst = 0.0
    for seed in (1, 2):
        prompt = kjv.ours.tokenize(P_TEXT)
        r = tl.generate(kjv.ours, prompt, max_tokens=12, loops=kjv.loops, seed=seed, events=True, **SAMPLED)
        ctx = list(prompt)
        for ev in r["events"]:
            p_hf = float(kjv.hf_probs(ctx, **SAMPLED)[ev["token"]])
            worst = max(worst, abs(p_hf - ev["prob"]))
            assert p_hf > 0, f"seed {seed}: token {ev['token']} after {ctx} is outside transformers' support"
            ctx.append(ev["token"])
    assert worst < 2e-4, worst


def test_sampled_first_token_frequencies_match_transformers(kjv):
    prompt = P_BIAS
    probs = kjv.hf_probs(prompt, **SAMPLED)
    n = 1200
    counts = {}
    for seed in range(n):
        t = kjv.ours_generate(prompt, 1, seed=seed, **SAMPLED)[0]
        counts[t] = counts.get(t, 0) + 1
    assert all(probs[t] > 0 for t in counts), "a token transformers never samples was drawn"
    tv = 0.5 * sum(abs(counts.get(t, 0) / n - float(probs[t])) for t in range(len(probs)))
    support = int((probs > 0).sum())
    # The expected total variation of n draws is about sqrt(support / (2 pi n)); allow 3 times.
    assert tv < 3 * math.sqrt(support / (2 * math.pi * n)) + 0.01, (tv, support)


# ---- Hugging Face's sampling-side knobs: suppress_tokens, begin_suppress_tokens,
# forced_eos_token_id, exponential_decay_length_penalty (token for token, greedy and beam), and
# the typical_p, epsilon_cutoff and eta_cutoff warpers (whole distributions, and sampled runs).

def hf_processor_cases(peer, plain):
    """The deterministic knobs, aimed at the tokens of a prompt's plain greedy output `plain`
    (EOS left out: forced_eos_token_id must not be suppressed)."""
    plain = [t for t in plain if t != peer.eos]
    return [
        {"suppress_tokens": [plain[0], plain[2]]},
        {"begin_suppress_tokens": [plain[0], plain[1]]},
        {"forced_eos_token_id": peer.eos},
        {"forced_eos_token_id": plain[1]},
        {"exponential_decay_length_penalty": (3, 1.6)},
        {"exponential_decay_length_penalty": (0, 3.0)},
        {"repetition_penalty": 1.2, "min_new_tokens": 4, "suppress_tokens": [plain[1]],
         "begin_suppress_tokens": [plain[0]], "exponential_decay_length_penalty": (5, 1.4),
         "forced_eos_token_id": peer.eos},
    ]


def compare_hf_processors(peer, max_tokens, searches):
    mismatches, changed = [], {}
    for p in prompts(peer):
        plain = peer.ours_generate(p, max_tokens, ignore_eos=True)
        for search in searches:
            unset = peer.ours_generate(p, max_tokens, **search)
            for i, kw in enumerate(hf_processor_cases(peer, plain)):
                args = {**search, **kw}
                ours = peer.ours_generate(p, max_tokens, **args)
                hf = peer.hf_generate(p, max_tokens, **args)
                changed[i] = changed.get(i, 0) + (ours != unset)
                if ours != hf:
                    mismatches.append(f"{args} prompt {p}: ours {ours}, transformers {hf}")
    assert not mismatches, "\n".join(mismatches)
    # Every case changes some output (else its agreement would prove nothing).
    assert all(changed.values()), changed


def test_hf_processor_knobs_match_transformers(kjv):
    compare_hf_processors(kjv, 12, [{}, {"beam_size": 3, "length_penalty": 1.0}])


def test_hf_processor_knobs_match_transformers_on_a_random_model(random_peer):
    compare_hf_processors(random_peer, 10, [{}, {"beam_size": 2}])


WARPERS = [
    {"temperature": 0.9, "typical_p": 0.8},
    {"temperature": 1.0, "typical_p": 0.3},
    {"temperature": 1.0, "epsilon_cutoff": 3e-3},
    {"temperature": 1.3, "eta_cutoff": 2e-3},
    {"temperature": 1.0, "eta_cutoff": 0.2},
    {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.01, "typical_p": 0.9, "epsilon_cutoff": 1e-3,
     "eta_cutoff": 1e-3, "repetition_penalty": 1.2},
]


def support(p):
    return set((p > 0).nonzero().flatten().tolist())


def test_warper_distributions_match_transformers(kjv):
    """The whole distribution each warper leaves (the same surviving tokens, the same
    probabilities to float32 precision) after several contexts."""
    contexts = prompts(kjv) + [kjv.ours.tokenize(P_TEXT)]
    worst = 0.0
    for kw in WARPERS:
        without = {k: v for k, v in kw.items() if k not in ("typical_p", "epsilon_cutoff", "eta_cutoff")}
        removed = 0
        for ctx in contexts:
            ours, hf = kjv.ours_probs(ctx, **kw), kjv.hf_probs(ctx, **kw)
            kept_ours, kept_hf = support(ours), support(hf)
            assert kept_ours == kept_hf, f"{kw} after {ctx}: only ours {kept_ours - kept_hf}, only HF {kept_hf - kept_ours}"
            removed += len(support(kjv.ours_probs(ctx, **without))) - len(kept_ours)
            worst = max(worst, float((ours - hf).abs().max()))
        assert removed > 0, f"{kw}: the warpers removed no token after any context (the case proves nothing)"
    assert worst < 2e-4, worst


def test_sampled_runs_with_warpers_match_transformers(kjv):
    """Sampled runs through generate() (the pipeline's draws, not only its distribution): each
    token's probability against transformers' after the same prefix."""
    kw = WARPERS[-1]
    worst = 0.0
    prompt = kjv.ours.tokenize(P_TEXT)
    r = tl.generate(kjv.ours, prompt, max_tokens=10, loops=kjv.loops, seed=3, events=True, **kw)
    ctx = list(prompt)
    for ev in r["events"]:
        p_hf = float(kjv.hf_probs(ctx, **kw)[ev["token"]])
        assert p_hf > 0, f"token {ev['token']} after {ctx} is outside transformers' support"
        worst = max(worst, abs(p_hf - ev["prob"]))
        ctx.append(ev["token"])
    assert worst < 2e-4, worst
