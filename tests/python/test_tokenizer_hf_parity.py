"""hf_byte_bpe tokenizers (FORMAT.md §3b) against the `tokenizers` package: the engine reads the
same tokenizer.json (tinyloop::tokenizer_spec_from_hf, through tinyloop_py.HfTokenizer) and must
produce the same ids on a few thousand strings: several scripts, emoji, digit runs, whitespace
runs, code, special-token strings; invalid UTF-8 against the documented rule; decode round-trips.
The files are the small Ouro-style and Huginn-style tokenizers of tests/data/hf_tokenizers
(tools/tokenizers/make_test_tokenizers.py)."""
import json
import os
import pathlib
import random

import pytest
import tokenizers
import tinyloop_py as tl

ROOT = pathlib.Path(os.environ.get("TINYLOOP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
DATA = ROOT / "tests/data/hf_tokenizers"
NAMES = ["ouro", "huginn"]

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog.", "Die Würde des Menschen ist unantastbar.",
    "Съешь же ещё этих мягких французских булок", "Γαζέες καὶ μυρτιὲς", "人人生而自由，在尊严和权利上一律平等。",
    "日本語のテキスト、カタカナ", "한국어 문장도 있습니다", "العربية لغة جميلة", "हिन्दी भी ठीक है", "ภาษาไทย",
    "עברית", "Tiếng Việt có dấu", "ǅemal ǈubljana", "ﬁnance ﬂow", "Ⅻ ⅷ ½ ² ⁴ ٣ ३ ๓",
]
EMOJI = ["😀", "🚀", "👍🏽", "❤️", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🤖", "☕", "✅", "\U0001FA84"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u2003", "\u3000",
              "\u0085", "\u180e", "\u2028", "\u200b", "\f", "\v"]
CODE = ["def f(x):\n    return x ** 2  # square", "if (a != b && c <= d) { y += 1; }", "for i in range(10):",
        "#include <vector>", "x = {'a': [1, 2.5e-3]}", "SELECT * FROM t WHERE id >= 42;", "a->b::c<<=2",
        "\\newcommand{\\R}{\\mathbb{R}}", "$$\\int_0^1 x^2 dx$$", "\\nabla \\neq \\n", "<0x1F>", "1st 22nd 3rd 4th"]
WORDS = ["I'm", "you're", "we'll", "they'd", "it's", "don't", "O'Neil", "rock'n'roll", "l’homme", "Huginn",
         '"""', "'''", "hello", "world", "tokenizer", "naïve", "café"]


def specials(name):
    j = json.loads((DATA / name / "tokenizer.json").read_text())
    return [a["content"] for a in j["added_tokens"]]


def digit_run(r):
    return "".join(r.choice("0123456789") for _ in range(r.randint(1, 25)))


def random_char(r):
    lo, hi = r.choice([(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x530), (0x600, 0x700), (0x900, 0x980),
                       (0x3040, 0x3100), (0x4E00, 0x4F00), (0xAC00, 0xAD00), (0x1F300, 0x1F700),
                       (0x2000, 0x2070), (0x0, 0x20), (0xE000, 0xE010), (0x10000, 0x10100)])
    return chr(r.randrange(lo, hi))


def corpus(name, n=2500, seed=7):
    r = random.Random(seed)
    spec = specials(name)
    parts = [SCRIPTS, EMOJI, WHITESPACE, CODE, WORDS, spec, [s[: len(s) // 2] for s in spec]]
    out = list(SCRIPTS + EMOJI + WHITESPACE + CODE + WORDS + spec)
    while len(out) < n:
        k = r.randint(1, 12)
        pieces = []
        for _ in range(k):
            c = r.random()
            if c < 0.12:
                pieces.append(digit_run(r))
            elif c < 0.22:
                pieces.append("".join(random_char(r) for _ in range(r.randint(1, 6))))
            else:
                pieces.append(r.choice(r.choice(parts)))
            if r.random() < 0.5:
                pieces.append(r.choice(WHITESPACE))
        out.append("".join(pieces))
    return out


@pytest.fixture(scope="module", params=NAMES)
def pair(request):
    d = DATA / request.param
    ours = tl.HfTokenizer(str(d / "tokenizer.json"), str(d / "tokenizer_config.json"))
    ref = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    return request.param, ours, ref


def mismatches(ours, ref, texts, **kw):
    bad = []
    for s in texts:
        a = ours.encode(s, **kw)
        b = ref.encode(s, add_special_tokens=kw.get("add_special", False)).ids
        if a != b:
            bad.append((s, a, b))
    return bad


def test_ids_equal_tokenizers(pair):
    name, ours, ref = pair
    texts = corpus(name)
    bad = mismatches(ours, ref, texts)
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[0]!r}"
    print(f"{name}: {len(texts)} strings, ids equal")


def test_post_processor_ids(pair):
    name, ours, ref = pair
    texts = corpus(name, n=300, seed=11)
    bad = mismatches(ours, ref, texts, add_special=True)
    assert not bad, bad[0]
    assert ours.encode("x", add_special=True) != ours.encode("x") or name == "ouro"


def test_special_tokens_as_text(pair):
    # parse_special=False is tokenizers' encode_special_tokens: specials are ordinary text.
    name, ours, ref = pair
    ref2 = tokenizers.Tokenizer.from_str(ref.to_str())
    ref2.encode_special_tokens = True
    texts = [s for s in corpus(name, n=600, seed=5) if any(t in s for t in specials(name))]
    assert len(texts) > 50
    for s in texts:
        assert ours.encode(s, parse_special=False) == ref2.encode(s, add_special_tokens=False).ids, s


def test_decode_round_trip(pair):
    name, ours, ref = pair
    for s in corpus(name, n=800, seed=3):
        ids = ours.encode(s)
        assert ours.decode(ids) == s.encode("utf-8")
        assert ref.decode(ids, skip_special_tokens=False) == s


def utf8_segments(b):
    """The documented rule (FORMAT.md §3b): the text is cut at every byte that does not begin a
    well-formed UTF-8 sequence; each such byte is its byte token, each valid stretch is encoded
    on its own."""
    out, start, i = [], 0, 0
    while i < len(b):
        n = next((n for n in (1, 2, 3, 4) if i + n <= len(b) and _one_char(b[i:i + n])), 0)
        if n:
            i += n
            continue
        out.append(("text", b[start:i].decode()))
        out.append(("byte", b[i]))
        i += 1
        start = i
    out.append(("text", b[start:].decode()))
    return out


def _one_char(seq):
    try:
        return len(seq.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def test_invalid_utf8_rule(pair):
    name, ours, ref = pair
    b2u = byte_to_unicode()
    r = random.Random(9)
    cases = [b"\xff", b"abc\x80def", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
             "é".encode() + b"\xe9" + "日本".encode()]
    for s in corpus(name, n=300, seed=13):
        raw = bytearray(s.encode())
        for _ in range(r.randint(1, 3)):
            raw.insert(r.randint(0, len(raw)), r.choice([0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xF0, 0xFF, 0xED]))
        cases.append(bytes(raw))
    for raw in cases:
        want = []
        for kind, v in utf8_segments(raw):
            want += ref.encode(v, add_special_tokens=False).ids if kind == "text" else [ref.token_to_id(b2u[v])]
        assert ours.encode(raw) == want, raw
        assert ours.decode(ours.encode(raw)) == raw


def test_string_merges_read_alike(pair, tmp_path):
    # Older files write merges as "left right" strings (SmolLM2's does).
    name, ours, ref = pair
    j = json.loads((DATA / name / "tokenizer.json").read_text())
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(j, ensure_ascii=False))
    old = tl.HfTokenizer(str(p))
    for s in corpus(name, n=300, seed=17):
        assert old.encode(s) == ours.encode(s)


def test_one_swapped_merge_rank_is_caught(pair, tmp_path):
    """The comparison can fail: swap the ranks of two merges that compete for a shared token
    (x y) and (y z), and the engine's ids must differ from the package's on the corpus."""
    name, ours, ref = pair
    j = json.loads((DATA / name / "tokenizer.json").read_text())
    merges = j["model"]["merges"]
    k = next(k for k in range(1, len(merges)) if merges[k][0] == merges[k - 1][1]
             and (merges[k - 1][0] + merges[k][0] + merges[k][1]).isascii()
             and (merges[k - 1][0] + merges[k][0] + merges[k][1]).isalpha())
    word = merges[k - 1][0] + merges[k][0] + merges[k][1]  # x y z: (x y) and (y z) compete
    merges[k - 1], merges[k] = merges[k], merges[k - 1]
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(j, ensure_ascii=False))
    swapped = tl.HfTokenizer(str(p))
    texts = corpus(name) + [word, f"a {word}."]
    bad = mismatches(swapped, ref, texts)
    print(f"{name}: swapping merges {k - 1} and {k} changes {len(bad)} of {len(texts)} strings ({word!r})")
    assert bad
