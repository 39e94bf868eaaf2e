//! What the tests of the models share: a data set only pairs of features explain, and every
//! codec and exchange against uncompressed training.

use std::path::Path;

use super::{epoch_losses, job_from, run_local};

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
/// training of `job` on 2 workers at every epoch, under each optimizer and learning rate.
pub struct CodecSweep {
    /// The job's text.
    pub job: &'static str,
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
        let run = |overrides: &[String]| {
            let o: Vec<&str> = overrides.iter().map(String::as_str).collect();
            epoch_losses(&run_local(&job_from(self.job, "sweep.toml", &o), 2).rows)
        };
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
                    let losses = run(&with(&[
                        exchange_set.clone(),
                        format!("train.compressor={{name=\"{codec}\"{extra}}}"),
                    ]));
                    let allowed = self.allowed(codec, adam);
                    line(codec, exchange, excess(&losses, &reference), allowed);
                }
            }
            let sharded = run(&with(&[]));
            let sketch = run(&with(&[
                "train.exchange=\"sketch\"".to_string(),
                format!("train.sketch.k={}", self.sketch_k),
            ]));
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
