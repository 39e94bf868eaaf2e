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
# Wabbit's default, and the progressive loss. Also gradflow on the same rows as CSV (a column
# per field, hashed into 2^18 features), and with a reader per process: two processes of one
# worker on loopback, each fed half the rows through its own pipe. Needs Python 3 with
# vowpalwabbit (pip install vowpalwabbit).
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
# The same rows as CSV: the label, then each row's 16 feature indices as 16 categorical columns.
awk 'BEGIN { printf "y"; for (i = 1; i <= 16; i++) printf ",c%d", i; print "" }
     { gsub(/:1/, ""); gsub(/ /, ","); print }' \
  "$out/rows.svm" > "$out/rows.csv"
cat > "$out/csv.toml" <<'TOML'
[data]
format = "csv"
[data.label]
column = "y"
[data.features]
categorical = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11", "c12", "c13", "c14", "c15", "c16"]
hash_bits = 18
TOML
# Each half of the rows, for the two readers.
half=$((rows / 2))
head -n "$half" "$out/rows.svm" > "$out/first.svm"
tail -n +"$((half + 1))" "$out/rows.svm" > "$out/second.svm"
ports=$(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
printf '127.0.0.1:%s\n' $ports > "$out/hosts"
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
# One gradflow run on the CSV rows: "seconds loss".
csv_run() {
  local start end line
  start=$(date +%s.%N)
  line=$(cat "$out/rows.csv" | ./target/release/gradflow train "$out/csv.toml" --data - --lambda 0 "$@" \
    | grep '^trained online')
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc -l) ${line##* }"
}
# Two processes of one worker, each reading half the rows from its own pipe: "seconds loss".
per_process_run() {
  local start end line
  local cluster=(--data - --dim 105060 --lambda 0 --each-process-reads -w 1 -n 2 --hostfile "$out/hosts")
  start=$(date +%s.%N)
  cat "$out/second.svm" | ./target/release/gradflow train "${cluster[@]}" -p 1 "$@" >/dev/null 2>&1 &
  line=$(cat "$out/first.svm" | ./target/release/gradflow train "${cluster[@]}" -p 0 "$@" 2>/dev/null \
    | grep '^trained online')
  wait
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
  measure "gradflow_adagrad,_CSV,_-w_1,_1000_rows_a_round" csv_run -w 1 --optimizer adagrad --lr 0.2 --batch-rows 1000
  measure "gradflow_adagrad,_CSV,_-w_2,_1000_rows_a_round" csv_run -w 2 --optimizer adagrad --lr 0.2 --batch-rows 1000
  measure "gradflow_adagrad,_2_processes_each_reading_half,_1000_rows_a_round" per_process_run --optimizer adagrad --lr 0.2 --batch-rows 1000
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
