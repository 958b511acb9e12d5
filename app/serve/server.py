#!/usr/bin/env python3
"""TinyLoop's OpenAI-compatible HTTP server (FastAPI + uvicorn over the tinyloop_py binding).

    python3 app/serve/server.py MODEL [--host 127.0.0.1] [--port 8080] [--max-queue 16]
    python3 -m server MODEL ...            (with app/serve on sys.path)
    tinyloop serve MODEL ...               (the CLI execs this file)

Endpoints
    GET  /v1/models          the one loaded model (with "recommended": the file's recommended
                             early-exit and speculation settings, docs/FORMAT.md §2)
    POST /v1/completions     OpenAI's legacy completions: prompt (str, list of str, token ids or
                             lists of token ids; at most 64 prompts and 128 choices), max_tokens (default 16), temperature (default 1),
                             top_p, n, stop (str or up to 4, excluded from the text),
                             frequency_penalty, presence_penalty, logit_bias ({"id": bias}), seed,
                             logprobs (0..5), echo, stream (SSE, ends with `data: [DONE]`),
                             stream_options {include_usage}, user, model (the loaded model's id,
                             or left out; another id is 404 model_not_found).
                             Extensions: loops, top_k (default: the whole vocabulary, as OpenAI),
                             min_p, repetition_penalty, ignore_eos, no_repeat_ngram_size,
                             max_time (s), beam_size, length_penalty, grammar (GBNF text),
                             early_exit {patience, min_L, peek_every, criterion, threshold,
                             logit_margin}, speculative {mode: chain|tree, draft_loops,
                             verify_loops, draft_ahead, branches} (fields of both left out: the
                             model's recommendation, else the built-in defaults) or, on a server started with
                             --draft-model DRAFT, {mode: draft, gamma, draft_loops} (draft-model
                             speculation: every other field applies). Every response carries usage
                             and "tinyloop_stats" (the engine's GenerateStats per choice).
    POST /v1/chat/completions  messages [{role: system|developer|user|assistant, content}] rendered
                             through the model's chat template (chat.py), then as completions:
                             max_tokens / max_completion_tokens (default: the rest of max_seq_len),
                             temperature, top_p, n, stop, logprobs (bool) + top_logprobs (0..5),
                             seed, penalties, logit_bias, stream, stream_options, and the
                             extensions above except echo, beam_size, speculative.
    GET  /health (and HEAD)  {"status", "active" (admitted), "decoding" (slots in use), "queued",
                             "streams", "stalled", "max_queue", "aborted_total", "write_timeouts_total",
                             "dropped_streams_total", "recent": [...]}

Errors are OpenAI-shaped: {"error": {"message", "type", "param", "code"}}; 400 names the field.
At most --max-queue requests are admitted (running or waiting for one of --max-concurrent
slots); the next one is answered 503. A client that disconnects aborts its generation (streamed
or not) and frees its place. Limits: --max-body-bytes (413), --header-timeout (the connection is
closed), --body-timeout (408), --write-timeout (a client that takes no write is disconnected),
--stream-buffer-bytes (a stream's unsent output; past it the stream is dropped),
--max-streams-per-client (429); streamed responses are sent by stream_send.BufferedStream, which
releases a stream's place deterministically however it ends. Request bodies are decoded,
checked, tokenized and their grammars parsed off the event loop. response_format (json_object,
json_schema) becomes a grammar (structured_output.py). The server listens on loopback unless
--host says otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import uuid
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
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from chat import ChatChunks, chat_body, chat_to_completion
from limits import HeaderTimeoutH11, read_body
from model_server import (Limits, Server, _close_and_record, _json, _next, choice_logprobs, finish_reason,
                          hidden_eos, run_choice, streamed_text, text_len)
from request_parse import ApiError, Completion, check_body, decode_json, engine_error, parse_completion
from stream_send import BufferedStream, WriteTimeout

# ------------------------------------------------------------------------------------------
# Preparing a request (in Server.prep_pool, off the event loop)
# ------------------------------------------------------------------------------------------


def prepare(srv: Server, raw: bytes, chat: bool) -> tuple[Completion, list[list[int]]]:
    """Body bytes -> (the parsed request, each prompt's token ids), every check done."""
    body = decode_json(raw)
    check_body(body)
    if isinstance(body, dict) and isinstance(body.get("model"), str) and body["model"] != srv.name:
        raise ApiError(404, "The model '%s' does not exist (this server serves '%s')" % (body["model"], srv.name),
                       "model", code="model_not_found")
    chat_opts = None
    if chat:
        body, chat_opts = chat_to_completion(body, srv.chat_template)
    req = parse_completion(body, srv.vocab_size)
    srv.apply_recommendation(req)
    many = len(req.prompts) > 1
    # A Jinja template's output holds the model's special tokens as text (<|im_start|>...):
    # they are split out as their ids, as transformers' apply_chat_template(tokenize=True) does.
    parse_special = chat_opts is not None and chat_opts["parse_special"]
    ids = [srv.prompt_ids(p, i if many else None, parse_special) for i, p in enumerate(req.prompts)]
    if chat_opts is not None:
        cfg = req.config
        stops = cfg.get("stop_strings", [])
        cfg["stop_strings"] = stops + [s for s in chat_opts["template_stop"] if s not in stops]
        req.chat_top_logprobs = chat_opts["top_logprobs"]
        if not chat_opts["max_tokens_given"]:  # OpenAI's chat default: up to the context's end
            cfg["max_tokens"] = max(1, srv.max_seq_len - max(len(p) for p in ids))
    srv.validate(req, ids)
    return req, ids


async def read_and_prepare(srv: Server, request: Request, chat: bool):
    """(request, ids), or None when the client went away before its body was complete."""
    raw = await read_body(request, srv.limits.max_body_bytes, srv.limits.body_timeout_s)
    if raw is None:
        return None
    return await asyncio.get_running_loop().run_in_executor(srv.prep_pool, prepare, srv, raw, chat)


async def until_disconnected(request: Request) -> None:
    """Returns when the client goes away (the body has been read: the next message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work) -> Any:
    """Runs `work` (a coroutine); cancels it and returns None when the client goes away first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            # Let the decode's own cleanup run (abort, close) before the place is released.
            await asyncio.wait({task})
    if task.cancelled():
        return None
    return task.result()


# ------------------------------------------------------------------------------------------
# The app
# ------------------------------------------------------------------------------------------


def create_app(model, name: str | None = None, max_queue: int = 16, max_concurrent: int = 4,
               token_delay_s: float = 0.0, batching: bool = True, draft=None, limits: Limits | None = None) -> FastAPI:
    """The FastAPI app over a loaded tinyloop_py.Model (tests use it with TestClient); `draft`, a
    Model with the same vocabulary, enables speculative {mode: draft}."""
    srv = Server(model, name or os.path.splitext(os.path.basename(model.path))[0], max_queue, max_concurrent,
                 token_delay_s, batching, draft, limits)
    app = FastAPI(title="TinyLoop", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = srv

    def _timed_out() -> None:
        srv.write_timeouts_total += 1
    app.add_middleware(WriteTimeout, timeout_s=srv.limits.write_timeout_s, on_timeout=_timed_out)

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

    @app.exception_handler(Exception)
    async def _internal_error(_req: Request, exc: Exception):
        # A bug, still answered in OpenAI's shape (uvicorn logs its traceback).
        return ApiError(500, "internal server error: %s" % type(exc).__name__, None, "server_error").response()

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():
        now = time.monotonic()
        with srv._lock:
            return {"status": "ok", "model": srv.name, "active": srv.active, "max_queue": srv.max_queue,
                    "max_concurrent": srv.max_concurrent,
                    # decode slots in use, admitted requests waiting for one, streamed responses
                    # open, and those whose client has taken no write for a second or more
                    "decoding": srv.decoding, "queued": srv.queued, "streams": len(srv.streams),
                    "stalled": sum(1 for st in srv.streams if st.stalled_for(now) >= 1.0),
                    "write_timeouts_total": srv.write_timeouts_total,
                    "dropped_streams_total": srv.dropped_streams_total,
                    "served_total": srv.served_total,
                    "refused_total": srv.refused_total, "aborted_total": srv.aborted_total,
                    "batch": srv.batch.stats() if srv.batch is not None else None,
                    "limits": {"max_body_bytes": srv.limits.max_body_bytes,
                               "header_timeout_s": srv.limits.header_timeout_s,
                               "body_timeout_s": srv.limits.body_timeout_s,
                               "write_timeout_s": srv.limits.write_timeout_s,
                               "stream_buffer_bytes": srv.limits.stream_buffer_bytes,
                               "max_streams_per_client": srv.limits.max_streams_per_client},
                    "chat_template": srv.chat_template_source,
                    "recent": list(srv.recent)}

    def model_card():
        return {"id": srv.name, "object": "model", "created": srv.created, "owned_by": "tinyloop",
                "recommended": srv.model.recommendation}  # the defaults of early_exit / speculative

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
        return await serve_request(srv, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await serve_request(srv, request, chat=True)

    return app


async def serve_request(srv: Server, request: Request, chat: bool) -> Response:
    prepared = await read_and_prepare(srv, request, chat)
    if prepared is None:  # the client left mid-body: nobody to answer
        return Response(status_code=400)
    req, ids = prepared
    client = request.client.host if request.client is not None else ""
    if req.stream and srv.client_streams[client] >= srv.limits.max_streams_per_client:
        raise ApiError(429, "this client has %d streams open (--max-streams-per-client %d); finish or close one "
                       "first" % (srv.client_streams[client], srv.limits.max_streams_per_client), None,
                       "rate_limit_error", "too_many_streams")
    srv.admit()
    record = {"id": "cmpl-" + uuid.uuid4().hex[:24], "stream": req.stream, "chat": chat, "choices": [],
              "aborted": False}
    if req.stream:
        return streamed_response(srv, req, ids, record, chat, client)
    try:
        body = await unless_disconnected(request, decode_whole(srv, req, ids, record))
        if body is None:
            record["aborted"] = True
            return Response(status_code=499)  # never sent: the client is gone
    finally:
        srv.release(record)
    return Response(content=await encode_body(chat_body(body, req.chat_top_logprobs) if chat else body),
                    media_type="application/json")


async def encode_body(body: dict) -> str:
    """The response body as JSON, a choice at a time with the event loop let in between: the
    encoder holds the GIL, and 64 echoed prompts with logprobs make megabytes."""
    parts = []
    for k, v in body.items():
        if k == "choices" and len(v) > 1:
            encoded = []
            for c in v:
                encoded.append(_json(c))
                await asyncio.sleep(0)
            parts.append(_json(k) + ": [" + ", ".join(encoded) + "]")
        else:
            parts.append(_json(k) + ": " + _json(v))
    return "{" + ", ".join(parts) + "}"


def streamed_response(srv: Server, req: Completion, ids: list[list[int]], record: dict, chat: bool,
                      client: str) -> BufferedStream:
    """The SSE response; from here until it ends it counts against the client's streams. Its
    end (whatever the cause) releases the admission too, in case the decode never started."""
    resp = None

    def on_end() -> None:
        srv.streams.discard(resp)
        srv.client_streams[client] -= 1
        if srv.client_streams[client] <= 0:
            del srv.client_streams[client]
        if resp.overflowed:
            srv.dropped_streams_total += 1
            record["aborted"] = True
        srv.release(record)

    resp = BufferedStream(sse_stream(srv, req, ids, record, chat), srv.limits.stream_buffer_bytes, on_end,
                          headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    srv.streams.add(resp)
    srv.client_streams[client] += 1
    return resp


async def decode_whole(srv: Server, req: Completion, ids: list[list[int]], record: dict) -> dict:
    async with srv.decode_slot():
        return await full_completion(srv, req, ids, record)


async def sse_stream(srv: Server, req: Completion, ids: list[list[int]], record: dict,
                     chat: bool) -> AsyncIterator[str]:
    """The SSE body: each chunk (as chat.completion.chunk for chat), then `data: [DONE]`."""
    chunks = stream_completion(srv, req, ids, record)
    convert = ChatChunks(req.chat_top_logprobs).convert if chat else (lambda c: [c])
    try:
        async for c in chunks:
            for d in convert(c):
                yield "data: " + _json(d) + "\n\n"
        yield "data: [DONE]\n\n"
    finally:
        await chunks.aclose()


async def full_completion(srv: Server, req: Completion, ids: list[list[int]], record: dict) -> dict:
    """The whole response body: every choice decoded in turn."""
    choices, stats_list = [], []
    completion_tokens = 0
    for pi, p in enumerate(ids):
        prefix = srv.model.detokenize(p) if req.echo else ""
        if req.echo and isinstance(req.prompts[pi], str):
            prefix = req.prompts[pi]
        if req.config.get("num_return_sequences", 1) > 1:  # beam search's n best, from one search
            beams, stats = await beam_choices(srv, req, p, pi, prefix, record, len(ids) > 1)
            choices += beams
            completion_tokens += sum(r["tokens"] for r in record["choices"][-len(beams):])
            stats_list.append(stats)
            continue
        for j, seed in enumerate(srv.seeds(req)):
            try:
                events, result = await run_choice(srv, req, p, seed, record)
            except (ValueError, TypeError, NotImplementedError, MemoryError, RuntimeError) as exc:
                raise engine_error(exc, pi if len(ids) > 1 else None) from None
            result["text"] = streamed_text(events, result)
            stats = result["stats"]
            completion_tokens += stats["tokens_emitted"]
            record["choices"].append({"stop_reason": stats["stop_reason"], "tokens": stats["tokens_emitted"]})
            # tinyloop_depth, an extension field (OpenAI's client ignores it): each emitted token's depth
            choice = {"text": prefix + result["text"], "index": pi * req.n + j, "logprobs": None,
                      "finish_reason": finish_reason(stats), "tinyloop_depth": stats["depth_per_token"]}
            if req.logprobs is not None:  # with echo, the lens over the prompt: on the pool, not the loop
                choice["logprobs"] = await asyncio.get_running_loop().run_in_executor(
                    srv.pool, choice_logprobs, srv, req, p, events, result, prefix)
            choices.append(choice)
            stats_list.append(stats)
    prompt_tokens = sum(len(p) for p in ids)
    body = {"id": record["id"], "object": "text_completion", "created": int(time.time()), "model": srv.name,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "tinyloop_stats": stats_list}
    return body


async def beam_choices(srv: Server, req: Completion, p: list[int], pi: int, prefix: str, record: dict,
                       several_prompts: bool) -> tuple[list[dict], dict]:
    """The n choices of prompt pi under beam search, one search's n best hypotheses (best first,
    each with its score as tinyloop_score), and the search's stats."""
    try:
        _, result = await run_choice(srv, req, p, 0, record)
    except (ValueError, TypeError, NotImplementedError, MemoryError, RuntimeError) as exc:
        raise engine_error(exc, pi if several_prompts else None) from None
    out = []
    for j, q in enumerate(result["sequences"]):
        record["choices"].append({"stop_reason": q["stop_reason"], "tokens": len(q["output_ids"])})
        out.append({"text": prefix + q["text"], "index": pi * req.n + j, "logprobs": None,
                    "finish_reason": finish_reason(q), "tinyloop_score": q["score"]})
    return out, result["stats"]


async def stream_completion(srv: Server, req: Completion, ids: list[list[int]], record: dict) -> AsyncIterator[dict]:
    """The chunk dicts of every choice in turn (sse_stream sends them, then `data: [DONE]`).
    Cancelled (the client went away) -> the stream in flight is aborted, and its decode stops
    after the current token."""
    loop = asyncio.get_running_loop()
    created = int(time.time())
    stream = None
    completion_tokens = 0
    finished = False

    def chunk(index: int, text: str, logprobs, finish, extra=None, depths=None) -> dict:
        c = {"id": record["id"], "object": "text_completion", "created": created, "model": srv.name,
             "choices": [{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}]}
        if depths:  # the extension field: the loop depth of each token this chunk carries
            c["choices"][0]["tinyloop_depth"] = depths
        if extra:
            c.update(extra)
        return c

    try:
        async with srv.decode_slot():
            for pi, p in enumerate(ids):
                for j, seed in enumerate(srv.seeds(req)):
                    index = pi * req.n + j
                    offset = 0
                    if req.echo:
                        prefix = req.prompts[pi] if isinstance(req.prompts[pi], str) else srv.model.detokenize(p)
                        lp = None
                        if req.logprobs is not None:  # the lens over the prompt: on the pool, not the loop
                            e = await loop.run_in_executor(srv.pool, srv.echo_logprobs, p, req.logprobs,
                                                           req.config.get("loops", 0))
                            lp = {"tokens": e["tokens"], "token_logprobs": e["token_logprobs"],
                                  "top_logprobs": e["top_logprobs"], "text_offset": e["offsets"]}
                        yield chunk(index, prefix, lp, None)
                        offset = len(prefix)
                    stream = srv.start(req, p, seed)
                    sent = ""
                    # Logprobs go out with the text they stand for: a token whose text the engine
                    # holds back (it may start a stop string) waits here, and is dropped with the
                    # stop string when that matches, as the plain response's logprobs are.
                    pending: list[tuple[str, float, dict, int]] = []
                    lp_chars = 0
                    depths: list[int] = []  # tokens' depths not yet sent (tinyloop_depth)

                    def flush(upto: int, everything: bool = False):
                        nonlocal lp_chars
                        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
                        while pending and (everything or lp_chars < upto):
                            s, l, top, n_chars = pending.pop(0)
                            out["tokens"].append(s)
                            out["token_logprobs"].append(l)
                            out["top_logprobs"].append(top)
                            out["text_offset"].append(offset + lp_chars)
                            lp_chars += n_chars
                        return out if out["tokens"] else None
                    while True:
                        try:
                            ev = await loop.run_in_executor(srv.pool, _next, stream)
                        except (ValueError, TypeError, NotImplementedError, MemoryError, RuntimeError) as exc:
                            # Headers are sent: report it in the stream, OpenAI's way, and end.
                            e = engine_error(exc, pi if len(ids) > 1 else None)
                            stream = None
                            yield e.body()
                            finished = True
                            return
                        if ev is None:
                            break
                        if req.logprobs is not None and not hidden_eos(srv, ev):
                            pending.append((*srv.event_logprob(ev, req.logprobs), text_len(srv.model, ev["token"])))
                        depths.append(ev["depth"])
                        sent += ev["piece"]
                        lp = flush(len(sent))
                        if ev["piece"] or lp is not None:
                            yield chunk(index, ev["piece"], lp, None, depths=depths)
                            depths = []
                        if srv.token_delay_s:
                            await asyncio.sleep(srv.token_delay_s)
                    result = stream.result
                    stream = None
                    stats = result["stats"]
                    completion_tokens += stats["tokens_emitted"]
                    record["choices"].append({"stop_reason": stats["stop_reason"], "tokens": stats["tokens_emitted"]})
                    rest = result["text"][len(sent):] if result["text"].startswith(sent) else ""
                    lp = flush(len(sent) + len(rest), everything=stats["stop_reason"] != "STOP_STRING")
                    # Usage only in the include_usage chunk (OpenAI's): a consumer that sums the
                    # usage it sees must count each token once.
                    yield chunk(index, rest, lp, finish_reason(stats), {"tinyloop_stats": stats}, depths=depths)
            if req.include_usage:
                prompt_tokens = sum(len(p) for p in ids)
                yield {"id": record["id"], "object": "text_completion", "created": created, "model": srv.name,
                       "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                                "total_tokens": prompt_tokens + completion_tokens}}
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
    ap.add_argument("--max-body-bytes", type=int, default=Limits.max_body_bytes,
                    help="largest request body; a larger one is answered 413 (default %d, 1 MiB)" % Limits.max_body_bytes)
    ap.add_argument("--header-timeout", type=float, default=Limits.header_timeout_s,
                    help="seconds a connection may take to send a request's headers, counted from when it "
                         "opens or its previous response ends; then it is closed (default %g)" % Limits.header_timeout_s)
    ap.add_argument("--body-timeout", type=float, default=Limits.body_timeout_s,
                    help="seconds a request's body may take to arrive; then 408 (default %g)" % Limits.body_timeout_s)
    ap.add_argument("--write-timeout", type=float, default=Limits.write_timeout_s,
                    help="seconds a client may take to accept a write of its response; a client that stops "
                         "reading is then disconnected and its place freed (default %g)" % Limits.write_timeout_s)
    ap.add_argument("--stream-buffer-bytes", type=int, default=Limits.stream_buffer_bytes,
                    help="a stream's output decoded but not yet taken by its client; past it the stream is "
                         "dropped, so decoding never waits on a socket (default %d, 4 MiB)" % Limits.stream_buffer_bytes)
    ap.add_argument("--max-streams-per-client", type=int, default=Limits.max_streams_per_client,
                    help="streamed responses open at once from one client address; more are answered 429 "
                         "(default %d)" % Limits.max_streams_per_client)
    ap.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    ap.add_argument("--debug-token-delay-ms", type=float, default=0.0, help=argparse.SUPPRESS)  # tests: a slow model
    args = ap.parse_args(argv)  # a malformed command line exits 2 (argparse)
    if args.max_queue < 1 or args.max_concurrent < 1:
        ap.error("--max-queue and --max-concurrent must be >= 1")
    if args.threads is not None and not 1 <= args.threads <= 256:
        ap.error("--threads: expected an integer in [1, 256], got %d (leave it out for all cores)" % args.threads)
    threads = args.threads or 0  # the binding's 0: all cores
    if args.max_body_bytes < 1024:
        ap.error("--max-body-bytes: %d is below 1024" % args.max_body_bytes)
    for flag, v in (("--header-timeout", args.header_timeout), ("--body-timeout", args.body_timeout),
                    ("--write-timeout", args.write_timeout)):
        if not (0.1 <= v <= 3600):
            ap.error("%s: %g is outside [0.1, 3600] seconds" % (flag, v))
    if not 4096 <= args.stream_buffer_bytes <= 1 << 30:
        ap.error("--stream-buffer-bytes: %d is outside [4096, %d]" % (args.stream_buffer_bytes, 1 << 30))
    if not 1 <= args.max_streams_per_client <= 4096:
        ap.error("--max-streams-per-client: %d is outside [1, 4096]" % args.max_streams_per_client)
    limits = Limits(args.max_body_bytes, args.header_timeout, args.body_timeout, args.write_timeout,
                    args.stream_buffer_bytes, args.max_streams_per_client)

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
                     batching=not args.no_batching, draft=draft, limits=limits)
    HeaderTimeoutH11.header_timeout_s = args.header_timeout
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                            http=HeaderTimeoutH11)
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
