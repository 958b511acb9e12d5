"""Jinja chat templates (app/serve/chat_template.py) against transformers' apply_chat_template:
the ChatML template of the Ouro-style test tokenizer and Huginn's published template
(tests/data/hf_tokenizers/*/tokenizer_config.json), on a few conversations, rendered text equal;
and the hook in chat.py that serves a string metadata chat_template."""
import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("TINYLOOP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "app/serve"))
import chat  # noqa: E402
import chat_template  # noqa: E402

import transformers  # noqa: E402  (a missing peer package fails the test, never skips it)
DATA = ROOT / "tests/data/hf_tokenizers"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "  Tell me a joke.  \n"}, {"role": "assistant", "content": "No.\n"},
     {"role": "user", "content": "Bitte? {{ not jinja }} <|im_end|> 😀"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
]


def hf_tokenizer(name):
    d = DATA / name
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"),
                                               bos_token=cfg["bos_token"], eos_token=cfg["eos_token"])
    tok.chat_template = cfg["chat_template"]
    return tok, cfg


@pytest.mark.parametrize("name", ["ouro", "huginn"])
@pytest.mark.parametrize("gen", [True, False])
def test_render_equals_transformers(name, gen):
    tok, cfg = hf_tokenizer(name)
    ours = chat_template.JinjaChatTemplate(cfg["chat_template"],
                                           {"bos_token": cfg["bos_token"], "eos_token": cfg["eos_token"]})
    for conv in CONVERSATIONS:
        want = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        assert ours.render(conv, add_generation_prompt=gen) == want


def test_render_differs_without_trim_blocks():
    # The comparison can fail: a template whose output depends on trim_blocks/lstrip_blocks.
    src = "{% for m in messages %}\n  {{ m['content'] }}\n{% endfor %}"
    tok, _ = hf_tokenizer("ouro")
    tok.chat_template = src
    conv = CONVERSATIONS[1]
    ours = chat_template.JinjaChatTemplate(src).render(conv)
    assert ours == tok.apply_chat_template(conv, tokenize=False)
    import jinja2
    assert jinja2.Environment().from_string(src).render(messages=conv) != ours


def test_raise_exception_and_sandbox():
    t = chat_template.JinjaChatTemplate("{{ raise_exception('no system role') }}")
    with pytest.raises(chat_template.TemplateError, match="no system role"):
        t.render([])
    t = chat_template.JinjaChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(chat_template.TemplateError):
        t.render([])
    with pytest.raises(chat_template.TemplateError, match="chat_template: line 1"):
        chat_template.JinjaChatTemplate("{% for %}")


def test_chat_hook_serves_a_jinja_metadata_template():
    _, cfg = hf_tokenizer("huginn")
    meta = {"chat_template": cfg["chat_template"],
            "special_tokens": {"bos_token": cfg["bos_token"], "eos_token": cfg["eos_token"]},
            "generation": {"eos_token_id": [1, 4]}}
    template, source = chat.load_template(meta)
    assert "Jinja" in source
    body, opts = chat.chat_to_completion({"messages": CONVERSATIONS[1]}, template)
    assert body["prompt"] == ("<|begin_text|><|begin_header|>system<|end_header|>\n\nYou are terse.<|end_turn|>"
                              "<|begin_header|>user<|end_header|>\n\n2+2?<|end_turn|>"
                              "<|begin_header|>Huginn<|end_header|>\n\n")
    assert opts["parse_special"] is True  # its special-token text becomes the tokens' ids
    # The object-of-strings form keeps working.
    template, _ = chat.load_template({"chat_template": {"user": "U: {content}\n"}})
    body, opts = chat.chat_to_completion({"messages": [{"role": "user", "content": "x"}]}, template)
    assert body["prompt"] == "U: x\nAssistant:" and opts["parse_special"] is False


def hf_chat_ids(tok, conv):
    ids = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5 returns a BatchEncoding


def test_server_tokenizes_the_rendered_chat_as_transformers(imported_ouro):
    # The imported file's template renders <|im_start|>...<|im_end|> as text; the server's prompt
    # ids are transformers' apply_chat_template(tokenize=True): each special token one id, never
    # its characters byte-BPE'd.
    import server
    import tinyloop_py as tl
    from fastapi.testclient import TestClient
    hf, path = imported_ouro
    cfg = json.loads((hf / "tokenizer_config.json").read_text())
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(hf / "tokenizer.json"),
                                               bos_token=cfg["bos_token"], eos_token=cfg["eos_token"])
    tok.chat_template = cfg["chat_template"]
    model = tl.load_model(str(path), backend="cpu")
    app = server.create_app(model)
    specials = {tok.convert_tokens_to_ids(s) for s in ("<|im_start|>", "<|im_end|>")}
    for conv in CONVERSATIONS:
        _, ids = server.prepare(app.state.server, json.dumps({"messages": conv}).encode(), chat=True)
        want = hf_chat_ids(tok, conv)
        assert ids[0] == want
        assert specials <= set(want)
    # A plain completion prompt keeps special-token text as text (unchanged).
    _, ids = server.prepare(app.state.server, json.dumps({"prompt": "<|im_start|>"}).encode(), chat=False)
    assert tok.convert_tokens_to_ids("<|im_start|>") not in ids[0]
    # generation_config.json's stop ids end a chat completion with finish_reason "stop"; its
    # tokenizer's eos alone would not stop on <|endoftext|> (0).
    with TestClient(app) as client:
        for bias, finish in (({"0": 100}, "stop"), ({"2": 100}, "stop"), ({"0": -100, "2": -100}, "length")):
            r = client.post("/v1/chat/completions", json={"messages": CONVERSATIONS[0], "max_tokens": 3,
                                                            "temperature": 0, "logit_bias": bias}).json()
            assert r["choices"][0]["finish_reason"] == finish, (bias, r)
            assert r["usage"]["completion_tokens"] == (1 if finish == "stop" else 3)
