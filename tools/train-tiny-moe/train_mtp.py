#!/usr/bin/python3
"""Train a multi-token-prediction (MTP) block for the shipped model and export it as a separate
GGUF, the way DeepSeek V4's converter ships its MTP block, for `sluice run --mtp FILE`.

The shipped model is read from its GGUF (weights dequantized as stored, evaluate.load_model) and
stays frozen: only the block learns, so the drafts it makes are for exactly the weights sluice
runs. Row t of a 128-token window gets the model's head input h_t and token t+1 and learns the
model's own distribution for token t+2 (model.MtpBlock; soft targets from the frozen model's
logits at t+1): a draft is verified against that distribution, not against the text, and on
held-out text this distillation agrees with the model's greedy choice far more often than
training on the text's tokens did. sluice chains further drafts from the block's own output,
which this single-step objective does not train.

The block starts from a copy of the model's last layer (a trained attention and expert set is a
better start than noise on a one-CPU budget); eh_proj starts as the identity on the hidden half.

Output: OUT/mtp.pt and, with --export, the GGUF (qwen3moe keys, block_count = n_layer + 1,
nextn_predict_layers = 1; tensors blk.{n_layer}.* and blk.{n_layer}.nextn.{eh_proj,enorm,hnorm,
shared_head_norm}; no embedding or head: the model's are shared) written by `sluice pack-gguf`.
"""
import argparse
import csv
import json
import os
import subprocess
import time

import numpy as np
import torch
import torch.nn.functional as F

from corpus import load_streams, sample_windows
from evaluate import load_model
from export import metadata
from ggml_formats import encode
from model import MtpBlock
from tokenizer import Tokenizer
from train import fast_cpu_setup, lr_at


@torch.no_grad()
def heldout_all(base, mtp, streams, seq):
    """heldout() per domain and their mean (the "mean" key): (CE, top-1, agreement)."""
    out = {name: heldout(base, mtp, ids, seq) for name, ids in sorted(streams.items())}
    out["mean"] = tuple(sum(v[i] for v in out.values()) / len(out) for i in range(3))
    return out


@torch.no_grad()
def heldout(base, mtp, ids, seq):
    """-> (mean CE of token t+2, top-1 accuracy against the text, agreement with the model's own
    greedy choice at t+2: the acceptance a greedy draft would get on this text)"""
    mtp.eval()
    n = (len(ids) - 2) // seq
    total, hit, agree, count = 0.0, 0, 0, 0
    for i in range(0, n, 16):
        rows = torch.stack([torch.from_numpy(ids[j * seq:j * seq + seq + 2])
                            for j in range(i, min(n, i + 16))])
        h, _, _ = base.hidden(rows[:, :seq + 1])
        logits, _ = mtp(h[:, :seq], rows[:, 1:seq + 1], base.embd)
        target = rows[:, 2:seq + 2]
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                 reduction="sum").item()
        pred = logits.argmax(-1)
        greedy = (h[:, 1:seq + 1] @ base.embd.t()).argmax(-1)  # the model's choice for t+2
        hit += (pred == target).sum().item()
        agree += (pred == greedy).sum().item()
        count += target.numel()
    mtp.train()
    return total / count, hit / count, agree / count


def tensor_plan(mtp, il, n_expert):
    def t(x):
        return x.detach().float().numpy()

    b = f"blk.{il}."
    blk = mtp.block
    stack = lambda kind: np.stack([t(getattr(blk.moe, kind)[e]) for e in range(n_expert)])
    return [
        (b + "attn_norm.weight", t(blk.attn_norm), "F32"),
        (b + "attn_q.weight", t(blk.attn.wq.weight), "Q8_0"),
        (b + "attn_k.weight", t(blk.attn.wk.weight), "Q8_0"),
        (b + "attn_v.weight", t(blk.attn.wv.weight), "Q8_0"),
        (b + "attn_output.weight", t(blk.attn.wo.weight), "Q8_0"),
        (b + "attn_q_norm.weight", t(blk.attn.q_norm), "F32"),
        (b + "attn_k_norm.weight", t(blk.attn.k_norm), "F32"),
        (b + "ffn_norm.weight", t(blk.ffn_norm), "F32"),
        (b + "ffn_gate_inp.weight", t(blk.moe.router.weight), "F32"),
        (b + "ffn_gate_exps.weight", stack("gate"), "Q8_0"),
        (b + "ffn_up_exps.weight", stack("up"), "Q8_0"),
        (b + "ffn_down_exps.weight", stack("down"), "Q8_0"),
        (b + "nextn.eh_proj.weight", t(mtp.eh_proj.weight), "Q8_0"),
        (b + "nextn.enorm.weight", t(mtp.enorm), "F32"),
        (b + "nextn.hnorm.weight", t(mtp.hnorm), "F32"),
        (b + "nextn.shared_head_norm.weight", t(mtp.shared_head_norm), "F32"),
    ]


def export_gguf(mtp, cfg, tok, args):
    # The model's keys without its tokenizer (the MTP file is never a model on its own), with the
    # block counted the way converters count nextn layers.
    meta = [m for m in metadata(cfg, tok, args.name) if not m["key"].startswith("tokenizer.")]
    for m in meta:
        if m["key"] == "qwen3moe.block_count":
            m["value"] = cfg.n_layer + 1
    meta.append({"key": "qwen3moe.nextn_predict_layers", "type": "uint32", "value": 1})
    tensors, offset = [], 0
    work = os.path.join(args.out, "export")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "tensors.bin"), "wb") as f:
        for name, x, ty in tensor_plan(mtp, cfg.n_layer, cfg.n_expert):
            raw = encode(x, ty)
            f.write(raw)
            tensors.append({"name": name, "type": ty, "dims": list(reversed(x.shape)),
                            "file": "tensors.bin", "offset": offset, "bytes": len(raw)})
            offset += len(raw)
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump({"metadata": meta, "tensors": tensors}, f, ensure_ascii=False)
    subprocess.run([args.sluice, "pack-gguf", os.path.join(work, "manifest.json"), "-o",
                    args.export, "--force"], check=True)
    print(f"{args.export}: {os.path.getsize(args.export):,} bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(root, "models", "sluice-tiny-moe.gguf"))
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--out", default=os.path.join(here, "runs", "mtp"))
    ap.add_argument("--export", default="", help="GGUF to write after training ('' to skip)")
    ap.add_argument("--sluice", default=os.path.join(root, "build", "sluice"))
    ap.add_argument("--name", default="sluice-tiny-moe-mtp")
    ap.add_argument("--time-budget", type=float, default=1200.0, help="seconds of training")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=0,
                    help="rows per window (+2 tokens read; default: the model's context - 2)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    fast_cpu_setup(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    base, _, cfg = load_model(args.model)
    for p in base.parameters():
        p.requires_grad_(False)
    tok = Tokenizer.load(os.path.join(args.data, "tokenizer.json"))
    train_streams = load_streams(args.data, "train", tok)
    held_streams = {k: v[:args.eval_tokens + 2]
                    for k, v in load_streams(args.data, "heldout", tok).items()}
    args.seq = args.seq or cfg.context_length - 2
    if args.seq + 2 > cfg.context_length + 1:
        raise SystemExit(f"--seq {args.seq}: the model saw at most {cfg.context_length} positions")

    mtp = MtpBlock(cfg)
    mtp.block.load_state_dict(base.blocks[-1].state_dict())
    with torch.no_grad():
        d = cfg.d_model
        mtp.eh_proj.weight.normal_(0.0, 0.02)
        mtp.eh_proj.weight[:, d:] += torch.eye(d)
        mtp.shared_head_norm.copy_(base.output_norm)
    decay = [p for p in mtp.parameters() if p.dim() >= 2]
    no_decay = [p for p in mtp.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    log = open(os.path.join(args.out, "loss.csv"), "w", newline="")
    w = csv.writer(log)
    w.writerow(["step", "elapsed_s", "lr", "train_soft_ce", "heldout_loss", "heldout_top1",
                "heldout_agree_greedy"])
    ce, top1, agree = heldout_all(base, mtp, held_streams, args.seq)["mean"]
    print(f"start: heldout {ce:.4f} top1 {top1:.3f} agrees with greedy {agree:.3f}", flush=True)
    t0, step, run_loss, run_n = time.time(), 0, 0.0, 0
    while True:
        lr = lr_at(step, time.time() - t0, args)
        for g in opt.param_groups:
            g["lr"] = lr
        win = sample_windows(train_streams, args.batch, args.seq + 2, gen)
        with torch.no_grad():
            h, _, _ = base.hidden(win[:, :args.seq + 1])
            # The model's own next-token distribution at t+1: what a draft is verified against.
            target = (h[:, 1:] @ base.embd.t()).softmax(-1)
        logits, aux = mtp(h[:, :args.seq], win[:, 1:args.seq + 1], base.embd)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               target.reshape(-1, target.shape[-1]))
        opt.zero_grad(set_to_none=True)
        (loss + args.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        run_n += 1
        step += 1
        last = time.time() - t0 >= args.time_budget
        if step % args.eval_every == 0 or last:
            per = heldout_all(base, mtp, held_streams, args.seq)
            ce, top1, agree = per["mean"]
            el = time.time() - t0
            w.writerow([step, f"{el:.1f}", f"{lr:.6f}", f"{run_loss / run_n:.4f}", f"{ce:.4f}",
                        f"{top1:.4f}", f"{agree:.4f}"])
            log.flush()
            print(f"step {step} {el:.0f}s lr {lr:.5f} loss {run_loss / run_n:.4f} heldout {ce:.4f} "
                  f"top1 {top1:.3f} agrees with greedy {agree:.3f}" +
                  "".join(f" {k} {v[2]:.3f}" for k, v in per.items() if k != "mean" and len(per) > 2),
                  flush=True)
            run_loss, run_n = 0.0, 0
            torch.save({"model": mtp.state_dict(), "step": step, "args": vars(args)},
                       os.path.join(args.out, "mtp.pt"))
        if last:
            break
    if args.export:
        export_gguf(mtp, cfg, tok, args)


if __name__ == "__main__":
    main()
