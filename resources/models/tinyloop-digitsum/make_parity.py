#!/usr/bin/env python3
"""Write parity.json: tokenizer ids and reference logits for the C++ engine (README.md, section
"Quantized files and the parity fixture"), in the schema of ../tinyloop-kjv/parity.json
(tinyloop-parity-v1), so tests/engine/parity_fixture.h checks both.

The logits come from the exported model-f32.tinyloop re-read with the pure-Python reader
(../tinyloop-kjv: tinyloop_file.py, model.py with input injection, FORMAT.md section 1a),
computed in float64 in torch eval mode and stored rounded to float32 (7 significant digits),
at the last positions of a few held-out prompts ending in `=` (the `?` that predicts `=`, the
`=` that predicts the answer) and at depths 1, 2, half the default, the default and max_loops.
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import hashlib
import json
import sys
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
torch.set_num_threads(int(os.environ.get("TL_THREADS", "1")))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import task  # noqa: E402
from kjv_recipe import byte_tokenizer, model_from_file  # noqa: E402

# Held-out problems of sizes 3, 7 (the card's and the workbench preset's example) and 10: at
# depth 1 all are unsolved, at half the default the 3-digit one is solved and the others are not.
PROMPTS = ["343?", "2479362?", "4548322647?"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "model-f32.tinyloop"))
    ap.add_argument("--out", default=os.path.join(HERE, "parity.json"))
    ap.add_argument("--last", type=int, default=2, help="positions stored per prompt, counted from the end")
    args = ap.parse_args()
    model, header = model_from_file(args.model)
    tok = byte_tokenizer()
    hp = model.hp
    assert hp.loop_input == "add", "the reasoner's file is version 2 with input injection"
    depths = sorted({1, 2, hp.default_loops // 2, hp.default_loops, hp.max_loops})
    model64 = model.double()
    heldout = {p["prompt"]: p for p in task.read_heldout(os.path.join(HERE, "heldout.jsonl"))}
    cases = []
    for prompt in PROMPTS:
        assert prompt in heldout, f"{prompt!r} is not a held-out problem"
        text = prompt + "="
        ids = tok.encode(text)
        assert ids == task.encode(text) and tok.decode(ids) == text
        positions = list(range(len(ids) - args.last, len(ids)))
        ent = {"text": text, "ids": ids, "answer": heldout[prompt]["answer"], "positions": positions,
               "logits": {}, "argmax": {}}
        with torch.no_grad():
            outs = model64(torch.tensor([ids]), max(depths), lens_depths=set(depths))
        for L in depths:
            lg = outs[L][0, positions].to(torch.float32)
            ent["logits"][str(L)] = [[float(f"{v:.7g}") for v in row.tolist()] for row in lg]
            ent["argmax"][str(L)] = [int(i) for i in lg.argmax(-1).tolist()]
        print(f"{text!r}: answer {ent['answer']}, argmax at '=' by depth "
              f"{ {L: tok.decode([a[-1]]) for L, a in ent['argmax'].items()} }", flush=True)
        cases.append(ent)
    fx = {
        "schema": "tinyloop-parity-v1",
        "model_file": os.path.basename(args.model),
        "model_sha256": hashlib.sha256(open(args.model, "rb").read()).hexdigest(),
        "vocab_size": hp.vocab_size,
        "eos_id": task.EOS,
        "depths": depths,
        "computed_in": "torch float64, eval mode, input injection (loop_input add), no special tokens added; "
                       "values rounded to float32 (7 significant digits)",
        "suggested_tolerance": {"rel": 1e-5, "note": "f32 engine vs f64 reference, |engine - reference| / max|reference| "
                                                     "per row; argmax must match exactly"},
        "cases": cases,
        "tokenizer_cases": [{"text": t, "ids": tok.encode(t)} for t in ("", "5?", "123456789?=0", "<|endoftext|>")],
    }
    with open(args.out, "w") as f:
        json.dump(fx, f, separators=(",", ":"))
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes), depths {depths}")


if __name__ == "__main__":
    main()
