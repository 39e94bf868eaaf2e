#!/usr/bin/env bash
# Text features on the Women's E-Commerce Clothing Reviews: gradflow (jobs/reviews.toml: words
# and word pairs of the review and its title, hashed, L2-normalised; department and class
# one-hot; age in 6 quantile buckets; logistic regression, Adam, 1 and 2 workers) against
# scikit-learn's HashingVectorizer + SGDClassifier with the same features (OneHotEncoder,
# KBinsDiscretizer; log loss; three alphas) on the same train and test files, in the same run:
# test AUC, log loss and seconds (loading and features included). Needs Python 3 with pyarrow,
# pandas and scikit-learn (pip install pyarrow pandas scikit-learn).
#
#   bash bench/reviews.sh [epochs]     (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-10}
python3 -c "import sklearn, pandas" 2>/dev/null || { echo "needs scikit-learn and pandas (pip install scikit-learn pandas)"; exit 1; }
[ -f datasets/reviews/train.csv.gz ] || python3 datasets/reviews/fetch.py
cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| run | test AUC | test log loss | seconds |"
echo "|---|---|---|---|"
counts='data.features.text=[{column="review",ngrams=2,hash_bits=20},{column="title",ngrams=2,hash_bits=18}]'
for run in "1" "2" "2 counts"; do
  w=${run%% *}
  sets=(); name="gradflow -w $w, Adam, $epochs epochs"
  if [[ $run == *counts ]]; then sets=(--set "$counts"); name="$name, counts (normalize = false)"; fi
  start=$(date +%s.%N)
  ./target/release/gradflow train jobs/reviews.toml -w "$w" --epochs "$epochs" \
    --metrics "$out/m.csv" "${sets[@]}" > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  end=$(date +%s.%N)
  python3 - "$out/m.csv" "$name" "$start" "$end" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "epoch"]
last = rows[-1]
print(f"| {sys.argv[2]} | {float(last['test_auc']):.4f} | {float(last['test_loss']):.4f} "
      f"| {float(sys.argv[4]) - float(sys.argv[3]):.2f} |")
PY
done
python3 -W ignore - "$epochs" <<'PY'
import sys, time
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.preprocessing import KBinsDiscretizer, OneHotEncoder

epochs = int(sys.argv[1])
read = lambda name: pd.read_csv(f"datasets/reviews/{name}.csv.gz", keep_default_na=False)
train, test = read("train"), read("test")

def features(train, test):
    text = lambda col, bits: HashingVectorizer(ngram_range=(1, 2), n_features=2**bits,
                                               alternate_sign=False)
    parts = [text("review", 20), text("title", 18)]
    onehot = OneHotEncoder(handle_unknown="ignore").fit(train[["department", "class"]])
    age = KBinsDiscretizer(n_bins=6, strategy="quantile").fit(train[["age"]])
    X = lambda d: sp.hstack([parts[0].transform(d.review), parts[1].transform(d.title),
                             onehot.transform(d[["department", "class"]]),
                             age.transform(d[["age"]])]).tocsr()
    return X(train), X(test)

for alpha in [1e-6, 1e-5, 1e-4]:
    start = time.perf_counter()
    X, Xt = features(train, test)
    clf = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=epochs, tol=None, random_state=0)
    clf.fit(X, train.recommended)
    p = clf.predict_proba(Xt)[:, 1]
    seconds = time.perf_counter() - start
    print(f"| scikit-learn HashingVectorizer + SGDClassifier, alpha {alpha:g}, {epochs} epochs "
          f"| {roc_auc_score(test.recommended, p):.4f} | {log_loss(test.recommended, p):.4f} "
          f"| {seconds:.2f} |")
PY
