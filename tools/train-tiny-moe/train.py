#!/usr/bin/python3
"""Train a qwen3moe of a preset shape (model.PRESETS) on a data directory (one CPU thread, fixed
seeds): the tiny model on data/train.txt, sluice-moe-128 on the mixed corpus of data/moe128.

Batches are random windows of the token streams (corpus.py) drawn from a seeded generator, so a
run is reproducible on the same torch build. The loss curve goes to OUT/loss.csv (train loss every
--log-every steps; every --eval-every steps the held-out loss on a fixed prefix of each domain's
held-out stream, and their mean) and checkpoints to OUT/model.pt, rewritten at each eval so a run
cut short still leaves a model.
"""
import argparse
import csv
import json
import math
import os
import time

import sys

import numpy as np
import torch
import torch.nn.functional as F

from corpus import load_streams, sample_windows
from model import PRESETS, Config, TinyMoE
from tokenizer import Tokenizer

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


def fast_cpu_setup(threads):
    """Re-executes under tcmalloc (Debian's libtcmalloc-minimal4) when it is installed, and
    flushes denormals. Why: glibc returns each freed multi-megabyte activation to the kernel and
    the next one faults its pages in again, which on this VM made training 3x slower (measured on
    sluice-moe-128's shape: 17.8 -> 5.4 s a step); tcmalloc keeps the memory. The preload must
    be in place before the interpreter starts, hence the exec."""
    if os.path.exists(TCMALLOC) and TCMALLOC not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=TCMALLOC, OPENBLAS_NUM_THREADS=str(threads))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


def progress(step, elapsed, args):
    """Fraction of the run done: by wall-clock when --time-budget is set (the machine is shared,
    so a step count cannot be planned), else by steps."""
    if args.time_budget:
        return elapsed / args.time_budget
    return step / args.steps


def lr_at(step, elapsed, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, progress(step, elapsed, args))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def heldout_losses(model, streams, seq):
    """{domain: mean NLL of its held-out prefix}, plus "mean" over the domains."""
    out = {name: heldout_loss(model, ids, seq) for name, ids in sorted(streams.items())}
    out["mean"] = sum(out.values()) / len(out)
    return out


@torch.no_grad()
def heldout_loss(model, ids, seq):
    model.eval()
    n = (len(ids) - 1) // seq
    x = torch.from_numpy(ids[:n * seq].reshape(n, seq))
    y = torch.from_numpy(ids[1:n * seq + 1].reshape(n, seq))
    total = 0.0
    for i in range(0, n, 16):
        logits, _, _ = model(x[i:i + 16])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[i:i + 16].reshape(-1),
                                 reduction="sum").item()
    model.train()
    return total / (n * seq)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--out", default=os.path.join(here, "runs", "main"))
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=3000, help="ignored when --time-budget is set")
    ap.add_argument("--time-budget", type=float, default=0.0, help="seconds of training")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=0, help="window length (default: the preset's context)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", default="", help="start from this checkpoint's weights (fresh optimizer)")
    args = ap.parse_args()

    fast_cpu_setup(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    tok = Tokenizer.load(os.path.join(args.data, "tokenizer.json"))
    cfg = Config(**PRESETS[args.preset])
    if len(tok.tokens) != cfg.vocab_size:
        raise SystemExit(f"tokenizer has {len(tok.tokens)} tokens, preset {args.preset} wants "
                         f"{cfg.vocab_size}")
    args.seq = args.seq or cfg.context_length
    cfg.context_length = args.seq
    train_streams = load_streams(args.data, "train", tok)
    held_streams = {k: v[:args.eval_tokens + 1]
                    for k, v in load_streams(args.data, "heldout", tok).items()}
    model = TinyMoE(cfg)
    if args.init:
        model.load_state_dict(torch.load(args.init, map_location="cpu")["model"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params:,}; train tokens " +
          ", ".join(f"{k} {len(v):,}" for k, v in sorted(train_streams.items())), flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)

    def save(step, elapsed):
        torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step,
                    "elapsed_s": elapsed, "args": vars(args)}, os.path.join(args.out, "model.pt"))

    log = open(os.path.join(args.out, "loss.csv"), "w", newline="")
    w = csv.writer(log)
    held_cols = sorted(held_streams) if len(held_streams) > 1 else []
    w.writerow(["step", "tokens", "elapsed_s", "lr", "train_loss", "aux_loss", "heldout_loss"]
               + [f"heldout_{k}" for k in held_cols])
    t0 = time.time()
    run_loss, run_aux, run_n = 0.0, 0.0, 0
    step = 0
    while True:
        lr = lr_at(step, time.time() - t0, args)
        for g in opt.param_groups:
            g["lr"] = lr
        win = sample_windows(train_streams, args.batch, args.seq + 1, gen)
        logits, aux, _ = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + args.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        run_aux += aux.item()
        run_n += 1
        last = progress(step + 1, time.time() - t0, args) >= 1.0
        if (step + 1) % args.log_every == 0 or last:
            held, per_domain = "", [""] * len(held_cols)
            if (step + 1) % args.eval_every == 0 or last:
                losses = heldout_losses(model, held_streams, args.seq)
                held = f"{losses['mean']:.4f}"
                per_domain = [f"{losses[k]:.4f}" for k in held_cols]
                save(step + 1, time.time() - t0)
            el = time.time() - t0
            w.writerow([step + 1, (step + 1) * args.batch * args.seq, f"{el:.1f}", f"{lr:.6f}",
                        f"{run_loss / run_n:.4f}", f"{run_aux / run_n:.4f}", held] + per_domain)
            log.flush()
            print(f"step {step + 1} {el:.0f}s lr {lr:.5f} loss {run_loss / run_n:.4f} "
                  f"aux {run_aux / run_n:.3f} {'heldout ' + held if held else ''} "
                  f"{' '.join(held_cols) + ' ' + ' '.join(per_domain) if held and held_cols else ''}",
                  flush=True)
            run_loss, run_aux, run_n = 0.0, 0.0, 0
        step += 1
        if last:
            break
    with open(os.path.join(args.out, "train_summary.json"), "w") as f:
        json.dump({"params": n_params, "steps": step, "tokens": step * args.batch * args.seq,
                   "elapsed_s": time.time() - t0,
                   "args": vars(args), "config": cfg.to_dict()}, f, indent=1)


if __name__ == "__main__":
    main()
