"""/v1/chat/completions for `tinyloop serve` (server.py): `messages` rendered to one prompt through
the model's chat template, decoded as a completion, and the completion's body or SSE chunks
reshaped into OpenAI's chat objects.

The chat template is the model file's metadata key `chat_template`, an object of plain strings
(every key optional; missing keys take the default's):

    {"system": "{content}\\n\\n", "user": "User: {content}\\n", "assistant": "Assistant: {content}\\n",
     "generation_prompt": "Assistant:", "stop": ["\\nUser:"]}

which is also the default for a model without one. Each message becomes its role's string with
`{content}` replaced by the message's text (a plain replacement: braces in the text stay as they
are); `generation_prompt` follows the last message; `stop` (up to 4 strings) ends the reply where
the model starts the next turn, on top of the request's own `stop`. A `chat_template` that is not
such an object is not executed: the server says so at start and uses the default. A string
`chat_template` is a Jinja template (a model imported from Hugging Face) and is rendered by
chat_template.py as transformers' apply_chat_template renders it, and its text tokenized with the
special tokens split out as their ids (the chat option `parse_special`), as
apply_chat_template(tokenize=True) does; a reply ends on the model's stop ids (generation_config's
eos_token_id, kept in the file's tokenizer as `stop_ids`) in the engine, with finish_reason "stop".
"""
from __future__ import annotations

from typing import Any

import chat_template
from request_parse import (ARR, BOOL, COMPLETION_FIELDS, INT, MAX_LOGPROBS, MAX_STOP, OBJ, STR, _bool, _int, bad,
                           check_fields)

DEFAULT_TEMPLATE = {"system": "{content}\n\n", "user": "User: {content}\n", "assistant": "Assistant: {content}\n",
                    "generation_prompt": "Assistant:", "stop": ["\nUser:"]}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_MESSAGES = 1024

# Chat fields that map one to one onto the completions body (everything else is refused).
PASSED_THROUGH = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "seed",
    # extensions, as in /v1/completions
    "loops", "top_k", "min_p", "repetition_penalty", "ignore_eos", "early_exit", "no_repeat_ngram_size",
    "max_time", "grammar", "kv_cache", "kv_sharing", "min_new_tokens", "min_length",
    "forced_eos_token_id", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "typical_p", "epsilon_cutoff", "eta_cutoff", "response_format",
}
# OpenAI chat fields that change nothing here, accepted and ignored so that ordinary client code
# passes: store and metadata (nothing is stored), parallel_tool_calls (meaningful only with tools,
# which are refused).
IGNORED = {"store": (BOOL,), "metadata": (OBJ,), "parallel_tool_calls": (BOOL,)}
# The chat body's validation table (request_parse.check_fields): the passed-through fields typed as
# in /v1/completions, and chat's own.
CHAT_FIELDS = {**{k: COMPLETION_FIELDS[k] for k in PASSED_THROUGH}, "messages": (ARR,),
               "max_completion_tokens": (INT,), "logprobs": (BOOL,), "top_logprobs": (INT,), **IGNORED}
MESSAGE_FIELDS = {"role": (STR,), "content": (STR, ARR), "name": (STR,)}


def load_template(metadata: Any) -> tuple[dict, str]:
    """(template, where it came from). `metadata` is the model's metadata dict."""
    t = metadata.get("chat_template") if isinstance(metadata, dict) else None
    if t is None:
        return dict(DEFAULT_TEMPLATE), "default (the model has no chat_template)"
    problem = None
    if isinstance(t, str):
        try:
            jinja = chat_template.from_metadata(metadata, t)
            return {"jinja": jinja, "stop": []}, "the model's metadata chat_template (Jinja)"
        except chat_template.TemplateError as e:
            problem = str(e)
    elif not isinstance(t, dict):
        problem = "neither an object of strings nor a Jinja template string"
    else:
        for k, v in t.items():
            if k not in DEFAULT_TEMPLATE:
                problem = "unknown key %r (allowed: %s)" % (k, ", ".join(DEFAULT_TEMPLATE))
            elif k == "stop":
                if not (isinstance(v, list) and len(v) <= MAX_STOP and all(isinstance(s, str) and s for s in v)):
                    problem = "stop: expected up to %d non-empty strings" % MAX_STOP
            elif not isinstance(v, str):
                problem = "%s: expected a string" % k
            elif k in ROLES.values() and v.count("{content}") != 1:
                problem = "%s: must hold {content} exactly once" % k
    if problem is not None:
        return dict(DEFAULT_TEMPLATE), "default (the model's chat_template is unusable: %s)" % problem
    out = dict(DEFAULT_TEMPLATE)
    out.update(t)
    return out, "the model's metadata chat_template"


def message_text(i: int, m: Any) -> tuple[str, str]:
    """(role, text) of messages[i]: content a string or a list of {"type": "text", "text": ...}."""
    p = "messages[%d]" % i
    if not isinstance(m, dict):
        raise bad("messages", "%s: expected an object {role, content}" % p)
    check_fields(m, MESSAGE_FIELDS, p + ".", "messages")
    role = m.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list or object is unhashable: typed first
        raise bad("messages", "%s.role: %s is not one of system, developer, user, assistant"
                  % (p, repr(role) if isinstance(role, str) else type(role).__name__))
    c = m.get("content")
    if isinstance(c, list):
        parts = []
        for j, part in enumerate(c):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad("messages", "%s.content[%d]: only {\"type\": \"text\", \"text\": ...} parts are supported"
                          % (p, j))
            parts.append(part["text"])
        c = "".join(parts)
    if not isinstance(c, str):
        raise bad("messages", "%s.content: expected a string or a list of text parts" % p)
    return ROLES[role], c


def render(template: dict, messages: list[tuple[str, str]]) -> str:
    if "jinja" in template:
        try:
            return template["jinja"].render([{"role": r, "content": c} for r, c in messages])
        except chat_template.TemplateError as e:
            raise bad("messages", str(e)) from None
    text = "".join(template[role].replace("{content}", content) for role, content in messages)
    return text + template["generation_prompt"]


def chat_to_completion(body: Any, template: dict) -> tuple[dict, dict]:
    """A chat body as (a /v1/completions body, chat options {template_stop, parse_special, ...}). Errors name the
    chat request's own fields."""
    if not isinstance(body, dict):
        raise bad(None, "the request body must be a JSON object")
    check_fields(body, CHAT_FIELDS)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "messages: expected a non-empty list of {role, content}")
    if len(msgs) > MAX_MESSAGES:
        raise bad("messages", "messages: %d messages, at most %d" % (len(msgs), MAX_MESSAGES))
    out = {k: v for k, v in body.items() if k in PASSED_THROUGH}
    out["prompt"] = render(template, [message_text(i, m) for i, m in enumerate(msgs)])
    mct = _int(body, "max_completion_tokens", None, 0)
    if mct is not None:
        out["max_tokens"] = mct
    want_lp = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
    if top is not None and not want_lp:
        raise bad("top_logprobs", "top_logprobs: only with logprobs: true")
    if want_lp:
        out["logprobs"] = top or 0
    return out, {"template_stop": list(template["stop"]), "parse_special": "jinja" in template,
                 "max_tokens_given": "max_tokens" in out, "top_logprobs": top or 0}


# ------------------------------------------------------------------------------------------
# Responses
# ------------------------------------------------------------------------------------------


def _lp_entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", "replace"))}


def chat_logprobs(lp: dict | None, n_top: int = 0) -> dict | None:
    """A completion choice's logprobs {tokens, token_logprobs, top_logprobs} as chat's {content},
    each with the n_top most likely alternatives (OpenAI's top_logprobs: [] when not asked)."""
    if lp is None:
        return None
    content = []
    for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        e = _lp_entry(tok, l)
        e["top_logprobs"] = [_lp_entry(t, v) for t, v in list((top or {}).items())[:n_top]]
        content.append(e)
    return {"content": content}


def chat_body(completion: dict, n_top: int = 0) -> dict:
    """A /v1/completions response body as a chat.completion."""
    choices = [dict({"index": c["index"], "message": {"role": "assistant", "content": c["text"]},
                     "logprobs": chat_logprobs(c["logprobs"], n_top), "finish_reason": c["finish_reason"]},
                    **({"tinyloop_depth": c["tinyloop_depth"]} if "tinyloop_depth" in c else {}))
               for c in completion["choices"]]
    out = dict(completion, id="chatcmpl-" + completion["id"].split("-", 1)[-1], object="chat.completion",
               choices=choices)
    return out


class ChatChunks:
    """Turns the completion stream's chunk dicts into chat.completion.chunk dicts: a role delta
    first for each choice, content deltas, then an empty delta with the finish reason."""

    def __init__(self, n_top: int = 0):
        self.started: set[int] = set()
        self.n_top = n_top

    def convert(self, chunk: dict) -> list[dict]:
        if "error" in chunk:
            return [chunk]
        base = {k: v for k, v in chunk.items() if k not in ("choices", "usage", "tinyloop_stats")}
        base["id"] = "chatcmpl-" + chunk["id"].split("-", 1)[-1]
        base["object"] = "chat.completion.chunk"
        if not chunk["choices"]:  # the include_usage chunk
            return [dict(base, choices=[], usage=chunk["usage"])]
        out = []
        for c in chunk["choices"]:
            i = c["index"]
            if i not in self.started:
                self.started.add(i)
                out.append(dict(base, choices=[{"index": i, "delta": {"role": "assistant", "content": ""},
                                                "logprobs": None, "finish_reason": None}]))
            if c["text"] or c["logprobs"] is not None:
                out.append(dict(base, choices=[dict({"index": i, "delta": {"content": c["text"]},
                                                     "logprobs": chat_logprobs(c["logprobs"], self.n_top),
                                                     "finish_reason": None},
                                                    **({"tinyloop_depth": c["tinyloop_depth"]}
                                                       if c.get("tinyloop_depth") else {}))]))
            if c["finish_reason"] is not None:
                last = dict(base, choices=[{"index": i, "delta": {}, "logprobs": None,
                                            "finish_reason": c["finish_reason"]}])
                if "tinyloop_stats" in chunk:
                    last["tinyloop_stats"] = chunk["tinyloop_stats"]
                out.append(last)
        return out

