#!/usr/bin/env bash
# Memory of replicated against sharded model state (`train.state`), and a model larger than
# this machine could hold replicated.
#
# 1. Logistic regression + Adam over generated CTR rows (20,000 rows, 20 features each) of
#    2^27 features, `gradflow cluster -n 4 -w 1`, the `sharded` exchange: peak resident memory
#    of each process (VmHWM, from the process's summary line), test loss and seconds, with
#    replicated and with sharded state.
# 2. The same at 2^30 features (12.9 GB of weights and Adam moments; replicated, each of the
#    4 processes would reserve 17.3 GB with its gradient accumulator, 69 GB in all), sharded,
#    each process under an address-space limit of 6 GB (`prlimit --as`), and the model file
#    written: RSS per process, seconds per epoch and bytes per round.
#
#   bash bench/state_memory.sh            # both
#   bash bench/state_memory.sh 27         # only the first
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=$PWD/target/release/gradflow
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

job() { # bits -> job file
  cat > "$out/job$1.toml" <<EOF
[data]
max_dim = $((1 << $1))
test_fraction = 0.2
[data.synth]
kind = "ctr"
rows = 20000
dim = $(((1 << $1) - 1))
nnz = 20
[model]
loss = "logistic"
[train]
epochs = 2
batch_fraction = 0.05
exchange = "sharded"
EOF
  echo "$out/job$1.toml"
}

# Runs a 4-process cluster and prints: peak memory of each process, the last test loss,
# seconds, payload bytes per round (all processes, both directions).
run() { # job, state, [prefix command...]
  local job=$1 state=$2
  shift 2
  local log="$out/run.log"
  "$@" "$bin" cluster "$job" -n 4 -w 1 --set "train.state=\"$state\"" \
    --set "output.model=\"$out/model-$state.txt\"" > "$log" 2>&1 || { cat "$log"; exit 1; }
  local peaks loss secs rounds bytes epochs
  peaks=$(grep -o 'peak memory [0-9.]* [kMG]*B' "$log" | sed 's/peak memory //' | paste -sd, -)
  loss=$(grep -o 'test_loss [0-9.]*' "$log" | tail -1 | cut -d' ' -f2)
  secs=$(grep -o 'on 4 worker(s) in [0-9.]* s' "$log" | grep -o '[0-9.]* s')
  epochs=$(grep -o 'epoch *[0-9]* *[0-9.]*s' "$log" | awk '$3 != "" {print $3}' | paste -sd, -)
  rounds=$(grep -o '([0-9]* rounds)' "$log" | grep -o '[0-9]*')
  bytes=$(grep -o 'sent [0-9.]* [kMG]*B up + [0-9.]* [kMG]*B down' "$log" | head -4 |
    awk '{u=$2*($3=="kB"?1e3:$3=="MB"?1e6:$3=="GB"?1e9:1); d=$6*($7=="kB"?1e3:$7=="MB"?1e6:$7=="GB"?1e9:1); s+=u+d} END {printf "%.1f kB", s/1e3}')
  echo "| $state | $peaks | $loss | $epochs | $secs | $bytes / $rounds rounds |"
}

echo "| state | peak memory per process | test loss | epochs' times (s, end of each) | run (start to end) | payload sent, all processes |"
echo "|---|---|---|---|---|---|"
j=$(job 27)
run "$j" replicated
run "$j" sharded
cmp "$out/model-replicated.txt" "$out/model-sharded.txt" && echo "(the two model files are equal byte for byte)"
if [ "${1:-}" != 27 ]; then
  j=$(job 30)
  run "$j" sharded prlimit --as=6000000000
  echo "(2^30 features, each process under prlimit --as=6000000000; model file $(wc -c < "$out/model-sharded.txt") bytes)"
fi
