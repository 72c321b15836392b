#!/usr/bin/python3
"""Extract the King James Bible (public domain) from Debian's bible-kjv packages into plain text.

Why a chapter-interleaved split: holding out the last books would make the held-out text
(prophecy, epistles) stylistically unlike the training text, so every 20th chapter (~5 %) is held
out instead. The split depends only on the chapter order, so it is reproducible.

Output (under data/, not committed): train.txt, heldout.txt; plus the committed held-out sample
used by sluice's perplexity test (first chapters of heldout.txt, ~30 KB).

Format: one verse per line without its reference; chapters separated by a blank line.
Needs: apt-get install bible-kjv bible-kjv-text
"""
import argparse
import os
import re
import subprocess

HELDOUT_EVERY = 20  # chapter i (0-based, canonical order) is held out when i % 20 == 10
HELDOUT_PHASE = 10
REF_RE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def read_verses():
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    verses = []
    for line in out.splitlines():
        m = REF_RE.match(line)
        if not m:
            raise SystemExit(f"unexpected line from bible: {line!r}")
        verses.append((m.group(1), int(m.group(2)), m.group(4).strip()))
    return verses


def chapters(verses):
    chs, key = [], None
    for book, ch, text in verses:
        if (book, ch) != key:
            chs.append([])
            key = (book, ch)
        chs[-1].append(text)
    return ["\n".join(c) + "\n" for c in chs]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "data"))
    ap.add_argument("--sample", default=os.path.join(here, "..", "..", "tests", "data",
                                                     "heldout-kjv.txt"))
    ap.add_argument("--sample-bytes", type=int, default=30000)
    args = ap.parse_args()

    chs = chapters(read_verses())
    train = [c for i, c in enumerate(chs) if i % HELDOUT_EVERY != HELDOUT_PHASE]
    held = [c for i, c in enumerate(chs) if i % HELDOUT_EVERY == HELDOUT_PHASE]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train.txt"), "w") as f:
        f.write("\n".join(train))
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write("\n".join(held))
    # Whole chapters only, so the sample is a natural prefix of heldout.txt.
    sample = []
    while held and sum(len(c) + 1 for c in sample) + len(held[0]) <= args.sample_bytes:
        sample.append(held.pop(0))
    with open(args.sample, "w") as f:
        f.write("\n".join(sample))
    print(f"chapters: {len(chs)} total, {len(train)} train, {len(chs) - len(train)} held out; "
          f"sample {len(sample)} chapters")
    for name in ("train.txt", "heldout.txt"):
        print(name, os.path.getsize(os.path.join(args.out, name)), "bytes")
    print(os.path.normpath(args.sample), os.path.getsize(args.sample), "bytes")


if __name__ == "__main__":
    main()
