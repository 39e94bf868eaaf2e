#!/usr/bin/env bash
# Fault injection: a 2-process job with checkpoints and a row cache is hit, at a random moment,
# by one fault (a SIGKILL of one process, a SIGSTOP of one until its peer gives up, or a kill
# followed by damage to the files: a flipped byte in a checkpoint file, a completion marker
# deleted, a file of the latest checkpoint swapped with the round before's, replaced by the
# same file of another run, or replaced by a FIFO, or a flipped bit in a row cache file), then
# resumed with --resume. Each iteration must end one of two ways:
#   - recovered: the resumed run succeeds and its model equals the uninterrupted run's, byte
#     for byte;
#   - refused: the resumed run fails with an error that names its cause (only allowed after
#     damage to the checkpoint files, never after a kill, a stop or damage to the cache).
# Anything else (a resumed run that succeeds with another model, a hang, a refusal after a
# plain kill) fails the script.
#
#   bash bench/faults.sh [ITERATIONS] [SEED]      (default 50 iterations, seed 1)
#
# Prints one line per iteration and a summary; exits 1 on any failure. Every random choice
# comes from SEED (bash's RANDOM), but where a kill lands depends on timing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bash reports each process it sees killed by a signal ("line N: PID Killed ..."): here they
# are killed on purpose, so those lines are dropped.
exec 2> >(grep --line-buffered -v -E ': line [0-9]+: +[0-9]+ (Killed|Stopped)' >&2)
iterations=${1:-50}
RANDOM=${2:-1}

cargo build --release -q
bin=$PWD/target/release/gradflow
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/job.toml" <<'EOF'
[data.synth]
rows = 6000
dim = 20000
nnz = 20
[model]
loss = "logistic"
lambda = 0.001
[optimizer]
kind = "adam"
lr = 0.02
[train]
epochs = 300
seed = 5
compressor = { name = "topk", ratio = 0.2 }
memory = "residual"
downlink = { name = "topk", ratio = 0.5 }
checkpoint = { every_rounds = 25, dir = "ckpt" }
[data]
cache = "cache"
[output]
model = "model.txt"
metrics = "metrics.csv"
EOF

free_ports() {
  python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))'
}

# start DIR EXTRA...: starts both processes in DIR; their pids in `pids`.
start() {
  local dir=$1
  shift
  local hosts
  hosts=$(free_ports)
  pids=()
  for p in 0 1; do
    (cd "$dir" && exec "$bin" train job.toml -q -w 1 -n 2 -p "$p" --hosts "$hosts" \
      --peer-timeout 3 --startup-timeout 20 "$@" >"out-$p.log" 2>"err-$p.log") &
    pids+=($!)
  done
}

# wait_all SECONDS: waits for both processes; kills them after SECONDS. Sets `codes`.
wait_all() {
  local limit=$1 waited=0
  codes=()
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((waited < limit * 10)); do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 "$p" 2>/dev/null; then
      kill -CONT "$p" 2>/dev/null || true
      kill -9 "$p" 2>/dev/null || true
      hung=1
    fi
    local code=0
    { wait "$p"; } 2>/dev/null || code=$?
    codes+=("$code")
  done
  pids=()
}

export GRADFLOW_CLUSTER_SECRET=faults
echo "faults: the uninterrupted run"
mkdir -p "$work/ref"
cp "$work/job.toml" "$work/ref/"
hung=0
start "$work/ref"
wait_all 120
if ((hung)) || [[ ${codes[*]} != "0 0" ]]; then
  echo "faults: the uninterrupted run failed: $(cat "$work/ref/err-0.log" "$work/ref/err-1.log")"
  exit 1
fi

# Another run's checkpoints (another seed), for files that are whole but not this run's.
echo "faults: a foreign run"
mkdir -p "$work/foreign"
sed 's/^seed = 5/seed = 6/' "$work/job.toml" >"$work/foreign/job.toml"
start "$work/foreign" --set 'train.epochs=8'
wait_all 120
foreign_round=$(find "$work/foreign/ckpt" -maxdepth 1 -name 'round-*' | sort | tail -n 1)
if [[ -z $foreign_round ]]; then
  echo "faults: the foreign run left no checkpoint: $(cat "$work/foreign/err-0.log")"
  exit 1
fi

# flip_bit FILE: flips one random bit of FILE; sets `at` to its byte.
flip_bit() {
  local size byte
  size=$(stat -c %s "$1")
  at=$(((RANDOM * 32768 + RANDOM) % size))
  byte=$(od -An -tu1 -j "$at" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ (1 << (RANDOM % 8)))))" \
    | dd of="$1" bs=1 seek="$at" count=1 conv=notrunc status=none
}

# latest_file DIR: a random worker or metrics file of the latest complete round in DIR/ckpt
# and that round's directory, or nothing.
latest_file() {
  local round
  round=$(find "$1/ckpt" -maxdepth 1 -name 'round-*' | sort | tail -n 1)
  [[ -n $round ]] || return 0
  mapfile -t fs < <(find "$round" -name '*.bin' -printf '%f\n' | sort)
  ((${#fs[@]})) || return 0
  echo "$round/${fs[RANDOM % ${#fs[@]}]}"
}

recovered=0 refused=0 early=0 failures=0
faults=(kill stop flip marker swap foreign fifo cache)
for ((i = 1; i <= iterations; i++)); do
  dir="$work/run-$i"
  mkdir -p "$dir"
  cp "$work/job.toml" "$dir/"
  fault=${faults[RANDOM % ${#faults[@]}]}
  victim=$((RANDOM % 2))
  delay=$((RANDOM % 1500))
  hung=0
  start "$dir"
  # Once a checkpoint is complete on both processes, wait a random while, then strike.
  for ((t = 0; t < 300; t++)); do
    if compgen -G "$dir/ckpt/round-*/complete-process-1" >/dev/null \
      && compgen -G "$dir/ckpt/round-*/complete-process-0" >/dev/null; then break; fi
    sleep 0.05
  done
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  what=$fault
  case $fault in
    kill) kill -9 "${pids[victim]}" 2>/dev/null || true ;;
    stop)
      # Stopped until its peer gives up on it (--peer-timeout), then continued.
      kill -STOP "${pids[victim]}" 2>/dev/null || true
      other=${pids[1 - victim]}
      for ((t = 0; t < 300; t++)); do kill -0 "$other" 2>/dev/null || break; sleep 0.1; done
      kill -CONT "${pids[victim]}" 2>/dev/null || true
      ;;
    *) kill -9 "${pids[@]}" 2>/dev/null || true ;;
  esac
  wait_all 30
  if [[ ${codes[*]} == "0 0" ]]; then
    # The run ended before the fault struck.
    early=$((early + 1))
    echo "$i $fault: the run ended before the fault"
    continue
  fi
  if [[ $fault == flip ]]; then
    mapfile -t files < <(find "$dir/ckpt" -type f | sort)
    file=${files[RANDOM % ${#files[@]}]}
    flip_bit "$file"
    what="flip byte $at of ${file#"$dir"/}"
  elif [[ $fault == marker ]]; then
    last=$(find "$dir/ckpt" -name 'complete-process-1' | sort | tail -n 1)
    if [[ -n $last ]]; then
      rm "$last"
      what="marker ${last#"$dir"/} deleted"
    fi
  elif [[ $fault == swap || $fault == foreign || $fault == fifo ]]; then
    file=$(latest_file "$dir")
    what="$fault: nothing to damage"
    if [[ -n $file ]]; then
      name=$(basename "$file")
      previous=$(find "$dir/ckpt" -maxdepth 1 -name 'round-*' | sort | tail -n 2 | head -n 1)
      case $fault in
        swap) if [[ -e $previous/$name && $previous != $(dirname "$file") ]]; then
            cp "$previous/$name" "$file"
            what="swap ${file#"$dir"/} with ${previous#"$dir"/}'s"
          fi ;;
        foreign) if [[ -e $foreign_round/$name ]]; then
            cp "$foreign_round/$name" "$file"
            what="foreign ${file#"$dir"/}"
          fi ;;
        fifo) rm -f "$file" && mkfifo "$file" && what="fifo in place of ${file#"$dir"/}" ;;
      esac
    fi
  elif [[ $fault == cache ]]; then
    mapfile -t files < <(find "$dir/cache" -type f -name '*.gfcache' 2>/dev/null | sort)
    what="cache: no cache file yet"
    if ((${#files[@]})); then
      file=${files[RANDOM % ${#files[@]}]}
      flip_bit "$file"
      what="cache: flip byte $at of ${file#"$dir"/}"
    fi
  else
    what="$fault process $victim after ${delay} ms"
  fi
  rm -f "$dir/model.txt"
  hung=0
  start "$dir" --resume ckpt
  wait_all 120
  if ((hung)); then
    echo "$i $what: FAILED, the resumed run hung"
    failures=$((failures + 1))
  elif [[ ${codes[*]} == "0 0" ]]; then
    if cmp -s "$dir/model.txt" "$work/ref/model.txt"; then
      recovered=$((recovered + 1))
      echo "$i $what: recovered, the same model"
    else
      echo "$i $what: FAILED, the resumed run ended with another model"
      failures=$((failures + 1))
    fi
  else
    # Each process's first error line: the one that found the damage names it, the other may
    # only have waited for it.
    cause=$(for p in 0 1; do grep -h -m 1 '^error:' "$dir/err-$p.log" | cut -c 1-240; done \
      | paste -sd '|' - || true)
    if [[ $fault =~ ^(flip|foreign|fifo|swap)$ && -n $cause ]]; then
      refused=$((refused + 1))
      echo "$i $what: refused: $cause"
    else
      echo "$i $what: FAILED, the resumed run failed: ${cause:-no error line}"
      failures=$((failures + 1))
    fi
  fi
  rm -rf "$dir"
done
echo "faults: $iterations iterations: $recovered recovered with the same model, $refused refused" \
  "naming the cause, $early ended before the fault, $failures failed"
((failures == 0))
