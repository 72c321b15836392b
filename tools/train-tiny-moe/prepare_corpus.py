#!/usr/bin/python3
"""The mixed-domain corpus of sluice-moe-128, extracted from Debian packages only.

Routing in a real MoE depends on the topic, so the corpus mixes three domains that a router can
tell apart, each from the files of named Debian packages (so the same package versions give the
same bytes):

  prose  English prose: the King James Bible (bible-kjv-text, one chapter a document, as
         prepare_data.py reads it) and Ambrose Bierce's The Devil's Dictionary (dict-devil, one
         entry a document). Both are in the public domain.
  tech   Technical English: the Linux man-pages (manpages, manpages-dev) rendered to plain ASCII
         by groff, and the Python 3.11 documentation's reStructuredText sources (python3.11-doc).
  code   Source code: the Python standard library (libpython3.11-minimal, libpython3.11-stdlib,
         without its test suites) and the C headers of libc6-dev and linux-libc-dev.

Documents are taken in sorted order per source; document i of a source is held out when
i % 20 == 10, so every domain and every source has a held-out part spread over the whole
source. Output under OUT (not committed):

  {domain}.train.jsonl, {domain}.heldout.jsonl   one {"source", "name", "text"} per line
  {domain}.heldout.txt                           held-out documents joined by a blank line
  sources.json                                   package versions, counts, bytes and sha256s

and the committed held-out samples tests/data/heldout-{domain}.txt (the starts of four held-out
documents spread over the split, cut at line ends, about 10 KB) that sluice's perplexity tests
read.

Needs: apt-get install bible-kjv bible-kjv-text dict-devil manpages manpages-dev python3.11-doc
       libc6-dev linux-libc-dev groff-base bsdextrautils
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess

from prepare_data import chapters, read_verses

HELDOUT_EVERY = 20
HELDOUT_PHASE = 10
SAMPLE_DOCS = 4
DOMAINS = ("prose", "tech", "code")
PACKAGES = ("bible-kjv-text", "dict-devil", "manpages", "manpages-dev", "python3.11-doc",
            "libpython3.11-minimal", "libpython3.11-stdlib", "libc6-dev", "linux-libc-dev",
            "groff-base")
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def package_files(pkg, pattern):
    out = subprocess.run(["dpkg", "-L", pkg], check=True, capture_output=True, text=True).stdout
    rx = re.compile(pattern)
    return sorted(p for p in out.splitlines() if rx.search(p) and os.path.isfile(p)
                  and not os.path.islink(p))


def package_version(pkg):
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                          capture_output=True, text=True).stdout


def tidy(text):
    """Unix newlines, no trailing spaces, at most one blank line in a row, one final newline."""
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    return text.strip("\n") + "\n"


def kjv():
    return [("kjv", f"chapter-{i:04d}", c) for i, c in enumerate(chapters(read_verses()))]


def devil():
    """One document per dictionary entry, located through the dictd index (base64 offsets)."""
    def b64(s):
        v = 0
        for ch in s:
            v = v * 64 + B64.index(ch)
        return v

    with gzip.open("/usr/share/dictd/devil.dict.dz", "rb") as f:  # dictzip is gzip-compatible
        data = f.read()
    docs = []
    with open("/usr/share/dictd/devil.index", encoding="utf-8") as f:
        for line in f:
            word, off, size = line.rstrip("\n").split("\t")
            if word.startswith("00database"):
                continue
            text = data[b64(off):b64(off) + b64(size)].decode("utf-8")
            docs.append((b64(off), word, text))
    docs.sort()
    return [("devil", word, tidy(text)) for _, word, text in docs]


def man_pages():
    docs = []
    for pkg in ("manpages", "manpages-dev"):
        for path in package_files(pkg, r"/man/man\d/[^/]+\.gz$"):
            with gzip.open(path, "rb") as f:
                src = f.read()
            if src.startswith(b".so "):
                continue  # an alias of another page
            # Left-aligned, unhyphenated: no padding spaces, words stay whole, as people type.
            out = subprocess.run(["groff", "-t", "-man", "-Tascii", "-P-cbou", "-rLL=78n"],
                                 input=b".ad l\n.nh\n" + src, capture_output=True,
                                 check=True).stdout
            text = subprocess.run(["col", "-bx"], input=out, capture_output=True,
                                  check=True).stdout.decode("ascii", errors="strict")
            docs.append(("man", os.path.basename(path)[:-3], tidy(text)))
    return docs


def python_docs():
    root = "/usr/share/doc/python3.11/html/_sources/"
    return [("python-doc", p[len(root):], tidy(read_text(p)))
            for p in package_files("python3.11-doc", r"/_sources/.*\.rst\.txt$")]


def python_stdlib():
    paths = []
    for pkg in ("libpython3.11-minimal", "libpython3.11-stdlib"):
        paths += package_files(pkg, r"^/usr/lib/python3\.11/.*\.py$")
    paths = sorted(p for p in set(paths)
                   if not re.search(r"/(test|tests|idle_test|__pycache__)/", p))
    return [("python", p[len("/usr/lib/python3.11/"):], tidy(read_text(p))) for p in paths]


def c_headers():
    paths = sorted(set(package_files("libc6-dev", r"\.h$") + package_files("linux-libc-dev", r"\.h$")))
    return [("c-header", p[len("/usr/include/"):], tidy(read_text(p))) for p in paths]


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def split(docs):
    train = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != HELDOUT_PHASE]
    held = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == HELDOUT_PHASE]
    return train, held


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for source, name, text in docs:
            f.write(json.dumps({"source": source, "name": name, "text": text},
                               ensure_ascii=False) + "\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "data", "moe128"))
    ap.add_argument("--samples", default=os.path.join(here, "..", "..", "tests", "data"))
    ap.add_argument("--sample-bytes", type=int, default=10000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    sources = {"prose": (kjv, devil), "tech": (man_pages, python_docs),
               "code": (python_stdlib, c_headers)}
    summary = {"packages": {p: package_version(p) for p in PACKAGES}, "domains": {}}
    for domain in DOMAINS:
        train, held = [], []
        counts = {}
        for reader in sources[domain]:
            docs = reader()
            tr, he = split(docs)
            train += tr
            held += he
            counts[docs[0][0]] = {"train": len(tr), "heldout": len(he)}
        write_jsonl(os.path.join(args.out, f"{domain}.train.jsonl"), train)
        write_jsonl(os.path.join(args.out, f"{domain}.heldout.jsonl"), held)
        with open(os.path.join(args.out, f"{domain}.heldout.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(text for _, _, text in held))
        # The start of SAMPLE_DOCS held-out documents at even spacing (so every source of the
        # domain is in it), each cut at a line end to its share of --sample-bytes.
        share = args.sample_bytes // SAMPLE_DOCS
        sample = []
        for i in range(SAMPLE_DOCS):
            text = held[i * len(held) // SAMPLE_DOCS][2]
            head = text.encode()[:share].decode("utf-8", errors="ignore")
            sample.append(text if len(text.encode()) <= share else head[:head.rfind("\n") + 1])
        sample_path = os.path.join(args.samples, f"heldout-{domain}.txt")
        with open(sample_path, "w", encoding="utf-8") as f:
            f.write("\n".join(sample))
        summary["domains"][domain] = {
            "sources": counts,
            "train_bytes": sum(len(t.encode()) for _, _, t in train),
            "heldout_bytes": sum(len(t.encode()) for _, _, t in held),
            "sha256": {name: sha256(os.path.join(args.out, name))
                       for name in (f"{domain}.train.jsonl", f"{domain}.heldout.jsonl")},
        }
        print(domain, json.dumps(summary["domains"][domain]["sources"]),
              summary["domains"][domain]["train_bytes"], "train bytes,",
              summary["domains"][domain]["heldout_bytes"], "held out", flush=True)
    with open(os.path.join(args.out, "sources.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
