#!/usr/bin/env python3
"""Train tinyloop-digitsum: a looped transformer with input injection (FORMAT.md section 1a)
that writes the last digit of the sum of a string of digits (task.py), one digit per loop pass.

Every step draws a batch of fresh problems (never a held-out prompt; half of the batch at the
curriculum's largest size S, half uniform in 1..S), runs the model to a depth drawn in
S+1..S+--extra-loops, and takes the loss through the logit lens (final norm + tied head on the
state after each pass), at every position and pass (make_batch lists the targets):

- the answer at `=` at every pass l >= size (deep supervision: the answer must appear at the
  pass that can compute it and stay there), weight 1;
- the partial sum of the last l digits at `=` at every pass l < size, weight --hop-weight
  (the lens then shows the sum being built, one digit per pass);
- at every digit, the sum of the window of l+1 digits ending there, weight --digit-weight
  (every position runs the same one-digit-per-pass recurrence: many steps supervised per problem);
- the format tokens (`=` after `?`, <|endoftext|> after the answer), weight 0.2.

Training stops after --minutes of wall clock, or after --steps; the LR schedule follows the
progress of that budget.  Curriculum (as in Fan et al. 2024): S starts at --start-size and
rises by one (up to task.MAX_SIZE) each time the running training accuracy on size S at the
run depth reaches --gate-acc over the last --gate-window problems of that size.  --resume
continues from the checkpoint (model, optimizer, data RNG, curriculum, elapsed time and log)
to the budget given.  Seeds: --init-seed (weights), --data-seed (problems).
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the cores are shared: don't spin
import argparse
import json
import math
import random
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import task  # noqa: E402
from kjv_recipe import WORK, HParams, LoopedLM  # noqa: E402

RECIPE_VERSION = "tinyloop-digitsum recipe v1"


def make_batch(rng, n, exclude, max_size, max_loops):
    """n fresh problems, half of size max_size and half uniform in 1..max_size ->
    (ids [n, T] right-padded with EOS, sizes, targets [n, T, max_loops] (-100: no loss),
    weights [n, T, max_loops]).  Targets, as bytes, at pass l (1-based):
      digit i:  the last digit of the sum of the l+1 digits ending at i (a window of the sum);
      `?`:      `=` (the format);
      `=`:      the last digit of the sum of the last l digits: the answer once l >= size
                (weight 1, deep supervision) and the partial sum before (weight --hop-weight);
      answer:   <|endoftext|>."""
    seqs, sizes, tgts = [], [], []
    while len(seqs) < n:
        size = max_size if len(seqs) % 2 else rng.randint(1, max_size)
        prompt, answer, size, digits = task.make_problem(rng, size)
        if prompt in exclude:
            continue
        seqs.append(task.encode(prompt + task.completion(answer)) + [task.EOS])
        sizes.append(size)
        t = [[ord(str(task.window_sum(digits, i, l + 1))) for l in range(1, max_loops + 1)] for i in range(size)]
        t.append([ord("=")] * max_loops)
        t.append([ord(str(task.window_sum(digits, size - 1, l))) for l in range(1, max_loops + 1)])
        t.append([task.EOS] * max_loops)
        tgts.append(t)
    T = max(len(s) for s in seqs)
    ids = torch.full((n, T), task.EOS, dtype=torch.int64)
    tgt = torch.full((n, T, max_loops), -100, dtype=torch.int64)
    for i, (s, t) in enumerate(zip(seqs, tgts)):
        ids[i, :len(s)] = torch.tensor(s)
        tgt[i, :len(t)] = torch.tensor(t)
    return ids, sizes, tgt


def batch_loss(model, ids, sizes, tgt, run_loops, hop_weight, digit_weight):
    """Returns (loss, {l: answer-correct tensor [B]})."""
    B, T = ids.shape
    lens = model(ids, run_loops, lens_depths=set(range(1, run_loops + 1)))
    rows = torch.arange(B)
    size = torch.tensor(sizes)
    a = size + 1                                   # the position of `=`
    pos = torch.arange(T)[None, :]
    w = torch.where(pos < size[:, None], digit_weight, 0.2)      # digits; `?`, answer, padding
    w = w * (tgt[:, :, 0] >= 0)
    total, correct = 0.0, {}
    for l in range(1, run_loops + 1):
        z, t = lens[l], tgt[:, :, l - 1]
        ce = F.cross_entropy(z.reshape(B * T, -1), t.reshape(-1).clamp(min=0), reduction="none").view(B, T)
        wl = w.clone()
        wl[rows, a] = torch.where(size <= l, 1.0, hop_weight)
        total = total + (ce * wl).sum() / wl.sum()
        correct[l] = z[rows, a].argmax(-1) == t[rows, a]
    return total / run_loops, correct


@torch.no_grad()
def quick_eval(model, problems, depths):
    """Answer accuracy at `=` per depth over (prompt, answer, size) dicts (torch reference)."""
    model.eval()
    hits = {L: {} for L in depths}
    for p in problems:
        ids = torch.tensor([task.encode(p["prompt"] + "=")])
        lens = model(ids, max(depths), lens_depths=set(depths))
        for L in depths:
            ok = int(lens[L][0, -1].argmax()) == ord(p["answer"])
            h = hits[L].setdefault(p["size"], [0, 0])
            h[0] += ok
            h[1] += 1
    model.train()
    return {L: {s: round(v[0] / v[1], 3) for s, v in sorted(hits[L].items())} for L in depths}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --minutes)")
    ap.add_argument("--resume", action="store_true", help="continue from --out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--hop-weight", type=float, default=0.5)
    ap.add_argument("--digit-weight", type=float, default=1.0)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--default-loops", type=int, default=task.MAX_SIZE + 2)
    ap.add_argument("--max-loops", type=int, default=24)
    ap.add_argument("--extra-loops", type=int, default=4, help="run depth S+1..S+this")
    ap.add_argument("--start-size", type=int, default=2)
    ap.add_argument("--gate-acc", type=float, default=0.9)
    ap.add_argument("--gate-window", type=int, default=400)
    ap.add_argument("--init-seed", type=int, default=1337)
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(WORK, "ckpt.pt"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)

    exclude = {p["prompt"] for p in task.heldout_problems()}
    val = [{"prompt": p, "answer": a, "size": s} for p, a, s, _ in
           (task.make_problem(random.Random(999 + i), 1 + i % task.MAX_SIZE) for i in range(200))]
    val = [v for v in val if v["prompt"] not in exclude]
    if args.resume:
        ck = torch.load(args.out, map_location="cpu", weights_only=False)
        hp = HParams(**ck["hparams"])
        model = LoopedLM(hp)
        model.load_state_dict(ck["model"])
        saved = ck["train"]["args"]
        for k in ("minutes", "steps", "threads", "eval_every"):  # the budget may be extended
            saved[k] = getattr(args, k)
        args = argparse.Namespace(**{**saved, "resume": True, "out": args.out})
    else:
        hp = HParams(vocab_size=task.VOCAB, d_model=args.d_model, n_heads=args.n_heads,
                     n_kv_heads=args.n_heads, head_dim=args.d_model // args.n_heads, d_ff=args.d_ff,
                     n_pre_blocks=1, n_loop_layers=1, default_loops=args.default_loops,
                     max_loops=args.max_loops, max_seq_len=64, loop_input="add")
        model = LoopedLM(hp)
        model.reset_parameters(seed=args.init_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    rng = random.Random(args.data_seed)
    step, elapsed0, log = 0, 0.0, []
    cur = args.start_size
    recent = []  # (correct) of the last problems of size cur
    if args.resume:
        opt.load_state_dict(ck["optimizer"])
        rng.setstate(ck["data_rng"])
        step, elapsed0, log = ck["train"]["steps"], ck["train"]["seconds"], ck["train"]["log"]
        cur = ck["train"]["curriculum_size"]
        print(f"resumed at step {step}, {elapsed0 / 60:.1f} min", flush=True)
    budget = args.minutes * 60
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{RECIPE_VERSION}: {n_params} parameters, hparams {hp.to_json()}", flush=True)
    t0 = time.time() - elapsed0
    last_save = time.time()
    hits = {}
    model.train()
    while True:
        elapsed = time.time() - t0
        progress = step / args.steps if args.steps else elapsed / budget
        if progress >= 1:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, sizes, tgt = make_batch(rng, args.batch, exclude, cur, hp.max_loops)
        run_loops = min(hp.max_loops, rng.randint(cur + 1, cur + args.extra_loops))
        loss, correct = batch_loss(model, ids, sizes, tgt, run_loops, args.hop_weight, args.digit_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ok = correct[min(run_loops, hp.default_loops)]
        for s, o in zip(sizes, ok.tolist()):
            h = hits.setdefault(s, [0, 0])
            h[0] += o
            h[1] += 1
            if s == cur:
                recent.append(o)
        recent = recent[-args.gate_window:]
        if cur < task.MAX_SIZE and len(recent) == args.gate_window and sum(recent) >= args.gate_acc * len(recent):
            cur, recent = cur + 1, []
            log.append({"step": step, "minutes": round(elapsed / 60, 2), "curriculum_size": cur})
            print(f"curriculum: size {cur} from step {step}", flush=True)
        if step % 50 == 0:
            acc = {s: round(v[0] / v[1], 2) for s, v in sorted(hits.items())}
            print(f"step {step} {elapsed / 60:.1f}min S={cur} loss {loss.item():.4f} lr {lr:.2e} "
                  f"train acc by size {acc}", flush=True)
            hits = {}
        if step % args.eval_every == 0:
            ev = quick_eval(model, val, [1, 2, 4, 6, hp.default_loops])
            entry = {"step": step, "curriculum_size": cur, "minutes": round(elapsed / 60, 2), "loss": round(loss.item(), 4),
                     "val_acc": {str(L): v for L, v in ev.items()}}
            log.append(entry)
            print("eval", json.dumps(entry), flush=True)
        if time.time() - last_save > 120:
            save(model, opt, rng, args, step, time.time() - t0, log, args.out, cur)
            last_save = time.time()
    ev = quick_eval(model, val, list(range(1, hp.default_loops + 1)))
    log.append({"step": step, "minutes": round((time.time() - t0) / 60, 2), "final": True,
                "val_acc": {str(L): v for L, v in ev.items()}})
    print("final", json.dumps(log[-1]), flush=True)
    save(model, opt, rng, args, step, time.time() - t0, log, args.out, cur)


def save(model, opt, rng, args, step, seconds, log, path, cur):
    ck = {"hparams": model.hp.__dict__.copy(), "model": model.state_dict(), "optimizer": opt.state_dict(),
          "data_rng": rng.getstate(),
          "train": {"recipe": RECIPE_VERSION, "args": {k: v for k, v in vars(args).items() if k != "resume"},
                    "steps": step, "curriculum_size": cur, "seconds": round(seconds, 1), "log": log,
                    "torch": torch.__version__, "threads": torch.get_num_threads()}}
    tmp = path + ".tmp"
    torch.save(ck, tmp)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
