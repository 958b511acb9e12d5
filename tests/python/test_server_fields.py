"""app/serve: every field of both endpoints given every JSON type it must not have answers a 4xx
JSON error naming the field (never a 500), and the values the engine cannot hold (integers past
its range, keys that are not canonical token ids, a body framed two ways) are refused by name."""
from __future__ import annotations

import socket
import sys

import pytest
from fastapi.testclient import TestClient

from conftest import ROOT

sys.path.insert(0, str(ROOT / "app" / "serve"))
import chat  # noqa: E402
import request_parse as rp  # noqa: E402
import server  # noqa: E402

# One value of each JSON type, and the integers at the edges of 64 bits.
VALUES = {rp.STR: ["x"], rp.INT: [7, 2**63, -(2**63) - 1, 2**64], rp.NUM: [1.5], rp.BOOL: [True],
          rp.OBJ: [{}, {"a": 1}], rp.ARR: [[], [1], [[2**64]]]}


def wrong_values(types: tuple[str, ...]) -> list:
    """Every value of VALUES whose JSON type the field does not allow (an int is a number)."""
    allowed = set(types) | ({rp.INT} if rp.NUM in types else set())
    return [v for t, vs in VALUES.items() if t not in allowed for v in vs]


@pytest.fixture(scope="module")
def client(model):
    with TestClient(server.create_app(model)) as c:
        yield c


def check_4xx(r, param_prefix: str, what: str) -> None:
    assert 400 <= r.status_code < 500, "%s: status %d: %s" % (what, r.status_code, r.text[:200])
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error", what
    assert err["param"] is not None and err["param"].split(".")[0] == param_prefix, (what, err)


def cases(table: dict, base: dict, wrap=lambda k, v: {k: v}, prefix: str | None = None):
    for k, types in table.items():
        for v in wrong_values(types):
            yield k, v, dict(base, **wrap(k, v)), prefix or k


COMPLETION = {"prompt": "hi", "max_tokens": 1}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def test_completion_field_matrix(client):
    n = 0
    for k, v, body, param in cases(rp.COMPLETION_FIELDS, COMPLETION):
        check_4xx(client.post("/v1/completions", json=body), param, "%s=%r" % (k, v))
        n += 1
    for sub, table in (("early_exit", rp.EARLY_EXIT_FIELDS), ("speculative", rp.SPECULATIVE_FIELDS),
                       ("stream_options", rp.STREAM_OPTIONS_FIELDS)):
        base = dict(COMPLETION, stream=True) if sub == "stream_options" else COMPLETION
        for k, v, body, param in cases(table, base, lambda k, v, s=sub: {s: {k: v}}, sub):
            check_4xx(client.post("/v1/completions", json=body), param, "%s.%s=%r" % (sub, k, v))
            n += 1
    assert n > 400  # the matrix really ran: ~50 fields x their wrong types


def test_chat_field_matrix(client):
    n = 0
    for k, v, body, param in cases(chat.CHAT_FIELDS, CHAT):
        check_4xx(client.post("/v1/chat/completions", json=body), param, "%s=%r" % (k, v))
        n += 1
    for k, v, body, param in cases(chat.MESSAGE_FIELDS, CHAT,
                                   lambda k, v: {"messages": [{"role": "user", "content": "hi", k: v}]},
                                   "messages"):
        check_4xx(client.post("/v1/chat/completions", json=body), param, "messages[0].%s=%r" % (k, v))
        n += 1
    assert n > 300


@pytest.mark.parametrize("body, param", [
    # Shapes that once raised a TypeError (an unhashable value in a set lookup) or failed the
    # binding's cast: each is a 400 naming its field.
    ({"early_exit": {"criterion": []}}, "early_exit"),
    ({"early_exit": {"criterion": {"a": 1}}}, "early_exit"),
    ({"force_words": [[2**63]]}, "force_words"),
    ({"force_words_ids": [[[5, 2**63]]]}, "force_words"),
    ({"force_words": [[-1]]}, "force_words"),
    ({"force_words": [["a"]]}, "force_words"),
    ({"exponential_decay_length_penalty": [2**63, 1.5]}, "exponential_decay_length_penalty"),
    ({"max_tokens": 2**63 - 1}, "max_tokens"),
    ({"seed": 2**63}, "seed"),
    ({"prompt": [2**64]}, "prompt"),
])
def test_values_past_engine_range_are_named(client, body, param):
    r = client.post("/v1/completions", json=dict(COMPLETION, beam_size=2, **body))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("field", ["prompt", "logit_bias", "force_words", "suppress_tokens"])
def test_token_ids_at_the_vocabulary_edges(client, model, field):
    """Each field with token ids uses the engine's one rule (tl.check_token_id): vocab - 1 is taken,
    vocab and 2**70 are refused naming the field, with the engine's message."""
    vocab = model.info["hparams"]["vocab_size"]

    def body(t):
        extra = {"prompt": {"prompt": [t]}, "logit_bias": {"logit_bias": {str(t): 1}},
                 "force_words": {"beam_size": 2, "force_words": [[t]]},
                 "suppress_tokens": {"suppress_tokens": [1, t]}}[field]
        return dict(COMPLETION, **extra)

    assert client.post("/v1/completions", json=body(vocab - 1)).status_code == 200
    where = {"prompt": "prompt", "logit_bias": "logit_bias", "force_words": "force_words[0]",
             "suppress_tokens": "suppress_tokens[1]"}[field]
    for t in (vocab, 2**70):
        r = client.post("/v1/completions", json=body(t))
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == field, err
        if t == vocab or field == "logit_bias":  # 2**70 elsewhere: the 64-bit check of every body comes first
            assert err["message"] == "%s: token id %d is outside the vocabulary [0, %d)" % (where, t, vocab), err
    # Past the body's 64-bit check (parse_completion called directly): the rule itself, no overflow.
    if field != "logit_bias":
        with pytest.raises(rp.ApiError) as e:
            rp.parse_completion(body(2**70), vocab)
        assert e.value.param == field
        assert e.value.message == "%s: token id %d is outside the vocabulary [0, %d)" % (where, 2**70, vocab)


@pytest.mark.parametrize("role", [[], ["user"], {"a": 1}, 5, None])
def test_chat_role_of_wrong_type(client, role):
    r = client.post("/v1/chat/completions", json={"messages": [{"role": role, "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text


@pytest.mark.parametrize("key", [" 5", "5 ", "+5", "-0", "05", "1_0", "\uff11", "\u0663", "", "1e2", "0x5"])
def test_logit_bias_keys_only_canonical_decimal(client, key):
    r = client.post("/v1/completions", json=dict(COMPLETION, logit_bias={key: 1}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", (key, r.text)


@pytest.mark.parametrize("key", ["0", "5", "299"])
def test_logit_bias_canonical_keys_taken(client, key):
    assert client.post("/v1/completions", json=dict(COMPLETION, logit_bias={key: 1})).status_code == 200


def test_content_length_with_transfer_encoding_refused(start_server):
    """Both framings on one request (request smuggling's shape) is 400 and the connection closes."""
    s = start_server()
    body = b'{"prompt": "hi", "max_tokens": 1}'
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
           % (len(body), len(body), body))
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(raw)
        got = b""
        while True:
            part = c.recv(65536)
            if not part:
                break  # the server closed the connection
            got += part
    head, _, rest = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), got[:200]
    assert b"connection: close" in head.lower()
    assert b"Transfer-Encoding" in rest
