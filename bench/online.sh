#!/usr/bin/env bash
# Online learning from a pipe: gradflow against Vowpal Wabbit, both reading the same rows from
# `cat FILE |` once, each row scored before it is trained on (progressive validation). Rows:
# `data synth --kind fields` (one value of each of 14 categorical fields plus two hashed
# crosses, 105,060 features, 16 a row). gradflow: AdaGrad (lr 0.2, no L2) and FTRL-Proximal,
# rounds of --batch-rows rows, -w 1 and -w 2; Vowpal Wabbit: its default update (adaptive,
# normalized, invariant) and --ftrl, through its Python module's own parse-and-learn loop
# (`run_parser`, what the `vw` command runs). Prints rows a second (median of 3 runs; gradflow
# timed as the whole process, Vowpal Wabbit from its workspace's creation to its end, without
# Python's start-up), the ratio to Vowpal
# Wabbit's default, and the progressive loss. Needs Python 3 with vowpalwabbit
# (pip install vowpalwabbit).
#
#   bash bench/online.sh [rows]     (default 2000000)
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-2000000}
python3 -c "import vowpalwabbit" 2>/dev/null ||
  { echo "needs vowpalwabbit (pip install vowpalwabbit)"; exit 1; }
cargo build --release -q --bin gradflow
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
./target/release/gradflow data synth --kind fields --rows "$rows" --out "$out/rows.svm" >/dev/null
# VW's logistic loss takes labels -1 and 1.
awk '{ $1 = ($1 == "1" ? "1" : "-1") " |a"; print }' "$out/rows.svm" > "$out/rows.vw"
cat > "$out/vw.py" <<'PY'
import sys, time
from vowpalwabbit import Workspace
t = time.time()
ws = Workspace("-d /dev/stdin --loss_function logistic --progress 1000000000 " + sys.argv[1])
ws.run_parser()
ws.finish()
print(f"seconds {time.time() - t:.3f}", flush=True)
PY

median() { sort -g | sed -n 2p; }
# One gradflow run: "seconds loss".
gradflow_run() {
  local start end line
  start=$(date +%s.%N)
  line=$(cat "$out/rows.svm" | ./target/release/gradflow train --data - --dim 105060 --lambda 0 "$@" \
    | grep '^trained online')
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc -l) ${line##* }"
}
# One VW run: "seconds loss".
vw_run() {
  local log
  log=$(cat "$out/rows.vw" | python3 "$out/vw.py" "$1" 2>&1)
  echo "$(sed -n 's/^seconds //p' <<<"$log") $(sed -n 's/^average loss = //p' <<<"$log")"
}
measure() { # label, then the command and its arguments: 3 runs, the median's row
  local label=$1; shift
  local runs
  runs=$(for _ in 1 2 3; do "$@"; done)
  local secs loss
  secs=$(awk '{ print $1 }' <<<"$runs" | median)
  loss=$(awk '{ print $2 }' <<<"$runs" | head -1)
  echo "$label $secs $loss"
}

results=$(
  measure "vw_default" vw_run ""
  measure "vw_--ftrl_α_0.1" vw_run "--ftrl --ftrl_alpha 0.1 --ftrl_beta 0"
  measure "gradflow_adagrad,_-w_1,_100_rows_a_round" gradflow_run -w 1 --optimizer adagrad --lr 0.2 --batch-rows 100
  measure "gradflow_adagrad,_-w_1,_1000_rows_a_round" gradflow_run -w 1 --optimizer adagrad --lr 0.2 --batch-rows 1000
  measure "gradflow_adagrad,_-w_2,_1000_rows_a_round" gradflow_run -w 2 --optimizer adagrad --lr 0.2 --batch-rows 1000
  measure "gradflow_ftrl_lr_0.2,_-w_1,_100_rows_a_round" gradflow_run -w 1 --optimizer ftrl --lr 0.2 --batch-rows 100
  measure "gradflow_ftrl_lr_0.2,_-w_2,_1000_rows_a_round" gradflow_run -w 2 --optimizer ftrl --lr 0.2 --batch-rows 1000
)
vw=$(awk '$1 == "vw_default" { print $2 }' <<<"$results")
echo "$rows rows from a pipe, once"
echo
echo "| run | seconds | rows/s | vs VW default | progressive loss |"
echo "|---|---|---|---|---|"
awk -v rows="$rows" -v vw="$vw" '{
  gsub("_", " ", $1)
  printf "| %s | %.2f | %.0f | %.2fx | %.4f |\n", $1, $2, rows / $2, vw / $2, $3
}' <<<"$results"
