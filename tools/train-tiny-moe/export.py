#!/usr/bin/python3
"""Export a train.py checkpoint to GGUF (qwen3moe layout) through `sluice pack-gguf`.

This script only lays out bytes: it writes OUT_DIR/tensors.bin (F32/F16 via numpy, Q8_0 blocks
quantized by ggml_formats) and OUT_DIR/manifest.json (metadata with real qwen3moe keys, tensor
table in GGML dim order), then runs the C++ packer, so the shipped file is written by sluice's own
gguf::Writer.

Types: expert and attention matrices Q8_0 (the bulk of the bytes), token embedding F16 (it is
also the tied output head, whose logits are most sensitive), router and norms F32.
"""
import argparse
import json
import os
import subprocess

import numpy as np
import torch

from ggml_formats import encode
from model import Config
from tokenizer import EOT, Tokenizer

LLAMA_FTYPE_MOSTLY_Q8_0 = 7
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3


def tensor_plan(sd, cfg):
    """[(gguf name, numpy float32 array in numpy order, ggml type)]"""
    def t(name):
        return sd[name].detach().float().numpy()

    plan = [("token_embd.weight", t("embd"), "F16"),
            ("output_norm.weight", t("output_norm"), "F32")]
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        b = f"blk.{i}."
        stack = lambda kind: np.stack([t(f"{p}moe.{kind}.{e}") for e in range(cfg.n_expert)])
        plan += [
            (b + "attn_norm.weight", t(p + "attn_norm"), "F32"),
            (b + "attn_q.weight", t(p + "attn.wq.weight"), "Q8_0"),
            (b + "attn_k.weight", t(p + "attn.wk.weight"), "Q8_0"),
            (b + "attn_v.weight", t(p + "attn.wv.weight"), "Q8_0"),
            (b + "attn_output.weight", t(p + "attn.wo.weight"), "Q8_0"),
            (b + "attn_q_norm.weight", t(p + "attn.q_norm"), "F32"),
            (b + "attn_k_norm.weight", t(p + "attn.k_norm"), "F32"),
            (b + "ffn_norm.weight", t(p + "ffn_norm"), "F32"),
            (b + "ffn_gate_inp.weight", t(p + "moe.router.weight"), "F32"),
            (b + "ffn_gate_exps.weight", stack("gate"), "Q8_0"),
            (b + "ffn_up_exps.weight", stack("up"), "Q8_0"),
            (b + "ffn_down_exps.weight", stack("down"), "Q8_0"),
        ]
    return plan


def metadata(cfg, tok, name):
    a = "qwen3moe."
    u32 = lambda k, v: {"key": k, "type": "uint32", "value": int(v)}
    f32 = lambda k, v: {"key": k, "type": "float32", "value": float(v)}
    s = lambda k, v: {"key": k, "type": "string", "value": v}
    types = [TOKEN_CONTROL if t == EOT else TOKEN_NORMAL for t in tok.tokens]
    return [
        s("general.architecture", "qwen3moe"),
        s("general.name", name),
        u32(a + "context_length", cfg.context_length),
        u32(a + "embedding_length", cfg.d_model),
        u32(a + "block_count", cfg.n_layer),
        # No dense FFN layers exist; the key is required by loaders, so it carries the expert size.
        u32(a + "feed_forward_length", cfg.expert_ff),
        u32(a + "expert_feed_forward_length", cfg.expert_ff),
        u32(a + "attention.head_count", cfg.n_head),
        u32(a + "attention.head_count_kv", cfg.n_head_kv),
        u32(a + "attention.key_length", cfg.head_dim),
        u32(a + "attention.value_length", cfg.head_dim),
        f32(a + "rope.freq_base", cfg.rope_base),
        f32(a + "attention.layer_norm_rms_epsilon", cfg.rms_eps),
        u32(a + "expert_count", cfg.n_expert),
        u32(a + "expert_used_count", cfg.n_expert_used),
        u32("general.file_type", LLAMA_FTYPE_MOSTLY_Q8_0),
        s("tokenizer.ggml.model", "gpt2"),
        s("tokenizer.ggml.pre", "qwen2"),
        {"key": "tokenizer.ggml.tokens", "type": "array", "elem_type": "string", "value": tok.tokens},
        {"key": "tokenizer.ggml.token_type", "type": "array", "elem_type": "int32", "value": types},
        {"key": "tokenizer.ggml.merges", "type": "array", "elem_type": "string", "value": tok.merges},
        u32("tokenizer.ggml.bos_token_id", tok.eot_id),
        u32("tokenizer.ggml.eos_token_id", tok.eot_id),
        {"key": "tokenizer.ggml.add_bos_token", "type": "bool", "value": False},
    ]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=os.path.join(here, "runs", "main", "model.pt"))
    ap.add_argument("--tokenizer", default=os.path.join(here, "data", "tokenizer.json"))
    ap.add_argument("--work", default=os.path.join(here, "runs", "export"))
    ap.add_argument("--out", default=os.path.join(root, "models", "sluice-tiny-moe.gguf"))
    ap.add_argument("--sluice", default=os.path.join(root, "build", "sluice"))
    ap.add_argument("--name", default="sluice-tiny-moe")
    args = ap.parse_args()

    ck = torch.load(args.checkpoint, map_location="cpu")
    cfg = Config(**ck["config"])
    # Declare the window length the model was trained on: RoPE positions past it were never seen.
    cfg.context_length = ck["args"]["seq"]
    tok = Tokenizer.load(args.tokenizer)
    os.makedirs(args.work, exist_ok=True)
    tensors, offset = [], 0
    with open(os.path.join(args.work, "tensors.bin"), "wb") as f:
        for name, x, ty in tensor_plan(ck["model"], cfg):
            raw = encode(x, ty)
            f.write(raw)
            tensors.append({"name": name, "type": ty, "dims": list(reversed(x.shape)),
                            "file": "tensors.bin", "offset": offset, "bytes": len(raw)})
            offset += len(raw)
    manifest = {"metadata": metadata(cfg, tok, args.name), "tensors": tensors}
    with open(os.path.join(args.work, "manifest.json"), "w") as f:
        json.dump(manifest, f, ensure_ascii=False)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    subprocess.run([args.sluice, "pack-gguf", os.path.join(args.work, "manifest.json"),
                    "-o", args.out, "--force"], check=True)
    print(f"{args.out}: {os.path.getsize(args.out):,} bytes (step {ck['step']})")


if __name__ == "__main__":
    main()
