"""Connection and body limits for `tinyloop serve` (server.py).

  * HeaderTimeoutH11: uvicorn's h11 protocol that closes a connection whose next request's
    headers have not all arrived `header_timeout_s` after the connection opened or after its
    previous response (slowloris: a client trickling header bytes holds no socket for long),
    and answers a request it cannot parse with a JSON 400.
    It also sets each connection's kernel send buffer (SEND_BUFFER_BYTES) and hands the
    transport to the request (stream_send aborts the connection of a client that stopped reading).
  * read_body: reads a request body up to `max_bytes` (413 at once when Content-Length says
    more, or as soon as the bytes read pass it) within `timeout_s` (408), and returns None for a
    client that went away mid-body (nothing to answer, nothing worth a traceback).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket

import h11
from starlette.requests import ClientDisconnect, Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from request_parse import ApiError
from stream_send import TRANSPORT_KEY


SEND_BUFFER_BYTES = 64 << 10


class HeaderTimeoutH11(H11Protocol):
    header_timeout_s = 10.0  # set by server.main from --header-timeout

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A fixed kernel send buffer (Linux doubles it) instead of one autotuned up to 4 MiB: a
        # client that stops reading holds at most this much kernel memory, and the write timeout
        # (stream_send) starts counting once this, and the transport's 64 KiB, are full.
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_timer()

    def connection_lost(self, exc) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        # The request's scope (its app task has not started yet) gets the transport, so that
        # stream_send can abort the connection of a client that stopped reading.
        if self.cycle is not None:
            self.cycle.scope[TRANSPORT_KEY] = self.transport  # type: ignore[literal-required]

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (garbage, headers over 16 KiB): OpenAI's JSON error, not
        uvicorn's plain text."""
        body = json.dumps(ApiError(400, "invalid HTTP request: %s" % msg, None).body()).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:
            pass
        self.transport.close()

    def _arm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        if not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _header_timeout(self) -> None:
        self._header_timer = None
        # A request whose headers arrived is being served (its body has read_body's timeout).
        if self.cycle is not None and not self.cycle.response_complete:
            return
        if not self.transport.is_closing():
            self.transport.close()


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and "transfer-encoding" in request.headers:
        # Request smuggling's shape: a proxy in front may frame the body by the other header, so
        # the body is not read and the connection not reused (RFC 9112 §6.1).
        raise ApiError(400, "the request has both Content-Length and Transfer-Encoding; send one of them",
                       None, close=True)
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise ApiError(400, "Content-Length: %r is not a byte count" % declared, None) from None
        if n > max_bytes:
            raise too_large(max_bytes, "Content-Length %d" % n)
    chunks, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise too_large(max_bytes, "more than that")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, "the request body did not arrive within %g s (--body-timeout); %d bytes came"
                       % (timeout_s, size), None, code="request_timeout") from None
    except ClientDisconnect:
        return None
    return b"".join(chunks)


def too_large(max_bytes: int, got: str) -> ApiError:
    return ApiError(413, "the request body is too large: at most %d bytes (--max-body-bytes), got %s"
                    % (max_bytes, got), None, code="request_too_large")
