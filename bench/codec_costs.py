#!/usr/bin/env python3
"""The codec table of docs/results.md, from the estimates `cargo bench --bench codecs` left.

    cargo bench --bench codecs -- --warm-up-time 1 --measurement-time 2 'codec/'
    python3 bench/codec_costs.py [target/criterion]

Prints, per codec, encode + decode in ns per pair at every shape, the 10k / 1M ratio of
that per-pair cost (target: at most 1.5x), encode throughput at 10k pairs (target for
logquant, sketchml and skcompress: at least 50M pairs/s), and whether each target is met.
Exits 1 when a shape's estimate is missing.
"""

import json
import os
import sys

SHAPES = [("1M", 1_000_000), ("40k", 40_000), ("10k", 10_000), ("2.5k", 2_500)]
CODECS = [
    "none", "none64", "zipml", "fastsgd", "gspar", "topk", "randomk", "threshold",
    "qsgd", "terngrad", "signsgd", "logquant", "sketchml", "skcompress",
]
RATIO_TARGET = 1.5
THROUGHPUT_TARGET = 50.0  # M pairs/s at 10k pairs
THROUGHPUT_CODECS = {"logquant", "sketchml", "skcompress"}


def nanos(root, shape, codec, op):
    """Criterion's median estimate of one benchmark, in ns per message."""
    path = os.path.join(root, f"codec_{shape}", f"{codec}_{op}", "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
    print("| codec | ns/pair at 1M | 40k | 10k | 2.5k | 10k / 1M | encode, Mpairs/s at 10k |")
    print("|---|---|---|---|---|---|---|")
    misses = []
    for codec in CODECS:
        try:
            per_pair = {
                shape: (nanos(root, shape, codec, "encode") + nanos(root, shape, codec, "decode"))
                / pairs
                for shape, pairs in SHAPES
            }
            encode_10k = 10_000 / nanos(root, "10k", codec, "encode") * 1e3
        except FileNotFoundError as e:
            print(f"missing: {e.filename}", file=sys.stderr)
            return 1
        ratio = per_pair["10k"] / per_pair["1M"]
        cells = [f"{per_pair[s]:.1f}" for s, _ in SHAPES]
        print(f"| {codec} | " + " | ".join(cells) + f" | {ratio:.2f}x | {encode_10k:.0f} |")
        if ratio > RATIO_TARGET:
            misses.append(f"{codec}: 10k / 1M = {ratio:.2f}x > {RATIO_TARGET}x")
        if codec in THROUGHPUT_CODECS and encode_10k < THROUGHPUT_TARGET:
            misses.append(f"{codec}: encode {encode_10k:.0f}M pairs/s < {THROUGHPUT_TARGET:.0f}M")
    print()
    print("targets missed: " + ("; ".join(misses) if misses else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
