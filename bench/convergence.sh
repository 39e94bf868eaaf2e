#!/usr/bin/env bash
# Convergence of every codec, the shape of SketchML's Table 2 and FastSGD's Table VII: logistic
# regression, SVM (hinge) and linear regression (squared loss), each with Adam and with plain
# SGD, x every codec with its paper's memory; each cell is the minimum test loss over the
# epochs, its change against the uncompressed run of the same column, and the round that
# reached it.
#
#   bash bench/convergence.sh [job] [workers]     (default: bench/convergence.toml, 2)
#   ROWS="none none+staleness=1 none+staleness=2" bash bench/convergence.sh
#   COLS="logistic|adam|0.01 logistic|sgd|0.5" bash bench/convergence.sh bench/convergence_fm.toml
#
# A row is a codec with its parameters after commas (`signsgd,vote=true`), and optionally
# `+field=value` for a [train] field (`+staleness=1`: pipelined rounds). The first row is the
# reference of the percentages.
#
# Prints a Markdown table. Every cell is a `gradflow train` run with timely workers in one
# process (the codec's effect on convergence does not depend on the transport).
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-bench/convergence.toml}
workers=${2:-2}
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# loss|optimizer|learning rate (Adam 0.01 as the papers' runs; plain SGD at the best of
# 0.1, 0.5, 2 for the uncompressed run on this job)
columns=("logistic|adam|0.01" "logistic|sgd|2.0" "hinge|adam|0.01" "hinge|sgd|0.5" "squared|adam|0.01" "squared|sgd|0.5")
codecs=(none none64 zipml sketchml skcompress fastsgd gspar topk randomk threshold qsgd terngrad
  signsgd signsgd,vote=true logquant none+staleness=1 none+staleness=2)
[ -n "${ROWS:-}" ] && read -r -a codecs <<< "$ROWS"
[ -n "${COLS:-}" ] && read -r -a columns <<< "$COLS"


header="| codec |"; rule="|---|"
for col in "${columns[@]}"; do
  IFS='|' read -r loss opt lr <<< "$col"
  header+=" $loss, $opt $lr |"; rule+="---|"
done
echo "$header"; echo "$rule"
declare -A base
for row_spec in "${codecs[@]}"; do
  codec=${row_spec%%+*}
  train=(); [[ $row_spec == *+* ]] && IFS='+' read -r -a train <<< "${row_spec#*+}"
  sets=(); for t in "${train[@]}"; do sets+=(--set "train.$t"); done
  name=${codec%%,*}
  extra=""; [[ $codec == *,* ]] && extra=",${codec#*,}"
  row="| $row_spec |"
  for col in "${columns[@]}"; do
    IFS='|' read -r loss opt lr <<< "$col"
    ./target/release/gradflow train "$job" -w "$workers" "${sets[@]}" \
      --set "train.compressor={name=\"$name\"$extra}" --set "model.loss=\"$loss\"" \
      --set "optimizer.kind=\"$opt\"" --set "optimizer.lr=$lr" \
      --set "output.metrics=\"$out/m.csv\"" > "$out/log" 2>&1 \
      || { row+=" failed: $(tail -1 "$out/log") |"; continue; }
    cell=$(python3 - "$out/m.csv" "${base[$col]:-}" <<'PY'
import csv, math, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
losses = [(float(r["test_loss"]), int(r["round"]) + 1) for r in rows]
best, at = min(losses, key=lambda x: (x[0] if math.isfinite(x[0]) else math.inf, x[1]))
ref = float(sys.argv[2]) if sys.argv[2] else best
print(f"{best}|{best:.4f} ({100 * (best / ref - 1):+.2f}%) @{at}")
PY
)
    [ -z "${base[$col]:-}" ] && base[$col]=${cell%%|*}
    row+=" ${cell#*|} |"
  done
  echo "$row"
done
