//! Writes the seed corpus: valid messages of every codec, key coder and a spread of parameter
//! sets; envelopes around them and around pull requests; LibSVM text; the repository's job
//! files. Usage: `seeds CORPUS_DIR` (from `fuzz/run.sh`).

use std::fs;
use std::path::Path;

use gradflow::codec::{build_codec, CodecSpec, EncodeContext, CODEC_NAMES};
use gradflow::data::table::{write_rows, FeatureMap, PreparedRow};
use gradflow::exchange::pull::Request;
use gradflow::exchange::{write_f32s, Envelope, DATA, PULL_REQUEST};
use gradflow::handshake::{Hello, TAG_LEN, VERSION};
use gradflow::model::file::ModelFile;

/// Parameter sets per codec besides the defaults, as TOML inline-table fields.
fn variants(name: &str) -> &'static [&'static str] {
    match name {
        "zipml" => &["bits = 16", "bits = 4"],
        "fastsgd" => &["tau = 1", "b = 4.0, l = 4"],
        "gspar" => &["variant = \"closed_form\", eps = 0.5", "density = 0.5"],
        "topk" | "randomk" => &["ratio = 0.5", "ratio = 1.0"],
        "threshold" => &["threshold = 0.001"],
        "qsgd" => &["levels = 2", "bucket = 7", "levels = 1000, bucket = 1"],
        "terngrad" => &["clip = 0.0"],
        "signsgd" => &["vote = true"],
        "logquant" => &["bits = 2"],
        "sketchml" | "skcompress" => &[
            "bins = 16, groups = 2",
            "rows = 1, column_ratio = 4.0",
            "decode = \"mean\"",
            "decode = \"midpoint\"",
        ],
        _ => &[],
    }
}

/// Every parameter set of `name`, each also with every key coder the codec accepts.
fn specs(name: &str) -> Vec<CodecSpec> {
    #[derive(serde::Deserialize)]
    struct Wrap {
        c: CodecSpec,
    }
    let mut fields: Vec<String> = vec![String::new()];
    fields.extend(variants(name).iter().map(|v| format!(", {v}")));
    let mut out = Vec::new();
    for f in &fields {
        for keys in [
            "",
            ", keys = \"raw\"",
            ", keys = \"delta_binary\"",
            ", keys = \"adaptive\"",
        ] {
            let text = format!("c = {{ name = \"{name}\"{f}{keys} }}");
            if let Ok(w) = toml::from_str::<Wrap>(&text) {
                out.push(w.c);
            }
        }
    }
    out
}

/// Gradients of several shapes: empty, one key, dense-ish, sparse, with exact zeros.
fn gradients() -> Vec<(Vec<u32>, Vec<f32>, u32)> {
    let shape = |n: u32, step: u32, dim: u32| {
        let keys: Vec<u32> = (0..n).map(|i| i * step + 3).collect();
        let values = (0..n)
            .map(|i| match (i * 7919) % 23 {
                0 => 0.0,
                r => (r as f32 - 11.5) * 1e-3 * if i % 5 == 0 { 40.0 } else { 1.0 },
            })
            .collect();
        (keys, values, dim)
    };
    vec![
        (vec![], vec![], 10),
        (vec![0], vec![0.5], 1),
        shape(40, 25, 1000),
        shape(300, 331, 100_000),
    ]
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let root = std::env::args().nth(1).unwrap_or_else(|| "corpus".into());
    let root = Path::new(&root);
    let mut envelopes = 0;
    for &name in CODEC_NAMES {
        for (s, spec) in specs(name).iter().enumerate() {
            let mut codec = build_codec(spec).unwrap();
            for (g, (keys, values, dim)) in gradients().iter().enumerate() {
                let mut msg = Vec::new();
                let ctx = EncodeContext {
                    seed: 7,
                    round: g as u64,
                    worker: 1,
                    piece: 0,
                };
                codec.encode(keys, values, *dim, ctx, &mut msg).unwrap();
                write(
                    &root.join(format!("decode_{name}")),
                    &format!("p{s}-g{g}"),
                    &msg,
                );
                if s == 0 && g == 2 {
                    let e = Envelope {
                        dest: 0,
                        src: 1,
                        rows: 12,
                        kind: DATA,
                        payload: msg,
                        local: None,
                    };
                    write(
                        &root.join("envelope"),
                        &format!("{name}"),
                        &bincode::serialize(&e).unwrap(),
                    );
                    envelopes += 1;
                }
            }
        }
    }
    for (i, request) in [Request::Keys(vec![1, 5, 900, 70_000]), Request::All]
        .iter()
        .enumerate()
    {
        let mut payload = Vec::new();
        request.encode(&mut payload);
        let e = Envelope {
            dest: 1,
            src: 0,
            rows: 0,
            kind: PULL_REQUEST,
            payload,
            local: None,
        };
        write(
            &root.join("envelope"),
            &format!("pull{i}"),
            &bincode::serialize(&e).unwrap(),
        );
    }
    let mut slice = Vec::new();
    write_f32s([0.5, -1.0, 3e-5], &mut slice);
    let e = Envelope {
        dest: 1,
        src: 0,
        rows: 0,
        kind: DATA,
        payload: slice,
        local: None,
    };
    write(
        &root.join("envelope"),
        "slice",
        &bincode::serialize(&e).unwrap(),
    );
    let svm = [
        "+1 1:0.5 3:1 10:-2\n-1 2:1\n",
        "1 qid:3 1:1 4:2.5e-3 # comment\n0 7:1\n\n",
        "-1 0:1 5:1\n+1 999:0.25\n",
        "2.5 1:1e10 2:-0\n",
    ];
    for (i, text) in svm.iter().enumerate() {
        write(&root.join("libsvm"), &format!("s{i}"), text.as_bytes());
    }
    // IDX: the labels file's length, the labels, then the images (2 images of 2 × 2 pixels).
    let labels = [0u8, 0, 8, 1, 0, 0, 0, 2, 3, 9];
    let mut idx = vec![labels.len() as u8];
    idx.extend_from_slice(&labels);
    idx.extend_from_slice(&[0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2]);
    idx.extend_from_slice(&[0, 255, 7, 0, 1, 2, 3, 4]);
    write(&root.join("idx"), "s0", &idx);
    let mut jobs = 0;
    for dir in ["jobs", "bench", "tests/jobs"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml") {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                write(&root.join("job"), &name, &fs::read(&path).unwrap());
                jobs += 1;
            }
        }
    }
    // Tables in the fuzz map's columns: quoting, missing values, CRLF, a date with a time.
    let tables = [
        "y,c,x,z,t\n1,a,0.5,3,2013-01-05\n0,b,NA,,2013-02-28T23:15\n",
        "t,z,x,c,y\r\n2024-02-29 07:00,1e3,-2,\"a, quoted\",1\r\n2020-12-31,0,0,b,0\r\n",
        "y,c,x,z,t,extra\n1,zz,1,1,2001-01-01,q\n",
    ];
    for (i, text) in tables.iter().enumerate() {
        write(&root.join("table"), &format!("t{i}"), text.as_bytes());
        write(&root.join("table_lines"), &format!("t{i}"), text.as_bytes());
    }
    for (i, bytes) in parquet_tables().iter().enumerate() {
        write(&root.join("parquet_table"), &format!("p{i}"), bytes);
    }
    // Model files: without an intercept, with one, with the fuzz map as its features, of a
    // program's own model, of a factorization machine (2 features of 2 weights) and of a
    // network (1 feature of 1 weight and 3 dense ones).
    let dir = tempfile::tempdir().unwrap();
    let map: FeatureMap = toml::from_str(gradflow_fuzz::TABLE_MAP).unwrap();
    let own = Some("unit-length".to_string());
    for (i, (intercept, features, model)) in [
        (None, None, None),
        (Some(2), None, None),
        (Some(3), Some(map), None),
        (Some(3), None, own),
        (Some(2), None, Some("fm:1".to_string())),
        (Some(0), None, Some("mlp:1".to_string())),
    ]
    .into_iter()
    .enumerate()
    {
        let m = ModelFile {
            loss: "logistic".into(),
            weights: vec![0.5, -1.0, 0.0, 2.0],
            intercept,
            classes: None,
            model,
            features: features.map(|f| toml::to_string(&f).unwrap()),
        };
        let p = dir.path().join("m.txt");
        m.save(&p).unwrap();
        write(
            &root.join("model_file"),
            &format!("m{i}"),
            &fs::read(&p).unwrap(),
        );
    }
    write(
        &root.join("model_file"),
        "softmax",
        b"# gradflow model v2\nloss softmax\ndim 6\nintercept 3\nclasses 3\nweights\n0 0.5\n5 -1\n",
    );
    write(
        &root.join("model_file"),
        "v1",
        b"# gradflow model v1\nloss logistic\ndim 3\n0 0.5\n2 -1\n",
    );
    // A rows file.
    let rows = vec![
        PreparedRow {
            id: 7,
            test: false,
            label: 1.0,
            keys: vec![0, 5],
            values: vec![1.0, -2.5],
        },
        PreparedRow {
            id: 90,
            test: true,
            label: -1.0,
            keys: vec![],
            values: vec![],
        },
    ];
    let p = dir.path().join("r.bin");
    write_rows(&p, 6, &rows).unwrap();
    write(&root.join("rows_file"), "r0", &fs::read(&p).unwrap());
    // A row cache file: a training set with real values, a test set of ones, notes and a
    // feature map.
    let mut train = gradflow::data::Dataset::new(9);
    train.push_row(&[1, 4, 8], &[1.0, -2.5, 1.0], 1.0);
    train.push_row(&[], &[], 0.0);
    train.push_row(&[0, 8], &[1.0, 1.0], 1.0);
    let mut test = gradflow::data::Dataset::new(9);
    test.push_row(&[3, 8], &[1.0, 1.0], 0.0);
    let cached = gradflow::data::cache::CachedRows {
        dim: 9,
        train,
        test,
        ignored_test_features: 2,
        features: Some("dim = 9\n".into()),
        notes: vec!["a note".into()],
    };
    let p = dir.path().join("c.gfcache");
    gradflow::data::cache::write(&p, 0x5eed, &cached).unwrap();
    write(&root.join("cache_file"), "c0", &fs::read(&p).unwrap());
    // Handshakes: a hello from process 1 to process 0 (the listener's side) and one from 0 to
    // 1 with a MAC after it (the connector's), for the target's job.
    let hello = |from, to| {
        Hello {
            version: VERSION,
            from,
            to,
            run: [0; 16],
            nonce: [3; 16],
        }
        .encode()
    };
    let mut listener = vec![0u8];
    listener.extend_from_slice(&hello(1, 0));
    listener.extend_from_slice(&[5; 2 * TAG_LEN]);
    write(&root.join("handshake"), "listener", &listener);
    // The connector reads the listener's hello, then an answer: ACCEPTED (1) and a MAC, or
    // DIFFERENT (3), a MAC and a description of one entry.
    let mut different = vec![1u8];
    different.extend_from_slice(&hello(0, 1));
    different.push(3);
    different.extend_from_slice(&[5; TAG_LEN]);
    different.extend_from_slice(&1u32.to_le_bytes());
    different.push(0);
    for part in [&b"train.seed"[..], b"5"] {
        different.extend_from_slice(&(part.len() as u32).to_le_bytes());
        different.extend_from_slice(part);
    }
    write(&root.join("handshake"), "different", &different);
    let mut connector = vec![1u8];
    connector.extend_from_slice(&hello(0, 1));
    connector.push(1);
    connector.extend_from_slice(&[5; TAG_LEN]);
    write(&root.join("handshake"), "connector", &connector);
    checkpoint_seeds(&root.join("checkpoint"));
    println!("seeds: {} codecs, {envelopes} codec envelopes + 3 others, 4 LibSVM files, {jobs} job files, 3 tables, 2 Parquet tables, 7 model files, 1 rows file, 1 cache file, 1 IDX pair, 3 handshakes, 2 checkpoint files", CODEC_NAMES.len());
}

/// A worker file of the checkpoint target's job (its state, unsealed: the target seals it)
/// and a rows log of three rows.
fn checkpoint_seeds(dir: &Path) {
    use gradflow::dataflow::checkpoint::{CheckpointSpec, Checkpoints, RowsLog};
    use gradflow::dataflow::WorkerState;
    use gradflow::metrics::MetricsRow;
    let tmp = tempfile::tempdir().unwrap();
    let gradflow::dataflow::checkpoint::WorkerSlot {
        job,
        round,
        worker,
        workers,
    } = gradflow_fuzz::CHECKPOINT_FILE;
    let spec = CheckpointSpec {
        every_rounds: round,
        dir: tmp.path().to_path_buf(),
    };
    let ck = Checkpoints::new(Some(spec), job, Vec::new(), 0, workers, workers).unwrap();
    let state = WorkerState::shared(&gradflow_fuzz::checkpoint_plan());
    state.borrow_mut().model.weights.set(3, 0.25);
    ck.save_worker(round, worker, &state.borrow(), Default::default())
        .unwrap();
    let file = tmp
        .path()
        .join(format!("round-{round:012}/worker-{worker:04}.bin"));
    let sealed = fs::read(file).unwrap();
    let mut seed = vec![0u8];
    seed.extend_from_slice(&sealed[8..sealed.len() - 32]); // without magic and checksum
    write(dir, "worker", &seed);
    let mut log = RowsLog::begin(Some(tmp.path()), &job, None, &mut |_| {})
        .unwrap()
        .unwrap();
    for (kind, round) in [("round", 0), ("round", 1), ("epoch", 1)] {
        let row = MetricsRow {
            kind,
            round,
            test_loss: Some(0.5),
            ..Default::default()
        };
        log.append(&row).unwrap();
    }
    log.mark().unwrap();
    let path = fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("metrics-rows-"))
        .unwrap()
        .path();
    let mut seed = vec![1u8, 3, 0];
    seed.extend_from_slice(&fs::read(path).unwrap());
    write(dir, "rows-log", &seed);
}

/// The fuzz map's columns as Parquet: typed (integers, a dictionary string, a float and an
/// integer with nulls, a timestamp; two row groups, Snappy), and all strings with a date.
fn parquet_tables() -> Vec<Vec<u8>> {
    use arrow_array::builder::StringDictionaryBuilder;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
        TimestampSecondArray,
    };
    use std::sync::Arc;
    let mut c = StringDictionaryBuilder::<Int32Type>::new();
    for v in ["a", "b", "a, quoted"] {
        c.append_value(v);
    }
    let typed = RecordBatch::try_from_iter([
        ("y", Arc::new(Int64Array::from(vec![1, 0, 1])) as ArrayRef),
        ("c", Arc::new(c.finish())),
        (
            "x",
            Arc::new(Float64Array::from(vec![Some(0.5), None, Some(-2.0)])),
        ),
        (
            "z",
            Arc::new(Int64Array::from(vec![Some(3), None, Some(1000)])),
        ),
        (
            "t",
            Arc::new(TimestampSecondArray::from(vec![
                1_357_344_000,
                1_362_093_300,
                0,
            ])),
        ),
    ])
    .unwrap();
    let text = RecordBatch::try_from_iter([
        (
            "t",
            Arc::new(Date32Array::from(vec![19_000, 11_000])) as ArrayRef,
        ),
        ("z", Arc::new(StringArray::from(vec!["1e3", "0"]))),
        ("x", Arc::new(StringArray::from(vec!["-2", "NA"]))),
        ("c", Arc::new(StringArray::from(vec!["a", "b"]))),
        ("y", Arc::new(StringArray::from(vec!["1", "0"]))),
    ])
    .unwrap();
    [typed, text]
        .iter()
        .map(|batch| {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(2))
                .set_compression(parquet::basic::Compression::SNAPPY)
                .build();
            let mut bytes = Vec::new();
            let mut w =
                parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props))
                    .unwrap();
            w.write(batch).unwrap();
            w.close().unwrap();
            bytes
        })
        .collect()
}
