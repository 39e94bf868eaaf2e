#!/usr/bin/env bash
# Does every setting `auto`'s loss check keeps end within 0.5% of uncompressed training? For
# each job: one run with `exchange = "auto"` and `compressor = "auto"` (2 processes on
# loopback) prints the loss check's verdicts; then uncompressed `sharded` and every kept lossy
# setting run alone (sharded, with the setting's codec, staleness and downlink) to the job's
# end. Prints, per job, each kept setting's final test loss against uncompressed training's,
# and each refused one's too (what the refusal gave up), as a markdown table. Whichever kept
# setting `auto`'s trials pick on a given link, its loss is one of these.
#
#   bash bench/auto_loss.sh [JOB ...]     (default: the jobs below)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=./target/release/gradflow
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cat > "$out/rare.toml" <<'EOF'
# Signal in rare features: 10^6 features, 40 a row, 5% batches (tests/exchange.rs).
[data]
test_fraction = 0.2
[data.synth]
rows = 100000
dim = 1000000
nnz = 40
seed = 3
[model]
lambda = 1e-6
[optimizer]
kind = "adam"
lr = 0.01
[train]
epochs = 3
batch_fraction = 0.05
seed = 42
EOF
# jobs/linear_regression.toml reads a generated LibSVM file.
[ -f datasets/gspar.svm ] || "$bin" data synth --kind gspar --rows 4000 --dim 512 --out datasets/gspar.svm > /dev/null
jobs=("$@")
if [ ${#jobs[@]} -eq 0 ]; then
  jobs=(bench/exchange.toml bench/convergence_fm.toml jobs/ctr.toml jobs/quickstart.toml
        jobs/gspar_logistic.toml jobs/svm.toml jobs/linear_regression.toml
        jobs/fashion_mnist.toml jobs/fashion_mnist_mlp.toml "$out/rare.toml")
fi
# The final test loss of a run of JOB with the given --set arguments.
final_loss() {
  local job=$1; shift
  "$bin" cluster "$job" -n 2 --set "output.metrics=\"$out/m.csv\"" \
    --set "output.model=\"$out/model.txt\"" "$@" > "$out/log" 2>&1 || { cat "$out/log" >&2; return 1; }
  python3 - "$out/m.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
print(rows[-1]["test_loss"])
PY
}
echo "| job | setting | at the check | check | final loss | vs uncompressed |"
echo "|---|---|---|---|---|---|"
for job in "${jobs[@]}"; do
  name=$(basename "$job" .toml)
  "$bin" cluster "$job" -n 2 --set "output.metrics=\"$out/a.csv\"" \
    --set "output.model=\"$out/model.txt\"" --set 'train.exchange="auto"' --set 'train.compressor="auto"' > "$out/auto.log" 2>&1 \
    || { cat "$out/auto.log" >&2; exit 1; }
  none=$(final_loss "$job" --set 'train.exchange="sharded"')
  printf '| %s | none | | reference | %.4f | |\n' "$name" "$none"
  # "[p0]   SETTING  loss L (G%)  progress P%  VERDICT", SETTING = "codec[, staleness S][, downlink D]"
  grep -E '^\[p0\]   .* loss [0-9.]+ .*progress' "$out/auto.log" | sed 's/^\[p0\] *//' |
    while IFS= read -r line; do
      verdict=${line##* }
      setting=$(echo "$line" | sed -E 's/ +loss [0-9.]+ .*//')
      measured=$(echo "$line" | sed -E 's/.* loss [0-9.]+ +//; s/ +(kept|refused)$//')
      [ "$verdict" = reference ] && continue
      codec=${setting%%,*}
      sets=(--set 'train.exchange="sharded"' --set "train.compressor={ name = \"$codec\" }")
      [[ $setting == *"staleness 1"* ]] && sets+=(--set 'train.staleness=1' --set 'train.replica="worker"')
      [[ $setting == *"downlink logquant"* ]] && sets+=(--set 'train.downlink={ name = "logquant" }')
      [[ $setting == *"downlink topk 3%"* ]] && sets+=(--set 'train.downlink={ name = "topk", ratio = 0.03 }')
      loss=$(final_loss "$job" "${sets[@]}")
      python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'| $name | $setting | $measured | $verdict | {a:.4f} | {100 * (a / b - 1):+.2f}% |')" "$loss" "$none"
    done
done
