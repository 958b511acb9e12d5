"""The model side of `tinyloop serve` (server.py): the Server (model, admission, thread pools,
limits), starting one choice's decode, and the logprobs helpers."""
from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import tinyloop_py as tl

from chat import load_template
from request_parse import ApiError, Completion, bad, engine_error


@dataclass
class Limits:
    """Per-request limits (server.py's --max-body-bytes, --header-timeout, --body-timeout,
    --write-timeout, --stream-buffer-bytes, --max-streams-per-client)."""
    max_body_bytes: int = 1 << 20
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 30.0  # a client that takes no write for this long is disconnected
    stream_buffer_bytes: int = 4 << 20  # a stream's output not yet taken by its client; past it, dropped
    max_streams_per_client: int = 8  # streams open at once from one client address


def max_token_bytes(model) -> int:
    """The most bytes any one token stands for (at least 1)."""
    most = 1
    for tid in range(model.vocab_size):
        try:
            most = max(most, len(model.token_bytes(tid)))
        except ValueError:  # a padded vocabulary's ids past the tokenizer's
            pass
    return most


def prompt_name(index: int | None) -> str:
    return "prompt" if index is None else "prompt[%d]" % index


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
                 token_delay_s: float = 0.0, batching: bool = True, draft=None, limits: Limits | None = None):
        self.model = model
        self.limits = limits or Limits()
        hp = model.hparams
        self.max_seq_len = hp["max_seq_len"]
        self.eos_id = model.eos_id
        self.max_token_bytes = max_token_bytes(model)
        self.chat_template, self.chat_template_source = load_template(model.info.get("metadata"))
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
        # Event-loop state (read and written on the loop only): decodes holding or waiting for a
        # slot, open streamed responses (stream_send.BufferedStream) and their count per client.
        self.decoding = 0
        self.queued = 0
        self.streams: set = set()
        self.client_streams: collections.Counter = collections.Counter()
        self.write_timeouts_total = 0
        self.dropped_streams_total = 0  # streams whose buffer passed stream_buffer_bytes
        # Continuous batching: plain decodes (greedy, sampling, early exit, grammar) of all the
        # requests in flight advance together, one token each per engine step. Requests that ask
        # for logprobs (lens rows), beam search or speculation keep their own decode.
        self.batch = tl.BatchEngine(model, max_batch=max(1, max_concurrent * 16)) if batching else None
        # One thread per admitted request at most waits in a stream's next().
        self.pool = ThreadPoolExecutor(max_workers=max_queue + 2, thread_name_prefix="tinyloop-serve")
        # Request preparation (JSON decoding, checks, tokenizing, grammar parsing) off the event loop.
        self.prep_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tinyloop-prep")

    def close(self) -> None:
        """Stops the batch engine and joins the worker threads (tests that count threads)."""
        if self.batch is not None:
            self.batch.close()
        self.pool.shutdown(wait=True)
        self.prep_pool.shutdown(wait=True)

    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        return self._slots

    @contextlib.asynccontextmanager
    async def decode_slot(self):
        """One of --max-concurrent decode slots, counted for /health while waited for and held."""
        self.queued += 1
        try:
            await self.slots().acquire()
        finally:
            self.queued -= 1
        self.decoding += 1
        try:
            yield
        finally:
            self.decoding -= 1
            self.slots().release()

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

    def prompt_ids(self, p, index: int | None = None, parse_special: bool = False) -> list[int]:
        """Token ids of one prompt (special-token strings in a text are its ids when
        parse_special, else plain text). A text too long to fit in max_seq_len tokens even at the
        longest token's bytes each is refused before tokenizing."""
        if isinstance(p, list):
            return list(p)
        n_bytes = len(p.encode("utf-8"))
        if n_bytes > self.max_seq_len * self.max_token_bytes:
            raise bad("prompt", "%s: %d bytes cannot fit in the model's max_seq_len %d tokens (at most %d bytes)"
                      % (prompt_name(index), n_bytes, self.max_seq_len, self.max_seq_len * self.max_token_bytes))
        return self.model.tokenize(p, parse_special)

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
            # gamma left out: the engine's default (kDraftModelGamma); draft_loops 0: the draft's depth
            return dict(draft_loops=sp["draft_loops"], **({"gamma": sp["gamma"]} if sp["gamma"] is not None else {}))
        # Knobs left out: the model's recommendation, else the built-in default. The engine's one
        # resolver decides, as for the CLI and the workbench: it resolves the request exactly as
        # `tinyloop generate --mode speculative|tree` with the same flags would.
        given = {k: sp[k] for k in ("verify_loops", "draft_loops", "draft_ahead") if sp.get(k)}
        if sp.get("K_branches"):
            given["branches"] = sp["K_branches"]
        mode = {"tree": "tree", "pipelined": "pipelined"}.get(sp["mode"], "speculative")
        try:
            run = tl.resolve_run(self.model, mode, speculation=given, temperature=cfg["temperature"],
                                 **({"loops": cfg["loops"]} if cfg.get("loops") else {}))
        except ValueError as exc:  # name the request's field: speculative.<knob> or loops
            msg = str(exc)
            head = msg.split(":", 1)[0].strip()
            knob = head.split(".", 1)[-1]
            if knob in ("verify_loops", "draft_loops", "draft_ahead", "branches"):
                raise bad("speculative." + knob, msg if head.startswith("speculation.") else "speculative." + msg) from None
            raise engine_error(exc) from None
        # The resolver has checked the depths' rules (verify in [2, max_loops], draft below verify:
        # the engine's check_speculation_depths), so the knobs are the run's as they are.
        knobs = run["speculation"]
        kw = dict(max_tokens=cfg["max_tokens"], draft_loops=knobs["draft_loops"], verify_loops=knobs["verify_loops"],
                  temperature=cfg["temperature"], ignore_eos=cfg["ignore_eos"])
        if sp["mode"] != "pipelined":  # the depths decide the pipelined wave's tokens in flight
            kw["draft_ahead"] = knobs["draft_ahead"]
        if sp["mode"] == "tree":
            kw["K_branches"] = knobs["branches"]
        else:
            kw["top_k"] = 0 if cfg["top_k"] >= self.vocab_size else cfg["top_k"]
            kw["top_p"] = cfg["top_p"]
        return kw

    def apply_recommendation(self, req: Completion) -> None:
        """An early_exit object's fields left out become the model's recommendation (metadata
        "recommended", when it has one for the criterion asked), else the built-in defaults, as in
        the CLI and the workbench: the engine's resolve_early_exit decides."""
        if not req.early_exit:
            return
        given = {k: v for k, v in req.config.items() if k.startswith("early_exit_")}
        try:
            run = tl.resolve_run(self.model, "early-exit", **given)
        except ValueError as exc:
            raise engine_error(exc) from None
        req.config.update({k: v for k, v in run["config"].items() if k.startswith("early_exit_")})

    def validate(self, req: Completion, ids: list[list[int]]) -> None:
        if req.speculative is not None:
            self.speculative_kw(req)
        for i, p in enumerate(ids):
            name = prompt_name(i if len(ids) > 1 else None)
            if not p:
                raise bad("prompt", "%s: must not be empty (it has no tokens)" % name)
            if len(p) > self.max_seq_len or (len(p) == self.max_seq_len and req.config["max_tokens"] > 0):
                raise bad("prompt", "%s: %d tokens, more than the model's max_seq_len %d allows (prompt tokens + "
                          "max_tokens must not exceed it)" % (name, len(p), self.max_seq_len))
            try:
                tl.validate_config(self.model, len(p), **req.config,
                                   **({"grammar": req.grammar} if req.grammar is not None else {}))
            except Exception as exc:  # engine errors -> 400 naming the field
                raise engine_error(exc, i if len(ids) > 1 else None) from None

    # -- logprobs ----------------------------------------------------------------------------

    def echo_logprobs(self, ids: list[int], n_top: int, loops: int) -> dict:
        """OpenAI logprobs of the prompt tokens (the first has none) from the lens at the final depth."""
        lens = tl.score_logit_lens(self.model, ids, loops=loops, top_k=max(1, n_top), final_only=True)
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
            cell = lens["cells"][i - 1][-1]  # the final depth
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
        if req.speculative is not None and req.speculative["mode"] == "pipelined":
            # no lens: logprobs are the emitted tokens' own probabilities
            return tl.generate_pipelined(self.model, ids, stream=True, queue_size=8, seed=seed, **self.speculative_kw(req))
        if req.speculative is not None:
            kw = self.speculative_kw(req)
            kw["seed"] = seed
            fn = tl.generate_tree_speculative if req.speculative["mode"] == "tree" else tl.generate_speculative
            return fn(self.model, ids, stream=True, queue_size=8, **kw, **lens)
        kw = dict(req.config)
        kw["seed"] = seed
        if req.grammar is not None:
            kw["grammar"] = req.grammar
        # The batch engine keeps per-pass keys/values: a kv_sharing request decodes on its own.
        if self.batch is not None and not lens and kw.get("beam_size", 0) < 2 and kw.get("kv_sharing", "per-pass") == "per-pass":
            return self.batch.submit(ids, **kw)
        return tl.generate_stream(self.model, ids, queue_size=8, **kw, **lens)


def hidden_eos(srv: Server, ev: dict) -> bool:
    """The event emitted the end-of-text token, which adds nothing to the text."""
    return ev["token"] == srv.eos_id and not ev["piece"]


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




async def run_choice(srv: Server, req: Completion, ids: list[int], seed: int, record: dict):
    """Runs one choice to the end; returns (events, result)."""
    loop = asyncio.get_running_loop()
    stream = srv.start(req, ids, seed)
    events = []
    finished = False
    try:
        while True:
            ev = await loop.run_in_executor(srv.pool, _next, stream)
            if ev is None:
                break
            events.append(ev)
            if srv.token_delay_s:  # tests: a slow model
                await asyncio.sleep(srv.token_delay_s)
        finished = True
        return events, stream.result
    finally:
        stream.abort()
        if finished:
            srv.pool.submit(stream.close)
        else:  # cancelled (the client went away) or failed: record how far the decode got
            record["aborted"] = True
            srv.pool.submit(_close_and_record, stream, record)


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
        if hidden_eos(srv, ev):
            continue  # the end-of-text token: the text does not show it, so neither do the logprobs
        s, l, top = srv.event_logprob(ev, n_top)
        lp["tokens"].append(s)
        lp["token_logprobs"].append(l)
        lp["top_logprobs"].append(top)
        lp["text_offset"].append(off)
        off += text_len(srv.model, ev["token"])
    return lp


def _close_and_record(stream, record: dict) -> None:
    stream.close()
    r = stream.result
    if r is not None:
        record["choices"].append({"stop_reason": r["stats"]["stop_reason"], "tokens": r["stats"]["tokens_emitted"]})


