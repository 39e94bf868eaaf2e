#!/usr/bin/env bash
# One epoch of logistic regression: gradflow (Adam, 1% mini-batches, 1 and 2 workers) against
# scikit-learn's SGDClassifier (log loss, one pass of partial_fit), on the same generated
# LibSVM file, measured in the same run. Prints seconds per epoch (median over the epochs) and
# the ratios. Needs Python 3 with scikit-learn (pip install scikit-learn); the issue's shape:
#
#   bash bench/sklearn.sh [rows] [features] [nnz]     (default 600000 100000 15)
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-600000}; dim=${2:-100000}; nnz=${3:-15}
python3 -c "import sklearn" 2>/dev/null || { echo "scikit-learn is not installed (pip install scikit-learn)"; exit 1; }
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
./target/release/gradflow data synth --rows "$rows" --dim "$dim" --nnz "$nnz" --out "$out/train.svm" >/dev/null
cat > "$out/job.toml" <<TOML
[data]
train = "$out/train.svm"
test_fraction = 0.0
[model]
loss = "logistic"
lambda = 1e-6
[optimizer]
kind = "adam"
lr = 0.01
[train]
epochs = 5
batch_fraction = 0.01
TOML
epoch_seconds() {  # median seconds per epoch from a metrics CSV (epoch rows' cumulative seconds)
  python3 - "$1" <<'PY'
import csv, statistics, sys
t = [float(r["seconds"]) for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
print(statistics.median(b - a for a, b in zip([0.0] + t, t)))
PY
}
declare -A whole  # wall seconds of the whole run: loading and 5 epochs
for w in 1 2; do
  start=$EPOCHREALTIME
  ./target/release/gradflow train "$out/job.toml" -w $w -q --metrics "$out/m$w.csv" > "$out/log$w" 2>&1
  whole[$w]=$(python3 -c "print($EPOCHREALTIME - $start)")
done
g1=$(epoch_seconds "$out/m1.csv"); g2=$(epoch_seconds "$out/m2.csv")
sk=$(python3 - "$out/train.svm" <<'PY'
import statistics, sys, time
import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.linear_model import SGDClassifier
X, y = load_svmlight_file(sys.argv[1])
X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
clf = SGDClassifier(loss="log_loss", alpha=1e-6, random_state=0)
times = []
for _ in range(5):
    t = time.process_time()
    clf.partial_fit(X, y, classes=np.array([-1.0, 1.0]))
    times.append(time.process_time() - t)
print(statistics.median(times))
PY
)
python3 - "$rows" "$dim" "$nnz" "$g1" "$g2" "$sk" "${whole[1]}" "${whole[2]}" <<'PY'
import sys
rows, dim, nnz, g1, g2, sk, r1, r2 = sys.argv[1:4] + [float(x) for x in sys.argv[4:]]
print(f"{rows} rows x {nnz} nonzeros, {dim} features; seconds per epoch (median of 5):")
print("| gradflow -w 1 | gradflow -w 2 | SGDClassifier (CPU) | sklearn / -w 1 | -w 1 / -w 2 |")
print("|---|---|---|---|---|")
print(f"| {g1:.3f} | {g2:.3f} | {sk:.3f} | {sk / g1:.2f}x | {g1 / g2:.2f}x |")
print(f"whole run (loading and 5 epochs): -w 1 {r1:.2f} s, -w 2 {r2:.2f} s: {r1 / r2:.2f}x")
PY
