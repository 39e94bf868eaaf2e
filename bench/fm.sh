#!/usr/bin/env bash
# Factorization machines of rank 8 on the generated set of planted pairs (`data synth --kind
# pairs`: 10 fields of 200 values, one of each a row, labels decided mostly by a hidden rank-4
# FM; the first 100,000 rows train, the last 30,000 test): gradflow (-w 1, Adam) against Spark
# MLlib's FMClassifier (local[1], its default adamW, full-batch iterations) and Vowpal Wabbit's
# low-rank quadratic `--lrq aa8` (with --lrqdropout, as its docs advise), one core each, on the
# same files, in the same run. Each tool gets a small grid of step sizes and L2 (the rows say
# which); all rows print, then each tool's best test log loss and the per-epoch time ratios.
# Logistic regression shows what the pairs are worth. Needs Java 17 and Python 3 with pyspark,
# vowpalwabbit and scikit-learn (pip install pyspark vowpalwabbit scikit-learn).
#
#   bash bench/fm.sh [epochs]     (default 12; Spark runs 100 iterations, VW 10 passes)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-12}
python3 -c "import pyspark, vowpalwabbit, sklearn" 2>/dev/null ||
  { echo "needs pyspark, vowpalwabbit and scikit-learn (pip install pyspark vowpalwabbit scikit-learn)"; exit 1; }
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
./target/release/gradflow data synth --kind pairs --rows 130000 --dim 2000 --nnz 10 --out "$out/all.svm" >/dev/null
head -n 100000 "$out/all.svm" > "$out/train.svm"
tail -n 30000 "$out/all.svm" > "$out/test.svm"
for s in train test; do awk '{ $1 = $1 " |a"; print }' "$out/$s.svm" > "$out/$s.vw"; done
rows="$out/rows.md"
echo "| run | test AUC | test log loss | seconds per epoch | seconds |" | tee "$rows"
echo "|---|---|---|---|---|" | tee -a "$rows"

# gradflow: the last epoch's line of the metrics CSV (its seconds: training and evaluation).
for run in "linear 1e-4" "fm 1e-4" "fm 2e-4" "fm 3e-4"; do
  set -- $run
  ./target/release/gradflow train --data "$out/train.svm" --test-file "$out/test.svm" -w 1 \
    --model "$1" --factors 8 --optimizer adam --lr 0.01 --lambda "$2" --epochs "$epochs" \
    --metrics "$out/m.csv" > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  python3 - "$out/m.csv" "$1" "$2" "$epochs" <<'PY' | tee -a "$rows"
import csv, sys
last = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"][-1]
model = "FM k = 8" if sys.argv[2] == "fm" else "logistic regression"
s = float(last["seconds"])
print(f"| gradflow {model}, Adam lr 0.01, λ {sys.argv[3]}, {sys.argv[4]} epochs "
      f"| {float(last['test_auc']):.4f} | {float(last['test_loss']):.4f} "
      f"| {s / int(sys.argv[4]):.3f} | {s:.1f} |")
PY
done

python3 bench/fm_spark.py "$out/train.svm" "$out/test.svm" 2000 8 100 \
  0.005,0 0.005,0.01 0.007,0.01 0.01,0.01 2> "$out/spark.log" | tee -a "$rows" ||
  { tail -20 "$out/spark.log"; exit 1; }

# Vowpal Wabbit through its Python module: training from the text file with a cache, then
# scoring the test file with the saved model.
python3 - "$out" <<'PY' | tee -a "$rows"
import sys, time
import numpy as np
from sklearn.metrics import log_loss, roc_auc_score
from vowpalwabbit import Workspace
out, passes = sys.argv[1], 10
y = np.array([line.split()[0] == "1" for line in open(f"{out}/test.vw")])
for lr in [0.5, 1.0, 2.0]:
    start = time.perf_counter()
    vw = Workspace(f"-d {out}/train.vw --passes {passes} -c -k --cache_file {out}/vw.cache "
                   f"--holdout_off --loss_function logistic -l {lr} -b 20 --lrq aa8 "
                   f"--lrqdropout --random_seed 1 --quiet -f {out}/vw.model")
    vw.run_parser()
    vw.finish()
    fit = time.perf_counter() - start
    vw = Workspace(f"-i {out}/vw.model -t -d {out}/test.vw -p {out}/vw.pred --link logistic --quiet")
    vw.run_parser()
    vw.finish()
    p = np.clip(np.loadtxt(f"{out}/vw.pred"), 1e-15, 1 - 1e-15)
    print(f"| Vowpal Wabbit --lrq aa8 --lrqdropout, -l {lr:g}, {passes} passes "
          f"| {roc_auc_score(y, p):.4f} | {log_loss(y, p):.4f} | {fit / passes:.3f} | {fit:.1f} |",
          flush=True)
PY

# Each tool's best test log loss, and its time per epoch against gradflow's best FM.
python3 - "$rows" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 5 or not cells[1][:1].isdigit() or "logistic" in cells[0]:
        continue
    tool = cells[0].split(" ")[0]
    loss, per_epoch = float(cells[2]), float(cells[3])
    if tool not in best or loss < best[tool][0]:
        best[tool] = (loss, per_epoch, cells[0])
g = best["gradflow"]
print()
for tool, (loss, per_epoch, name) in best.items():
    print(f"best {tool}: test log loss {loss:.4f}, {per_epoch:.3f} s/epoch ({name})")
for tool in ("Spark", "Vowpal"):
    if tool in best:
        print(f"gradflow is {best[tool][1] / g[1]:.1f}x faster per epoch than {tool} "
              f"(best rows); log loss {g[0]:.4f} against {best[tool][0]:.4f}")
PY
