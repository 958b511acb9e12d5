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


# ---- OpenAI's behaviours a client relies on ----------------------------------------------------


def test_completion_stream_usage_only_when_asked_and_once(oa):
    kw = dict(model="py", prompt=[PROMPT, "Hello"], max_tokens=6, temperature=0, stream=True)
    assert all(ch.usage is None for ch in oa.completions.create(**kw))
    chunks = list(oa.completions.create(**kw, stream_options={"include_usage": True}))
    with_usage = [ch for ch in chunks if ch.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and chunks[-1].usage.completion_tokens == 12


@pytest.mark.parametrize("top", [None, 0, 3])
def test_chat_top_logprobs_empty_unless_asked(oa, top):
    kw = {} if top is None else {"top_logprobs": top}
    c = oa.chat.completions.create(model="py", messages=CHAT, max_tokens=6, temperature=0, logprobs=True, **kw)
    content = c.choices[0].logprobs.content
    assert content and all(len(t.top_logprobs) == (top or 0) for t in content)
    s = list(oa.chat.completions.create(model="py", messages=CHAT, max_tokens=6, temperature=0, logprobs=True,
                                        stream=True, **kw))
    streamed = [t for ch in s if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(len(t.top_logprobs) == (top or 0) for t in streamed)


def test_logprobs_cut_where_the_text_is_cut(oa, model):
    """With a stop string, the logprobs' tokens end where the returned text ends (streamed or not)."""
    full = engine_text(model, PROMPT, max_tokens=24)
    stop = next(full[i:i + 2] for i in range(4, len(full) - 1) if all(32 < ord(ch) < 127 for ch in full[i:i + 2]))
    kw = dict(model="py", prompt=PROMPT, max_tokens=24, temperature=0, logprobs=1, stop=[stop])
    c = oa.completions.create(**kw)
    text = c.choices[0].text
    assert c.choices[0].finish_reason == "stop" and stop not in text
    toks = c.choices[0].logprobs.tokens
    offs = c.choices[0].logprobs.text_offset
    assert toks and offs[-1] < len(text) or (not text and not toks)
    chunks = list(oa.completions.create(**kw, stream=True))
    s_toks = [t for ch in chunks if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == text
    assert s_toks == toks


def test_harmless_parameters_accepted(oa):
    c = oa.chat.completions.create(model="py", messages=CHAT, max_tokens=4, temperature=0, store=False, user="u1",
                                   metadata={"k": "v"}, parallel_tool_calls=False)
    assert c.choices[0].message.content is not None


# ---- Structured output on the bundled model ---------------------------------------------------


@pytest.fixture(scope="module")
def kjv():
    from conftest import ROOT, RunningServer
    s = RunningServer(ROOT / "resources" / "models" / "tinyloop-kjv" / "model-q4.tinyloop")
    yield openai.OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    s.stop()


KJV_MESSAGES = [{"role": "user", "content": "Who begat Enos? Answer in JSON."}]


def test_json_object_is_valid_json(kjv):
    import json
    c = kjv.chat.completions.create(model="model-q4", messages=KJV_MESSAGES, max_tokens=400, temperature=0,
                                    response_format={"type": "json_object"})
    assert c.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(c.choices[0].message.content), dict)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "tribe": {"type": "string", "enum": ["Judah", "Levi", "Benjamin"]},
        "age": {"type": "integer"},
        "alive": {"type": "boolean"},
        "sons": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
        "home": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                  "near": {"type": "array", "items": {"enum": [1, 2, 3]},
                                                           "maxItems": 2}},
                 "required": ["city", "near"], "additionalProperties": False},
    },
    "required": ["name", "tribe", "age", "alive", "sons", "home"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_nested_objects_arrays_enums(kjv, stream):
    import json
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    kw = dict(model="model-q4", messages=KJV_MESSAGES, max_tokens=400, temperature=0, response_format=rf)
    if stream:
        text = "".join(ch.choices[0].delta.content or "" for ch in kjv.chat.completions.create(**kw, stream=True)
                       if ch.choices)
    else:
        c = kjv.chat.completions.create(**kw)
        assert c.choices[0].finish_reason == "stop"
        text = c.choices[0].message.content
    o = json.loads(text)
    assert list(o) == list(PERSON["properties"])
    assert isinstance(o["name"], str) and len(o["name"]) <= 12 and o["tribe"] in ("Judah", "Levi", "Benjamin")
    assert isinstance(o["age"], int) and isinstance(o["alive"], bool)
    assert 1 <= len(o["sons"]) <= 3 and all(isinstance(s, str) and len(s) <= 8 for s in o["sons"])
    assert list(o["home"]) == ["city", "near"] and all(x in (1, 2, 3) for x in o["home"]["near"])


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "pattern": "^a+$"}, "pattern"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}, "format"),
    ({"oneOf": [{"type": "string"}]}, "oneOf"),
    ({"type": "number", "minimum": 3}, "minimum"),
])
def test_json_schema_unsupported_keyword_named(oa, schema, keyword):
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="py", messages=CHAT, max_tokens=4, response_format=rf)
    assert e.value.body["param"] == "response_format" and repr(keyword) in e.value.body["message"]
