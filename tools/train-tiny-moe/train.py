#!/usr/bin/python3
"""Train the tiny qwen3moe on data/train.txt (one CPU thread, fixed seeds).

Batches are random windows of the token stream drawn from a seeded generator, so a run is
reproducible on the same torch build. The loss curve goes to OUT/loss.csv (train loss every
--log-every steps, held-out loss on a fixed prefix of heldout.txt every --eval-every steps) and
checkpoints to OUT/model.pt, rewritten at each eval so a run cut short still leaves a model.
"""
import argparse
import csv
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from model import Config, TinyMoE
from tokenizer import Tokenizer


def load_ids(data_dir, name, tok):
    cache = os.path.join(data_dir, name + ".ids.npy")
    if os.path.exists(cache):
        return np.load(cache)
    with open(os.path.join(data_dir, name + ".txt")) as f:
        ids = np.array(tok.encode(f.read()), dtype=np.int64)
    np.save(cache, ids)
    return ids


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
    ap.add_argument("--steps", type=int, default=3000, help="ignored when --time-budget is set")
    ap.add_argument("--time-budget", type=float, default=0.0, help="seconds of training")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--expert-ff", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    tok = Tokenizer.load(os.path.join(args.data, "tokenizer.json"))
    train_ids = load_ids(args.data, "train", tok)
    held_ids = load_ids(args.data, "heldout", tok)[:args.eval_tokens + 1]
    cfg = Config(vocab_size=len(tok.tokens), expert_ff=args.expert_ff, n_layer=args.n_layer,
                 context_length=args.seq)
    model = TinyMoE(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params:,}; train tokens {len(train_ids):,}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    data = torch.from_numpy(train_ids)

    def save(step, elapsed):
        torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step,
                    "elapsed_s": elapsed, "args": vars(args)}, os.path.join(args.out, "model.pt"))

    log = open(os.path.join(args.out, "loss.csv"), "w", newline="")
    w = csv.writer(log)
    w.writerow(["step", "tokens", "elapsed_s", "lr", "train_loss", "aux_loss", "heldout_loss"])
    t0 = time.time()
    run_loss, run_aux, run_n = 0.0, 0.0, 0
    step = 0
    while True:
        lr = lr_at(step, time.time() - t0, args)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=gen)
        win = torch.stack([data[s:s + args.seq + 1] for s in starts.tolist()])
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
            held = ""
            if (step + 1) % args.eval_every == 0 or last:
                held = f"{heldout_loss(model, held_ids, args.seq):.4f}"
                save(step + 1, time.time() - t0)
            el = time.time() - t0
            w.writerow([step + 1, (step + 1) * args.batch * args.seq, f"{el:.1f}", f"{lr:.6f}",
                        f"{run_loss / run_n:.4f}", f"{run_aux / run_n:.4f}", held])
            log.flush()
            print(f"step {step + 1} {el:.0f}s lr {lr:.5f} loss {run_loss / run_n:.4f} "
                  f"aux {run_aux / run_n:.3f} {'heldout ' + held if held else ''}", flush=True)
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
