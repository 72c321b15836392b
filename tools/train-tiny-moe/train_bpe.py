#!/usr/bin/python3
"""Train our own byte-level BPE vocabulary on DATA/train.txt (the tiny model's corpus) or, for a
mixed-domain corpus (prepare_corpus.py), on an equal share of each domain's training documents:
a vocabulary learned from the largest domain alone would cut the others' words into more pieces.

Vocabulary layout: ids 0..255 are the single bytes (id == byte value, GPT-2 text form), then one
token per merge in merge order, then <|endoftext|> last (bos = eos). Merges never cross
pre-token boundaries, so sluice's qwen2 pre-tokenizer + rank-ordered merging reproduces
tokenizer.encode() exactly.

Training is incremental: pair counts are updated only for the words that contain the merged
pair, and the best pair comes from a lazily-invalidated heap, so ~4000 merges over the ~4 MB
corpus take well under a minute. Ties break on the lexicographically smaller pair, which makes
the result deterministic.
"""
import argparse
import collections
import glob
import heapq
import json
import os
import time

from tokenizer import BYTE_ENC, EOT, Tokenizer, pretokenize, to_symbols


def train(text, vocab_size):
    word_counts = collections.Counter(pretokenize(text))
    words = [to_symbols(w) for w in word_counts]
    freqs = list(word_counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for wi, syms in enumerate(words):
        for p in zip(syms, syms[1:]):
            pair_counts[p] += freqs[wi]
            where[p].add(wi)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    merges = []
    n_merges = vocab_size - 256 - 1
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue  # stale entry
        if -neg < 2:
            break
        merges.append(pair)
        new_sym = pair[0] + pair[1]
        touched = set()
        for wi in list(where.pop(pair, ())):
            syms, f = words[wi], freqs[wi]
            for p in zip(syms, syms[1:]):
                pair_counts[p] -= f
                touched.add(p)
            merged, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and syms[k] == pair[0] and syms[k + 1] == pair[1]:
                    merged.append(new_sym)
                    k += 2
                else:
                    merged.append(syms[k])
                    k += 1
            words[wi] = merged
            for p in zip(merged, merged[1:]):
                pair_counts[p] += f
                where[p].add(wi)
                touched.add(p)
        for p in touched:
            c = pair_counts[p]
            if c <= 0:
                del pair_counts[p]
            elif p != pair:
                heapq.heappush(heap, (-c, p))
        pair_counts.pop(pair, None)

    tokens = [BYTE_ENC[b] for b in range(256)] + [a + b for a, b in merges] + [EOT]
    if len(set(tokens)) != len(tokens):
        raise SystemExit("duplicate token text in vocabulary")
    return Tokenizer(tokens, [f"{a} {b}" for a, b in merges])


def training_text(data_dir, share_bytes):
    """train.txt whole, or up to share_bytes of each domain's documents, taken at an even stride
    through the domain so every source in it is represented."""
    plain = os.path.join(data_dir, "train.txt")
    if os.path.exists(plain):
        with open(plain) as f:
            return f.read()
    parts = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.train.jsonl"))):
        with open(path) as f:
            docs = [json.loads(line)["text"] for line in f]
        total = sum(len(d) for d in docs)
        stride = max(1, round(total / share_bytes))
        parts += docs[::stride]
    if not parts:
        raise SystemExit(f"{data_dir}: neither train.txt nor *.train.jsonl")
    return "\n".join(parts)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--share-bytes", type=int, default=4_000_000,
                    help="bytes of each domain to learn from (mixed-domain corpora)")
    args = ap.parse_args()
    text = training_text(args.data, args.share_bytes)
    t0 = time.time()
    tok = train(text, args.vocab_size)
    tok.save(os.path.join(args.data, "tokenizer.json"))
    ids = tok.encode(text)
    print(f"vocab {len(tok.tokens)} ({len(tok.merges)} merges) in {time.time() - t0:.1f}s; "
          f"training text = {len(ids)} tokens ({len(text.encode()) / len(ids):.2f} bytes/token)")
    if tok.decode(ids) != text:
        raise SystemExit("round trip failed")


if __name__ == "__main__":
    main()
