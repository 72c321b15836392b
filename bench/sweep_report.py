#!/usr/bin/env python3
"""Summarises a bench/stream-sweep CSV: a table of decode and prefill t/s per model, limit, mode and
cache size with the ratio to the mmap run (and llama.cpp's run, when measured) of the same model
and limit, plus an SVG plot of decode
t/s against cache size (one line per policy, mmap as a dashed level). Plain SVG, no plotting
library, so it runs wherever python3 does.

usage: sweep_report.py RESULTS.csv PLOT.svg [DISK_MB_S]
DISK_MB_S (measured random-read rate) adds the disk bound per point: disk rate / MB read per token.
"""
import csv
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def table(rows, disk):
    # Decode runs of mmap may use fewer tokens (it is slow under a small limit): compare by kind.
    kind = lambda test: "tg" if test.startswith("tg") else test
    mmap = {}
    for r in rows:
        if r["mode"] == "mmap":
            mmap[(r["label"], r["limit_gb"], kind(r["test"]))] = float(r["tps"])
    llama = {}
    for r in rows:
        if r["mode"] == "llama.cpp":
            llama[(r["label"], r["limit_gb"], kind(r["test"]))] = float(r["tps"])
    hdr = f"{'model':<16} {'limit':>5} {'mode':<9} {'policy':<7} {'cache GB':>8} {'test':<6} {'t/s':>8} {'x mmap':>7} {'x llama':>7} {'hit %':>6} {'MB/t':>7} {'MB/s':>6} {'peak GB':>7}"
    if disk:
        hdr += f" {'bound':>6} {'of bound':>8}"
    print(hdr)
    for r in rows:
        tps = float(r["tps"])
        base = mmap.get((r["label"], r["limit_gb"], kind(r["test"])))
        ratio = f"{tps / base:7.1f}" if base and r["mode"] == "stream" else f"{'':>7}"
        lbase = llama.get((r["label"], r["limit_gb"], kind(r["test"])))
        lratio = f"{tps / lbase:7.1f}" if lbase and r["mode"] == "stream" else f"{'':>7}"
        line = (f"{r['label']:<16} {r['limit_gb']:>5} {r['mode']:<9} {r['policy']:<7} {r['cache_gb']:>8} {r['test']:<6} "
                f"{tps:8.2f} {ratio} {lratio} {float(r['hit_rate']):6.1f} {float(r['mb_per_token']):7.1f} "
                f"{float(r['read_mb_s']):6.1f} {float(r['peak_gb']):7.2f}")
        if disk and r["mode"] == "stream" and r["test"].startswith("tg") and float(r["mb_per_token"]) > 0:
            bound = disk / float(r["mb_per_token"])
            line += f" {bound:6.2f} {100 * tps / bound:7.0f}%"
        print(line)


def svg(rows, path):
    series = defaultdict(list)  # (label, limit, policy) -> [(cache, tps)]
    levels = {}                 # (label, limit) -> mmap tps
    for r in rows:
        if not r["test"].startswith("tg"):
            continue
        if r["mode"] == "mmap":
            levels[(r["label"], r["limit_gb"])] = float(r["tps"])
        elif r["mode"] == "stream" and r["cache_gb"] not in ("auto", ""):
            series[(r["label"], r["limit_gb"], r["policy"])].append((float(r["cache_gb"]), float(r["tps"])))
    if not series:
        return
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts] + list(levels.values())
    x0, x1 = 0.0, max(xs) * 1.05
    y1 = max(ys) * 1.1
    W, H, L, B, T, R = 760, 460, 60, 50, 30, 230
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    py = lambda y: H - B - y / y1 * (H - B - T)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">decode tokens/s vs expert cache size (nextuse solid, lfu dashed, lru dotted; long dashes: mmap)</text>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">expert cache (GB)</text>',
           f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" text-anchor="middle">t/s</text>']
    for i in range(6):
        xv = x0 + (x1 - x0) * i / 5
        yv = y1 * i / 5
        out.append(f'<text x="{px(xv):.1f}" y="{H-B+16}" text-anchor="middle">{xv:.1f}</text>')
        out.append(f'<text x="{L-6}" y="{py(yv)+4:.1f}" text-anchor="end">{yv:.1f}</text>')
        out.append(f'<line x1="{L}" y1="{py(yv):.1f}" x2="{W-R}" y2="{py(yv):.1f}" stroke="#ddd"/>')
    legend_y = T
    groups = sorted({(k[0], k[1]) for k in series})
    for gi, g in enumerate(groups):
        color = colors[gi % len(colors)]
        for key in sorted(k for k in series if (k[0], k[1]) == g):
            pts = sorted(series[key])
            dash = {"nextuse": "", "lfu": ' stroke-dasharray="6,3"'}.get(key[2], ' stroke-dasharray="2,3"')
            poly = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{poly}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for x, y in pts:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
            out.append(f'<line x1="{W-R+10}" y1="{legend_y}" x2="{W-R+34}" y2="{legend_y}" stroke="{color}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{W-R+40}" y="{legend_y+4}">{key[0]} {key[1]} GB {key[2]}</text>')
            legend_y += 18
        if g in levels:
            y = py(levels[g])
            out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W-R}" y2="{y:.1f}" stroke="{color}" stroke-dasharray="8,5"/>')
            out.append(f'<line x1="{W-R+10}" y1="{legend_y}" x2="{W-R+34}" y2="{legend_y}" stroke="{color}" stroke-dasharray="8,5"/>')
            out.append(f'<text x="{W-R+40}" y="{legend_y+4}">{g[0]} {g[1]} GB mmap</text>')
            legend_y += 18
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"plot: {path}")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    rows = load(sys.argv[1])
    disk = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    table(rows, disk)
    svg(rows, sys.argv[2])


if __name__ == "__main__":
    main()
