"""Byte-level BPE tokenizer shared by train_bpe.py, train.py, evaluate.py and export.py.

It must tokenize exactly like sluice (and llama.cpp) will for tokenizer.ggml.model = "gpt2",
tokenizer.ggml.pre = "qwen2", so the pre-tokenizer below is a hand-written matcher of the qwen2
regex

  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*
  |\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

(Python's re has no \\p{L}); each alternative is tried in order at each position, with the
backtracking the regex engine would do spelled out. Letters and numbers are Unicode categories L*
and N*, as in the regex.
"""
import json
import re
import unicodedata

EOT = "<|endoftext|>"


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


def _is_l(c):
    return unicodedata.category(c)[0] == "L"


def _is_n(c):
    return unicodedata.category(c)[0] == "N"


def _is_s(c):
    return c.isspace()


def _is_p(c):
    """[^\\s\\p{L}\\p{N}]"""
    return not (c.isspace() or _is_l(c) or _is_n(c))


_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def pretokenize(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        end = None
        # 1. contractions
        if c == "'":
            for suf in _CONTRACTIONS:
                if text[i + 1:i + 1 + len(suf)].lower() == suf:
                    end = i + 1 + len(suf)
                    break
        # 2. [^\r\n\p{L}\p{N}]?\p{L}+
        if end is None:
            j = i
            if not _is_l(c) and c not in "\r\n" and not _is_n(c) and i + 1 < n and _is_l(text[i + 1]):
                j = i + 1
            if _is_l(text[j]):
                while j < n and _is_l(text[j]):
                    j += 1
                end = j
        # 3. \p{N}
        if end is None and _is_n(c):
            end = i + 1
        # 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
        if end is None:
            j = i + 1 if c == " " and i + 1 < n and _is_p(text[i + 1]) else i
            if _is_p(text[j]):
                while j < n and _is_p(text[j]):
                    j += 1
                while j < n and text[j] in "\r\n":
                    j += 1
                end = j
        if end is None and _is_s(c):
            run = i
            while run < n and _is_s(text[run]):
                run += 1
            # 5. \s*[\r\n]+ : greedy \s* backs off to the last newline of the whitespace run
            last_nl = max((k for k in range(i, run) if text[k] in "\r\n"), default=None)
            if last_nl is not None:
                end = last_nl + 1
            # 6. \s+(?!\S) : the whole run at the end of text, else the run minus its last char
            elif run == n:
                end = run
            elif run - i >= 2:
                end = run - 1
            # 7. \s+
            else:
                end = run
        if end is None:
            raise AssertionError(f"pretokenize: no alternative matched at {i}: {text[i:i+10]!r}")
        out.append(text[i:end])
        i = end
    return out


# The qwen2 regex with \p{L} and \p{N} narrowed to ASCII: equivalent to pretokenize() on ASCII
# text, which lets train_bpe.py cross-check the hand-written matcher on the whole corpus.
ASCII_QWEN2_RE = re.compile(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


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
