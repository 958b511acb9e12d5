"""/v1/chat/completions (app/serve/chat.py): messages through the chat template, the same decode as
/v1/completions on the rendered prompt, chat-shaped bodies and chunks, the template from the
model file's metadata."""
from __future__ import annotations

import json
import struct
import sys

import pytest
from fastapi.testclient import TestClient

import tinyloop_py as tl
from conftest import ROOT

sys.path.insert(0, str(ROOT / "app" / "serve"))
import chat  # noqa: E402
import server  # noqa: E402

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "In the beginning"},
            {"role": "assistant", "content": "there was"}, {"role": "user", "content": "and then?"}]
RENDERED = "Be brief.\n\nUser: In the beginning\nAssistant: there was\nUser: and then?\nAssistant:"


@pytest.fixture(scope="module")
def client(model):
    with TestClient(server.create_app(model)) as c:
        yield c


def sse(text: str) -> list:
    lines = [ln for ln in text.splitlines() if ln]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[len("data: "):]) for ln in lines[:-1]]


def test_default_template_renders_roles():
    t, source = chat.load_template({})
    assert source.startswith("default")
    msgs = [chat.message_text(i, m) for i, m in enumerate(MESSAGES)]
    assert chat.render(t, msgs) == RENDERED
    # Braces in the text are plain text; list-of-parts content is joined.
    assert chat.render(t, [("user", "{content} {x}")]) == "User: {content} {x}\nAssistant:"
    assert chat.message_text(0, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}) == ("user", "ab")


def test_chat_equals_completion_on_the_rendered_prompt(client):
    kw = dict(max_tokens=24, temperature=0)
    c = client.post("/v1/chat/completions", json=dict(messages=MESSAGES, **kw)).json()
    p = client.post("/v1/completions", json=dict(prompt=RENDERED, stop=["\nUser:"], **kw)).json()
    assert c["object"] == "chat.completion" and c["id"].startswith("chatcmpl-")
    msg = c["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": p["choices"][0]["text"]}
    assert c["choices"][0]["finish_reason"] == p["choices"][0]["finish_reason"]
    assert c["usage"] == p["usage"]


def test_chat_streaming_matches_plain(client):
    body = dict(messages=MESSAGES, max_tokens=20, temperature=0, n=2, stream=True,
                stream_options={"include_usage": True})
    plain = client.post("/v1/chat/completions", json=dict(body, stream=False, stream_options=None)).json()
    chunks = sse(client.post("/v1/chat/completions", json=body).text)
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    for i in range(2):
        mine = [ch["choices"][0] for ch in chunks if ch["choices"] and ch["choices"][0]["index"] == i]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(c["delta"].get("content", "") for c in mine)
        assert text == plain["choices"][i]["message"]["content"]
        assert mine[-1]["delta"] == {} and mine[-1]["finish_reason"] == plain["choices"][i]["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]


def test_chat_stop_logprobs_and_default_length(client, model):
    c = client.post("/v1/chat/completions", json=dict(messages=MESSAGES, max_completion_tokens=12, temperature=0,
                                                      logprobs=True, top_logprobs=2)).json()
    content = c["choices"][0]["logprobs"]["content"]
    assert len(content) == c["usage"]["completion_tokens"]
    for e in content:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) >= 1 and e["bytes"] == list(e["token"].encode())
    # Without max_tokens a reply may run to the end of the context (OpenAI's chat default).
    d = client.post("/v1/chat/completions", json=dict(messages=MESSAGES, temperature=0, ignore_eos=True,
                                                      stop=["\x00never"])).json()
    n = len(model.tokenize(RENDERED))
    assert d["usage"]["prompt_tokens"] == n
    assert d["usage"]["completion_tokens"] <= model.hparams["max_seq_len"] - n


@pytest.mark.parametrize("body,param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "prompt": "x"}, "prompt"),
    ({"messages": [{"role": "user", "content": "x"}], "echo": True}, "echo"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 9}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}, "model"),
])
def test_chat_errors_name_the_field(client, body, param):
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == (404 if param == "model" else 400), r.text
    assert r.json()["error"]["param"] == param


def with_metadata(src, dst, metadata: dict) -> None:
    """Copies a .tinyloop file with its header's metadata replaced (docs/FORMAT.md section 2)."""
    raw = src.read_bytes()
    (header_bytes,) = struct.unpack_from("<Q", raw, 16)
    header = json.loads(raw[24:24 + header_bytes])
    data = raw[(24 + header_bytes + 63) // 64 * 64:]
    header["metadata"] = metadata
    text = json.dumps(header).encode()
    pad = (24 + len(text) + 63) // 64 * 64 - 24 - len(text)
    dst.write_bytes(raw[:16] + struct.pack("<Q", len(text)) + text + b"\0" * pad + data)


def test_template_from_model_metadata(model_path, tmp_path):
    template = {"system": "<s>{content}</s>", "user": "<u>{content}</u>", "assistant": "<a>{content}</a>",
                "generation_prompt": "<a>", "stop": ["</a>"]}
    path = tmp_path / "templated.tinyloop"
    with_metadata(model_path, path, {"chat_template": template})
    with tl.load_model(str(path), backend="cpu") as m, TestClient(server.create_app(m)) as c:
        assert c.get("/health").json()["chat_template"] == "the model's metadata chat_template"
        got = c.post("/v1/chat/completions", json=dict(messages=MESSAGES[:2], max_tokens=10, temperature=0)).json()
        want = c.post("/v1/completions", json=dict(prompt="<s>Be brief.</s><u>In the beginning</u><a>", stop=["</a>"],
                                                   max_tokens=10, temperature=0)).json()
        assert got["choices"][0]["message"]["content"] == want["choices"][0]["text"]
        assert got["usage"] == want["usage"]
    # An unusable template (a Jinja string that does not compile) is not run: the default, and
    # /health says why. (A Jinja string that compiles is rendered: test_tokenizer_chat_template.py.)
    bad = tmp_path / "jinja.tinyloop"
    with_metadata(model_path, bad, {"chat_template": "{% for m in messages %}{{ m.content }}"})
    with tl.load_model(str(bad), backend="cpu") as m, TestClient(server.create_app(m)) as c:
        assert "unusable" in c.get("/health").json()["chat_template"]
    good = tmp_path / "jinja-ok.tinyloop"
    with_metadata(model_path, good, {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})
    with tl.load_model(str(good), backend="cpu") as m, TestClient(server.create_app(m)) as c:
        assert "Jinja" in c.get("/health").json()["chat_template"]
