"""Jinja chat templates (a model file's metadata `chat_template` when it is a string, taken from
tokenizer_config.json by the importer), rendered the way transformers' apply_chat_template
renders them (transformers/utils/chat_template_utils.py): an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and transformers' {% generation %}
block (rendered as its body), its `tojson` filter, and the globals messages,
add_generation_prompt, bos_token, eos_token (and the other special tokens the caller gives),
raise_exception and strftime_now. The special tokens are the metadata's `special_tokens` object
(the importer's copy of tokenizer_config.json's bos_token, eos_token, ...: transformers passes
special_tokens_map). Stop ids are not the template's business: the engine stops on the file's
tokenizer stop_ids (FORMAT.md §3b).
"""
from __future__ import annotations

import datetime
import json
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(ValueError):
    """A template that does not compile, or raise_exception() called while rendering."""


class _Generation(Extension):
    # transformers' AssistantTracker marks the assistant's text for its masks; the text it
    # renders is the block's body, unchanged.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' filter: unlike Jinja's own, no HTML escaping.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError("chat_template: line %d: %s" % (e.lineno, e.message)) from None


class JinjaChatTemplate:
    """A compiled template and the special-token strings it is rendered with."""

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None):
        self.source = source
        self.template = compile_template(source)
        self.special_tokens = dict(special_tokens or {})

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs) -> str:
        ctx = {"bos_token": "", "eos_token": ""}
        ctx.update(self.special_tokens)
        ctx.update(kwargs)
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt, **ctx)
        except jinja2.TemplateError as e:  # includes SecurityError from the sandbox
            raise TemplateError("chat_template: %s" % e) from None


def from_metadata(metadata: dict, source: str) -> JinjaChatTemplate:
    """The template of a model's metadata: special tokens from metadata.special_tokens (the
    importer's {"bos_token": ..., "eos_token": ...}) when present."""
    specials = metadata.get("special_tokens") if isinstance(metadata.get("special_tokens"), dict) else {}
    specials = {k: v for k, v in specials.items() if isinstance(k, str) and isinstance(v, str)}
    return JinjaChatTemplate(source, specials)
