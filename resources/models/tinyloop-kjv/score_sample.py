#!/usr/bin/env python3
"""Mean NLL per token of a .tinyloop model on val-sample.txt, the protocol behind the model card's
and the README's quantization, INT8-KV and early-exit figures: the text (the first 40,000
characters of the recipe's held-out val.txt, NUL separators as newlines) is scored in
1,200-character chunks with `tinyloop score --json` plus any extra flags, and the NLLs are summed.

    score_sample.py TINYLOOP MODEL [score flags...]
    score_sample.py build/bin/tinyloop model-q4.tinyloop --loops 4
    score_sample.py build/bin/tinyloop model-f32.tinyloop --loops 4 --kv-cache int8
    score_sample.py build/bin/tinyloop model-f32.tinyloop --loops 4 --early-exit argmax
"""
import json
import os
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
tl, model, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
here = os.path.dirname(os.path.abspath(__file__))
text = open(os.path.join(here, "val-sample.txt"), encoding="utf-8").read()
total, n, depth_sum, depth_n = 0.0, 0, 0, 0
for i in range(0, len(text), 1200):
    r = subprocess.run([tl, "score", model, "--text", text[i:i + 1200], "--json"] + extra,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tinyloop score failed ({r.returncode}): {r.stderr.strip()}")
    j = json.loads(r.stdout)
    total += j["total_nll"]
    n += sum(1 for x in j["token_logprobs"] if x is not None)
    if "early_exit" in j:
        depth_sum += sum(j["early_exit"]["depth_used"])
        depth_n += len(j["early_exit"]["depth_used"])
line = f"{os.path.basename(model)}: {total / n:.4f} nats/token over {n} tokens"
if depth_n:
    line += f", mean depth {depth_sum / depth_n:.2f}"
print(line)
