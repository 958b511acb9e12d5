"""Shared data and evaluation helpers for the tinyloop-kjv recipe."""
import math
import os
import random

import torch
import torch.nn.functional as F

import synth
from tokenizer import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
DOC_SEP = "\n\x00\n"


def load_tokenizer(path=None):
    return Tokenizer.load(path or os.path.join(WORK, "tokenizer.json"))


def encode_docs(tok, path):
    text = open(path, encoding="utf-8").read()
    ids = []
    for d in text.split(DOC_SEP):
        ids.append(tok.eos_id)
        ids.extend(tok.encode(d))
    ids.append(tok.eos_id)
    return torch.tensor(ids, dtype=torch.int64)


def val_windows(val_ids, T, max_windows):
    n = min(max_windows, (len(val_ids) - 1) // T)
    x = torch.stack([val_ids[i * T:i * T + T + 1] for i in range(n)])
    return x


@torch.no_grad()
def prose_loss_per_depth(model, windows, depths, batch=16):
    """Mean next-token loss (nats/token) on the windows at every depth in `depths` (lens = model)."""
    model.eval()
    Lmax = max(depths)
    tot = {l: 0.0 for l in depths}
    n = 0
    for i in range(0, len(windows), batch):
        x = windows[i:i + batch]
        outs = model(x[:, :-1], Lmax, lens_depths=set(depths))
        for l in depths:
            tot[l] += F.cross_entropy(outs[l].reshape(-1, outs[l].shape[-1]), x[:, 1:].reshape(-1),
                                      reduction="sum").item()
        n += x[:, 1:].numel()
    return {l: tot[l] / n for l in depths}


def synth_sequence(tok, rng, T, frontier):
    """Packed synthetic lines, each preceded by <|endoftext|>.  Returns (ids[T+1], mask[T+1],
    kind[T+1]): mask marks answer tokens (every synthetic character is one token); kind is the
    number of operations k of a perm line at its answer token, -1 elsewhere."""
    ids, mask, kind = [], [], []
    while len(ids) < T + 1:
        line = synth.train_line(rng, frontier)
        li = tok.encode(line)
        assert len(li) == len(line)
        ids.append(tok.eos_id)
        mask.append(0)
        kind.append(-1)
        ids.extend(li)
        m = synth.answer_mask(line)
        mask.extend(m)
        k = synth.perm_k_of(line) if line[:1] == "#" else -1
        kind.extend(k if a else -1 for a in m)
    return (torch.tensor(ids[:T + 1], dtype=torch.int64),
            torch.tensor(mask[:T + 1], dtype=torch.float32),
            torch.tensor(kind[:T + 1], dtype=torch.int64))


@torch.no_grad()
def greedy_answer(model, tok, prompts, answers, L, n_valid):
    """Greedy exact match; prompts are prefixed with <|endoftext|> as in training. Returns acc."""
    model.eval()
    groups = {}
    for p, a in zip(prompts, answers):
        pi = [tok.eos_id] + tok.encode(p)
        groups.setdefault(len(pi), []).append((pi, tok.encode(a)))
    correct = 0
    for _, items in groups.items():
        x = torch.tensor([it[0] for it in items])
        nmax = max(len(it[1]) for it in items)
        gen = []
        for _ in range(nmax):
            logits = model(x, L)[:, -1, :n_valid]
            nxt = logits.argmax(-1)
            gen.append(nxt)
            x = torch.cat([x, nxt[:, None]], 1)
        gen = torch.stack(gen, 1).tolist()
        for (pi, ai), g in zip(items, gen):
            correct += int(g[:len(ai)] == ai)
    return correct / len(prompts)


@torch.no_grad()
def greedy_answer_depths(model, tok, prompts, answers, depths, n_valid):
    """Like greedy_answer for every depth in `depths`; single-token answers use one forward
    with the logit lens (the lens at depth l is exactly the model at depth l)."""
    depths = sorted(set(depths))  # a depth listed twice (default = deepest trained) is counted once
    answers_ids = [tok.encode(a) for a in answers]
    if any(len(a) != 1 for a in answers_ids):
        return {L: greedy_answer(model, tok, prompts, answers, L, n_valid) for L in depths}
    model.eval()
    groups = {}
    for p, a in zip(prompts, answers_ids):
        pi = [tok.eos_id] + tok.encode(p)
        groups.setdefault(len(pi), []).append((pi, a[0]))
    correct = {L: 0 for L in depths}
    for _, items in groups.items():
        x = torch.tensor([it[0] for it in items])
        y = torch.tensor([it[1] for it in items])
        outs = model(x, max(depths), lens_depths=set(depths))
        for L in depths:
            correct[L] += int((outs[L][:, -1, :n_valid].argmax(-1) == y).sum())
    return {L: correct[L] / len(prompts) for L in depths}


def task_accuracy_depths(model, tok, depths, n_per_task, seed=2026, n_valid=None, tasks=None):
    """{task: {L: acc}}"""
    n_valid = n_valid or tok.n_ids
    res = {}
    for name in (tasks or synth.EVAL_TASKS):
        ex = synth.eval_set(name, n_per_task, seed)
        res[name] = greedy_answer_depths(model, tok, [e[0] for e in ex], [e[1] for e in ex], depths, n_valid)
    return res


def task_accuracy(model, tok, L, n_per_task, seed=2026, n_valid=None, tasks=None):
    n_valid = n_valid or tok.n_ids
    res = {}
    for name in (tasks or synth.EVAL_TASKS):
        ex = synth.eval_set(name, n_per_task, seed)
        res[name] = greedy_answer(model, tok, [e[0] for e in ex], [e[1] for e in ex], L, n_valid)
    return res


@torch.no_grad()
def sample(model, tok, prompt, L, n_tokens, temperature=0.0, top_k=40, seed=0, n_valid=None):
    model.eval()
    n_valid = n_valid or tok.n_ids
    g = torch.Generator().manual_seed(seed)
    ids = [tok.eos_id] + tok.encode(prompt)
    for _ in range(n_tokens):
        x = torch.tensor([ids[-model.hp.max_seq_len:]])
        logits = model(x, L)[0, -1, :n_valid].double()
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, top_k).values[-1]
                logits = torch.where(logits < kth, torch.full_like(logits, -math.inf), logits)
            p = torch.softmax(logits, -1)
            nxt = int(torch.multinomial(p, 1, generator=g))
        if nxt == tok.eos_id:
            break
        ids.append(nxt)
    return tok.decode(ids[1 + len(tok.encode(prompt)):])
