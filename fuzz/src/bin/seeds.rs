//! Writes the seed corpus: valid messages of every codec, key coder and a spread of parameter
//! sets; envelopes around them and around pull requests; LibSVM text; the repository's job
//! files. Usage: `seeds CORPUS_DIR` (from `fuzz/run.sh`).

use std::fs;
use std::path::Path;

use gradflow::codec::{build_codec, CodecSpec, EncodeContext, CODEC_NAMES};
use gradflow::exchange::pull::Request;
use gradflow::exchange::{write_f32s, Envelope, DATA, PULL_REQUEST};

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
    println!("seeds: {} codecs, {envelopes} codec envelopes + 3 others, 4 LibSVM files, {jobs} job files", CODEC_NAMES.len());
}
