#!/usr/bin/env bash
# AdaGrad and FTRL-Proximal against Vowpal Wabbit's, on a CTR-like set (`data synth --kind
# fields`: one value of each of 14 categorical fields plus two hashed crosses, 105,060
# features, 16 a row; the first 160,000 rows train, the last 40,000 test): gradflow (-w 1;
# Adam, AdaGrad, FTRL with and without L1) and Vowpal Wabbit (`--ftrl` with the same α, β and
# L1; its default adaptive, normalized, invariant update; `--adaptive` alone), one core each,
# the same passes over the same files, in one run. Prints test AUC, test log loss, non-zero
# weights (gradflow: lines of the model file; VW: of `--readable_model`) and seconds.
# Needs Python 3 with vowpalwabbit and scikit-learn (pip install vowpalwabbit scikit-learn).
#
#   bash bench/ftrl.sh [epochs]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-5}
python3 -c "import vowpalwabbit, sklearn" 2>/dev/null ||
  { echo "needs vowpalwabbit and scikit-learn (pip install vowpalwabbit scikit-learn)"; exit 1; }
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
./target/release/gradflow data synth --kind fields --rows 200000 --out "$out/all.svm" >/dev/null
head -n 160000 "$out/all.svm" > "$out/train.svm"
tail -n 40000 "$out/all.svm" > "$out/test.svm"
# VW's logistic loss takes labels -1 and 1.
for s in train test; do
  awk '{ $1 = ($1 == "1" ? "1" : "-1") " |a"; print }' "$out/$s.svm" > "$out/$s.vw"
done
echo "| run | test AUC | test log loss | non-zero weights | seconds |"
echo "|---|---|---|---|---|"

# gradflow: the last epoch's line of the metrics CSV; 1% of the rows a round.
for run in "adam 0.002 0" "adagrad 0.05 0" "ftrl 0.05 0" "ftrl 0.05 0.0003" "ftrl 0.05 0.001"; do
  set -- $run
  ./target/release/gradflow train --data "$out/train.svm" --test-file "$out/test.svm" -w 1 \
    --optimizer "$1" --lr "$2" --set optimizer.l1="$3" --lambda 0 --epochs "$epochs" \
    --set train.batch_fraction=0.01 --metrics "$out/m.csv" --set output.model=\"$out/model.txt\" \
    > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  nonzero=$(awk '/^weights$/ { on = 1; next } /^end / { on = 0 } on' "$out/model.txt" | wc -l)
  python3 - "$out/m.csv" "$1 lr $2, l1 $3" "$nonzero" <<'PY'
import csv, sys
last = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"][-1]
print(f"| gradflow {sys.argv[2]} | {float(last['test_auc']):.4f} "
      f"| {float(last['test_loss']):.4f} | {sys.argv[3]} | {float(last['seconds']):.2f} |")
PY
done

# Vowpal Wabbit through its Python module: passes over a cache, then the test file scored
# with the saved model.
python3 - "$out" "$epochs" <<'PY'
import re, sys, time
import numpy as np
from sklearn.metrics import log_loss, roc_auc_score
from vowpalwabbit import Workspace
out, passes = sys.argv[1], int(sys.argv[2])
y = np.array([line.split()[0] == "1" for line in open(f"{out}/test.vw")])
runs = [
    ("--ftrl, α 0.05, β 0, l1 0", "--ftrl --ftrl_alpha 0.05 --ftrl_beta 0"),
    # VW's z sums one row's gradients, gradflow's a batch's mean (1,600 rows): gradflow's
    # l1 0.001 is VW's 1.6.
    ("--ftrl, α 0.05, β 0, l1 0.48", "--ftrl --ftrl_alpha 0.05 --ftrl_beta 0 --l1 0.48"),
    ("--ftrl, α 0.05, β 0, l1 1.6", "--ftrl --ftrl_alpha 0.05 --ftrl_beta 0 --l1 1.6"),
    ("--ftrl (its defaults: α 0.005, β 0.1)", "--ftrl"),
    ("default update (adaptive, normalized, invariant), -l 0.5", "-l 0.5"),
    ("--adaptive alone, -l 0.05", "--adaptive -l 0.05"),
]
for name, opts in runs:
    start = time.perf_counter()
    vw = Workspace(f"-d {out}/train.vw --passes {passes} -c -k --cache_file {out}/vw.cache "
                   f"--holdout_off --loss_function logistic -b 20 {opts} --random_seed 1 "
                   f"--quiet -f {out}/vw.model --readable_model {out}/vw.readable")
    vw.run_parser()
    vw.finish()
    fit = time.perf_counter() - start
    vw = Workspace(f"-i {out}/vw.model -t -d {out}/test.vw -p {out}/vw.pred --link logistic --quiet")
    vw.run_parser()
    vw.finish()
    p = np.clip(np.loadtxt(f"{out}/vw.pred"), 1e-15, 1 - 1e-15)
    weights = [re.match(r"(\d+):(\S+)", l) for l in open(f"{out}/vw.readable")]
    nonzero = sum(1 for m in weights if m and float(m.group(2)) != 0.0)
    print(f"| Vowpal Wabbit {name}, {passes} passes | {roc_auc_score(y, p):.4f} "
          f"| {log_loss(y, p):.4f} | {nonzero} | {fit:.2f} |", flush=True)
PY
