"""Byte-level BPE tokenizer shared by train_bpe.py, train.py, evaluate.py and export.py.

It must tokenize exactly like sluice (and llama.cpp) will for tokenizer.ggml.model = "gpt2",
tokenizer.ggml.pre = "qwen2", so pre-tokenization is llama.cpp's qwen2 regex itself, run by the
`regex` module (Debian's python3-regex: Python's re has no \\p{L} / \\p{N} classes).
"""
import json

import regex

EOT = "<|endoftext|>"

QWEN2_RE = regex.compile(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable-unicode-char table (token texts are stored this way)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_ENC = bytes_to_unicode()
BYTE_DEC = {c: b for b, c in BYTE_ENC.items()}


def pretokenize(text):
    return QWEN2_RE.findall(text)


def to_symbols(piece):
    return [BYTE_ENC[b] for b in piece.encode("utf-8")]


class Tokenizer:
    def __init__(self, tokens, merges):
        self.tokens = tokens
        self.merges = merges
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.eot_id = self.ids[EOT]
        self.cache_ = {}

    @staticmethod
    def load(path):
        with open(path) as f:
            d = json.load(f)
        return Tokenizer(d["tokens"], d["merges"])

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"tokens": self.tokens, "merges": self.merges}, f, ensure_ascii=False)

    def _bpe(self, piece):
        syms = to_symbols(piece)
        while len(syms) > 1:
            best, best_rank = None, None
            for a, b in zip(syms, syms[1:]):
                r = self.ranks.get((a, b))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = (a, b), r
            if best is None:
                break
            merged, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == best[0] and syms[k + 1] == best[1]:
                    merged.append(best[0] + best[1])
                    k += 2
                else:
                    merged.append(syms[k])
                    k += 1
            syms = merged
        return [self.ids[s] for s in syms]

    def encode(self, text):
        ids = []
        for piece in pretokenize(text):
            got = self.cache_.get(piece)
            if got is None:
                got = self._bpe(piece)
                self.cache_[piece] = got
            ids.extend(got)
        return ids

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t == EOT:
                data.extend(t.encode())
            else:
                data.extend(BYTE_DEC[c] for c in t)
        return data.decode("utf-8", errors="replace")
