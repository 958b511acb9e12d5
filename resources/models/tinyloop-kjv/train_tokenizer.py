#!/usr/bin/env python3
"""Train the byte-level BPE of FORMAT.md section 3 on work/corpus (recipe v1).

Pairs are counted inside pretokenizer chunks only.  Each step merges the most frequent pair;
ties go to the smallest (a, b).  vocab_size = 256 + n_merges + 1 special (<|endoftext|>).
Writes work/tokenizer.json.
"""
import argparse
import collections
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tokenizer import EOT, Tokenizer, pretokenize, encode_reference  # noqa: E402


def train_bpe(word_counts, n_merges, log_every=200):
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        c = counts[wi]
        for i in range(len(w) - 1):
            p = (w[i], w[i + 1])
            pair_counts[p] += c
            where[p].add(wi)
    merges = []
    t0 = time.time()
    for k in range(n_merges):
        if not pair_counts:
            break
        best = max(pair_counts.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
        (a, b), cnt = best
        if cnt <= 0:
            break
        new_id = 256 + k
        merges.append((a, b))
        for wi in list(where[(a, b)]):
            w, c = words[wi], counts[wi]
            for i in range(len(w) - 1):
                p = (w[i], w[i + 1])
                pair_counts[p] -= c
                if pair_counts[p] <= 0:
                    del pair_counts[p]
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for i in range(len(out) - 1):
                p = (out[i], out[i + 1])
                pair_counts[p] += c
                where[p].add(wi)
        where.pop((a, b), None)
        if log_every and (k + 1) % log_every == 0:
            print(f"  merge {k+1}/{n_merges} count={cnt} ({time.time()-t0:.1f}s)", flush=True)
    return merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--corpus", default=os.path.join(HERE, "work", "corpus"))
    ap.add_argument("--out", default=os.path.join(HERE, "work", "tokenizer.json"))
    args = ap.parse_args()
    n_merges = args.vocab_size - 256 - 1
    text = open(os.path.join(args.corpus, "train.txt"), encoding="utf-8").read()
    docs = text.split("\n\x00\n")
    synth = open(os.path.join(args.corpus, "synthetic_sample.txt"), encoding="utf-8").read()
    wc = collections.Counter()
    for d in docs + [synth]:
        wc.update(pretokenize(d.encode("utf-8")))
    print(f"{len(wc)} distinct chunks; training {n_merges} merges", flush=True)
    merges = train_bpe(wc, n_merges)
    tok = Tokenizer(merges, {EOT: 256 + len(merges)})
    with open(args.out, "w") as f:
        json.dump(tok.to_json(), f)
    # self-check against the literal reference on a sample
    sample = docs[0][:3000] + " café — ok  \n\n  x=7;y=x;y?7 +12+34=46 12345 "
    assert tok.encode(sample) == encode_reference(tok, sample)
    assert tok.decode(tok.encode(sample)) == sample
    n_bytes = sum(len(d.encode()) for d in docs[:200])
    n_tok = sum(len(tok.encode(d)) for d in docs[:200])
    print(f"vocab ids {tok.n_ids} (eos {tok.eos_id}); {n_bytes/n_tok:.2f} bytes/token on a sample")
    print("some merges:", [tok.vocab[256 + i] for i in range(0, len(merges), max(1, len(merges)//12))])


if __name__ == "__main__":
    main()
