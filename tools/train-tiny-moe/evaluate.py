#!/usr/bin/python3
"""Held-out perplexity (and a text sample) of the exported GGUF, computed by PyTorch from the
weights as stored in the file (Q8_0/F16 dequantized), so `sluice perplexity` on the same file
must agree with it up to float accumulation order.

Protocol (sliding window; sluice's perplexity command implements the same):
  1. tokens = tokenize(whole file), no BOS and no special tokens; N tokens.
  2. Windows start at s = 0, stride, 2*stride, ...; window s holds tokens [s, min(s + ctx, N)),
     evaluated from an empty KV cache with positions 0..len-1.
  3. Window 0 scores every prediction it makes (tokens 1 .. min(ctx, N) - 1); a later window
     scores only the tokens at window positions >= ctx - stride (absolute s + ctx - stride ..).
  4. Stop after the first window with s + ctx >= N. Every token 1..N-1 is scored exactly once.
  5. perplexity = exp(mean over scored tokens of -ln softmax(logits)[target]).
Defaults: ctx = 128, stride = 64.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from ggml_formats import read_gguf
from model import Config, TinyMoE
from tokenizer import Tokenizer
from train import fast_cpu_setup


def load_model(path):
    meta, t = read_gguf(path)
    a = "qwen3moe."
    cfg = Config(vocab_size=len(meta["tokenizer.ggml.tokens"]), n_layer=meta[a + "block_count"],
                 d_model=meta[a + "embedding_length"], n_head=meta[a + "attention.head_count"],
                 n_head_kv=meta[a + "attention.head_count_kv"],
                 head_dim=meta[a + "attention.key_length"], n_expert=meta[a + "expert_count"],
                 n_expert_used=meta[a + "expert_used_count"],
                 expert_ff=meta[a + "expert_feed_forward_length"],
                 rope_base=meta[a + "rope.freq_base"],
                 rms_eps=meta[a + "attention.layer_norm_rms_epsilon"],
                 context_length=meta[a + "context_length"])
    sd = {"embd": t["token_embd.weight"], "output_norm": t["output_norm.weight"]}
    for i in range(cfg.n_layer):
        p, b = f"blocks.{i}.", f"blk.{i}."
        sd.update({p + "attn_norm": t[b + "attn_norm.weight"],
                   p + "attn.wq.weight": t[b + "attn_q.weight"],
                   p + "attn.wk.weight": t[b + "attn_k.weight"],
                   p + "attn.wv.weight": t[b + "attn_v.weight"],
                   p + "attn.wo.weight": t[b + "attn_output.weight"],
                   p + "attn.q_norm": t[b + "attn_q_norm.weight"],
                   p + "attn.k_norm": t[b + "attn_k_norm.weight"],
                   p + "ffn_norm": t[b + "ffn_norm.weight"],
                   p + "moe.router.weight": t[b + "ffn_gate_inp.weight"]})
        for kind, name in (("gate", "ffn_gate_exps"), ("up", "ffn_up_exps"), ("down", "ffn_down_exps")):
            for e in range(cfg.n_expert):
                sd[f"{p}moe.{kind}.{e}"] = t[f"{b}{name}.weight"][e]
    model = TinyMoE(cfg)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
    model.eval()
    tok = Tokenizer(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"])
    return model, tok, cfg


@torch.no_grad()
def sliding_nll(model, ids, ctx, stride):
    """-> (sum of NLL in nats, number of scored tokens, number of windows)"""
    n, total, count, windows, s = len(ids), 0.0, 0, 0, 0
    while True:
        win = torch.tensor(ids[s:s + ctx]).unsqueeze(0)
        logits, _, _ = model(win)
        logp = F.log_softmax(logits[0].double(), dim=-1)
        first = 1 if s == 0 else ctx - stride  # window position of the first scored target
        targets = win[0, first:]
        total -= logp[first - 1:win.shape[1] - 1].gather(1, targets[:, None]).sum().item()
        count += targets.numel()
        windows += 1
        if s + ctx >= n:
            return total, count, windows
        s += stride


@torch.no_grad()
def generate(model, tok, prompt, n_new, ctx, top_k=0, temperature=1.0, seed=0):
    ids = tok.encode(prompt)
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_new):
        logits, _, _ = model(torch.tensor(ids[-ctx:]).unsqueeze(0))
        last = logits[0, -1]
        if top_k == 0:
            nxt = int(last.argmax())
        else:
            v, i = (last / temperature).topk(top_k)
            nxt = int(i[torch.multinomial(v.softmax(-1), 1, generator=g)])
        if nxt == tok.eot_id:
            break
        ids.append(nxt)
    return tok.decode(ids)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(root, "models", "sluice-tiny-moe.gguf"))
    ap.add_argument("--text", nargs="+", default=[os.path.join(root, "tests", "data", "heldout-kjv.txt")],
                    help="held-out texts; with several, the JSON is a list of one result each")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--stride", type=int, default=64)
    ap.add_argument("--json", default=os.path.join(root, "models", "sluice-tiny-moe.eval.json"),
                    help="where to write the result ('' to skip)")
    ap.add_argument("--prompt", nargs="*", default=["In the beginning"], help="sample prompts")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    fast_cpu_setup(args.threads)

    model, tok, cfg = load_model(args.model)
    results = []
    for path in args.text:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        ids = tok.encode(text)
        nll, count, windows = sliding_nll(model, ids, args.ctx, args.stride)
        results.append({
            "model": os.path.relpath(args.model, root),
            "text": os.path.relpath(path, root),
            "text_bytes": len(text.encode()),
            "n_tokens": len(ids),
            "protocol": {"ctx": args.ctx, "stride": args.stride, "add_bos": False,
                         "first_window_scores_from": 1,
                         "later_windows_score_from_position": args.ctx - args.stride},
            "n_windows": windows,
            "n_scored": count,
            "mean_nll": nll / count,
            "perplexity": math.exp(nll / count),
            "computed_by": "tools/train-tiny-moe/evaluate.py (PyTorch float32, dequantized GGUF weights)",
        })
        print(json.dumps(results[-1], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results[0] if len(results) == 1 else results, f, indent=1)
            f.write("\n")
    for prompt in args.prompt:
        print(f"--- {prompt!r} greedy:")
        print(generate(model, tok, prompt, 48, args.ctx))
        print(f"--- {prompt!r} top-k 40, temperature 0.8, seed 0:")
        print(generate(model, tok, prompt, 48, args.ctx, top_k=40, temperature=0.8), flush=True)


if __name__ == "__main__":
    main()
