#!/usr/bin/env bash
# `normalize = true` (text rows scaled to unit length) against raw word counts, at three L2
# strengths, on generated mails whose lengths spread over two orders of magnitude (log-normal,
# 3 to ~1000 words; 8% of the words carry the class, 4% the other class's, the rest are
# noise): 6,000 rows, logistic regression, Adam at 0.01, 10 epochs, one worker. A row of unit
# length has margins of at most ‖w‖, so the default λ = 0.01 keeps the probabilities near the
# base rate: its log loss is poor where its AUC is not.
#
#   bash bench/normalize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 - "$out/mails.csv" <<'PY'
import csv, random, sys
random.seed(5)
spam = ["cheap", "pills", "buy", "now", "offer", "free", "winner", "click", "money", "deal"]
ham = ["meeting", "project", "lunch", "report", "team", "schedule", "review", "notes", "call", "plan"]
common = ["the", "a", "to", "and", "of", "in", "for", "is", "on", "you", "this", "with", "at", "be"]
with open(sys.argv[1], "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["y", "text"])
    for _ in range(6000):
        y = random.random() < 0.4
        words = []
        for _ in range(int(random.lognormvariate(3.5, 1.0)) + 3):
            r = random.random()
            if r < 0.08:
                words.append(random.choice(spam if y else ham))
            elif r < 0.12:
                words.append(random.choice(ham if y else spam))
            else:
                words.append(random.choice(common) + str(random.randint(0, 300)))
        w.writerow(["spam" if y else "ham", " ".join(words)])
PY
echo "| normalize | lambda | test log loss | accuracy | AUC |"
echo "|---|---|---|---|---|"
for norm in false true; do
  for lambda in 0.01 0.0001 0.000001; do
    line=$(./target/release/gradflow train --data "$out/mails.csv" --label y=spam \
      --text "text:normalize=$norm" --lambda "$lambda" --epochs 10 2>/dev/null | grep '^epoch  10')
    read -r loss acc auc <<< "$(echo "$line" | sed -E 's/.*test_loss ([0-9.]+) +acc ([0-9.]+) +auc ([0-9.]+).*/\1 \2 \3/')"
    echo "| $norm | $lambda | $loss | $acc | $auc |"
  done
done
