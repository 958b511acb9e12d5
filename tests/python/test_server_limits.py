"""`tinyloop serve` under attack (the reproducers of the hardening issue), against a real uvicorn:
every hostile request gets an OpenAI-shaped JSON 4xx (413, 408, 404, 400) or its connection
closed, never a crash or a plain-text 500, and the server keeps answering."""
from __future__ import annotations

import json
import socket
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from conftest import ROOT

sys.path.insert(0, str(ROOT / "app" / "serve"))
import server  # noqa: E402

PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def srv(model_path):
    from conftest import RunningServer
    s = RunningServer(model_path, "--max-body-bytes", "65536", "--header-timeout", "1", "--body-timeout", "1")
    yield s
    s.stop()


def post_raw(base: str, content: bytes, path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(base + path, content=content, headers={"content-type": "application/json"}, timeout=60)


def expect_error(r: httpx.Response, status: int, param=None, code=None, says=None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"}
    if param is not None:
        assert e["param"] == param, e
    if code is not None:
        assert e["code"] == code, e
    if says is not None:
        assert says in e["message"], e
    return e


def still_serving(base: str) -> None:
    r = httpx.post(base + "/v1/completions", json=dict(prompt=PROMPT, max_tokens=2, temperature=0), timeout=60)
    assert r.status_code == 200, r.text
    assert httpx.get(base + "/health", timeout=5).json()["active"] == 0


def test_grammar_nested_16000_deep_is_a_400(srv):
    d = 16000
    body = {"prompt": "hi", "max_tokens": 2, "grammar": "root ::= " + "(" * d + '"a"' + ")" * d}
    r = httpx.post(srv.base + "/v1/completions", json=body, timeout=60)
    expect_error(r, 400, "grammar", says="nested too deep")
    still_serving(srv.base)


def test_large_grammar_parses_off_the_loop(srv):
    # 2,000 rules (about 60 KB, under this server's 64 KiB body limit): parsed, decoded.
    rules = ["root ::= r0"] + ['r%d ::= "x" r%d | "y"' % (k, k + 1) for k in range(1999)] + ['r1999 ::= "z"']
    body = {"prompt": "hi", "max_tokens": 3, "temperature": 0, "grammar": "\n".join(rules)}
    r = httpx.post(srv.base + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("y", "xy", "xxy", "xxx", "z", "xz", "xxz")


@pytest.mark.parametrize("raw", [b"[" * 30000 + b"]" * 30000,
                                 b'{"prompt": ' + b"[" * 20000 + b"1" + b"]" * 20000 + b"}",
                                 b'{"prompt": ' + b"[" * 100 + b"1" + b"]" * 100 + b"}"],
                         ids=["body-30000-deep", "prompt-20000-deep", "prompt-100-deep"])
def test_deeply_nested_json_is_a_400(srv, raw):
    e = expect_error(post_raw(srv.base, raw), 400)
    assert "nested" in e["message"] or e["param"] == "prompt", e


@pytest.mark.parametrize("field", ["prompt", "grammar", "stop"])
def test_lone_surrogate_is_a_400_naming_the_field(srv, field):
    body = {"prompt": "hi", "max_tokens": 2}
    raw = json.dumps(body)[:-1] + ', "%s": "a\\ud800b"}' % field if field != "prompt" else \
        '{"prompt": "\\ud800", "max_tokens": 2}'
    expect_error(post_raw(srv.base, raw.encode()), 400, field, says="surrogate")
    raw = '{"model": "py", "messages": [{"role": "user", "content": "\\udfff"}]}'
    expect_error(post_raw(srv.base, raw.encode(), "/v1/chat/completions"), 400, "messages", says="surrogate")


def test_body_over_the_limit_is_413(srv):
    big = json.dumps({"prompt": "a" * 100000, "max_tokens": 1}).encode()
    expect_error(post_raw(srv.base, big), 413, code="request_too_large", says="65536")

    def chunked():  # no Content-Length: counted while read
        for _ in range(20):
            yield b" " * 8192
    r = httpx.post(srv.base + "/v1/completions", content=chunked(), timeout=60)
    expect_error(r, 413, code="request_too_large")
    still_serving(srv.base)


def test_slow_headers_are_dropped_and_slow_bodies_get_408(srv):
    port = int(srv.base.rsplit(":", 1)[1])
    # Headers never finished: the connection is closed after --header-timeout (1 s).
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    slow.settimeout(10)
    t0 = time.time()
    assert slow.recv(100) == b""
    assert time.time() - t0 < 5
    slow.close()
    # Headers done, body short of its Content-Length: 408 after --body-timeout (1 s).
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{\"prompt\"")
    s.settimeout(10)
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    s.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    # A client that sends half a body and hangs up: no traceback in the log.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"prompt\": \"hi")
    s.close()
    time.sleep(0.3)
    still_serving(srv.base)
    assert "Traceback" not in srv.output() and "ERROR" not in srv.output(), srv.output()


def raw_exchange(port: int, data: bytes) -> bytes:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(10)
    reply = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    s.close()
    return reply


def test_unparsable_requests_get_json_400(srv):
    port = int(srv.base.rsplit(":", 1)[1])
    for data in (b"GARBAGE\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000):
        # (the second: headers still unfinished past h11's 16 KiB bound)
        reply = raw_exchange(port, data)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, reply[:200]
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
    still_serving(srv.base)


def test_unknown_model_is_404_and_head_health(srv):
    r = httpx.post(srv.base + "/v1/completions", json=dict(model="gpt-3.5-turbo-instruct", prompt="hi"), timeout=60)
    expect_error(r, 404, "model", code="model_not_found")
    assert httpx.post(srv.base + "/v1/completions", json=dict(model="py", prompt="hi", max_tokens=1),
                      timeout=60).status_code == 200
    r = httpx.head(srv.base + "/health", timeout=5)
    assert r.status_code == 200 and r.content == b""


def test_over_long_prompt_and_huge_integers_name_their_field(srv, model):
    n = model.hparams["max_seq_len"]
    r = httpx.post(srv.base + "/v1/completions", json=dict(prompt=[1] * (n + 5), max_tokens=1), timeout=60)
    expect_error(r, 400, "prompt", says="max_seq_len %d" % n)
    r = httpx.post(srv.base + "/v1/completions", json=dict(prompt=[1] * n, max_tokens=1), timeout=60)
    expect_error(r, 400, "prompt", says="max_seq_len %d" % n)
    r = httpx.post(srv.base + "/v1/completions", json=dict(prompt="ab" * 30000, max_tokens=1), timeout=60)
    expect_error(r, 400, "prompt", says="max_seq_len %d" % n)
    for field in ("max_tokens", "seed", "n", "logprobs", "top_k", "loops"):
        for v in (2**63, 2**64 + 1):
            r = httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", field: v}, timeout=60)
            expect_error(r, 400, field, says=str(v))
    r = httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", "temperature": 10**400}, timeout=60)
    expect_error(r, 400, "temperature")
    for field in ("length_penalty", "repetition_penalty"):  # finite for JSON, infinite as a C++ float
        r = httpx.post(srv.base + "/v1/completions", json={"prompt": "hi", field: 1e308}, timeout=60)
        expect_error(r, 400, field, says="finite")
    # One request's work is bounded: at most 64 prompts, 128 choices.
    r = httpx.post(srv.base + "/v1/completions", json={"prompt": ["a"] * 65, "max_tokens": 1}, timeout=60)
    expect_error(r, 400, "prompt", says="at most 64")
    r = httpx.post(srv.base + "/v1/completions", json={"prompt": ["a"] * 9, "n": 16, "max_tokens": 1}, timeout=60)
    expect_error(r, 400, "n", says="at most 128")


def test_logprobs_leave_out_the_end_of_text_token(srv, model):
    eos = model.eos_id
    assert eos >= 0
    body = dict(prompt=PROMPT, max_tokens=5, temperature=0, logprobs=1, logit_bias={str(eos): 100})
    j = httpx.post(srv.base + "/v1/completions", json=body, timeout=60).json()
    ch = j["choices"][0]
    assert j["tinyloop_stats"][0]["stop_reason"] == "EOS" and ch["text"] == ""
    assert "<|endoftext|>" not in ch["logprobs"]["tokens"]
    assert len(ch["logprobs"]["tokens"]) == len(ch["logprobs"]["text_offset"])
    with httpx.stream("POST", srv.base + "/v1/completions", json=dict(body, stream=True), timeout=60) as r:
        text = "".join(r.iter_lines())
    assert "<|endoftext|>" not in text


def test_abandoned_plain_requests_free_their_place(start_server):
    s = start_server("--max-queue", "2", "--max-concurrent", "1", "--debug-token-delay-ms", "40")
    body = dict(prompt=PROMPT, max_tokens=200, n=4, temperature=0, ignore_eos=True)
    for _ in range(2):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.base + "/v1/completions", json=body, timeout=0.5)
    deadline = time.time() + 20
    while time.time() < deadline:
        h = httpx.get(s.base + "/health", timeout=5).json()
        if h["active"] == 0:
            break
        time.sleep(0.1)
    assert h["active"] == 0 and h["aborted_total"] == 2, h
    # The decodes that had started stopped well short of their 4 x 200 tokens.
    assert all(rec["aborted"] for rec in h["recent"])
    stopped = [c for rec in h["recent"] for c in rec["choices"]]
    assert stopped and all(c["stop_reason"] == "CALLBACK_ABORT" and c["tokens"] < 200 for c in stopped), h["recent"]
    r = httpx.post(s.base + "/v1/completions", json=dict(prompt=PROMPT, max_tokens=2), timeout=60)
    assert r.status_code == 200


def test_an_unexpected_exception_is_still_a_json_500(model, monkeypatch):
    def broken(*_args, **_kw):
        raise KeyError("a bug")
    monkeypatch.setattr(server, "prepare", broken)
    with TestClient(server.create_app(model), raise_server_exceptions=False) as c:
        r = c.post("/v1/completions", json={"prompt": "hi"})
        e = expect_error(r, 500)
        assert e["type"] == "server_error" and "KeyError" in e["message"]
        assert c.get("/health").json()["active"] == 0
