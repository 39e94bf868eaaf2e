#!/usr/bin/env bash
# Soak: 100,000 rounds of a small job as a 2-process loopback cluster, RSS of each process
# sampled every second from /proc. Prints the samples and, per process, RSS after warm-up (a
# third of the run: the allocator's arenas and timely's buffers grow for the first seconds)
# against the end and the largest sample after warm-up.
#
#   bash bench/soak.sh [ROUNDS] [EVERY]   (default 100000 rounds; EVERY: also a checkpoint
#                                        every EVERY rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-100000}
every=${2:-0}
cargo build --release -q
bin=target/release/gradflow
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
epochs=$((rounds / 100))
cat > "$dir/job.toml" <<JOB
[data.synth]
rows = 4000
dim = 5000
nnz = 10
[model]
loss = "logistic"
[optimizer]
kind = "adam"
lr = 0.01
[train]
epochs = $epochs
batch_fraction = 0.01
compressor = { name = "topk", ratio = 0.5 }
$( ((every > 0)) && echo "checkpoint = { every_rounds = $every, dir = \"$dir/ckpt\" }" )
[output]
metrics = "$dir/metrics.csv"
JOB
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(",".join("127.0.0.1:%d"%x.getsockname()[1] for x in s))')
export GRADFLOW_CLUSTER_SECRET=soak
$bin train "$dir/job.toml" -q -n 2 -p 1 --hosts "$ports" > /dev/null 2>&1 & p1=$!
$bin train "$dir/job.toml" -q -n 2 -p 0 --hosts "$ports" > "$dir/out0" 2>&1 & p0=$!
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "seconds rss0_kb rss1_kb"
t=0
: > "$dir/samples"
while kill -0 $p0 2>/dev/null; do
  echo "$t $(rss $p0) $(rss $p1)" | tee -a "$dir/samples"
  sleep 1; t=$((t + 1))
done
wait $p0 $p1
rows=$(grep -c '^round,' "$dir/metrics.csv")
echo "rounds in the metrics: $rows"
python3 - "$dir/samples" <<'PY'
import sys
s = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
s = [x for x in s if x[1] > 0 and x[2] > 0]
w = max(1, len(s) // 3)
warm, end = s[w], s[-1]
for p in (1, 2):
    peak = max(x[p] for x in s[w:])
    print(f"process {p-1}: RSS {warm[p]/1024:.1f} MiB at {warm[0]} s (a third of the run), "
          f"{end[p]/1024:.1f} MiB at {end[0]} s: {100*(end[p]/warm[p]-1):+.1f}% "
          f"(largest after warm-up {peak/1024:.1f} MiB, {100*(peak/warm[p]-1):+.1f}%)")
PY
