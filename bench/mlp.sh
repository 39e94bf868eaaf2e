#!/usr/bin/env bash
# The exchange under a neural network: jobs/fashion_mnist_mlp.toml (101,898 weights, every one in
# every round's gradient) as a 2-process cluster over loopback TCP, uncompressed against the
# quantizers (QSGD, TernGrad, signSGD, logquant), SketchML, top-k with its residual and the
# sketch exchange (Sketched-SGD) at two sizes of k. Prints, per configuration, the test accuracy
# and log loss after the last epoch, the best accuracy of any epoch, the bytes both processes
# sent per epoch (uplink and downlink, the serialized messages that crossed between them) and
# the training seconds. Needs Debian's dataset-fashion-mnist.
#
#   bash bench/mlp.sh [epochs]     (default 5)
#   ROWS='none qsgd' bash bench/mlp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-5}
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "needs Fashion-MNIST: apt-get install dataset-fashion-mnist"; exit 1; }
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rows=(none qsgd terngrad signsgd logquant sketchml "topk:ratio=0.01" "sketch:k=1019" "sketch:k=10000")
[ -n "${ROWS:-}" ] && read -r -a rows <<< "$ROWS"
echo "| configuration | test accuracy | best accuracy | test log loss | MB sent per epoch | seconds |"
echo "|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  case $row in
    sketch:k=*) flags=(--exchange sketch --set "train.sketch.k=${row#sketch:k=}") ;;
    *) flags=(--compressor "$row") ;;
  esac
  ./target/release/gradflow cluster jobs/fashion_mnist_mlp.toml -n 2 --epochs "$epochs" \
    --metrics "$out/m.csv" "${flags[@]}" > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  python3 - "$out/m.csv" "$row" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
last = rows[-1]
sent = sum(float(r["uplink_bytes"]) + float(r["downlink_bytes"]) for r in rows) / len(rows)
best = max(float(r["test_accuracy"]) for r in rows)
print(f"| {sys.argv[2]} | {float(last['test_accuracy']):.4f} | {best:.4f} "
      f"| {float(last['test_loss']):.4f} | {sent / 1e6:.1f} | {float(last['seconds']):.1f} |")
PY
done
