//! What the tests of the models share: a data set only pairs of features explain, and every
//! codec and exchange against uncompressed training.

use std::path::Path;

use gradflow::model::file::ModelFile;

use super::{epoch_fields, epoch_losses, gradflow_ok, gradflow_outputs, job_from, run_local};

/// Rows of two categorical columns whose label is their parity: positive when `a + b` is even
/// (each column alone says nothing), 5% of labels flipped.
pub fn write_parity(path: &Path, rows: usize, seed: u64) -> Vec<bool> {
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = String::from("a,b,y\n");
    let mut labels = Vec::new();
    for _ in 0..rows {
        let (a, b) = (next() % 10, next() % 10);
        let y = ((a + b) % 2 == 0) != (next() % 20 == 0);
        t += &format!("a{a},b{b},{}\n", y as u8);
        labels.push(y);
    }
    std::fs::write(path, t).unwrap();
    labels
}

/// The test AUC of the last `epoch` line of a run's output.
pub fn last_auc(out: &str) -> f64 {
    let mut lines = out.lines().map(|l| l.trim_start_matches("[p0] "));
    let last = lines.rfind(|l| l.starts_with("epoch")).unwrap();
    last.split("auc ").nth(1).unwrap()[..6].parse().unwrap()
}

/// The flags of a run on `train` and `test`, with `extra`.
pub fn parity_args<'a>(train: &'a Path, test: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "--data",
        train.to_str().unwrap(),
        "--test-file",
        test.to_str().unwrap(),
        "--label",
        "y=1",
        "--categorical",
        "a,b",
        "--epochs",
        "10",
        "--lr",
        "0.05",
        "--lambda",
        "0",
    ];
    v.extend(extra);
    v
}

/// Every codec under both codec exchanges, and the sketch exchange, against uncompressed
/// training of `job` on 2 workers at every epoch, under each optimizer and learning rate; under
/// Adam every configuration also runs as a 2-process cluster, which must train the model the 2
/// threads trained, bit for bit.
pub struct CodecSweep {
    /// The job's text.
    pub job: String,
    /// `(optimizer.kind, optimizer.lr)` pairs.
    pub optimizers: &'static [(&'static str, &'static str)],
    /// The uncompressed run's last test loss must be below this (it trained).
    pub trained_below: f64,
    /// `train.sketch.k` of the sketch exchange.
    pub sketch_k: u32,
    /// How far above uncompressed a codec's (or `"sketch"`'s) test loss may be at any epoch:
    /// under Adam, and under the other optimizer.
    pub tolerance: fn(&str) -> (f64, f64),
}

impl CodecSweep {
    fn allowed(&self, codec: &str, adam: bool) -> f64 {
        let (under_adam, otherwise) = (self.tolerance)(codec);
        if adam {
            under_adam
        } else {
            otherwise
        }
    }

    /// Runs the sweep, `params(codec, optimizer)` adding to each codec's spec (`,ratio=0.5`),
    /// prints the report and fails if any run is beyond its tolerance.
    pub fn run(&self, params: impl Fn(&str, &str) -> &'static str) {
        let dir = tempfile::tempdir().unwrap();
        let job_path = dir.path().join("sweep.toml");
        std::fs::write(&job_path, &self.job).unwrap();
        let run_on = |overrides: &[String], processes: bool| {
            let o: Vec<&str> = overrides.iter().map(String::as_str).collect();
            let out = run_local(&job_from(&self.job, "sweep.toml", &o), 2);
            if processes {
                let model = dir.path().join("cluster.txt");
                let mut c = vec![
                    "cluster".to_string(),
                    job_path.display().to_string(),
                    "-n=2".into(),
                    format!("--model-out={}", model.display()),
                ];
                c.extend(overrides.iter().map(|o| format!("--set={o}")));
                gradflow_ok(&c);
                let weights = ModelFile::load(&model).unwrap().weights;
                assert!(
                    out.weights.as_ref() == Some(&weights),
                    "{overrides:?}: 2 processes and 2 threads trained different models"
                );
            }
            epoch_losses(&out.rows)
        };
        let run = |overrides: &[String]| run_on(overrides, false);
        let excess = |losses: &[f64], reference: &[f64]| {
            let worst = losses
                .iter()
                .zip(reference)
                .map(|(l, r)| l / r - 1.0)
                .fold(f64::MIN, f64::max);
            let broken = losses.len() != reference.len() || losses.iter().any(|l| !l.is_finite());
            if broken {
                f64::INFINITY
            } else {
                worst
            }
        };
        let (mut report, mut failed) = (String::new(), false);
        for &(optimizer, lr) in self.optimizers {
            let adam = optimizer == "adam";
            let with = |extra: &[String]| {
                let mut o = vec![
                    format!("optimizer.kind=\"{optimizer}\""),
                    format!("optimizer.lr={lr}"),
                ];
                o.extend_from_slice(extra);
                o
            };
            let mut line = |name: &str, exchange: &str, excess: f64, allowed: f64| {
                failed |= excess.is_nan() || excess > allowed;
                report += &format!(
                    "{name:>10} {exchange:>9} {optimizer:<5} worst epoch {:+.2}% (allowed {:.0}%)\n",
                    100.0 * excess,
                    100.0 * allowed
                );
            };
            for exchange in ["sharded", "allgather"] {
                let exchange_set = format!("train.exchange=\"{exchange}\"");
                let reference = run(&with(std::slice::from_ref(&exchange_set)));
                assert!(
                    *reference.last().unwrap() < self.trained_below,
                    "{optimizer} {exchange}: uncompressed test losses {reference:?}"
                );
                for &codec in gradflow::codec::CODEC_NAMES {
                    let extra = params(codec, optimizer);
                    let losses = run_on(
                        &with(&[
                            exchange_set.clone(),
                            format!("train.compressor={{name=\"{codec}\"{extra}}}"),
                        ]),
                        adam,
                    );
                    let allowed = self.allowed(codec, adam);
                    line(codec, exchange, excess(&losses, &reference), allowed);
                }
            }
            let sharded = run(&with(&[]));
            let sketch = run_on(
                &with(&[
                    "train.exchange=\"sketch\"".to_string(),
                    format!("train.sketch.k={}", self.sketch_k),
                ]),
                adam,
            );
            let allowed = self.allowed("sketch", adam);
            line("-", "sketch", excess(&sketch, &sharded), allowed);
        }
        println!("{report}");
        assert!(!failed, "{report}");
    }
}

/// randomk's unbiased steps are 1/ratio times a kept value: at its default 0.1, plain SGD's
/// tenfold steps make a model with products of weights (a factorization machine's pairs, a
/// network's layers) grow without bound; Adam's per-key scaling absorbs them. Under SGD the
/// sweeps give it ratio 0.5.
pub fn randomk_half_under_sgd(codec: &str, optimizer: &str) -> &'static str {
    if codec == "randomk" && optimizer == "sgd" {
        ",ratio=0.5"
    } else {
        ""
    }
}

/// 40,000 generated rows of planted pairs (10 fields of 50 values; 10,000 more test), 4 epochs
/// of 1% batches, λ 1e-4, under the `[model]` fields `model`.
pub fn pairs_job(model: &str) -> String {
    format!(
        r#"
[data.synth]
kind = "pairs"
rows = 50000
dim = 500
nnz = 10
[model]
{model}
lambda = 1e-4
[train]
epochs = 4
batch_fraction = 0.01
seed = 42
"#
    )
}

/// `train.pull` asks the owners for every key its next batch reaches: 2 epochs of `job` pulled
/// give the pushed model and test losses, bit for bit, and the model learned.
pub fn assert_pull_equals_push(job: &str) {
    let run = |pull: &str| {
        let out = run_local(&job_from(job, "pull.toml", &[pull, "train.epochs=2"]), 2);
        (out.weights.unwrap(), epoch_losses(&out.rows))
    };
    let (pushed, pulled) = (run("train.pull=false"), run("train.pull=true"));
    assert!(pushed.1.iter().all(|l| *l < 0.69), "{:?}", pushed.1);
    assert_eq!(pushed, pulled);
}

/// Each of `exchanges` (flags) on `model` flags over the parity files learns (test AUC > 0.9)
/// as a 2-process cluster and gives the epoch lines of 2 threads in one process.
pub fn assert_exchanges_learn_alike_on_processes(
    train: &Path,
    test: &Path,
    model: &[&str],
    exchanges: &[&[&str]],
) {
    for &exchange in exchanges {
        let mut c = vec!["cluster", "-n", "2"];
        c.extend(parity_args(train, test, model));
        c.extend(exchange);
        let (processes, _) = gradflow_outputs(&c);
        let auc = last_auc(&processes);
        assert!(auc > 0.9, "{model:?} {exchange:?}: AUC {auc}");
        let mut t = vec!["train", "-w", "2"];
        t.extend(parity_args(train, test, model));
        t.extend(exchange);
        let threads = gradflow_ok(&t);
        assert_eq!(
            epoch_fields(&threads),
            epoch_fields(&processes),
            "{model:?} {exchange:?}: 2 processes and 2 threads differ"
        );
    }
}
