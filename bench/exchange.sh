#!/usr/bin/env bash
# Exchange strategies side by side on loopback: payload bytes per process per round (uplink and
# downlink, to and from other processes), the busiest process, final test loss and wall time,
# for each codec under sharded (uncompressed downlink, compressed downlink, pull), allgather
# and the sketch exchange, at W = 2 and 4 processes of one worker each.
#
#   bash bench/exchange.sh [job] [W...]        (default: bench/exchange.toml, W = 2 4)
#
# Prints a Markdown table. Every cell is a real `gradflow cluster` run over loopback TCP.
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-bench/exchange.toml}
shift || true
workers=${*:-2 4}
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The compressed downlink measured best on this job: the top 3% of each owner's change (plus
# its residual), Rice-coded keys.
down='{name="topk",ratio=0.03}'
codecs=(none sketchml skcompress fastsgd topk)
echo "| W | exchange | codec | memory | up kB | down kB | busiest kB | vs sharded/none | test loss | vs none | wall s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for w in $workers; do
  base=""
  cells=()
  for c in "${codecs[@]}"; do
    cells+=("sharded|$c|")
    cells+=("sharded, compressed downlink|$c|train.downlink=$down")
    cells+=("sharded, pull|$c|train.pull=true")
    cells+=("allgather|$c|train.exchange=\"allgather\"")
  done
  cells+=("sketch|none|train.exchange=\"sketch\"")
  for cell in "${cells[@]}"; do
    IFS='|' read -r name codec set <<< "$cell"
    args=(--set "train.compressor={name=\"$codec\"}" --set "output.metrics=\"$out/m.csv\"")
    [ -n "$set" ] && args+=(--set "$set")
    start=$(date +%s.%N)
    ./target/release/gradflow cluster "$job" -n "$w" "${args[@]}" > "$out/log" 2>&1 \
      || { echo "| $w | $name | $codec | failed: $(tail -1 "$out/log") |"; continue; }
    end=$(date +%s.%N)
    line=$(python3 - "$out/m.csv" "$w" "$name" "$codec" "$base" "$start" "$end" <<'PY'
import csv, sys
path, w, name, codec, base, start, end = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
rounds = sum(1 for r in rows if r["kind"] == "round")
epoch = [r for r in rows if r["kind"] == "epoch"][-1]
procs = [r for r in rows if r["kind"] == "process"]
up = sum(int(p["uplink_bytes"]) for p in procs) / len(procs) / rounds
down = sum(int(p["downlink_bytes"]) for p in procs) / len(procs) / rounds
busiest = max(int(p["uplink_bytes"]) + int(p["downlink_bytes"]) for p in procs) / rounds
loss = float(epoch["test_loss"])
memory = epoch.get("memory", "")
ref_busy, ref_loss = (map(float, base.split(":")) if base else (busiest, loss))
print(f"{busiest}:{loss}|{up / 1e3:.1f}|{down / 1e3:.1f}|{busiest / 1e3:.1f}|{ref_busy / busiest:.1f}x|{loss:.4f}|{100 * (loss / ref_loss - 1):+.2f}%|{float(end) - float(start):.1f}")
PY
)
    IFS='|' read -r key up dn busy ratio loss dloss wall <<< "$line"
    [ -z "$base" ] && base=$key
    mem=$(sed -n 's/.*exchange: .*memory \([a-z]*\).*/\1/p' "$out/log" | head -1)
    echo "| $w | $name | $codec | ${mem:-} | $up | $dn | $busy | $ratio | $loss | $dloss | $wall |"
  done
done
