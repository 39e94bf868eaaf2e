#!/usr/bin/env bash
# Softmax regression on Fashion-MNIST: gradflow (jobs/fashion_mnist.toml, 1 and 2 workers)
# against scikit-learn's LogisticRegression (multinomial, L-BFGS, the same L2 λ) on the same
# files, in the same run: test accuracy, log loss and seconds. Needs Debian's
# dataset-fashion-mnist and Python 3 with scikit-learn (pip install scikit-learn).
#
#   bash bench/fashion_mnist.sh [epochs]     (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-10}
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "$data is missing (apt-get install dataset-fashion-mnist)"; exit 1; }
python3 -c "import sklearn" 2>/dev/null || { echo "scikit-learn is not installed (pip install scikit-learn)"; exit 1; }
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| run | test accuracy | test log loss | seconds |"
echo "|---|---|---|---|"
for w in 1 2; do
  start=$(date +%s.%N)
  ./target/release/gradflow train jobs/fashion_mnist.toml -w "$w" --epochs "$epochs" \
    --set "output.metrics=\"$out/m.csv\"" --set "output.model=\"$out/model.txt\"" > /dev/null
  end=$(date +%s.%N)
  python3 - "$out/m.csv" "$w" "$epochs" "$start" "$end" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
last = rows[-1]
print(f"| gradflow -w {sys.argv[2]}, Adam, {sys.argv[3]} epochs | {float(last['test_accuracy']):.4f} "
      f"| {float(last['test_loss']):.4f} | {float(sys.argv[5]) - float(sys.argv[4]):.2f} |")
PY
done
python3 -W ignore - "$data" <<'PY'
import gzip, sys, time
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss

def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

d = sys.argv[1]
x_train = idx(f"{d}/train-images-idx3-ubyte.gz", 16).reshape(-1, 784) / 255.0
y_train = idx(f"{d}/train-labels-idx1-ubyte.gz", 8)
x_test = idx(f"{d}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784) / 255.0
y_test = idx(f"{d}/t10k-labels-idx1-ubyte.gz", 8)
start = time.time()
# gradflow's λ/2 ‖w‖² on the mean loss is C = 1 / (λ n) on scikit-learn's summed loss.
# 200 L-BFGS iterations: not converged to scikit-learn's tolerance (it warns; silenced here).
model = LogisticRegression(C=1.0 / (1e-4 * len(y_train)), max_iter=200).fit(x_train, y_train)
seconds = time.time() - start
p = model.predict_proba(x_test)
print(f"| scikit-learn LogisticRegression (L-BFGS, {model.n_iter_[0]} iterations) "
      f"| {accuracy_score(y_test, p.argmax(1)):.4f} | {log_loss(y_test, p):.4f} | {seconds:.2f} |")
PY
