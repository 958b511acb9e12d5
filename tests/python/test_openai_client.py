"""End to end: the official openai client (pinned in requirements.txt) against a real uvicorn."""
from __future__ import annotations

import openai
import pytest

import tinyloop_py as tl

PROMPT = "In the beginning"


def engine_text(model, prompt, **kw) -> str:
    r = tl.generate(model, prompt, events=True, **kw)
    return "".join(e["piece"] for e in r["events"])


@pytest.fixture(scope="module")
def oa_server(model_path):
    from conftest import RunningServer
    s = RunningServer(model_path)
    yield s
    s.stop()


@pytest.fixture
def oa(oa_server):
    return openai.OpenAI(base_url=oa_server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_list(oa):
    assert [m.id for m in oa.models.list().data] == ["py"]


def test_plain_completion(oa, model):
    c = oa.completions.create(model="py", prompt=PROMPT, max_tokens=24, temperature=0)
    assert c.object == "text_completion" and len(c.choices) == 1
    assert c.choices[0].text == engine_text(model, PROMPT, max_tokens=24)
    assert c.choices[0].finish_reason == "length"
    n = len(model.tokenize(PROMPT))
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens) == (n, 24, n + 24)
    assert c.model_extra["tinyloop_stats"][0]["tokens_emitted"] == 24


def test_streamed_completion(oa, model):
    chunks = list(oa.completions.create(model="py", prompt=PROMPT, max_tokens=24, temperature=0, stream=True))
    assert chunks and all(ch.object == "text_completion" for ch in chunks)
    assert "".join(ch.choices[0].text for ch in chunks) == engine_text(model, PROMPT, max_tokens=24)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_sampled_with_seed_and_logprobs(oa, model):
    kw = dict(model="py", prompt=PROMPT, max_tokens=16, temperature=0.9, seed=9, top_p=0.95, logprobs=2,
              frequency_penalty=0.2, logit_bias={"30": -100})
    a = oa.completions.create(**kw)
    b = oa.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    assert len(a.choices[0].logprobs.tokens) == 16
    assert "\x1e" not in a.choices[0].text  # token 30 is banned


def test_errors_are_openai_errors(oa):
    with pytest.raises(openai.BadRequestError) as e:
        oa.completions.create(model="py", prompt=PROMPT, max_tokens=4, temperature=-1)
    assert e.value.status_code == 400
    assert e.value.body["param"] == "temperature"


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]


def test_chat_completion(oa, model):
    c = oa.chat.completions.create(model="py", messages=CHAT, max_tokens=20, temperature=0, n=2, stop=["\n\n"],
                                   logprobs=True, top_logprobs=2)
    assert c.object == "chat.completion" and len(c.choices) == 2
    rendered = "Be brief.\n\nUser: " + PROMPT + "\nAssistant:"
    want = engine_text(model, rendered, max_tokens=20, stop_strings=["\n\n", "\nUser:"])
    for ch in c.choices:
        assert ch.message.role == "assistant" and ch.message.content == want
        assert ch.finish_reason in ("stop", "length")
        assert ch.logprobs.content and all(len(t.top_logprobs) >= 1 for t in ch.logprobs.content)
    n = len(model.tokenize(rendered))
    assert c.usage.prompt_tokens == n and c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens


def test_streamed_chat_completion(oa, model):
    chunks = list(oa.chat.completions.create(model="py", messages=CHAT, max_tokens=20, temperature=0, stream=True,
                                             stream_options={"include_usage": True}))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    plain = oa.chat.completions.create(model="py", messages=CHAT, max_tokens=20, temperature=0)
    assert text == plain.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_chat_errors_and_unknown_model(oa):
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="py", messages=[{"role": "robot", "content": "x"}])
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.NotFoundError) as e:
        oa.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=2)
    assert e.value.body["code"] == "model_not_found"
