"""Sending responses to clients that may stop reading, for `tinyloop serve` (server.py).

  * WriteTimeout: ASGI middleware around the whole app. Every `send` (a response's start, each
    body part) must be taken by the connection within --write-timeout seconds; otherwise the
    connection is aborted (its unsent bytes dropped: a plain close would wait for a client that
    never reads) and the response ends with WriteTimedOut, which the middleware swallows.
  * BufferedStream: the SSE response. The decode runs in its own task (the producer) that puts
    each chunk in a per-stream buffer and never waits on the socket; the response's own task
    sends what is buffered. A buffer past --stream-buffer-bytes drops the stream. Whatever ends
    the stream (done, client gone, write timed out, buffer overflow, server stopping), the
    `finally` of __call__ cancels the producer and awaits it, so the decode's slot and admission
    are released there and then, not when the garbage collector reaches a suspended generator.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable

from starlette.responses import Response

TRANSPORT_KEY = "tinyloop.transport"  # scope key set by limits.HeaderTimeoutH11 (uvicorn only)


class WriteTimedOut(Exception):
    """A client did not take a write within the write timeout; its connection is aborted."""


def abort_connection(scope: dict) -> None:
    transport = scope.get(TRANSPORT_KEY)
    if transport is not None and not transport.is_closing():
        transport.abort()


class WriteTimeout:
    """ASGI middleware: bounds each send by `timeout_s` (see the module comment)."""

    def __init__(self, app, timeout_s: float, on_timeout: Callable[[], None] = lambda: None):
        self.app, self.timeout_s, self.on_timeout = app, timeout_s, on_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def timed_send(message):
            try:
                await asyncio.wait_for(send(message), self.timeout_s)
            except asyncio.TimeoutError:
                self.on_timeout()
                abort_connection(scope)
                raise WriteTimedOut() from None

        try:
            await self.app(scope, receive, timed_send)
        except WriteTimedOut:
            # Let the aborted connection's connection_lost run first, so that uvicorn sees a
            # client gone, not an app that returned mid-response.
            await asyncio.sleep(0)


class BufferedStream(Response):
    """An SSE response over `chunks` (an async generator of str whose `finally` releases the
    decode's slot and admission). `on_end` runs once when the response ends, however it ends.
    (A Response subclass only so that FastAPI passes it through as a response; it sends itself.)"""

    def __init__(self, chunks: AsyncIterator[str], max_buffer_bytes: int, on_end: Callable[[], None],
                 headers: dict | None = None):
        self.status_code = 200
        self.background = None
        self.chunks = chunks
        self.max_buffer_bytes = max_buffer_bytes
        self.on_end = on_end
        self.extra_headers = headers or {}
        self.buffer: list[bytes] = []
        self.buffered = 0  # bytes in the buffer
        self.overflowed = False
        self.blocked_since: float | None = None
        self.scope: dict = {}  # monotonic time a send started and has not returned

    def stalled_for(self, now: float) -> float:
        return 0.0 if self.blocked_since is None else now - self.blocked_since

    async def produce(self, wake: asyncio.Event) -> None:
        try:
            async for text in self.chunks:
                b = text.encode("utf-8")
                self.buffer.append(b)
                self.buffered += len(b)
                wake.set()
                if self.buffered > self.max_buffer_bytes:
                    # The client reads slower than we decode: drop it (the abort also ends a
                    # send blocked on its full socket).
                    self.overflowed = True
                    abort_connection(self.scope)
                    return
        finally:
            # Deterministic: the decode is aborted and its place released here (cancelled or not).
            await self.chunks.aclose()
            wake.set()

    async def __call__(self, scope, receive, send) -> None:
        self.scope = scope
        wake = asyncio.Event()
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    wake.set()
                    return

        producer = asyncio.ensure_future(self.produce(wake))
        producer.add_done_callback(lambda _: wake.set())
        watcher = asyncio.ensure_future(watch())
        try:
            headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.extra_headers.items()]
            await self.timed(send, {"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                await wake.wait()
                wake.clear()
                if gone.is_set():
                    return
                if self.overflowed:
                    abort_connection(scope)
                    return
                if self.buffer:
                    data = b"".join(self.buffer)
                    self.buffer.clear()
                    self.buffered = 0
                    await self.timed(send, {"type": "http.response.body", "body": data, "more_body": True})
                    wake.set()  # look again: more may have come while sending
                    continue
                if producer.done():
                    break
            await self.timed(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return  # the connection failed under a write: the client is gone
        finally:
            watcher.cancel()
            if not producer.done():
                producer.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            self.on_end()

    async def timed(self, send, message) -> None:
        self.blocked_since = time.monotonic()
        try:
            await send(message)
        finally:
            self.blocked_since = None
