#!/usr/bin/env python3
"""The codec table of docs/results.md, from the estimates `cargo bench --bench codecs` left.

    cargo bench --bench codecs -- --warm-up-time 1 --measurement-time 2 'codec/'
    python3 bench/codec_costs.py [target/criterion]

Prints, per codec, encode + decode in ns per pair at every shape, the 10k / 1M ratio of
that per-pair cost (target: at most 1.5x; 10k / 40k for a codec whose 1M message drops most
of its pairs), encode throughput at 10k pairs (target for
logquant, sketchml and skcompress: at least 50M pairs/s; judged on criterion's median, and
shown beside it from the fastest sample, which a noisy host disturbs least), and whether each
target is met.
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
# Codecs whose 1M message drops most of its pairs (fastsgd's threshold Σ|v| / 1.1^128), so
# that its per-pair cost is not a codec's work per pair: their fixed cost is judged at 10k
# against 40k, where every pair is coded.
REFERENCE_40K = {"fastsgd"}


def nanos(root, shape, codec, op):
    """Criterion's median estimate of one benchmark, in ns per message."""
    path = os.path.join(root, f"codec_{shape}", f"{codec}_{op}", "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def fastest(root, shape, codec, op):
    """The fastest sample of one benchmark, in ns per message."""
    path = os.path.join(root, f"codec_{shape}", f"{codec}_{op}", "new", "sample.json")
    with open(path) as f:
        sample = json.load(f)
    return min(t / n for t, n in zip(sample["times"], sample["iters"]))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
    print(
        "| codec | ns/pair at 1M | 40k | 10k | 2.5k | 10k / 1M "
        "| encode, Mpairs/s at 10k | fastest sample |"
    )
    print("|---|---|---|---|---|---|---|---|")
    misses = []
    for codec in CODECS:
        try:
            per_pair = {
                shape: (nanos(root, shape, codec, "encode") + nanos(root, shape, codec, "decode"))
                / pairs
                for shape, pairs in SHAPES
            }
            encode_10k = 10_000 / nanos(root, "10k", codec, "encode") * 1e3
            fastest_10k = 10_000 / fastest(root, "10k", codec, "encode") * 1e3
        except FileNotFoundError as e:
            print(f"missing: {e.filename}", file=sys.stderr)
            return 1
        reference = "40k" if codec in REFERENCE_40K else "1M"
        ratio = per_pair["10k"] / per_pair[reference]
        cells = [f"{per_pair[s]:.1f}" for s, _ in SHAPES]
        shown = f"{ratio:.2f}x" + (f" (of {reference})" if reference != "1M" else "")
        print(f"| {codec} | " + " | ".join(cells) + f" | {shown} | {encode_10k:.0f} | {fastest_10k:.0f} |")
        if ratio > RATIO_TARGET:
            misses.append(f"{codec}: 10k / {reference} = {ratio:.2f}x > {RATIO_TARGET}x")
        if codec in THROUGHPUT_CODECS and encode_10k < THROUGHPUT_TARGET:
            misses.append(f"{codec}: encode {encode_10k:.0f}M pairs/s < {THROUGHPUT_TARGET:.0f}M")
    print()
    print("targets missed: " + ("; ".join(misses) if misses else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
