"""The qwen3moe architecture in PyTorch, exactly as llama.cpp (and sluice) evaluate it, so that
exported weights mean the same thing on both sides:

  x = token_embd[ids]
  per layer:  h = rms_norm(x) * attn_norm
              q, k, v = h Wq, h Wk, h Wv           (GQA: n_head_kv < n_head)
              q, k = rms_norm per head * attn_q_norm / attn_k_norm   (size head_dim)
              q, k = NeoX RoPE (rotate halves: dim i pairs with i + head_dim/2)
              x += softmax(q k^T / sqrt(head_dim) + causal) v  Wo
              h = rms_norm(x) * ffn_norm
              p = softmax(h Wr) over all experts; top-k; weights renormalised to sum 1
              x += sum_k w_k * down_k(silu(gate_k h) * up_k h)
  logits = (rms_norm(x) * output_norm) token_embd^T        (tied output head)

Linear weights are [out, in] (numpy order of the GGUF tensors, GGML order reversed); each expert's
gate/up is [ff, d] and down [d, ff], stacked over experts on export.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    vocab_size: int = 4096
    n_layer: int = 6
    d_model: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_expert: int = 16
    n_expert_used: int = 2
    expert_ff: int = 128
    rope_base: float = 10000.0
    rms_eps: float = 1e-6
    context_length: int = 256

    def to_dict(self):
        return asdict(self)


# Shapes train.py can build. tiny: the shipped sluice-tiny-moe. moe128: sluice-moe-128, a
# fine-grained MoE shaped like Qwen3-30B-A3B's experts (128 routed, top-8, expert ff 0.375 of
# the width), chosen from measured training speed (models/README.md).
PRESETS = {
    "tiny": dict(vocab_size=4096, n_layer=6, d_model=256, n_head=4, n_head_kv=2, head_dim=64,
                 n_expert=16, n_expert_used=2, expert_ff=128, context_length=128),
    "moe128": dict(vocab_size=8192, n_layer=8, d_model=256, n_head=4, n_head_kv=2, head_dim=64,
                   n_expert=128, n_expert_used=8, expert_ff=96, context_length=512),
}


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_neox(x, pos, base):
    """x: [B, H, T, D]; pairs dim i with i + D/2, angle pos * base^(-2i/D)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float32) * 2.0 / d)
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.d_model, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.d_model, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(c.d_model, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.d_model, bias=False)
        self.q_norm = nn.Parameter(torch.ones(c.head_dim))
        self.k_norm = nn.Parameter(torch.ones(c.head_dim))

    def forward(self, x, mask):
        c = self.c
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, c.n_head, c.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        q = rms_norm(q, self.q_norm, c.rms_eps)
        k = rms_norm(k, self.k_norm, c.rms_eps)
        pos = torch.arange(t)
        q = rope_neox(q, pos, c.rope_base)
        k = rope_neox(k, pos, c.rope_base)
        rep = c.n_head // c.n_head_kv
        # Query head h reads KV head h // rep, as llama.cpp's broadcast does.
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim) + mask
        y = att.softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, c.n_head * c.head_dim))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.router = nn.Linear(c.d_model, c.n_expert, bias=False)
        # One Parameter per expert, not a stacked [E, ...] tensor: indexing a stacked parameter
        # makes autograd materialise a full-size zero gradient per expert per layer, which cost
        # more than the expert matmuls themselves. export.py stacks them into the GGUF layout.
        def experts(rows, cols):
            return nn.ParameterList(nn.Parameter(torch.randn(rows, cols) * 0.02)
                                    for _ in range(c.n_expert))
        self.gate = experts(c.expert_ff, c.d_model)
        self.up = experts(c.expert_ff, c.d_model)
        self.down = experts(c.d_model, c.expert_ff)

    def forward(self, x):
        """Returns (output, Switch-style load-balancing loss, per-expert token fraction).

        The token-expert pairs are sorted by expert once and split into one contiguous group per
        expert, so each expert costs three matmuls on a slice, with no per-expert search of the
        routing (with 128 experts per layer the searches cost more than the matmuls)."""
        c = self.c
        shape = x.shape
        x = x.reshape(-1, c.d_model)
        probs = self.router(x).softmax(-1)
        top_w, top_i = probs.topk(c.n_expert_used, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        flat_i = top_i.reshape(-1)
        order = flat_i.argsort()
        tok = order // c.n_expert_used  # the token of each sorted pair
        counts = torch.bincount(flat_i, minlength=c.n_expert)
        groups = x[tok].split(counts.tolist())
        ys = [(F.silu(h @ self.gate[e].t()) * (h @ self.up[e].t())) @ self.down[e].t()
              for e, h in enumerate(groups) if h.shape[0]]
        y = torch.cat(ys) * top_w.reshape(-1)[order, None]
        out = torch.zeros_like(x).index_add_(0, tok, y)
        frac = counts.float() / flat_i.numel()
        aux = c.n_expert * (frac * probs.mean(0)).sum()
        return out.view(shape), aux, frac


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(c.d_model))
        self.ffn_norm = nn.Parameter(torch.ones(c.d_model))
        self.attn = Attention(c)
        self.moe = MoE(c)

    def forward(self, x, mask):
        x = x + self.attn(rms_norm(x, self.attn_norm, self.c.rms_eps), mask)
        m, aux, frac = self.moe(rms_norm(x, self.ffn_norm, self.c.rms_eps))
        return x + m, aux, frac


class TinyMoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embd = nn.Parameter(torch.randn(c.vocab_size, c.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.output_norm = nn.Parameter(torch.ones(c.d_model))
        for name, p in self.named_parameters():
            if name.endswith(("wq.weight", "wk.weight", "wv.weight", "router.weight")):
                nn.init.normal_(p, std=0.02)
            elif name.endswith("wo.weight") or ".down." in name:
                # GPT-2 style: residual-branch outputs shrink with depth so the stream stays O(1).
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.n_layer))

    def hidden(self, ids):
        """ids [B, T] -> the output head's input rms_norm(x) * output_norm [B, T, d] (what an MTP
        block is handed), mean aux loss, [n_layer, n_expert] routing fractions."""
        t = ids.shape[1]
        mask = causal_mask(t)
        x = self.embd[ids]
        auxes, fracs = [], []
        for blk in self.blocks:
            x, aux, frac = blk(x, mask)
            auxes.append(aux)
            fracs.append(frac)
        return rms_norm(x, self.output_norm, self.c.rms_eps), torch.stack(auxes).mean(), torch.stack(fracs)

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, V], mean aux loss, [n_layer, n_expert] routing fractions."""
        h, aux, fracs = self.hidden(ids)
        return h @ self.embd.t(), aux, fracs


def causal_mask(t):
    return torch.full((t, t), float("-inf")).triu(1)


class MtpBlock(nn.Module):
    """A DeepSeek-V3-style multi-token-prediction block on the frozen model, as sluice runs it
    (Model::forward_mtp): row t sees the model's head input h_t and the embedding of token t+1,
        x = eh_proj([rms_norm(embd[t+1]) * enorm ; rms_norm(h_t) * hnorm])
        x = Block(x)                          (a qwen3moe layer with its own attention over rows)
        logits_t = (rms_norm(x) * shared_head_norm) embd^T    -> predicts token t+2
    The embedding and the tied head are the model's, so they are passed in, not owned."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.enorm = nn.Parameter(torch.ones(c.d_model))
        self.hnorm = nn.Parameter(torch.ones(c.d_model))
        self.eh_proj = nn.Linear(2 * c.d_model, c.d_model, bias=False)  # weight [d, 2d]
        self.block = Block(c)
        self.shared_head_norm = nn.Parameter(torch.ones(c.d_model))

    def forward(self, h, next_ids, embd):
        """h [B, T, d], next_ids [B, T] -> logits [B, T, V] (row t predicts token t+2), aux loss."""
        eps = self.c.rms_eps
        cat = torch.cat([rms_norm(embd[next_ids], self.enorm, eps), rms_norm(h, self.hnorm, eps)], -1)
        x, aux, _ = self.block(self.eh_proj(cat), causal_mask(h.shape[1]))
        return rms_norm(x, self.shared_head_norm, eps) @ embd.t(), aux
