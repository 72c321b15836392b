#!/usr/bin/python3
"""Training speed of candidate MoE shapes, measured before choosing sluice-moe-128's: tokens per
second of a full training step (forward, backward, AdamW) on random tokens, batches of 8 windows
of 512, after two warm-up steps, with train.py's CPU set-up (tcmalloc, flushed denormals).

Candidates (vocabulary 8192, 8 layers, 4 query heads of 64, 2 KV heads):
  A  d 256, 128 experts top-8, expert ff 96   (Qwen3-30B-A3B's expert shape, scaled: the chosen one)
  B  d 192, 128 experts top-8, expert ff 64
  C  d 256,  64 experts top-8, expert ff 128  (OLMoE-like: fewer, wider experts)
  D  d 256, 128 experts top-4, expert ff 128
"""
import argparse
import time

import torch
import torch.nn.functional as F

from model import PRESETS, Config, TinyMoE
from train import fast_cpu_setup

BASE = dict(vocab_size=8192, n_layer=8, n_head=4, n_head_kv=2, head_dim=64, context_length=512)
SHAPES = {
    "A": dict(BASE, d_model=256, n_expert=128, n_expert_used=8, expert_ff=96),
    "B": dict(BASE, d_model=192, n_head=3, n_head_kv=1, n_expert=128, n_expert_used=8, expert_ff=64),
    "C": dict(BASE, d_model=256, n_expert=64, n_expert_used=8, expert_ff=128),
    "D": dict(BASE, d_model=256, n_expert=128, n_expert_used=4, expert_ff=128),
}
assert SHAPES["A"] == PRESETS["moe128"], "candidate A is the moe128 preset"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="A,B,C,D")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    fast_cpu_setup(args.threads)
    torch.manual_seed(0)
    batch, seq = 8, 512
    for name in args.shapes.split(","):
        cfg = Config(**SHAPES[name])
        model = TinyMoE(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            x = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
            logits, aux, _ = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            (loss + 0.01 * aux).backward()
            opt.step()

        step()
        step()
        t0 = time.time()
        for _ in range(args.steps):
            step()
        dt = (time.time() - t0) / args.steps
        params = sum(p.numel() for p in model.parameters())
        print(f"{name}: {params / 1e6:.1f} M parameters, {dt:.2f} s a step, "
              f"{batch * seq / dt:.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
