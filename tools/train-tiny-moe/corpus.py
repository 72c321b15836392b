"""Token streams for training and evaluation, shared by train.py and train_mtp.py.

A data directory holds either one corpus (train.txt / heldout.txt: the tiny model's Bible) or a
mixed-domain one (prepare_corpus.py: {domain}.train.jsonl / {domain}.heldout.jsonl). Each becomes
one token stream per domain; in a mixed corpus every document ends with <|endoftext|>, as in
pretraining, so the model sees where topics change. Streams are cached as .ids.npy beside the
text (tokenizing 40 MB in Python takes minutes).

Training windows pick a domain uniformly and then a position in it, so the domains are seen
equally often whatever their sizes.
"""
import glob
import json
import os

import numpy as np
import torch


def load_streams(data_dir, split, tok):
    """-> {domain: int64 token ids} for split 'train' or 'heldout'."""
    plain = os.path.join(data_dir, split + ".txt")
    if os.path.exists(plain):
        return {"text": _cached(data_dir, split, lambda: tok.encode(_read(plain)))}
    streams = {}
    for path in sorted(glob.glob(os.path.join(data_dir, f"*.{split}.jsonl"))):
        domain = os.path.basename(path).split(".")[0]

        def encode(path=path):
            ids = []
            with open(path, encoding="utf-8") as f:
                for line in f:
                    ids += tok.encode(json.loads(line)["text"])
                    ids.append(tok.eot_id)
            return ids
        streams[domain] = _cached(data_dir, f"{domain}.{split}", encode)
    if not streams:
        raise SystemExit(f"{data_dir}: no {split}.txt and no *.{split}.jsonl")
    return streams


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _cached(data_dir, name, encode):
    cache = os.path.join(data_dir, name + ".ids.npy")
    if os.path.exists(cache):
        return np.load(cache)
    ids = np.array(encode(), dtype=np.int64)
    np.save(cache, ids)
    return ids


def sample_windows(streams, batch, length, gen):
    """batch windows of `length` tokens: a domain uniformly, then a uniform start in it."""
    if len(streams) == 1:  # one draw for the whole batch, as the tiny model was trained
        data = torch.from_numpy(next(iter(streams.values())))
        starts = torch.randint(0, len(data) - length, (batch,), generator=gen)
        return torch.stack([data[s:s + length] for s in starts.tolist()])
    names = sorted(streams)
    pick = torch.randint(0, len(names), (batch,), generator=gen).tolist()
    rows = []
    for k in pick:
        data = streams[names[k]]
        s = torch.randint(0, len(data) - length, (1,), generator=gen).item()
        rows.append(torch.from_numpy(data[s:s + length]))
    return torch.stack(rows)
