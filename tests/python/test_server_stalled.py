"""app/serve against clients that stop reading: slots and admissions released when a stream ends
for any reason (client gone, write timed out, buffer overflow), at once and not by the garbage
collector; the per-client stream cap; /health's counts of it all; the chat structure untouched."""
from __future__ import annotations

import json
import socket
import time

import httpx

# A streamed request whose output is far more than the socket buffers between a non-reading
# client and the server hold (~128 KiB of kernel send buffer, 64 KiB in the transport, the
# client's 2 KB): the servers below carry a 4,000-character model id, which every SSE chunk
# repeats, so 100 cheap tokens make ~400 KB.
BIG = {"prompt": "In the beginning", "max_tokens": 100, "ignore_eos": True, "temperature": 0, "stream": True}
LONG_ID = ("--model-name", "m" * 4000)


def stalled_client(port: int, body: dict = BIG, source: str = "127.0.0.1") -> socket.socket:
    """A connection with a 2 KB receive buffer that sends a streamed request and never reads."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    raw = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw))
    return s


_http = httpx.Client(timeout=5)  # one kept-alive connection for the many /health polls


def health(base: str) -> dict:
    return _http.get(base + "/health").json()


def wait_for(base: str, pred, bound_s: float) -> tuple[dict, float]:
    """(/health, seconds waited) once pred(/health) holds; fails after bound_s."""
    t0 = time.monotonic()
    while True:
        h = health(base)
        if pred(h):
            return h, time.monotonic() - t0
        assert time.monotonic() - t0 < bound_s, "not within %g s: %s" % (bound_s, h)
        time.sleep(0.01)


def idle(h: dict) -> bool:
    return h["active"] == 0 and h["decoding"] == 0 and h["queued"] == 0 and h["streams"] == 0


def test_stall_then_disconnect_releases_every_time(start_server):
    """50 times: a stream whose client stopped reading, then hung up, frees its slot, its
    admission and its stream at once (it once stayed held until a gc.collect())."""
    srv = start_server(*LONG_ID, "--max-concurrent", "1", "--max-queue", "2")
    worst = 0.0
    t_open = t_release = 0.0
    for _ in range(50):
        t0 = time.monotonic()
        c = stalled_client(srv.port)
        wait_for(srv.base, lambda h: h["streams"] == 1 and h["decoding"] == 0, 10)
        time.sleep(0.05)  # the client's buffers fill: the response waits on its socket
        t_open += time.monotonic() - t0
        c.close()
        _, waited = wait_for(srv.base, idle, 2.0)
        worst = max(worst, waited)
        t_release += waited
    h = health(srv.base)
    assert h["served_total"] == 50 and h["write_timeouts_total"] == 0
    # A plain request still gets its answer: nothing is held.
    r = httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=30)
    assert r.status_code == 200
    print("stall-then-disconnect x50: slowest release %.3f s (open %.1f s, release %.1f s in all)"
          % (worst, t_open, t_release))


def test_write_timeout_disconnects_a_stalled_client(start_server):
    """A client that stays connected but takes nothing is cut off after --write-timeout; its
    stream ends and a normal completion answers meanwhile."""
    srv = start_server(*LONG_ID, "--write-timeout", "2", "--max-concurrent", "1")
    c = stalled_client(srv.port)
    try:
        h, _ = wait_for(srv.base, lambda h: h["stalled"] == 1, 10)
        assert h["decoding"] == 0  # the decode finished into the buffer: no slot waits on the socket
        t0 = time.monotonic()
        r = httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", "max_tokens": 8}, timeout=30)
        assert r.status_code == 200 and time.monotonic() - t0 < 5
        h, _ = wait_for(srv.base, idle, 4)
        assert h["write_timeouts_total"] == 1 and h["stalled"] == 0
        # The server closed the connection: what the client reads ends (reset or EOF).
        c.settimeout(5)
        try:
            while c.recv(65536):
                pass
        except ConnectionResetError:
            pass
    finally:
        c.close()


def test_stream_past_its_buffer_is_dropped(start_server):
    """Decoding never waits on a socket: a stream whose unsent output passes
    --stream-buffer-bytes is dropped, and its place freed, long before the write timeout."""
    srv = start_server(*LONG_ID, "--stream-buffer-bytes", "4096", "--write-timeout", "60")
    c = stalled_client(srv.port)
    try:
        h, waited = wait_for(srv.base, lambda h: h["dropped_streams_total"] == 1 and idle(h), 10)
        assert waited < 10 and h["write_timeouts_total"] == 0
    finally:
        c.close()


def test_streams_per_client_capped(start_server):
    """--max-streams-per-client: the client's next stream is 429 while its stalled ones stay;
    another client address is not affected."""
    srv = start_server(*LONG_ID, "--max-streams-per-client", "2", "--max-concurrent", "1")
    held = [stalled_client(srv.port) for _ in range(2)]
    try:
        wait_for(srv.base, lambda h: h["streams"] == 2, 10)
        r = httpx.post(srv.base + "/v1/completions", json=dict(BIG, max_tokens=2), timeout=30)
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_streams"
        # Plain (non-streamed) requests are not streams.
        assert httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30).status_code == 200
        other = stalled_client(srv.port, dict(BIG, max_tokens=2), source="127.0.0.2")
        try:
            other.settimeout(30)
            got = b""
            while b"[DONE]" not in got:
                part = other.recv(65536)
                assert part, got
                got += part
            assert got.startswith(b"HTTP/1.1 200")
        finally:
            other.close()
    finally:
        for c in held:
            c.close()
    wait_for(srv.base, idle, 3)
