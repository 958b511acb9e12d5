#!/usr/bin/env python3
"""TinyLoop's OpenAI-compatible HTTP server (FastAPI + uvicorn over the tinyloop_py binding).

    python3 app/serve/server.py MODEL [--host 127.0.0.1] [--port 8080] [--max-queue 16]
    python3 -m server MODEL ...            (with app/serve on sys.path)
    tinyloop serve MODEL ...               (the CLI execs this file)

Endpoints
    GET  /v1/models          the one loaded model
    POST /v1/completions     OpenAI's legacy completions: prompt (str, list of str, token ids or
                             lists of token ids), max_tokens (default 16), temperature (default 1),
                             top_p, n, stop (str or up to 4, excluded from the text),
                             frequency_penalty, presence_penalty, logit_bias ({"id": bias}), seed,
                             logprobs (0..5), echo, stream (SSE, ends with `data: [DONE]`),
                             stream_options {include_usage}, user, model (informational).
                             Extensions: loops, top_k (default: the whole vocabulary, as OpenAI),
                             min_p, repetition_penalty, ignore_eos, no_repeat_ngram_size,
                             max_time (s), beam_size, length_penalty, grammar (GBNF text),
                             early_exit {patience, min_L, peek_every, criterion, threshold,
                             logit_margin}, speculative {mode: chain|tree, draft_loops,
                             verify_loops, draft_ahead, branches} or, on a server started with
                             --draft-model DRAFT, {mode: draft, gamma, draft_loops} (draft-model
                             speculation: every other field applies). Every response carries usage
                             and "tinyloop_stats" (the engine's GenerateStats per choice).
    GET  /health             {"status", "active", "max_queue", "aborted_total", "recent": [...]}

Errors are OpenAI-shaped: {"error": {"message", "type", "param", "code"}}; 400 names the field.
At most --max-queue requests are admitted (running or waiting for one of --max-concurrent
slots); the next one is answered 503. A client that disconnects from a stream aborts its
generation. The server listens on loopback unless --host says otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import secrets
import socket
import sys
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

try:
    import tinyloop_py as tl
except ImportError as exc:  # pragma: no cover - a set-up problem, said plainly
    sys.stderr.write(
        "tinyloop serve: cannot import the tinyloop_py binding (%s).\n"
        "Build it (cmake --build build) and set PYTHONPATH=build/python, or install it.\n" % exc)
    raise

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

MAX_STOP = 4
MAX_N = 16
MAX_LOGPROBS = 5

# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as OpenAI's {"error": {...}} object."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 type_: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code

    def response(self) -> JSONResponse:
        return JSONResponse(status_code=self.status, content={"error": {
            "message": self.message, "type": self.type, "param": self.param, "code": self.code}})


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
    "prompt": "prompt", "beam_size": "beam_size", "grammar": "grammar",
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

KNOWN_FIELDS = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "logprobs",
    "echo", "stop", "presence_penalty", "frequency_penalty", "best_of", "logit_bias", "user", "seed",
    "suffix",
    # extensions
    "loops", "top_k", "min_p", "repetition_penalty", "ignore_eos", "early_exit", "speculative",
    "no_repeat_ngram_size", "max_time", "beam_size", "length_penalty", "grammar", "kv_cache",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None,
         param: str | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    p = param or name
    if not _is_int(v):
        raise bad(p, "%s: expected an integer, got %s" % (p, json.dumps(v)))
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = "[%s, %s]" % (lo if lo is not None else "-inf", hi if hi is not None else "inf")
        raise bad(p, "%s: %d is outside %s" % (p, v, rng))
    return v


def _num(body: dict, name: str, default: float | None, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False, param: str | None = None) -> float | None:
    v = body.get(name)
    if v is None:
        return default
    p = param or name
    if not _is_num(v):
        raise bad(p, "%s: expected a number, got %s" % (p, json.dumps(v)))
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
    grammar: Any = None  # a tinyloop_py.Grammar


EARLY_EXIT_KEYS = {"patience": "early_exit_patience", "min_L": "early_exit_min_L",
                   "peek_every": "early_exit_peek_every", "criterion": "early_exit_criterion",
                   "threshold": "early_exit_threshold", "logit_margin": "early_exit_logit_margin"}
CRITERIA = {"hidden_l2", "l2", "logit_margin", "margin", "kl", "entropy_delta", "entropy", "argmax_stable", "argmax"}
SPECULATIVE_KEYS = {"draft_loops", "verify_loops", "draft_ahead", "branches", "K_branches", "mode", "gamma"}


def parse_completion(body: Any, vocab_size: int) -> Completion:
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object")
    for k in body:
        if k not in KNOWN_FIELDS:
            raise bad(k, "Unrecognized request argument supplied: %s" % k)
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("model", "model: expected a string")
    if body.get("suffix") is not None:
        raise bad("suffix", "suffix: not supported yet")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise bad("user", "user: expected a string")

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
    for i, q in enumerate(prompts):
        if isinstance(q, str) and q == "":
            raise bad("prompt", "prompt%s: must not be empty" % ("" if len(prompts) == 1 else "[%d]" % i))
        if isinstance(q, list):
            for t in q:
                if t < 0 or t >= vocab_size:
                    raise bad("prompt", "prompt: token id %d is outside the vocabulary [0, %d)" % (t, vocab_size))

    c = Completion(prompts=prompts)
    cfg = c.config
    cfg["max_tokens"] = _int(body, "max_tokens", 16, 0)
    cfg["temperature"] = _num(body, "temperature", 1.0, 0.0, 2.0)
    cfg["top_p"] = _num(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    c.n = _int(body, "n", 1, 1, MAX_N)
    best_of = _int(body, "best_of", None, 1, MAX_N)
    if best_of is not None and best_of != c.n:
        raise bad("best_of", "best_of: only best_of == n is supported yet")
    c.stream = _bool(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict) or any(k != "include_usage" for k in so):
            raise bad("stream_options", "stream_options: expected {\"include_usage\": bool}")
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
            try:
                tid = int(k)
            except (TypeError, ValueError):
                raise bad("logit_bias", "logit_bias: key %s is not a token id" % json.dumps(k)) from None
            if tid < 0 or tid >= vocab_size:
                raise bad("logit_bias", "logit_bias: token id %d is outside the vocabulary [0, %d)" % (tid, vocab_size))
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
    cfg["top_k"] = _int(body, "top_k", vocab_size, 1)
    cfg["min_p"] = _num(body, "min_p", 0.0, 0.0, 1.0)
    cfg["repetition_penalty"] = _num(body, "repetition_penalty", 1.0, 0.0, None, lo_open=True)
    cfg["ignore_eos"] = _bool(body, "ignore_eos", False)
    for k, lo in (("no_repeat_ngram_size", 0), ("beam_size", 0)):
        v = _int(body, k, None, lo)
        if v is not None:
            cfg[k] = v
    for k in ("max_time", "length_penalty"):
        v = _num(body, k, None, 0.0)
        if v is not None:
            cfg[k] = v
    gr = body.get("grammar")
    if gr is not None:
        if not isinstance(gr, str) or not gr.strip():
            raise bad("grammar", "grammar: expected GBNF text (start rule root)")
        try:
            c.grammar = tl.Grammar(gr)
        except ValueError as exc:
            raise bad("grammar", str(exc)) from None
    ee = body.get("early_exit")
    if ee is not None:
        if not isinstance(ee, dict):
            raise bad("early_exit", "early_exit: expected an object {patience, min_L, peek_every, criterion, "
                                    "threshold, logit_margin}")
        for k in ee:
            if k not in EARLY_EXIT_KEYS:
                raise bad("early_exit", "early_exit.%s: unknown field (allowed: %s)" % (k, ", ".join(EARLY_EXIT_KEYS)))
        cfg["early_exit_patience"] = _int(ee, "patience", 1, 0, param="early_exit.patience")
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


def parse_speculative(body: dict, sp: Any, cfg: dict) -> dict:
    """speculative {mode: chain|tree, draft_loops, verify_loops, draft_ahead, branches}: the
    engine's self-speculative decoding. verify_loops defaults to `loops` (or the model's default),
    draft_loops to 2 (at most verify_loops - 1), draft_ahead to 4 (chain) or 2 (tree), branches to 2."""
    if not hasattr(tl, "generate_speculative"):
        raise bad("speculative", "speculative: speculative decoding is not supported yet in this build")
    if not isinstance(sp, dict):
        raise bad("speculative", "speculative: expected an object {mode, draft_loops, verify_loops, draft_ahead, branches}")
    for k in sp:
        if k not in SPECULATIVE_KEYS:
            raise bad("speculative", "speculative.%s: unknown field (allowed: %s)" % (k, ", ".join(sorted(SPECULATIVE_KEYS))))
    mode = sp.get("mode")
    if mode is None:
        mode = "tree" if ("branches" in sp or "K_branches" in sp) else "chain"
    if mode not in ("chain", "tree", "draft"):
        raise bad("speculative", "speculative.mode: %s is not one of chain, tree, draft" % json.dumps(mode))
    if mode == "draft":  # draft-model speculation takes the whole config; only its own knobs here
        for k in ("verify_loops", "draft_ahead", "branches", "K_branches"):
            if k in sp:
                raise bad("speculative", "speculative.%s: not used by mode draft (gamma, draft_loops)" % k)
        if cfg.get("early_exit_patience", 0) > 0:
            raise bad("early_exit", "early_exit: not supported with speculative mode draft")
        if cfg.get("beam_size", 0) >= 2:
            raise bad("beam_size", "beam_size: not supported with speculative mode draft")
        return {"mode": "draft", "gamma": _int(sp, "gamma", 4, 1, 32, param="speculative.gamma"),
                "draft_loops": _int(sp, "draft_loops", 0, 1, param="speculative.draft_loops")}
    if "gamma" in sp:
        raise bad("speculative", "speculative.gamma: only with mode draft")
    # Knobs the speculative decoders do not have.
    unsupported = {"stop": None, "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": None, "min_p": 0,
                   "repetition_penalty": 1, "early_exit": None, "grammar": None, "beam_size": 0,
                   "no_repeat_ngram_size": 0, "max_time": 0}
    for k, default in unsupported.items():
        v = body.get(k)
        if v is not None and v != default and v != {} and v != []:
            raise bad(k, "%s: not supported with speculative decoding" % k)
    out = {"mode": mode}
    out["verify_loops"] = _int(sp, "verify_loops", None, 2, param="speculative.verify_loops")
    out["draft_loops"] = _int(sp, "draft_loops", None, 1, param="speculative.draft_loops")
    out["draft_ahead"] = _int(sp, "draft_ahead", 4 if mode == "chain" else 2, 1, 32 if mode == "chain" else 8,
                              param="speculative.draft_ahead")
    br = sp.get("branches", sp.get("K_branches"))
    if mode == "tree":
        out["K_branches"] = _int({"b": br}, "b", 2, 1, 8, param="speculative.branches")
        if cfg["temperature"] > 0.01:
            raise bad("temperature", "temperature: tree speculative decoding is greedy only (temperature 0)")
    elif br is not None:
        raise bad("speculative", "speculative.branches: only with mode tree")
    return out


# ------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------


def token_text(model, tid: int) -> str:
    """A token as OpenAI's logprobs show it: its text, or bytes:\\xNN for incomplete UTF-8."""
    try:
        b = model.token_bytes(tid)
    except ValueError:  # an id past the tokenizer's (a padded vocabulary): never emitted
        return "<|token_%d|>" % tid
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join("\\x%02x" % x for x in b)


def text_len(model, tid: int) -> int:
    """Characters a token adds to the text (for text_offset)."""
    try:
        return len(model.detokenize([tid]))
    except ValueError:
        return 0


def streamed_text(events: list[dict], result: dict) -> str:
    """The choice's text as the stream shows it: the events' pieces, plus any tail the engine's
    final text holds beyond them. (The engine's whole-text U+FFFD replacement of invalid UTF-8
    can differ from the pieces'; using the pieces keeps streamed and plain responses equal.)"""
    sent = "".join(e["piece"] for e in events)
    final = result["text"]
    return sent + (final[len(sent):] if final.startswith(sent) else "")


def finish_reason(stats: dict) -> str:
    return "length" if stats["stop_reason"] in ("MAX_TOKENS", "MAX_TIME") else "stop"


class Server:
    """Holds the model, admission control and the threads that wait on streams."""

    def __init__(self, model, name: str, max_queue: int = 16, max_concurrent: int = 4,
                 token_delay_s: float = 0.0, batching: bool = True, draft=None):
        self.model = model
        self.draft = draft  # the draft model of speculative {mode: draft}, or None
        self.name = name
        self.created = int(time.time())
        self.vocab_size = model.vocab_size
        self.max_queue = max_queue
        self.max_concurrent = max_concurrent
        self.token_delay_s = token_delay_s
        self.active = 0
        self.aborted_total = 0
        self.served_total = 0
        self.refused_total = 0
        self.recent: collections.deque = collections.deque(maxlen=64)
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        # Continuous batching: plain decodes (greedy, sampling, early exit, grammar) of all the
        # requests in flight advance together, one token each per engine step. Requests that ask
        # for logprobs (lens rows), beam search or speculation keep their own decode.
        self.batch = tl.BatchEngine(model, max_batch=max(1, max_concurrent * 16)) if batching else None
        # One thread per admitted request at most waits in a stream's next().
        self.pool = ThreadPoolExecutor(max_workers=max_queue + 2, thread_name_prefix="tinyloop-serve")

    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        return self._slots

    def admit(self) -> None:
        with self._lock:
            if self.active >= self.max_queue:
                self.refused_total += 1
                raise ApiError(503, "the server is busy: %d requests running or waiting (--max-queue %d); retry later"
                               % (self.active, self.max_queue), None, "server_error", "server_busy")
            self.active += 1

    def release(self, record: dict) -> None:
        """Ends a request's admission; idempotent (a stream's generator may end two ways)."""
        with self._lock:
            if record.get("released"):
                return
            record["released"] = True
            self.active -= 1
            self.served_total += 1
            if record.get("aborted"):
                self.aborted_total += 1
            self.recent.append(record)

    def prompt_ids(self, p) -> list[int]:
        return list(p) if isinstance(p, list) else self.model.tokenize(p)

    def seeds(self, req: Completion) -> list[int]:
        """One sampling seed per choice index j (seed + j when the request has a seed)."""
        if req.seed is not None:
            return [(req.seed + j) % 2**64 for j in range(req.n)]
        return [secrets.randbits(63) for _ in range(req.n)]

    def speculative_kw(self, req: Completion) -> dict:
        """The generate_speculative / generate_tree_speculative keywords of a request."""
        sp, cfg = req.speculative, req.config
        if sp["mode"] == "draft":
            if self.draft is None:
                raise bad("speculative.mode", "speculative.mode: draft needs a server started with --draft-model DRAFT")
            dmax = self.draft.hparams["max_loops"]
            if sp["draft_loops"] > dmax:
                raise bad("speculative.draft_loops", "speculative.draft_loops: %d is outside [1, %d] (the draft's "
                          "max_loops)" % (sp["draft_loops"], dmax))
            return dict(gamma=sp["gamma"], draft_loops=sp["draft_loops"])
        hp = self.model.hparams
        verify = sp["verify_loops"] or cfg.get("loops") or hp["default_loops"]
        draft = sp["draft_loops"] if sp["draft_loops"] is not None else max(1, min(2, verify - 1))
        if verify > hp["max_loops"]:
            raise bad("speculative.verify_loops", "speculative.verify_loops: %d is outside [2, %d]" % (verify, hp["max_loops"]))
        if verify < 2:
            raise bad("speculative.verify_loops", "speculative.verify_loops: %d is outside [2, %d] (from loops or the "
                      "model's default)" % (verify, hp["max_loops"]))
        if draft >= verify:
            raise bad("speculative.draft_loops", "speculative.draft_loops: %d is outside [1, %d] (below verify_loops)"
                      % (draft, verify - 1))
        kw = dict(max_tokens=cfg["max_tokens"], draft_loops=draft, verify_loops=verify, draft_ahead=sp["draft_ahead"],
                  temperature=cfg["temperature"], ignore_eos=cfg["ignore_eos"])
        if sp["mode"] == "tree":
            kw["K_branches"] = sp["K_branches"]
        else:
            kw["top_k"] = 0 if cfg["top_k"] >= self.vocab_size else cfg["top_k"]
            kw["top_p"] = cfg["top_p"]
        return kw

    def validate(self, req: Completion, ids: list[list[int]]) -> None:
        if req.speculative is not None:
            self.speculative_kw(req)
        for i, p in enumerate(ids):
            if not p:
                raise bad("prompt", "prompt%s: must not be empty (it has no tokens)" % ("" if len(ids) == 1 else "[%d]" % i))
            try:
                tl.validate_config(self.model, len(p), **req.config,
                                   **({"grammar": req.grammar} if req.grammar is not None else {}))
            except Exception as exc:  # engine errors -> 400 naming the field
                raise engine_error(exc, i if len(ids) > 1 else None) from None

    # -- logprobs ----------------------------------------------------------------------------

    def echo_logprobs(self, ids: list[int], n_top: int, loops: int) -> dict:
        """OpenAI logprobs of the prompt tokens (the first has none) from the lens at the final depth."""
        lens = tl.score_logit_lens(self.model, ids, loops=loops, top_k=max(1, n_top))
        depth = lens["loops"]
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "offsets": []}
        off = 0
        for i, t in enumerate(ids):
            s = token_text(self.model, t)
            out["tokens"].append(s)
            out["offsets"].append(off)
            off += text_len(self.model, t)
            if i == 0:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            cell = lens["cells"][i - 1][depth - 1]
            p = cell["p_next"]
            out["token_logprobs"].append(_log(p))
            top = {token_text(self.model, a): _log(b)
                   for a, b in list(zip(cell["top_ids"], cell["top_probs"]))[:n_top]}
            top.setdefault(s, out["token_logprobs"][-1])
            out["top_logprobs"].append(top)
        return out

    def event_logprob(self, ev: dict, n_top: int) -> tuple[str, float, dict]:
        s = token_text(self.model, ev["token"])
        if not ev.get("lens"):  # a decoder that reports no lens: the sampled token's probability only
            return s, _log(ev["prob"]), {s: _log(ev["prob"])}
        row = ev["lens"][-1]  # the depth the token was emitted at
        lp = _log(row["p_emitted"])
        top = {token_text(self.model, a): (_log(b))
               for a, b in list(zip(row["top_ids"], row["top_probs"]))[:n_top]}
        top.setdefault(s, lp)
        return s, lp, top

    # -- one choice ----------------------------------------------------------------------------

    def start(self, req: Completion, ids: list[int], seed: int):
        """Starts one choice's decode as a tinyloop_py.GenerationStream."""
        lens = {}
        if req.logprobs is not None:
            lens = {"lens": True, "lens_top_k": max(1, req.logprobs)}
        if req.speculative is not None and req.speculative["mode"] == "draft":
            kw = dict(req.config, **self.speculative_kw(req))
            kw["seed"] = seed
            if req.grammar is not None:
                kw["grammar"] = req.grammar
            return tl.generate_draft_speculative(self.model, self.draft, ids, stream=True, queue_size=8, **kw, **lens)
        if req.speculative is not None:
            kw = self.speculative_kw(req)
            kw["seed"] = seed
            fn = tl.generate_tree_speculative if req.speculative["mode"] == "tree" else tl.generate_speculative
            return fn(self.model, ids, stream=True, queue_size=8, **kw, **lens)
        kw = dict(req.config)
        kw["seed"] = seed
        if req.grammar is not None:
            kw["grammar"] = req.grammar
        if self.batch is not None and not lens and kw.get("beam_size", 0) < 2:
            return self.batch.submit(ids, **kw)
        return tl.generate_stream(self.model, ids, queue_size=8, **kw, **lens)


def _next(stream):
    try:
        return next(stream)
    except StopIteration:
        return None


def _json(o: Any) -> str:
    return json.dumps(o, ensure_ascii=False, allow_nan=False)


def _log(p: float) -> float:
    """log(p), floored at -9999 so a zero probability stays valid JSON."""
    return math.log(p) if p > 0 else -9999.0


def create_app(model, name: str | None = None, max_queue: int = 16, max_concurrent: int = 4,
               token_delay_s: float = 0.0, batching: bool = True, draft=None) -> FastAPI:
    """The FastAPI app over a loaded tinyloop_py.Model (tests use it with TestClient); `draft`, a
    Model with the same vocabulary, enables speculative {mode: draft}."""
    srv = Server(model, name or os.path.splitext(os.path.basename(model.path))[0], max_queue, max_concurrent,
                 token_delay_s, batching, draft)
    app = FastAPI(title="TinyLoop", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = srv

    @app.exception_handler(ApiError)
    async def _api_error(_req: Request, exc: ApiError):
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_req: Request, exc: StarletteHTTPException):
        return ApiError(exc.status_code, str(exc.detail), None,
                        "invalid_request_error" if exc.status_code < 500 else "server_error").response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_req: Request, exc: RequestValidationError):
        return ApiError(400, str(exc), None).response()

    @app.get("/health")
    async def health():
        with srv._lock:
            return {"status": "ok", "model": srv.name, "active": srv.active, "max_queue": srv.max_queue,
                    "max_concurrent": srv.max_concurrent, "served_total": srv.served_total,
                    "refused_total": srv.refused_total, "aborted_total": srv.aborted_total,
                    "batch": srv.batch.stats() if srv.batch is not None else None,
                    "recent": list(srv.recent)}

    def model_card():
        return {"id": srv.name, "object": "model", "created": srv.created, "owned_by": "tinyloop"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id}")
    async def model_one(model_id: str):
        if model_id != srv.name:
            raise ApiError(404, "The model '%s' does not exist" % model_id, "model", code="model_not_found")
        return model_card()

    @app.post("/v1/completions")
    async def completions(request: Request):
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "We could not parse the JSON body of your request.", None) from None
        req = parse_completion(body, srv.vocab_size)
        ids = [srv.prompt_ids(p) for p in req.prompts]
        srv.validate(req, ids)
        srv.admit()
        record = {"id": "cmpl-" + uuid.uuid4().hex[:24], "stream": req.stream, "choices": [], "aborted": False}
        if req.stream:
            gen = stream_completion(srv, req, ids, record, request)
            # A client gone before the body starts leaves the generator unstarted: its finally
            # never runs, so garbage collection releases the admission instead.
            weakref.finalize(gen, srv.release, record)
            return StreamingResponse(gen,
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            async with srv.slots():
                return await full_completion(srv, req, ids, record)
        finally:
            srv.release(record)

    return app


async def run_choice(srv: Server, req: Completion, ids: list[int], seed: int, record: dict):
    """Runs one choice to the end; returns (events, result)."""
    loop = asyncio.get_running_loop()
    stream = srv.start(req, ids, seed)
    events = []
    try:
        while True:
            ev = await loop.run_in_executor(srv.pool, _next, stream)
            if ev is None:
                break
            events.append(ev)
        return events, stream.result
    finally:
        stream.abort()
        srv.pool.submit(stream.close)


def choice_logprobs(srv: Server, req: Completion, ids: list[int], events: list[dict], result: dict,
                    prefix: str) -> dict:
    """OpenAI's logprobs object for one choice; offsets index the choice's text (prefix = echo)."""
    n_top = req.logprobs
    lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    if req.echo:
        e = srv.echo_logprobs(ids, n_top, req.config.get("loops", 0))
        lp["tokens"] += e["tokens"]
        lp["token_logprobs"] += e["token_logprobs"]
        lp["top_logprobs"] += e["top_logprobs"]
        lp["text_offset"] += e["offsets"]
    off = len(prefix)
    end = len(prefix) + len(result["text"])
    cut = result["stats"]["stop_reason"] == "STOP_STRING"
    for ev in events:
        if cut and off >= end:
            break  # the tokens of the stop string, which the text leaves out
        s, l, top = srv.event_logprob(ev, n_top)
        lp["tokens"].append(s)
        lp["token_logprobs"].append(l)
        lp["top_logprobs"].append(top)
        lp["text_offset"].append(off)
        off += text_len(srv.model, ev["token"])
    return lp


async def full_completion(srv: Server, req: Completion, ids: list[list[int]], record: dict) -> JSONResponse:
    choices, stats_list = [], []
    completion_tokens = 0
    for pi, p in enumerate(ids):
        prefix = srv.model.detokenize(p) if req.echo else ""
        if req.echo and isinstance(req.prompts[pi], str):
            prefix = req.prompts[pi]
        for j, seed in enumerate(srv.seeds(req)):
            try:
                events, result = await run_choice(srv, req, p, seed, record)
            except (ValueError, TypeError, NotImplementedError, MemoryError, RuntimeError) as exc:
                raise engine_error(exc, pi if len(ids) > 1 else None) from None
            result["text"] = streamed_text(events, result)
            stats = result["stats"]
            completion_tokens += stats["tokens_emitted"]
            record["choices"].append({"stop_reason": stats["stop_reason"], "tokens": stats["tokens_emitted"]})
            choice = {"text": prefix + result["text"], "index": pi * req.n + j, "logprobs": None,
                      "finish_reason": finish_reason(stats)}
            if req.logprobs is not None:
                choice["logprobs"] = choice_logprobs(srv, req, p, events, result, prefix)
            choices.append(choice)
            stats_list.append(stats)
    prompt_tokens = sum(len(p) for p in ids)
    body = {"id": record["id"], "object": "text_completion", "created": int(time.time()), "model": srv.name,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "tinyloop_stats": stats_list}
    return Response(content=_json(body), media_type="application/json")


async def stream_completion(srv: Server, req: Completion, ids: list[list[int]], record: dict,
                            request: Request) -> AsyncIterator[str]:
    """SSE chunks for every choice in turn, then `data: [DONE]`. Cancelled (the client went
    away) -> the stream in flight is aborted, and its decode stops after the current token."""
    loop = asyncio.get_running_loop()
    created = int(time.time())
    stream = None
    completion_tokens = 0
    finished = False

    def chunk(index: int, text: str, logprobs, finish, extra=None) -> str:
        c = {"id": record["id"], "object": "text_completion", "created": created, "model": srv.name,
             "choices": [{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}]}
        if extra:
            c.update(extra)
        return "data: " + _json(c) + "\n\n"

    try:
        async with srv.slots():
            for pi, p in enumerate(ids):
                for j, seed in enumerate(srv.seeds(req)):
                    index = pi * req.n + j
                    offset = 0
                    if req.echo:
                        prefix = req.prompts[pi] if isinstance(req.prompts[pi], str) else srv.model.detokenize(p)
                        lp = None
                        if req.logprobs is not None:
                            e = srv.echo_logprobs(p, req.logprobs, req.config.get("loops", 0))
                            lp = {"tokens": e["tokens"], "token_logprobs": e["token_logprobs"],
                                  "top_logprobs": e["top_logprobs"], "text_offset": e["offsets"]}
                        yield chunk(index, prefix, lp, None)
                        offset = len(prefix)
                    stream = srv.start(req, p, seed)
                    sent = ""
                    while True:
                        try:
                            ev = await loop.run_in_executor(srv.pool, _next, stream)
                        except (ValueError, TypeError, NotImplementedError, MemoryError, RuntimeError) as exc:
                            # Headers are sent: report it in the stream, OpenAI's way, and end.
                            e = engine_error(exc, pi if len(ids) > 1 else None)
                            stream = None
                            yield "data: " + _json({"error": {"message": e.message, "type": e.type,
                                                              "param": e.param, "code": e.code}}) + "\n\n"
                            yield "data: [DONE]\n\n"
                            finished = True
                            return
                        if ev is None:
                            break
                        lp = None
                        if req.logprobs is not None:
                            s, l, top = srv.event_logprob(ev, req.logprobs)
                            lp = {"tokens": [s], "token_logprobs": [l], "top_logprobs": [top],
                                  "text_offset": [offset]}
                            offset += text_len(srv.model, ev["token"])
                        sent += ev["piece"]
                        if ev["piece"] or lp is not None:
                            yield chunk(index, ev["piece"], lp, None)
                        if srv.token_delay_s:
                            await asyncio.sleep(srv.token_delay_s)
                    result = stream.result
                    stream = None
                    stats = result["stats"]
                    completion_tokens += stats["tokens_emitted"]
                    record["choices"].append({"stop_reason": stats["stop_reason"], "tokens": stats["tokens_emitted"]})
                    rest = result["text"][len(sent):] if result["text"].startswith(sent) else ""
                    usage = {"prompt_tokens": len(p), "completion_tokens": stats["tokens_emitted"],
                             "total_tokens": len(p) + stats["tokens_emitted"]}
                    yield chunk(index, rest, None, finish_reason(stats), {"usage": usage, "tinyloop_stats": stats})
            if req.include_usage:
                prompt_tokens = sum(len(p) for p in ids)
                yield "data: " + _json({"id": record["id"], "object": "text_completion", "created": created,
                                        "model": srv.name, "choices": [],
                                        "usage": {"prompt_tokens": prompt_tokens,
                                                  "completion_tokens": completion_tokens,
                                                  "total_tokens": prompt_tokens + completion_tokens}}) + "\n\n"
            yield "data: [DONE]\n\n"
            finished = True
    finally:
        if stream is not None:
            # The client went away (or the server is stopping): stop the decode after this token.
            stream.abort()
            srv.pool.submit(_close_and_record, stream, record)
            record["aborted"] = True
        elif not finished:
            record["aborted"] = True
        srv.release(record)


def _close_and_record(stream, record: dict) -> None:
    stream.close()
    r = stream.result
    if r is not None:
        record["choices"].append({"stop_reason": r["stats"]["stop_reason"], "tokens": r["stats"]["tokens_emitted"]})


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------


class _CommandLine(argparse.ArgumentParser):
    """argparse with the error format of every tinyloop command: one line, exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, "%s: %s (see '%s --help')\n" % (self.prog, message, self.prog))


def main(argv: list[str] | None = None) -> int:
    ap = _CommandLine(prog="tinyloop serve", description="OpenAI-compatible completions server for a "
                                 ".tinyloop model (listens on loopback unless --host says otherwise).")
    ap.add_argument("model", metavar="MODEL", help="the .tinyloop file")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    ap.add_argument("--max-queue", type=int, default=16,
                    help="requests admitted at once, running or waiting; more are answered 503 (default 16)")
    ap.add_argument("--max-concurrent", type=int, default=4, help="requests decoding at once (default 4)")
    ap.add_argument("--no-batching", action="store_true",
                    help="decode each request on its own instead of through the continuous-batching engine")
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"], help="back end (default auto)")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU worker threads, 1..256 (default: all cores), as in every tinyloop command")
    ap.add_argument("--model-name", default=None, help="the id /v1/models reports (default: the file's stem)")
    ap.add_argument("--draft-model", default=None, metavar="DRAFT",
                    help="a model with the same vocabulary for speculative {mode: draft} requests")
    ap.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    ap.add_argument("--debug-token-delay-ms", type=float, default=0.0, help=argparse.SUPPRESS)  # tests: a slow model
    args = ap.parse_args(argv)  # a malformed command line exits 2 (argparse)
    if args.max_queue < 1 or args.max_concurrent < 1:
        ap.error("--max-queue and --max-concurrent must be >= 1")
    if args.threads is not None and not 1 <= args.threads <= 256:
        ap.error("--threads: expected an integer in [1, 256], got %d (leave it out for all cores)" % args.threads)
    threads = args.threads or 0  # the binding's 0: all cores

    # Every refusal before the server runs (the model, the draft, the address) exits 2, as a
    # refused command line does; only a failure while serving exits 1.
    import uvicorn
    try:
        model = tl.load_model(args.model, backend=args.backend, threads=threads)
    except (OSError, ValueError, RuntimeError) as exc:
        where = "" if args.model in str(exc) else "model '%s': " % args.model
        sys.stderr.write("tinyloop serve: %s%s\n" % (where, exc))
        return 2
    draft = None
    if args.draft_model is not None:
        try:
            draft = tl.load_model(args.draft_model, backend=args.backend, threads=threads)
            # Refuses a draft whose vocabulary differs, now rather than on the first request.
            tl.generate_draft_speculative(model, draft, [0], max_tokens=0)
        except (OSError, ValueError, RuntimeError) as exc:
            sys.stderr.write("tinyloop serve: --draft-model: %s\n" % exc)
            return 2
    try:
        sock = listen_socket(args.host, args.port)
    except (OSError, OverflowError) as exc:
        sys.stderr.write("tinyloop serve: --host %s --port %d: cannot listen there: %s\n"
                         % (args.host, args.port, exc.strerror if isinstance(exc, OSError) and exc.strerror else exc))
        return 2
    app = create_app(model, args.model_name, args.max_queue, args.max_concurrent, args.debug_token_delay_ms / 1000.0,
                     batching=not args.no_batching, draft=draft)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    server = uvicorn.Server(config)
    sys.stderr.write("tinyloop serve: %s (%s) on http://%s:%d/v1 (max queue %d, pid %d)\n"
                     % (args.model, model.info["backend"], args.host, sock.getsockname()[1], args.max_queue,
                        os.getpid()))
    server.run(sockets=[sock])
    return 0


def listen_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that an address in use is a refusal (exit 2)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    sys.exit(main())
