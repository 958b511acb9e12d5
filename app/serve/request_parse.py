"""Request parsing for `tinyloop serve` (server.py): OpenAI-shaped errors, the /v1/completions
body checked field by field into a Completion (each error names its field and the allowed
range), and the checks every body gets first (JSON nesting, lone surrogates, integer range)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import tinyloop_py as tl
from fastapi.responses import JSONResponse

MAX_STOP = 4
MAX_N = 16
MAX_LOGPROBS = 5
MAX_PROMPTS = 64  # prompts in one request's list
MAX_CHOICES = 128  # prompts x n: one request's decodes are bounded
INT_MAX = 2**31 - 1  # the engine's integer fields are 32-bit: larger values are refused by name

# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as OpenAI's {"error": {...}} object."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 type_: str = "invalid_request_error", code: str | None = None, close: bool = False):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code
        self.close = close  # answer with Connection: close (the connection's framing is not trusted)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        # 408: the client stalls mid-body, so the connection is closed. (After a 413 uvicorn
        # reads the rest of the body into nothing, so the client, still sending, gets the answer;
        # the header timeout bounds how long that may take.)
        headers = {"Connection": "close"} if self.status == 408 or self.close else None
        return JSONResponse(status_code=self.status, content=self.body(), headers=headers)


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param)


# Engine field names (the start of an engine ValueError message) -> request fields.
ENGINE_FIELDS = {
    "max_tokens": "max_tokens", "prompt_len": "prompt", "loops": "loops", "temperature": "temperature",
    "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "logit_bias": "logit_bias", "stop_strings": "stop", "stop": "stop", "sample_seed": "seed",
    "early_exit_patience": "early_exit", "early_exit_min_L": "early_exit",
    "early_exit_peek_every": "early_exit", "early_exit_logit_margin": "early_exit",
    "early_exit_criterion": "early_exit", "early_exit_threshold": "early_exit", "lens_top_k": "logprobs",
    "prompt": "prompt", "beam_size": "beam_size", "grammar": "grammar", "length_penalty": "length_penalty",
    "max_time": "max_time", "no_repeat_ngram_size": "no_repeat_ngram_size", "kv_cache": "kv_cache",
    "kv_sharing": "kv_sharing",
    "early_stopping": "early_stopping", "renormalize_logits": "renormalize_logits",
    "min_new_tokens": "min_new_tokens", "min_length": "min_length",
    "forced_eos_token_id": "forced_eos_token_id",
    "exponential_decay_length_penalty": "exponential_decay_length_penalty", "suppress_tokens": "suppress_tokens",
    "begin_suppress_tokens": "begin_suppress_tokens", "typical_p": "typical_p", "epsilon_cutoff": "epsilon_cutoff",
    "eta_cutoff": "eta_cutoff",
    "num_return_sequences": "n", "num_beam_groups": "num_beam_groups", "diversity_penalty": "diversity_penalty",
    "force_words": "force_words",
}


def engine_error(exc: Exception, prompt_index: int | None = None) -> ApiError:
    """An engine exception as an API error naming the request field."""
    msg = str(exc)
    head = msg.split(":", 1)[0].split("[", 1)[0].strip()
    param = ENGINE_FIELDS.get(head)
    if prompt_index is not None and param == "max_tokens" and "prompt_len" in msg:
        msg += " (prompt %d)" % prompt_index
    if isinstance(exc, NotImplementedError):
        return ApiError(400, msg + " (not supported yet)", param)
    if isinstance(exc, (ValueError, TypeError)):
        return ApiError(400, msg, param)
    if isinstance(exc, MemoryError):
        return ApiError(503, "out of memory: " + msg, None, "server_error")
    return ApiError(500, msg, None, "server_error")


# ------------------------------------------------------------------------------------------
# Request parsing
# ------------------------------------------------------------------------------------------

# The one validation table: every field of /v1/completions with the JSON types it may have
# (null is always "left out"). check_fields types every field of a body against its table before
# any parsing code looks at a value, so no value of an unexpected type reaches a comparison, a
# set lookup or the binding (where it would be a TypeError's 500). /v1/chat/completions'
# table (chat.py) reuses these entries for the fields it passes through.
STR, INT, NUM, BOOL, OBJ, ARR = "a string", "an integer", "a number", "true or false", "an object", "an array"
COMPLETION_FIELDS: dict[str, tuple[str, ...]] = {
    "model": (STR,), "prompt": (STR, ARR), "max_tokens": (INT,), "temperature": (NUM,), "top_p": (NUM,),
    "n": (INT,), "stream": (BOOL,), "stream_options": (OBJ,), "logprobs": (INT,), "echo": (BOOL,),
    "stop": (STR, ARR), "presence_penalty": (NUM,), "frequency_penalty": (NUM,), "best_of": (INT,),
    "logit_bias": (OBJ,), "user": (STR,), "seed": (INT,), "suffix": (STR,),
    "response_format": (OBJ,),  # structured output (structured_output.py): a grammar made for it
    # extensions
    "loops": (INT,), "top_k": (INT,), "min_p": (NUM,), "repetition_penalty": (NUM,), "ignore_eos": (BOOL,),
    "early_exit": (OBJ,), "speculative": (OBJ,), "no_repeat_ngram_size": (INT,), "max_time": (NUM,),
    "beam_size": (INT,), "length_penalty": (NUM,), "grammar": (STR,), "kv_cache": (STR,), "kv_sharing": (STR,),
    "early_stopping": (BOOL, STR), "renormalize_logits": (BOOL,), "min_new_tokens": (INT,), "min_length": (INT,),
    # Hugging Face's sampling-side GenerationConfig knobs
    "forced_eos_token_id": (INT,), "exponential_decay_length_penalty": (ARR,), "suppress_tokens": (ARR,),
    "begin_suppress_tokens": (ARR,), "typical_p": (NUM,), "epsilon_cutoff": (NUM,), "eta_cutoff": (NUM,),
    "num_return_sequences": (INT,), "num_beam_groups": (INT,), "diversity_penalty": (NUM,),
    "force_words": (ARR,), "force_words_ids": (ARR,),
}
EARLY_EXIT_FIELDS = {"patience": (INT,), "min_L": (INT,), "peek_every": (INT,), "criterion": (STR,),
                     "threshold": (NUM,), "logit_margin": (NUM,)}
SPECULATIVE_FIELDS = {"mode": (STR,), "draft_loops": (INT,), "verify_loops": (INT,), "draft_ahead": (INT,),
                      "branches": (INT,), "K_branches": (INT,), "gamma": (INT,)}
STREAM_OPTIONS_FIELDS = {"include_usage": (BOOL,)}
INT64_MAX = 2**63 - 1  # no integer field of the engine is wider; larger ones are named, never cast


def json_type(v: Any) -> str:
    """The JSON type of a decoded value, as error messages name it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _has_type(v: Any, t: str) -> bool:
    if t == STR:
        return isinstance(v, str)
    if t == INT:
        return _is_int(v)
    if t == NUM:
        return _is_int(v) or (isinstance(v, float) and not isinstance(v, bool))
    if t == BOOL:
        return isinstance(v, bool)
    if t == OBJ:
        return isinstance(v, dict)
    return isinstance(v, list)


def check_fields(body: dict, table: dict, prefix: str = "", param: str | None = None) -> None:
    """Refuses an unknown field or a field whose JSON type its table does not allow, naming it
    (`prefix` + name) and the types allowed; null counts as left out. `param` is the error's
    param (default: the field's own name)."""
    for k, v in body.items():
        name = prefix + str(k)
        types = table.get(k)
        if types is None:
            if prefix:
                raise bad(param or name, "%s: unknown field (allowed: %s)" % (name, ", ".join(table)))
            raise bad(k, "Unrecognized request argument supplied: %s" % k)
        if v is None:
            continue
        if not any(_has_type(v, t) for t in types):
            raise bad(param or name, "%s: expected %s, got %s" % (name, " or ".join(types), json_type(v)))
        if INT in types and _is_int(v) and not -INT64_MAX - 1 <= v <= INT64_MAX:
            raise bad(param or name, "%s: %d is outside the 64-bit integer range" % (name, v))


HF_SAMPLING_DEFAULTS = {"forced_eos_token_id": None, "exponential_decay_length_penalty": None,
                        "suppress_tokens": [], "begin_suppress_tokens": [], "typical_p": 1,
                        "epsilon_cutoff": 0, "eta_cutoff": 0}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int):
        return abs(v) <= 2**63  # math.isfinite would overflow on a huge int
    return math.isfinite(v)


def _field(body: dict, name: str, param: str | None, ok, what: str) -> tuple[Any, str]:
    """(the field's value or None, the name errors use); refuses a value `ok` rejects."""
    v = body.get(name)
    p = param or name
    if v is not None and not ok(v):
        raise bad(p, "%s: expected %s, got %s" % (p, what, json.dumps(v)))
    return v, p


def _int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = INT_MAX,
         param: str | None = None) -> int | None:
    v, p = _field(body, name, param, _is_int, "an integer")
    if v is None:
        return default
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = "[%s, %s]" % (lo if lo is not None else "-inf", hi if hi is not None else "inf")
        raise bad(p, "%s: %d is outside %s" % (p, v, rng))
    return v


def _num(body: dict, name: str, default: float | None, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False, param: str | None = None) -> float | None:
    v, p = _field(body, name, param, _is_num, "a number")
    if v is None:
        return default
    v = float(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise bad(p, "%s: %g is outside %s%g, %s]" % (p, v, "(" if lo_open else "[", lo, "inf" if hi is None else "%g" % hi))
    if hi is not None and v > hi:
        raise bad(p, "%s: %g is outside %s%g, %g]" % (p, v, "(" if lo_open else "[", lo if lo is not None else -math.inf, hi))
    return v


def _bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(name, "%s: expected true or false, got %s" % (name, json.dumps(v)))
    return v


@dataclass
class Completion:
    """A parsed /v1/completions request."""
    prompts: list  # each a str or a list of token ids
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None
    echo: bool = False
    seed: int | None = None
    config: dict = field(default_factory=dict)  # tinyloop_py GenerateConfig fields
    speculative: dict | None = None
    early_exit: bool = False  # the request has an early_exit object (its unset fields: the model's)
    grammar: Any = None  # a tinyloop_py.Grammar
    chat_top_logprobs: int = 0  # chat's top_logprobs (the alternatives each chat logprobs entry lists)


EARLY_EXIT_KEYS = {"patience": "early_exit_patience", "min_L": "early_exit_min_L",
                   "peek_every": "early_exit_peek_every", "criterion": "early_exit_criterion",
                   "threshold": "early_exit_threshold", "logit_margin": "early_exit_logit_margin"}
CRITERIA = {"hidden_l2", "l2", "logit_margin", "margin", "kl", "entropy_delta", "entropy", "argmax_stable", "argmax",
            "gate_stop", "gate", "gate_select", "reverse_kl", "minp_kl"}


def check_token_ids(param: str, ids: list, vocab_size: int, field: str, each: bool = True) -> None:
    """The engine's one token-id rule (tl.check_token_ids / tl.check_token_id: FIELD[i], or FIELD
    with each=False, "token id X is outside the vocabulary [0, V)"; ints of any size) as a 400 naming
    `param`."""
    try:
        if each:
            tl.check_token_ids(ids, vocab_size, field)
        else:
            for t in ids:
                tl.check_token_id(t, vocab_size, field)
    except ValueError as exc:
        raise bad(param, str(exc)) from None


def check_force_words(words: Any, vocab_size: int) -> None:
    """force_words in HF's form, every id in the vocabulary (checked here, by the engine's rule:
    an id past 64 bits would otherwise fail the binding's cast)."""
    form = "force_words: expected a list whose entries are [token ids] or [[token ids], [token ids], ...]"
    if not isinstance(words, list):
        raise bad("force_words", form)
    for i, w in enumerate(words):
        if not isinstance(w, list):
            raise bad("force_words", "%s; force_words[%d] is %s" % (form, i, json_type(w)))
        alts = w if w and all(isinstance(x, list) for x in w) else [w]
        for a in alts:
            for t in a:
                if not _is_int(t):
                    raise bad("force_words", "%s; force_words[%d] holds %s" % (form, i, json_type(t)))
            check_token_ids("force_words", a, vocab_size, "force_words[%d]" % i, each=False)


def _beam_outputs(body: dict, c: Completion, vocab_size: int) -> None:
    """Diverse beam search (num_beam_groups, diversity_penalty), constrained beam search
    (force_words), and n with beam search: the n best hypotheses of one search (the engine's
    num_return_sequences), not n equal searches."""
    cfg = c.config
    groups = _int(body, "num_beam_groups", None, 1)
    if groups is not None:
        cfg["num_beam_groups"] = groups
    dp = _num(body, "diversity_penalty", None, 0.0, 100.0)
    if dp is not None:
        cfg["diversity_penalty"] = dp
    # Constrained beam search: force_words or HF's name force_words_ids, in HF's form (each entry
    # [ids] or [[ids], [ids], ...] alternatives); the engine checks the entries and the ranges.
    if "force_words" in body and "force_words_ids" in body:
        raise bad("force_words", "force_words: give force_words or its alias force_words_ids, not both")
    words = body.get("force_words", body.get("force_words_ids"))
    if words is not None:
        check_force_words(words, vocab_size)
        cfg["force_words"] = words
    if cfg.get("beam_size", 0) >= 2 and c.n > 1:
        if c.stream:
            raise bad("n", "n: %d best beams come from one search at its end; stream them with n 1, "
                      "or set stream false" % c.n)
        if body.get("logprobs") is not None:
            raise bad("logprobs", "logprobs: not reported for beam search with n > 1 (use n 1)")
        cfg["num_return_sequences"] = c.n


def parse_completion(body: Any, vocab_size: int) -> Completion:
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object")
    check_fields(body, COMPLETION_FIELDS)
    if body.get("suffix") is not None:
        raise bad("suffix", "suffix: not supported yet")

    # prompt: str | [str] | [int] | [[int]]
    if "prompt" not in body or body["prompt"] is None:
        raise bad("prompt", "prompt: required")
    p = body["prompt"]
    if isinstance(p, str):
        prompts = [p]
    elif isinstance(p, list) and p and all(_is_int(t) for t in p):
        prompts = [list(p)]
    elif isinstance(p, list) and p and all(isinstance(s, str) for s in p):
        prompts = list(p)
    elif isinstance(p, list) and p and all(isinstance(s, list) and s and all(_is_int(t) for t in s) for s in p):
        prompts = [list(s) for s in p]
    else:
        raise bad("prompt", "prompt: expected a non-empty string, a list of strings, a list of token ids "
                            "or a list of token-id lists")
    if len(prompts) > MAX_PROMPTS:
        raise bad("prompt", "prompt: %d prompts, at most %d in one request" % (len(prompts), MAX_PROMPTS))
    for i, q in enumerate(prompts):
        if isinstance(q, str) and q == "":
            raise bad("prompt", "prompt%s: must not be empty" % ("" if len(prompts) == 1 else "[%d]" % i))
        if isinstance(q, list):
            check_token_ids("prompt", q, vocab_size, "prompt", each=False)

    c = Completion(prompts=prompts)
    cfg = c.config
    cfg["max_tokens"] = _int(body, "max_tokens", 16, 0)
    cfg["temperature"] = _num(body, "temperature", 1.0, 0.0, 2.0)
    cfg["top_p"] = _num(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    c.n = _int(body, "n", 1, 1, MAX_N)
    nrs = _int(body, "num_return_sequences", None, 1, MAX_N)  # Hugging Face's name for n
    if nrs is not None:
        if "n" in body and nrs != c.n:
            raise bad("num_return_sequences", "num_return_sequences: %d disagrees with n %d (the same count; "
                      "give one of them)" % (nrs, c.n))
        c.n = nrs
    if len(prompts) * c.n > MAX_CHOICES:
        raise bad("n", "n: %d prompts x n %d = %d choices, at most %d in one request"
                  % (len(prompts), c.n, len(prompts) * c.n, MAX_CHOICES))
    best_of = _int(body, "best_of", None, 1, MAX_N)
    if best_of is not None and best_of != c.n:
        raise bad("best_of", "best_of: only best_of == n is supported yet")
    c.stream = _bool(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        check_fields(so, STREAM_OPTIONS_FIELDS, "stream_options.", "stream_options")
        if not c.stream:
            raise bad("stream_options", "stream_options: only allowed when stream is true")
        c.include_usage = _bool(so, "include_usage", False)
    c.logprobs = _int(body, "logprobs", None, 0, MAX_LOGPROBS)
    c.echo = _bool(body, "echo", False)

    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad("stop", "stop: expected a string or a list of up to %d strings" % MAX_STOP)
        if len(stop) > MAX_STOP:
            raise bad("stop", "stop: at most %d sequences, got %d" % (MAX_STOP, len(stop)))
        if any(s == "" for s in stop):
            raise bad("stop", "stop: sequences must not be empty")
        cfg["stop_strings"] = stop
    cfg["frequency_penalty"] = _num(body, "frequency_penalty", 0.0, -2.0, 2.0)
    cfg["presence_penalty"] = _num(body, "presence_penalty", 0.0, -2.0, 2.0)

    lb = body.get("logit_bias")
    if lb is not None:
        if not isinstance(lb, dict):
            raise bad("logit_bias", "logit_bias: expected an object {\"token_id\": bias}")
        bias = {}
        for k, v in lb.items():
            # Canonical decimal only: int() would also take " 5", "+5", "1_0" and non-ASCII digits
            # ("\uff11", "\u0663"), keys a proxy or a client may read as something else.
            if not (k.isascii() and k.isdigit() and (k == "0" or k[0] != "0")):
                raise bad("logit_bias", "logit_bias: key %s is not a token id (expected a decimal number such "
                          "as \"42\", no sign, blanks or leading zeros)" % json.dumps(k))
            tid = int(k)
            check_token_ids("logit_bias", [tid], vocab_size, "logit_bias", each=False)
            if not _is_num(v) or v < -100 or v > 100:
                raise bad("logit_bias", "logit_bias: bias for token %d must be a number in [-100, 100], got %s"
                          % (tid, json.dumps(v)))
            bias[tid] = float(v)
        cfg["logit_bias"] = bias
    c.seed = _int(body, "seed", None, 0, 2**63 - 1)

    # Extensions.
    cfg["loops"] = _int(body, "loops", 0, 0)
    kv = body.get("kv_cache")
    if kv is not None:
        if kv not in ("f32", "int8"):
            raise bad("kv_cache", "kv_cache: %s is not one of f32, int8" % json.dumps(kv))
        if kv == "int8" and body.get("speculative") is not None:
            raise bad("kv_cache", "kv_cache: int8 is not used by speculative decoding (leave it out or use f32)")
        cfg["kv_cache"] = kv
    ks = body.get("kv_sharing")
    if ks is not None:  # FORMAT.md §1c; the value itself is the engine's to check (validate_config)
        if body.get("speculative") is not None and ks != "per-pass":
            raise bad("kv_sharing", "kv_sharing: %s runs with plain decoding; speculative decoding keeps per-pass "
                      "(leave it out or use per-pass)" % json.dumps(ks))
        cfg["kv_sharing"] = ks
    cfg["top_k"] = _int(body, "top_k", vocab_size, 1)
    cfg["min_p"] = _num(body, "min_p", 0.0, 0.0, 1.0)
    cfg["repetition_penalty"] = _num(body, "repetition_penalty", 1.0, 0.0, None, lo_open=True)
    cfg["ignore_eos"] = _bool(body, "ignore_eos", False)
    for k, lo in (("no_repeat_ngram_size", 0), ("beam_size", 0), ("min_new_tokens", 0), ("min_length", 0)):
        v = _int(body, k, None, lo)
        if v is not None:
            cfg[k] = v
    for k in ("max_time", "length_penalty"):
        v = _num(body, k, None, 0.0)
        if v is not None:
            cfg[k] = v
    es = body.get("early_stopping")  # Hugging Face's: true, false or "never" (beam search)
    if es is not None:
        if not isinstance(es, bool) and es != "never":
            raise bad("early_stopping", "early_stopping: expected true, false or \"never\", got %s" % json.dumps(es))
        cfg["early_stopping"] = es
    if body.get("renormalize_logits") is not None:
        cfg["renormalize_logits"] = _bool(body, "renormalize_logits", False)
    parse_hf_sampling(body, cfg, vocab_size)
    _beam_outputs(body, c, vocab_size)
    gr = body.get("grammar")
    if gr is not None:
        if not isinstance(gr, str) or not gr.strip():
            raise bad("grammar", "grammar: expected GBNF text (start rule root)")
        try:
            c.grammar = tl.Grammar(gr)
        except ValueError as exc:
            raise bad("grammar", str(exc)) from None
    rf = body.get("response_format")
    if rf is not None:
        from structured_output import response_format_grammar  # it imports this module's bad()
        text = response_format_grammar(rf)
        if text is not None:
            if gr is not None:
                raise bad("response_format", "response_format: give it or grammar, not both")
            try:
                c.grammar = tl.Grammar(text)
            except ValueError as exc:
                raise bad("response_format", "response_format: the grammar made from it is refused: %s" % exc) from None
    ee = body.get("early_exit")
    if ee is not None:
        check_fields(ee, EARLY_EXIT_FIELDS, "early_exit.", "early_exit")
        # Only the fields given go into the config: Server.apply_recommendation fills the others
        # with the model's recommendation (else the built-in defaults) through the engine's resolver.
        c.early_exit = True
        v = _int(ee, "patience", None, 0, param="early_exit.patience")
        if v is not None:
            cfg["early_exit_patience"] = v
        for k in ("min_L", "peek_every"):
            v = _int(ee, k, None, 1, param="early_exit." + k)
            if v is not None:
                cfg[EARLY_EXIT_KEYS[k]] = v
        for k in ("threshold", "logit_margin"):
            v = _num(ee, k, None, 0.0, param="early_exit." + k)
            if v is not None:
                cfg[EARLY_EXIT_KEYS[k]] = v
        crit = ee.get("criterion")
        if crit is not None:
            if crit not in CRITERIA:
                raise bad("early_exit", "early_exit.criterion: %s is not one of %s" % (json.dumps(crit), ", ".join(sorted(CRITERIA))))
            cfg["early_exit_criterion"] = crit
    sp = body.get("speculative")
    if sp is not None:
        c.speculative = parse_speculative(body, sp, cfg)
    return c


def _token_ids(body: dict, name: str, vocab_size: int) -> list[int] | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, list) or not all(_is_int(x) for x in v):
        raise bad(name, "%s: expected an array of token ids, got %s" % (name, json.dumps(v)))
    check_token_ids(name, v, vocab_size, name)
    return v


def parse_hf_sampling(body: dict, cfg: dict, vocab_size: int) -> None:
    """Hugging Face's forced_eos_token_id, exponential_decay_length_penalty, suppress_tokens,
    begin_suppress_tokens, typical_p, epsilon_cutoff and eta_cutoff into `cfg` (the engine checks
    the rest of their ranges)."""
    v = _int(body, "forced_eos_token_id", None, 0, vocab_size - 1)
    if v is not None:
        cfg["forced_eos_token_id"] = v
    decay = body.get("exponential_decay_length_penalty")
    if decay is not None:
        if (not isinstance(decay, list) or len(decay) != 2 or not _is_int(decay[0]) or not _is_num(decay[1])
                or not 0 <= decay[0] <= INT_MAX):
            raise bad("exponential_decay_length_penalty", "exponential_decay_length_penalty: expected "
                      "[start_index, decay_factor], got %s" % json.dumps(decay))
        cfg["exponential_decay_length_penalty"] = (decay[0], float(decay[1]))
    for k in ("suppress_tokens", "begin_suppress_tokens"):
        ids = _token_ids(body, k, vocab_size)
        if ids is not None:
            cfg[k] = ids
    v = _num(body, "typical_p", None, 0.0, 1.0, lo_open=True)
    if v is not None:
        cfg["typical_p"] = v
    for k in ("epsilon_cutoff", "eta_cutoff"):
        v = _num(body, k, None, 0.0)
        if v is not None:
            cfg[k] = v


def parse_speculative(body: dict, sp: Any, cfg: dict) -> dict:
    """speculative {mode: chain|tree|pipelined, draft_loops, verify_loops, draft_ahead, branches}: the
    engine's self-speculative decoding. verify_loops defaults to `loops` (or the model's default);
    draft_loops, draft_ahead and branches left out are None here and become the model's
    recommendation, else the engine's built-in defaults (Server.speculative_kw)."""
    if not hasattr(tl, "generate_speculative"):
        raise bad("speculative", "speculative: speculative decoding is not supported yet in this build")
    check_fields(sp, SPECULATIVE_FIELDS, "speculative.", "speculative")
    mode = sp.get("mode")
    if mode is None:
        mode = "tree" if ("branches" in sp or "K_branches" in sp) else "chain"
    if mode not in ("chain", "tree", "pipelined", "draft"):
        raise bad("speculative", "speculative.mode: %s is not one of chain, tree, pipelined, draft" % json.dumps(mode))
    if mode == "draft":  # draft-model speculation takes the whole config; only its own knobs here
        for k in ("verify_loops", "draft_ahead", "branches", "K_branches"):
            if k in sp:
                raise bad("speculative", "speculative.%s: not used by mode draft (gamma, draft_loops)" % k)
        if body.get("early_exit") is not None and cfg.get("early_exit_patience", 1) > 0:
            raise bad("early_exit", "early_exit: not supported with speculative mode draft")
        if cfg.get("beam_size", 0) >= 2:
            raise bad("beam_size", "beam_size: not supported with speculative mode draft")
        return {"mode": "draft", "gamma": _int(sp, "gamma", None, 1, 32, param="speculative.gamma"),
                "draft_loops": _int(sp, "draft_loops", 0, 1, param="speculative.draft_loops")}
    if "gamma" in sp:
        raise bad("speculative", "speculative.gamma: only with mode draft")
    # Knobs the speculative decoders do not have.
    unsupported = {"stop": None, "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": None, "min_p": 0,
                   "repetition_penalty": 1, "early_exit": None, "grammar": None, "beam_size": 0,
                   "no_repeat_ngram_size": 0, "max_time": 0, "early_stopping": False, "renormalize_logits": False,
                   "min_new_tokens": 0, "min_length": 0, **HF_SAMPLING_DEFAULTS}
    for k, default in unsupported.items():
        v = body.get(k)
        if v is not None and v != default and v != {} and v != []:
            raise bad(k, "%s: not supported with speculative decoding" % k)
    out = {"mode": mode}
    out["verify_loops"] = _int(sp, "verify_loops", None, 2, param="speculative.verify_loops")
    out["draft_loops"] = _int(sp, "draft_loops", None, 1, param="speculative.draft_loops")
    # tree is greedy only: the engine's resolver refuses a temperature (Server.speculative_kw)
    if mode == "pipelined":  # the depths decide the tokens in flight
        if "draft_ahead" in sp:
            raise bad("speculative", "speculative.draft_ahead: not used by mode pipelined (draft_loops, verify_loops)")
    else:
        out["draft_ahead"] = _int(sp, "draft_ahead", None, 1, 32 if mode == "chain" else 8,
                                  param="speculative.draft_ahead")
    br = sp.get("branches", sp.get("K_branches"))
    if mode == "tree":
        out["K_branches"] = _int({"b": br}, "b", None, 1, 8, param="speculative.branches")
    elif br is not None:
        raise bad("speculative", "speculative.branches: only with mode tree")
    return out


# ------------------------------------------------------------------------------------------
# Checks on any decoded body
# ------------------------------------------------------------------------------------------


def decode_json(raw: bytes) -> Any:
    """The request body as JSON; a 400 naming the problem (never a RecursionError's 500)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ApiError(400, "We could not parse the JSON body of your request: nested too deep (at most %d "
                            "levels)" % MAX_JSON_DEPTH, None) from None
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "We could not parse the JSON body of your request.", None) from None


MAX_JSON_DEPTH = 64  # deeper bodies are refused (Python's json recurses; no field needs more than 4)


def check_body(body: Any) -> None:
    """Refuses, naming the top-level field, nesting deeper than MAX_JSON_DEPTH and strings that
    are not Unicode scalar text (a lone surrogate such as "\\ud800" cannot be UTF-8). Iterative."""
    if not isinstance(body, dict):
        return
    for top, value in body.items():
        work = [(value, 1)]
        while work:
            v, depth = work.pop()
            if depth > MAX_JSON_DEPTH:
                raise bad(top, "%s: nested deeper than %d levels" % (top, MAX_JSON_DEPTH))
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise bad(top, "%s: not valid Unicode text (a lone surrogate \\u%04x at character %d)"
                              % (top, ord(v[exc.start]), exc.start)) from None
            elif isinstance(v, list):
                work.extend((x, depth + 1) for x in v)
            elif isinstance(v, dict):
                for k, x in v.items():
                    work.append((k, depth + 1))
                    work.append((x, depth + 1))
        if isinstance(top, str):
            try:
                top.encode("utf-8")
            except UnicodeEncodeError:
                raise bad(None, "a field name is not valid Unicode text (a lone surrogate)") from None
