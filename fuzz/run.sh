#!/usr/bin/env bash
# Fuzzes every codec's decoder, the exchange's envelope path, the LibSVM parser and the job
# loader with cargo-fuzz (libFuzzer + AddressSanitizer, release with debug assertions).
#
#   fuzz/run.sh [--seconds N | --runs N] [TARGET...]
#
# Each target runs N seconds (default 10) or N executions, seeded with valid messages of every
# codec, key coder and parameter set (src/bin/seeds.rs) plus the corpus of earlier runs.
# A target fails on a panic, on any single allocation over 256 MiB and on an input that takes
# over a second. Prints one row per target; exits 1 if any failed (the input that failed is
# kept under fuzz/artifacts/TARGET/). Needs a nightly toolchain; installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")"

seconds=10 runs=0 targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz/run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: no nightly toolchain (rustup toolchain install nightly); skipped"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo +nightly install cargo-fuzz --locked -q
fi

cargo +nightly fuzz build -O -a
bin="target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(cargo +nightly fuzz list | grep -v '^seeds$')
fi
"$bin/seeds" corpus

if ((runs > 0)); then limit="-runs=$runs"; else limit="-max_total_time=$seconds"; fi
mkdir -p logs
failed=0
printf '%-18s %14s %8s %12s  %s\n' target executions seconds peak_rss_mb result
for t in "${targets[@]}"; do
  mkdir -p "artifacts/$t" "corpus/$t"
  log="logs/$t.log"
  start=$SECONDS
  # Decoders also get inputs of a few MB (what a peer can send in one message).
  max_len=()
  if [[ $t == decode_* ]]; then max_len=(-max_len=4194304); fi
  if "$bin/$t" -malloc_limit_mb=256 -rss_limit_mb=2048 -timeout=1 -print_final_stats=1 \
      "${max_len[@]}" "$limit" -artifact_prefix="artifacts/$t/" "corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see fuzz/$log)"
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
  printf '%-18s %14s %8s %12s  %s\n' "$t" "${execs:-?}" "$((SECONDS - start))" "${rss:-?}" "$result"
  if [[ $result != ok ]]; then
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|malloc\(' "$log" | head -n 8 | sed 's/^/    /'
  fi
done
exit "$failed"
