#!/usr/bin/env python3
"""Write parity.json: tokenizer ids and reference logits for the C++ engine (see README.md,
section "Parity fixture").  Logits come from the exported model-f32.tinyloop (re-read with
the pure-Python reader), computed in float64 in torch eval mode, stored as float32 values."""
import argparse
import hashlib
import json
import os
import sys

import torch
torch.set_num_threads(int(os.environ.get("TL_THREADS", "2")))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import model_from_file  # noqa: E402
from tokenizer import Tokenizer  # noqa: E402

PROMPTS = [
    "In the beginning God created the heaven and the earth. And",
    "k=3;b=7;q=k;x=b;z=q;z?",
    "  Verse 12, chapter 3456:\t\"quoted\"... (yes!)\n\n   indented   text  ",
    "café — ok",
]


# The model card's greedy samples: "<|endoftext|>" + prompt, greedy at these depths, stopped at
# eos or after GREEDY_TOKENS tokens.  `tinyloop generate` must reproduce them exactly
# (tests/app/test_cli_generate.cpp, CliTest.BundledModelReproducesTheCardsGreedySamples).
GREEDY_PROMPTS = ["And God said", "The LORD is my shepherd"]
GREEDY_TOKENS = 40


def greedy(model64, tok, prompt, L, n_tokens):
    ids = [tok.eos_id] + tok.encode(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n_tokens):
            logits = model64(torch.tensor([ids]), L)[0, -1]
            nxt = int(logits.argmax())
            if nxt == tok.eos_id:
                break
            ids.append(nxt)
            out.append(nxt)
    return out


TOKENIZER_CASES = [
    "", " ", "  ", "a", "Hello  world", "a   b", "x \t\ny", "a\t\tb", "end   ", "\r\n\r\n",
    "\x0c\x0bform feed", "12 34", "3.14159", "1,000,000!", " ...!x", "(yes!)", "don't", "café — ok",
    "naïve 😀 emoji", "\u00a0nbsp", "<|endoftext|> is ordinary text", "And the LORD spake unto Moses, saying,",
    "k=3;b=7;q=k;x=b;z=q;z?3", "+274+983=168", "%101101=0",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "model-f32.tinyloop"))
    ap.add_argument("--out", default=os.path.join(HERE, "parity.json"))
    ap.add_argument("--last", type=int, default=3)
    args = ap.parse_args()
    model, header = model_from_file(args.model)
    tok = Tokenizer.from_json(header["tokenizer"])
    hp = model.hp
    depths = [1, hp.default_loops]
    model64 = model.double()
    sha = hashlib.sha256(open(args.model, "rb").read()).hexdigest()
    cases = []
    for text in PROMPTS:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        x = torch.tensor([ids])
        ent = {"text": text, "ids": ids, "positions": list(range(max(0, len(ids) - args.last), len(ids))),
               "logits": {}, "argmax": {}}
        with torch.no_grad():
            outs = model64(x, max(depths), lens_depths=set(depths))
        for L in depths:
            lg = outs[L][0, ent["positions"]].to(torch.float32)
            ent["logits"][str(L)] = [[float(f"{v:.7g}") for v in row.tolist()] for row in lg]
            ent["argmax"][str(L)] = [int(i) for i in lg.argmax(-1).tolist()]
        cases.append(ent)
    tcases = []
    for text in TOKENIZER_CASES:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        tcases.append({"text": text, "ids": ids})
    samples = []
    for prompt in GREEDY_PROMPTS:
        for L in sorted({2, hp.default_loops}):
            out = greedy(model64, tok, prompt, L, GREEDY_TOKENS)
            samples.append({"prompt": "<|endoftext|>" + prompt, "loops": L, "max_tokens": GREEDY_TOKENS,
                            "ids": out, "text": tok.decode(out)})
            print(f"greedy L={L} {prompt!r}: {tok.decode(out)!r}", flush=True)
    fx = {
        "schema": "tinyloop-parity-v1",
        "model_file": os.path.basename(args.model),
        "model_sha256": sha,
        "vocab_size": hp.vocab_size,
        "eos_id": tok.eos_id,
        "depths": depths,
        "computed_in": "torch float64, eval mode, no special tokens added; values rounded to float32 (7 significant digits)",
        "suggested_tolerance": {"abs": 2e-3, "rel": 1e-3,
                                "note": "f32 engine vs f64 reference; argmax must match exactly"},
        "cases": cases,
        "tokenizer_cases": tcases,
        "greedy_samples": samples,
    }
    with open(args.out, "w") as f:
        json.dump(fx, f, separators=(",", ":"))
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes); ids:",
          [c["ids"] for c in cases])


if __name__ == "__main__":
    main()
