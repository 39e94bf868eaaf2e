#!/usr/bin/env bash
# Two processes x 1 worker on loopback TCP: rounds per second and bytes per round for each
# exchange strategy, measured in the same run.
#   bash bench/loopback.sh [job]        (default bench/loopback.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-bench/loopback.toml}
cargo build --release -q
out=$(mktemp -d)
printf '%-10s %8s %12s %16s %16s %16s\n' exchange rounds rounds_per_s payload_B_round wire_data_B_round progress_B_round
for ex in sharded allgather; do
  log="$out/$ex.log"
  ./target/release/gradflow cluster "$job" -n 2 -w 1 --exchange "$ex" --set "output.metrics=\"$out/$ex.csv\"" > "$log"
  python3 - "$out/$ex.csv" "$log" "$ex" <<'PY'
import csv, re, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "round"]
n = len(rows)
span = float(rows[-1]["seconds"]) - float(rows[0]["seconds"])
payload = sum(int(r["uplink_bytes"]) + int(r["downlink_bytes"]) for r in rows)
data = progress = 0
for line in open(sys.argv[2]):
    m = re.search(r"wire: (\d+) bytes on data channels in \d+ messages .* and (\d+) bytes on progress", line)
    if m:
        data += int(m.group(1)); progress += int(m.group(2))
print(f"{sys.argv[3]:<10} {n:>8} {(n - 1) / span:>12.1f} {payload / n:>16.0f} {data / n:>16.0f} {progress / n:>16.0f}")
PY
done
rm -rf "$out"
