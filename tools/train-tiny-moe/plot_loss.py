#!/usr/bin/python3
"""Draw train.py's loss.csv as a small standalone SVG (no plotting library on the machine):
train loss as a line, held-out loss as dots (one colour per domain when the CSV has
heldout_<domain> columns), against tokens seen."""
import argparse
import csv
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("svg")
    args = ap.parse_args()
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    tokens = [int(r["tokens"]) for r in rows]
    train = [float(r["train_loss"]) for r in rows]
    domains = [c[len("heldout_"):] for c in rows[0] if c.startswith("heldout_") and c != "heldout_loss"]
    series = {d: [(int(r["tokens"]), float(r["heldout_" + d])) for r in rows if r["heldout_" + d]]
              for d in domains} or {"": [(int(r["tokens"]), float(r["heldout_loss"]))
                                         for r in rows if r["heldout_loss"]]}
    held = [p for pts in series.values() for p in pts]

    w, h, ml, mr, mt, mb = 640, 360, 56, 16, 24, 44
    x_max = max(tokens)
    y_lo = math.floor(min(train + [v for _, v in held]))
    y_hi = math.ceil(max(train[min(2, len(train) - 1):]))
    sx = lambda t: ml + (w - ml - mr) * t / x_max
    sy = lambda v: mt + (h - mt - mb) * (y_hi - min(v, y_hi)) / (y_hi - y_lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for v in range(y_lo, y_hi + 1):
        out.append(f'<line x1="{ml}" x2="{w - mr}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v}</text>')
    step = 10 ** math.floor(math.log10(x_max))
    if x_max / step < 4:
        step //= 2
    for t in range(0, x_max + 1, step):
        out.append(f'<text x="{sx(t):.1f}" y="{h - mb + 16}" text-anchor="middle">{t / 1e6:g}M</text>')
    out.append(f'<text x="{(ml + w - mr) / 2}" y="{h - 8}" text-anchor="middle">tokens seen</text>')
    out.append(f'<text x="14" y="{(mt + h - mb) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(mt + h - mb) / 2})">cross-entropy (nats/token)</text>')
    pts = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in zip(tokens, train))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    colours = ["#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    out.append(f'<line x1="{w - 190}" x2="{w - 170}" y1="{mt + 6}" y2="{mt + 6}" stroke="#1f77b4" stroke-width="1.5"/>')
    out.append(f'<text x="{w - 165}" y="{mt + 10}">train (mean of 10 steps)</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = colours[i % len(colours)]
        for t, v in pts:
            out.append(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="3" fill="{c}"/>')
        y = mt + 22 + 16 * i
        out.append(f'<circle cx="{w - 180}" cy="{y}" r="3" fill="{c}"/>')
        out.append(f'<text x="{w - 165}" y="{y + 4}">held-out{" " + name if name else ""} (4096 tokens)</text>')
    out.append("</svg>")
    with open(args.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
