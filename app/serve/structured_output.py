"""Structured output for `tinyloop serve`: OpenAI's `response_format` as a grammar (GBNF text
for tinyloop_py.Grammar), so that the engine's grammar-constrained decoding does the
constraining.

    {"type": "text"}                          no grammar
    {"type": "json_object"}                   any JSON object (the grammar JSON_OBJECT below)
    {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ..., "description": ...}}
                                              a grammar made from the schema (schema_grammar)

The schema subset (anything else is refused naming the keyword):
    type (one or a list of: object, array, string, integer, number, boolean, null),
    properties, required, additionalProperties (false or true; only the listed properties are
    produced either way), items, minItems, maxItems, enum, const, minLength, maxLength, anyOf,
    $ref to "#/$defs/NAME" or "#/definitions/NAME" (with $defs / definitions), and the
    annotations title, description, $schema, $id, $comment, default, examples (ignored).
Properties come out in the schema's order, required ones first. Strings without maxLength are
kept to at most MAX_STRING characters, arrays without maxItems to MAX_ITEMS items, and
json_object's nesting to 3 levels, so that a small model's output ends inside max_tokens; each
is a value the schema allows.
"""
from __future__ import annotations

import json
import re
from typing import Any

from request_parse import bad

MAX_STRING = 64  # characters of a string without maxLength
MAX_ITEMS = 8  # items of an array without maxItems
MAX_SCHEMA_RULES = 1000  # rules one schema may become

# Shared rules. `char` is any code point but the quote, the backslash and controls, or an escape.
COMMON = r'''
ws ::= [ \t\n]{0,2}
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char{0,%d} "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
''' % MAX_STRING

# Any JSON object, nesting bounded (value0 holds no object or array).
JSON_OBJECT = r'''root ::= object1
object1 ::= "{" ws (member1 ("," ws member1){0,%d})? "}" ws
member1 ::= string ws ":" ws value1
value1 ::= (object2 | array2 | string | number | boolean | null) ws
object2 ::= "{" ws (member2 ("," ws member2){0,%d})? "}"
member2 ::= string ws ":" ws value2
value2 ::= (object3 | array3 | string | number | boolean | null) ws
array2 ::= "[" ws (value2 ("," ws value2){0,%d})? "]"
object3 ::= "{" ws (member3 ("," ws member3){0,%d})? "}"
member3 ::= string ws ":" ws value3
array3 ::= "[" ws (value3 ("," ws value3){0,%d})? "]"
value3 ::= (string | number | boolean | null) ws
''' % ((MAX_ITEMS - 1,) * 5) + COMMON

ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
SUPPORTED = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
             "const", "minLength", "maxLength", "anyOf", "$ref", "$defs", "definitions"} | ANNOTATIONS
TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}
PARAM = "response_format"


def literal(value: Any) -> str:
    """A GBNF string literal matching the JSON text of `value` exactly."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SchemaGrammar:
    def __init__(self, root_schema: dict):
        self.root = root_schema
        self.rules: dict[str, str] = {}
        self.ref_rules: dict[str, str] = {}

    def fail(self, where: str, message: str):
        raise bad(PARAM, "response_format.json_schema.schema%s: %s" % (where, message))

    def new_rule(self, hint: str, body: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-").lower() or "r"
        name, k = base, 1
        while name in self.rules or name in ("root", "ws", "char", "string", "integer", "number", "boolean", "null"):
            k += 1
            name = "%s-%d" % (base, k)
        if len(self.rules) >= MAX_SCHEMA_RULES:
            self.fail("", "too large (more than %d rules)" % MAX_SCHEMA_RULES)
        self.rules[name] = body
        return name

    def count(self, s: dict, key: str, where: str) -> int | None:
        v = s.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4096:
            self.fail(where + "." + key, "expected an integer in [0, 4096], got %s" % json.dumps(v))
        return v

    def visit(self, s: Any, where: str, hint: str) -> str:
        """A GBNF expression for values of schema `s`."""
        if s is True or s == {}:
            self.fail(where, "an unconstrained schema ({} or true) is not supported; give a type")
        if not isinstance(s, dict):
            self.fail(where, "expected a schema object, got %s" % json.dumps(s)[:80])
        for k in s:
            if k not in SUPPORTED:
                self.fail(where, "keyword %r is not supported (supported: %s)" % (k, ", ".join(sorted(SUPPORTED))))
        if "$ref" in s:
            return self.ref(s["$ref"], where)
        if "const" in s:
            return literal(s["const"])
        if "enum" in s:
            e = s["enum"]
            if not isinstance(e, list) or not e:
                self.fail(where + ".enum", "expected a non-empty array")
            return "(" + " | ".join(literal(v) for v in e) + ")"
        if "anyOf" in s:
            alts = s["anyOf"]
            if not isinstance(alts, list) or not alts:
                self.fail(where + ".anyOf", "expected a non-empty array of schemas")
            return "(" + " | ".join(self.visit(a, "%s.anyOf[%d]" % (where, i), hint) for i, a in enumerate(alts)) + ")"
        t = s.get("type")
        if t is None:
            self.fail(where, "expected a type (or enum, const, anyOf, $ref)")
        types = t if isinstance(t, list) else [t]
        if not types or any(x not in TYPES for x in types):
            self.fail(where + ".type", "%s is not one of %s" % (json.dumps(t), ", ".join(sorted(TYPES))))
        alts = [self.typed(x, s, where, hint) for x in types]
        return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"

    def typed(self, t: str, s: dict, where: str, hint: str) -> str:
        if t in ("boolean", "null", "integer", "number"):
            return t
        if t == "string":
            lo = self.count(s, "minLength", where) or 0
            hi = self.count(s, "maxLength", where)
            hi = MAX_STRING if hi is None else hi
            if lo > hi:
                self.fail(where, "minLength %d is above maxLength %d" % (lo, hi))
            if lo == 0 and hi == MAX_STRING:
                return "string"
            return '"\\"" char{%d,%d} "\\""' % (lo, hi)
        if t == "array":
            items = s.get("items")
            if items is None:
                self.fail(where, "an array needs items (a schema)")
            item = self.new_rule(hint + "-item", self.visit(items, where + ".items", hint + "-item"))
            lo = self.count(s, "minItems", where) or 0
            hi = self.count(s, "maxItems", where)
            hi = max(lo, MAX_ITEMS) if hi is None else hi
            if lo > hi:
                self.fail(where, "minItems %d is above maxItems %d" % (lo, hi))
            if hi == 0:
                return '"[" ws "]"'
            more = '("," ws %s ws){%d,%d}' % (item, max(0, lo - 1), hi - 1)
            body = '"[" ws %s ws %s "]"' % (item, more)
            return body if lo > 0 else '("[" ws "]" | %s)' % body
        return self.object(s, where, hint)

    def object(self, s: dict, where: str, hint: str) -> str:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            self.fail(where + ".properties", "expected an object of schemas")
        req = s.get("required", [])
        if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
            self.fail(where + ".required", "expected an array of property names")
        for r in req:
            if r not in props:
                self.fail(where + ".required", "%r is not in properties" % r)
        ap = s.get("additionalProperties")
        if ap is not None and not isinstance(ap, bool):
            self.fail(where + ".additionalProperties", "only false or true are supported (a schema is not)")
        kv = {}
        for name, sub in props.items():
            value = self.new_rule(hint + "-" + name, self.visit(sub, "%s.properties.%s" % (where, name),
                                                                 hint + "-" + name))
            kv[name] = "%s ws \":\" ws %s" % (literal(name), value)
        required = [n for n in props if n in req]
        optional = [n for n in props if n not in req]
        if required:
            body = ' "," ws '.join(kv[n] for n in required)
            body += "".join(' ("," ws %s)?' % kv[n] for n in optional)
        elif optional:
            alts = []
            for i, n in enumerate(optional):
                alts.append(kv[n] + "".join(' ("," ws %s)?' % kv[m] for m in optional[i + 1:]))
            body = "(" + " | ".join(alts) + ")?"
        else:
            body = ""
        return '"{" ws %s ws "}"' % body if body else '"{" ws "}"'

    def ref(self, ref: Any, where: str) -> str:
        if not isinstance(ref, str):
            self.fail(where + ".$ref", "expected a string")
        m = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
        if m is None:
            self.fail(where + ".$ref", "%r: only \"#/$defs/NAME\" and \"#/definitions/NAME\" are supported" % ref)
        if ref in self.ref_rules:
            return self.ref_rules[ref]
        defs = self.root.get(m.group(1))
        if not isinstance(defs, dict) or m.group(2) not in defs:
            self.fail(where + ".$ref", "%r is not defined" % ref)
        # The rule's name first (a recursive definition refers to itself), its body after.
        name = self.new_rule("def-" + m.group(2), "")
        self.ref_rules[ref] = name
        self.rules[name] = self.visit(defs[m.group(2)], "." + m.group(1) + "." + m.group(2), "def-" + m.group(2))
        return name

    def grammar(self) -> str:
        root = self.visit(self.root, "", "root")
        lines = ["root ::= %s ws" % root] + ["%s ::= %s" % (k, v) for k, v in self.rules.items()]
        return "\n".join(lines) + "\n" + COMMON


def response_format_grammar(rf: Any) -> str | None:
    """GBNF text for a request's response_format (None for {"type": "text"}); errors name
    response_format and, for a schema, the keyword."""
    if not isinstance(rf, dict):
        raise bad(PARAM, "response_format: expected an object {\"type\": ...}")
    t = rf.get("type")
    allowed = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}
    if not isinstance(t, str) or t not in allowed:
        raise bad(PARAM, "response_format.type: %s is not one of text, json_object, json_schema" % json.dumps(t))
    for k in rf:
        if k not in allowed[t]:
            raise bad(PARAM, "response_format.%s: unknown field for type %s" % (k, t))
    if t == "text":
        return None
    if t == "json_object":
        return JSON_OBJECT
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise bad(PARAM, "response_format.json_schema: expected an object {name, schema, strict, description}")
    for k, v in js.items():
        if k not in ("name", "schema", "strict", "description"):
            raise bad(PARAM, "response_format.json_schema.%s: unknown field (allowed: name, schema, strict, "
                             "description)" % k)
    if not isinstance(js.get("name"), str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", js["name"]):
        raise bad(PARAM, "response_format.json_schema.name: expected a name of 1 to 64 letters, digits, _ or -")
    if js.get("strict") is not None and not isinstance(js["strict"], bool):
        raise bad(PARAM, "response_format.json_schema.strict: expected true or false")
    schema = js.get("schema")
    if not isinstance(schema, dict):
        raise bad(PARAM, "response_format.json_schema.schema: expected a JSON Schema object")
    return SchemaGrammar(schema).grammar()
