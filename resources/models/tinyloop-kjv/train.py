#!/usr/bin/env python3
"""Train tinyloop-kjv: a weight-shared looped transformer (FORMAT.md section 1), recipe v3.

Loop depth L is sampled per batch (--min-train-loops .. --max-train-loops, default 2..6) and
the loss is taken at several depths through the logit lens (final norm + tied head on h_l):
weight 1 at l=L, and --aux-weight (default 0.25) at l=1 and at one depth in between, so every
pass is a usable readout while the model is trained to use its loops (recipe v1 trained L=1
as an endpoint and weighted the shallow readouts 0.5: its passes after the first barely
mattered, 0.03 nats).  --synth-frac (25%) of sequences are synthetic depth tasks (synth.py):
composition of fixed permutations ("#7:1321=") with a curriculum gated on being solved (the
longest composition k starts at 1 and rises by one each time the running training accuracy on
it reaches --gate-acc at a depth that can hold it, or after --gate-max-steps steps at it, up to
--perm-max-k), and reversed addition;
answer tokens get an extra averaged loss term (--answer-weight) so they are not drowned by
unpredictable tokens.  (Recipe v2 trained variable chains and parity instead: both stayed at
chance at every depth, the associative-recall plateau the issue warned of.)
Training stops after --minutes of wall clock (or after --steps if given); the LR schedule
follows progress = elapsed/budget (or step/steps with --steps, which makes a run reproducible
step for step on any machine with the same thread count).
--resume continues from --out (model, optimizer, batch RNG, curriculum, step, tokens, elapsed time
and log) to the budget given on the command line (--minutes or --steps); the shape and objective
come from the checkpoint.  A checkpoint is written at every evaluation and every
--save-minutes of wall clock.
Seeds: torch 1337 (init), python random 1337 (batches), synthetic eval sets seed 2026.
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # the 2 cores are shared: don't spin
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
from model import HParams, LoopedLM  # noqa: E402

RECIPE_VERSION = "tinyloop-kjv recipe v4"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=80.0, help="wall-clock training budget")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides the time budget)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--synth-frac", type=float, default=0.25)
    ap.add_argument("--answer-weight", type=float, default=1.0)
    ap.add_argument("--perm-max-k", type=int, default=8, help="longest composition the curriculum reaches")
    ap.add_argument("--gate-acc", type=float, default=0.8,
                    help="running training accuracy on the longest composition that raises it by one")
    ap.add_argument("--gate-max-steps", type=int, default=1200,
                    help="steps after which the longest composition rises even if not yet solved")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=704)
    ap.add_argument("--n-pre-blocks", type=int, default=1)
    ap.add_argument("--n-loop-layers", type=int, default=1)
    ap.add_argument("--default-loops", type=int, default=4)
    ap.add_argument("--max-loops", type=int, default=16)
    ap.add_argument("--max-train-loops", type=int, default=6)
    ap.add_argument("--min-train-loops", type=int, default=2)
    ap.add_argument("--loop-input", choices=["none", "add"], default="none",
                    help="FORMAT.md section 1a: \"add\" adds the prelude output back before every pass after "
                         "the first (file version 2); \"none\" (default, recipe v3) does not")
    ap.add_argument("--aux-weight", type=float, default=0.25,
                    help="weight of the lens losses at l=1 and at one depth in between (1 at l=L)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(common.WORK, "ckpt.pt"))
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--save-minutes", type=float, default=5.0, help="checkpoint period for --resume")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint at --out")
    args = ap.parse_args()
    ck = None
    if args.resume:
        ck = torch.load(args.out, map_location="cpu", weights_only=False)
        if "optimizer" not in ck:
            raise SystemExit(f"--resume: {args.out} has no optimizer state (written before --resume existed)")
        saved = dict(ck["train"]["args"])
        for k in ("minutes", "steps", "threads", "eval_every", "save_minutes", "out"):  # budget may change
            saved[k] = getattr(args, k)
        args = argparse.Namespace(**{**vars(args), **saved, "resume": True})

    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    tok = common.load_tokenizer()
    hp = HParams(vocab_size=tok.n_ids, d_model=args.d_model, n_heads=args.n_heads,
                 n_kv_heads=args.n_kv_heads, head_dim=args.d_model // args.n_heads,
                 d_ff=args.d_ff, n_pre_blocks=args.n_pre_blocks, n_loop_layers=args.n_loop_layers,
                 default_loops=args.default_loops, max_loops=args.max_loops, max_seq_len=512,
                 loop_input=args.loop_input)
    t_enc = time.time()
    train_ids = common.encode_docs(tok, os.path.join(common.WORK, "corpus", "train.txt"))
    val_ids = common.encode_docs(tok, os.path.join(common.WORK, "corpus", "val.txt"))
    print(f"train tokens {len(train_ids)}  val tokens {len(val_ids)}  (encoded in {time.time()-t_enc:.1f}s)",
          flush=True)
    val_w = common.val_windows(val_ids, args.seq, 48)

    model = LoopedLM(hp)
    model.reset_parameters(seed=args.seed)
    if ck is not None:
        model.load_state_dict(ck["model"])
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params}  hparams {hp.to_json()}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    budget = args.minutes * 60.0
    T, B = args.seq, args.batch
    t0 = time.time()
    total_steps = args.steps or None
    step = 0
    tokens_seen = 0
    synth_tokens = 0
    log = []
    depth_choices = list(range(args.min_train_loops, args.max_train_loops + 1))
    frontier, frontier_ema, frontier_since = 1, 0.0, 0  # perm curriculum: longest k trained now
    frontier_step = 0  # step at which the current frontier started
    curriculum = [{"step": 0, "k": 1}]
    if ck is not None:
        opt.load_state_dict(ck["optimizer"])
        st = ck["resume_state"]
        rng.setstate(st["rng"])
        step, tokens_seen, synth_tokens, log = st["step"], st["tokens"], st["synth_tokens"], ck["train"]["log"]
        frontier, frontier_ema, frontier_since, frontier_step = st["frontier"]
        curriculum = ck["train"]["curriculum"]
        t0 = time.time() - st["seconds"]
        print(f"resumed at step {step} ({tokens_seen} tokens, {st['seconds'] / 60:.1f} min)", flush=True)

    def checkpoint():
        save(model, hp, args, step, tokens_seen, synth_tokens, t0, log, n_params, args.out, curriculum,
             opt=opt, resume_state={"rng": rng.getstate(), "step": step, "tokens": tokens_seen,
                                    "synth_tokens": synth_tokens, "seconds": time.time() - t0,
                                    "frontier": [frontier, frontier_ema, frontier_since, frontier_step]})
    last_save = time.time()

    def progress():
        if total_steps:
            return min(1.0, step / total_steps)
        return min(1.0, (time.time() - t0) / budget)

    def lr_at(p):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        if p < 0.6:
            return args.lr
        q = (p - 0.6) / 0.4
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * q)))

    last_print = time.time()
    while True:
        p = progress()
        if p >= 1.0 or (total_steps and step >= total_steps):
            break
        seqs, masks, kinds = [], [], []
        for _ in range(B):
            if rng.random() < args.synth_frac:
                s_ids, s_mask, s_kind = common.synth_sequence(tok, rng, T, frontier)
                seqs.append(s_ids)
                masks.append(s_mask)
                kinds.append(s_kind)
                synth_tokens += T
            else:
                i = rng.randrange(0, len(train_ids) - T - 1)
                seqs.append(train_ids[i:i + T + 1])
                masks.append(torch.zeros(T + 1))
                kinds.append(torch.full((T + 1,), -1, dtype=torch.int64))
        x = torch.stack(seqs).to(device)
        amask = torch.stack(masks)[:, 1:].reshape(-1).to(device)
        kind = torch.stack(kinds)[:, 1:].reshape(-1).to(device)
        L = rng.choice(depth_choices)
        lens = {1, L}
        if L > 2:
            lens.add(rng.randint(2, L - 1))
        for g in opt.param_groups:
            g["lr"] = lr_at(p)
        model.train()
        outs = model(x[:, :-1], L, lens_depths=lens)
        tgt = x[:, 1:].reshape(-1)
        wsum, loss = 0.0, 0.0
        n_ans = amask.sum()
        for l, lo in outs.items():
            w = 1.0 if l == L else args.aux_weight
            ce = F.cross_entropy(lo.reshape(-1, lo.shape[-1]), tgt, reduction="none")
            term = ce.mean()
            if n_ans > 0:  # answer tokens of the synthetic tasks get an extra, averaged term
                term = term + args.answer_weight * (ce * amask).sum() / n_ans
            loss = loss + w * term
            wsum += w
        loss = loss / wsum
        # Curriculum gate: accuracy on the frontier's answers at this depth, when the depth can
        # hold the composition (L >= k, capped at the deepest trained L).
        at_front = kind == frontier
        if frontier < args.perm_max_k and L >= min(frontier, args.max_train_loops) and bool(at_front.any()):
            with torch.no_grad():
                pred = outs[L].reshape(-1, outs[L].shape[-1]).argmax(-1)
                acc_f = float((pred[at_front] == tgt[at_front]).float().mean())
            frontier_ema = 0.9 * frontier_ema + 0.1 * acc_f
            frontier_since += 1
            solved = frontier_ema >= args.gate_acc and frontier_since >= 20
            if solved or step + 1 - frontier_step >= args.gate_max_steps:
                curriculum.append({"step": step + 1, "k": frontier + 1, "solved": solved,
                                   "acc": round(frontier_ema, 3)})
                frontier, frontier_ema, frontier_since, frontier_step = frontier + 1, 0.0, 0, step + 1
                print(f"curriculum: perm k <= {frontier} from step {step + 1} "
                      f"({'solved' if solved else 'not solved after --gate-max-steps'}: acc {curriculum[-1]['acc']})",
                      flush=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += B * T
        if time.time() - last_print > 30 or step == 1:
            el = time.time() - t0
            print(f"step {step}/{total_steps} L={L} loss {loss.item():.3f} gn {gn:.2f} lr {lr_at(p):.2e} "
                  f"perm k<= {frontier} (acc {frontier_ema:.2f}) tok/s {tokens_seen/el:.0f} elapsed {el/60:.1f}m "
                  f"left {max(0, budget-el)/60:.1f}m", flush=True)
            last_print = time.time()
        if step % args.eval_every == 0:
            vl = common.prose_loss_per_depth(model, val_w[:16], [1, 2, hp.default_loops])
            acc = common.task_accuracy_depths(model, tok, [1, 2, hp.default_loops, args.max_train_loops], 100,
                                              tasks=["perm_k2", "perm_k4", "perm_k6"])
            rec = {"step": step, "tokens": tokens_seen, "minutes": (time.time() - t0) / 60,
                   "val": vl, "acc_by_depth": acc, "perm_frontier": frontier}
            log.append(rec)
            print("EVAL", json.dumps(rec), flush=True)
            checkpoint()
            last_save = time.time()
        elif time.time() - last_save > args.save_minutes * 60:
            checkpoint()
            last_save = time.time()
    checkpoint()
    print(f"done: {step} steps, {tokens_seen} tokens in {(time.time()-t0)/60:.1f} min", flush=True)


def save(model, hp, args, step, tokens, synth_tokens, t0, log, n_params, path, curriculum,
         opt=None, resume_state=None):
    ck = {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
          "hparams": hp.to_json(),
          "optimizer": opt.state_dict() if opt is not None else None,
          "resume_state": resume_state,
          "train": {"recipe": RECIPE_VERSION, "args": {k: v for k, v in vars(args).items() if k != "resume"},
                    "steps": step,
                    "tokens": tokens, "synthetic_tokens": synth_tokens,
                    "minutes": (time.time() - t0) / 60, "params": n_params,
                    "torch": str(torch.__version__), "threads": args.threads,
                    "seeds": {"torch_init": args.seed, "python_batches": args.seed,
                              "eval_sets": 2026},
                    "curriculum": curriculum, "log": log}}
    tmp = path + ".tmp"
    torch.save(ck, tmp)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
