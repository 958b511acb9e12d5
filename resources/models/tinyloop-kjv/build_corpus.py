#!/usr/bin/env python3
"""Build the tinyloop-kjv corpus from Debian packages only (recipe v3).

Sources (all public domain, see README.md):
  bible-kjv-text : /usr/lib/bible.data, read through the `bible` program (package bible-kjv);
                   verse numbers are stripped, one chapter per document, one verse per line.
  dict-devil     : /usr/share/dictd/devil.dict.dz + .index (Ambrose Bierce, The Devil's Dictionary)
  dict-jargon    : /usr/share/dictd/jargon.dict.dz + .index (The Jargon File 4.4.7, public domain)

Writes into work/corpus/: train.jsonl-like plain files of documents separated by a \x00 line,
plus sources.json (paths, sizes, SHA-256) and a synthetic sample (synthetic tasks are generated
on the fly by train.py with synth.py; the sample is only used to train the tokenizer).
Validation split: every 20th document (deterministic), per source.
"""
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "work", "corpus")
SEP = "\n\x00\n"  # document separator inside our files (never in the text)

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def kjv_documents():
    out = subprocess.run(["bible", "-l100000", "-m", "8192", "Gen1:1-Rev22:21"],
                         check=True, capture_output=True).stdout.decode("ascii")
    docs, cur, title = [], [], None
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            cur.append(m.group(2).strip())
        else:  # chapter heading, e.g. "Genesis 1"
            if title is not None:
                docs.append(title + "\n\n" + "\n".join(cur))
            title, cur = line.strip(), []
    docs.append(title + "\n\n" + "\n".join(cur))
    assert len(docs) == 1189, len(docs)
    nverses = sum(d.count("\n") - 1 for d in docs)
    assert nverses == 31102, nverses
    return docs


def dictd_entries(name):
    idx = f"/usr/share/dictd/{name}.index"
    dz = f"/usr/share/dictd/{name}.dict.dz"
    data = gzip.open(dz).read()
    spans = set()
    for line in open(idx, encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 3 or parts[0].startswith("00database") or parts[0].startswith("00-database"):
            continue
        spans.add((b64num(parts[1]), b64num(parts[2])))
    ents = []
    for off, ln in sorted(spans):
        t = data[off:off + ln].decode("utf-8")
        if "00-database" in t[:40]:
            continue
        ents.append(t)
    return ents


def clean_dict_text(t):
    t = t.replace("{", "").replace("}", "")
    t = t.replace("_", "")
    lines = [ln.rstrip() for ln in t.split("\n")]
    # dedent body (jargon indents by 4)
    lines = [ln[4:] if ln.startswith("    ") else ln for ln in lines]
    t = "\n".join(lines)
    t = re.sub(r"\n{3,}", "\n\n", t).strip()
    return t


def main():
    os.makedirs(OUT, exist_ok=True)
    sources = {
        "kjv": {"package": "bible-kjv-text", "files": ["/usr/lib/bible.data"],
                "reader": "bible (package bible-kjv)",
                "licence": "public domain (KJV 1611 text; copyright expired, see /usr/share/doc/bible-kjv-text/copyright)"},
        "devil": {"package": "dict-devil", "files": ["/usr/share/dictd/devil.dict.dz", "/usr/share/dictd/devil.index"],
                  "licence": "public domain (Ambrose Bierce, 1911; copyright expired, see /usr/share/doc/dict-devil/copyright)"},
        "jargon": {"package": "dict-jargon", "files": ["/usr/share/dictd/jargon.dict.dz", "/usr/share/dictd/jargon.index"],
                   "licence": "public domain (Jargon File 4.4.7, 29 Dec 2003; see /usr/share/doc/dict-jargon/copyright)"},
    }
    for s in sources.values():
        s["sha256"] = {p: sha256(p) for p in s["files"]}
        s["bytes"] = {p: os.path.getsize(p) for p in s["files"]}
        try:
            s["version"] = subprocess.run(["dpkg-query", "-W", "-f=${Version}", s["package"]],
                                          capture_output=True, text=True).stdout.strip()
        except Exception:
            s["version"] = None
    docs = {
        "kjv": kjv_documents(),
        "devil": [clean_dict_text(t) for t in dictd_entries("devil")],
        "jargon": [clean_dict_text(t) for t in dictd_entries("jargon")],
    }
    train, val = [], []
    for name, ds in docs.items():
        tr = [d for i, d in enumerate(ds) if i % 20 != 7]
        va = [d for i, d in enumerate(ds) if i % 20 == 7]
        sources[name]["documents"] = len(ds)
        sources[name]["chars"] = sum(len(d) for d in ds)
        sources[name]["val_documents"] = len(va)
        train += tr
        val += va
        with open(os.path.join(OUT, f"val_{name}.txt"), "w", encoding="utf-8") as f:
            f.write(SEP.join(va))
    rng = random.Random(1234)
    rng.shuffle(train)
    with open(os.path.join(OUT, "train.txt"), "w", encoding="utf-8") as f:
        f.write(SEP.join(train))
    with open(os.path.join(OUT, "val.txt"), "w", encoding="utf-8") as f:
        f.write(SEP.join(val))
    # synthetic sample for tokenizer training (~15% of characters)
    sys.path.insert(0, HERE)
    import synth
    srng = random.Random(99)
    target = int(0.15 * sum(len(d) for d in train))
    lines, n = [], 0
    while n < target:
        ln = synth.train_line(srng, 6)
        lines.append(ln)
        n += len(ln) + 1
    with open(os.path.join(OUT, "synthetic_sample.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    meta = {"sources": sources, "train_documents": len(train), "val_documents": len(val),
            "train_chars": sum(len(d) for d in train), "val_chars": sum(len(d) for d in val),
            "document_separator": "documents are joined with <|endoftext|> at training time"}
    with open(os.path.join(OUT, "sources.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: {kk: v[kk] for kk in ("documents", "chars")} for k, v in sources.items()}))
    print("train chars", meta["train_chars"], "val chars", meta["val_chars"])


if __name__ == "__main__":
    main()
