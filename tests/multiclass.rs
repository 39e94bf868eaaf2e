//! Multiclass softmax regression end to end: every codec under both codec exchanges and the
//! sketch exchange against uncompressed training at the same epoch (Adam and plain SGD), the
//! model file and `predict`, labels that are not classes, and Fashion-MNIST as a 2-process
//! cluster.

use std::path::Path;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

mod common;

use common::{epoch_losses, gradflow, gradflow_ok, gradflow_outputs, job_from, run_local};
use gradflow::data::idx::write_idx;
use gradflow::data::{write_libsvm, Dataset};
use gradflow::metrics::MetricsRow;

/// Classes of the generated images.
const K: u32 = 4;
/// Their side in pixels.
const SIDE: u32 = 8;
/// The fraction of a class's pattern that is its own.
const OWN: f64 = 0.08;

/// `n` generated `SIDE × SIDE` images of `K` classes: each class a fixed pattern of bright
/// pixels (a shared background plus a few of its own, so that the classes overlap), each image
/// its class's pattern dimmed at random, with pixels dropped and stray ones lit.
fn images(n: usize, seed: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
    let pixels = (SIDE * SIDE) as usize;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(99);
    let shared: Vec<u8> = (0..pixels)
        .map(|_| {
            if rng.random::<f64>() < 0.3 {
                rng.random_range(100..=255)
            } else {
                0
            }
        })
        .collect();
    let patterns: Vec<Vec<u8>> = (0..K)
        .map(|_| {
            shared
                .iter()
                .map(|&s| {
                    if rng.random::<f64>() < OWN {
                        rng.random_range(100..=255)
                    } else {
                        s
                    }
                })
                .collect()
        })
        .collect();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut labels = Vec::with_capacity(n);
    let images = (0..n)
        .map(|_| {
            let class = rng.random_range(0..K) as u8;
            labels.push(class);
            patterns[class as usize]
                .iter()
                .map(|&p| {
                    let u = rng.random::<f64>();
                    if p > 0 && u < 0.7 {
                        (p as f64 * rng.random_range(0.3..1.0)) as u8
                    } else if u > 0.85 {
                        rng.random_range(1..=255)
                    } else {
                        0
                    }
                })
                .collect()
        })
        .collect();
    (images, labels)
}

/// Writes 4,000 training and 1,000 test images as IDX files into `dir`.
fn write_images(dir: &Path) {
    for (name, n, seed) in [("train", 4000, 1), ("test", 1000, 2)] {
        let (pixels, labels) = images(n, seed);
        write_idx(
            &dir.join(format!("{name}-images")),
            &dir.join(format!("{name}-labels")),
            SIDE,
            SIDE,
            &pixels,
            &labels,
        )
        .unwrap();
    }
}

/// The softmax job on the images in `dir`.
fn job_text(dir: &Path) -> String {
    format!(
        r#"
[data]
format = "idx"
train = "{d}/train-images"
train_labels = "{d}/train-labels"
test = "{d}/test-images"
test_labels = "{d}/test-labels"
[model]
loss = "softmax"
classes = {K}
lambda = 1e-4
[train]
epochs = 3
batch_fraction = 0.02
seed = 42
"#,
        d = dir.display()
    )
}

fn epoch_rows(rows: &[MetricsRow]) -> Vec<&MetricsRow> {
    rows.iter().filter(|r| r.kind == "epoch").collect()
}

#[test]
fn every_codec_and_exchange_trains_softmax_within_tolerance_of_uncompressed() {
    let dir = tempfile::tempdir().unwrap();
    write_images(dir.path());
    let text = job_text(dir.path());
    let run = |overrides: &[String]| {
        let o: Vec<&str> = overrides.iter().map(String::as_str).collect();
        run_local(&job_from(&text, "multiclass.toml", &o), 2).rows
    };
    let optimizers: [[&str; 2]; 2] = [
        ["optimizer.kind=\"adam\"", "optimizer.lr=0.01"],
        ["optimizer.kind=\"sgd\"", "optimizer.lr=0.5"],
    ];
    let (mut report, mut failed) = (String::new(), false);
    for optimizer in optimizers {
        let with = |extra: &[String]| {
            let mut o: Vec<String> = optimizer.iter().map(|s| s.to_string()).collect();
            o.extend_from_slice(extra);
            o
        };
        for exchange in ["sharded", "allgather"] {
            let exchange_set = format!("train.exchange=\"{exchange}\"");
            let reference = run(&with(std::slice::from_ref(&exchange_set)));
            let epochs = epoch_rows(&reference);
            let first = epochs[0].test_accuracy.unwrap();
            let last = epochs.last().unwrap();
            // Chance is 1/4; a model whose keys or classes were mixed up stays near it.
            assert!(
                last.test_accuracy.unwrap() > 0.8 && first > 0.6,
                "{optimizer:?} {exchange}: accuracy {first} then {:?}",
                last.test_accuracy
            );
            let reference = epoch_losses(&reference);
            for &codec in gradflow::codec::CODEC_NAMES {
                let rows = run(&with(&[
                    exchange_set.clone(),
                    format!("train.compressor={{name=\"{codec}\"}}"),
                ]));
                let losses = epoch_losses(&rows);
                let excess = losses
                    .iter()
                    .zip(&reference)
                    .map(|(l, r)| l / r - 1.0)
                    .fold(f64::MIN, f64::max);
                let accuracy = epoch_rows(&rows).last().unwrap().test_accuracy.unwrap();
                let allowed = tolerance(codec, optimizer[0].contains("adam"));
                failed |= excess > allowed
                    || losses.len() != reference.len()
                    || losses.iter().any(|l| !l.is_finite());
                report += &format!(
                    "{codec:>10} {exchange:>9} {:<22} worst epoch {:+.2}% (allowed {:.0}%), \
                     accuracy {accuracy:.4}\n",
                    optimizer[0],
                    100.0 * excess,
                    100.0 * allowed
                );
            }
        }
        // The sketch exchange sends count sketches of the gradient, not codec messages; it
        // updates k of the 260 keys per round (its default, 1% of them, is 2 here).
        let sharded = epoch_losses(&run(&with(&[])));
        let sketch = epoch_losses(&run(&with(&[
            "train.exchange=\"sketch\"".to_string(),
            "train.sketch.k=65".to_string(),
        ])));
        let excess = sketch
            .iter()
            .zip(&sharded)
            .map(|(l, r)| l / r - 1.0)
            .fold(f64::MIN, f64::max);
        let allowed = sketch_tolerance(optimizer[0].contains("adam"));
        failed |= excess > allowed || sketch.iter().any(|l| !l.is_finite());
        report += &format!(
            "{:>10} {:>9} {:<22} worst epoch {:+.2}% (allowed {:.0}%)\n",
            "-",
            "sketch",
            optimizer[0],
            100.0 * excess,
            100.0 * allowed
        );
    }
    println!("{report}");
    assert!(!failed, "{report}");
}

/// `train.pull` asks the owners for all `K` weights of each feature of its next batch: the
/// pulled softmax model is the pushed one, bit for bit.
#[test]
fn pulling_trains_the_softmax_model_pushing_does() {
    let dir = tempfile::tempdir().unwrap();
    write_images(dir.path());
    let text = job_text(dir.path());
    let run = |pull: &str| {
        let out = run_local(&job_from(&text, "multiclass.toml", &[pull]), 2);
        (out.weights.unwrap(), epoch_losses(&out.rows))
    };
    assert_eq!(run("train.pull=false"), run("train.pull=true"));
}

/// How far above uncompressed training a codec's test log loss may be at any epoch, under Adam
/// or plain SGD: about 1.5 times the worst measured of both exchanges (2026-11-23), and at
/// least 1.2 times the worst over eight training seeds (42 and 1-7, 2026-11-25: only randomk
/// under SGD needed more, +8.71% at seed 1 with `allgather`, where seed 42 gave +3.81%). Under Adam
/// the sparsifiers (with their residual) and TernGrad lag in the first epochs (+14% to +87% at
/// epoch 1, within 1% of the accuracy); plain SGD keeps them within 5%.
fn tolerance(codec: &str, adam: bool) -> f64 {
    let (adam_bound, sgd_bound) = match codec {
        "randomk" => (1.3, 0.11),
        "gspar" => (0.75, 0.06),
        "topk" => (0.4, 0.02),
        "terngrad" => (0.22, 0.07),
        "qsgd" => (0.04, 0.02),
        "fastsgd" => (0.02, 0.04),
        "signsgd" => (0.02, 0.03),
        "logquant" => (0.02, 0.02),
        _ => (0.01, 0.01),
    };
    if adam {
        adam_bound
    } else {
        sgd_bound
    }
}

/// The same for the sketch exchange (k = 25% of the keys; measured +20% under Adam, -8% under
/// plain SGD).
fn sketch_tolerance(adam: bool) -> f64 {
    if adam {
        0.3
    } else {
        0.1
    }
}

/// The generated images as a LibSVM dataset (pixels / 255, labels the classes).
fn as_dataset(pixels: &[Vec<u8>], labels: &[u8]) -> Dataset {
    let mut d = Dataset::new(SIDE * SIDE);
    for (image, &label) in pixels.iter().zip(labels) {
        let (keys, vals): (Vec<u32>, Vec<f32>) = image
            .iter()
            .enumerate()
            .filter(|(_, &p)| p != 0)
            .map(|(k, &p)| (k as u32, p as f32 / 255.0))
            .unzip();
        d.push_row(&keys, &vals, label as f32);
    }
    d
}

#[test]
fn the_softmax_model_file_predicts_what_training_measured() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    for (name, n, seed) in [("train.svm", 3000, 1), ("test.svm", 1000, 2)] {
        let (pixels, labels) = images(n, seed);
        write_libsvm(&path(name), &as_dataset(&pixels, &labels)).unwrap();
    }
    let job = format!(
        "[data]\ntrain = {:?}\ntest = {:?}\ndim = {}\n[model]\nloss = \"softmax\"\n\
         classes = {K}\nlambda = 1e-4\n[train]\nepochs = 2\nbatch_fraction = 0.05\n\
         [output]\nmetrics = {:?}\nmodel = {:?}\n",
        path("train.svm"),
        path("test.svm"),
        SIDE * SIDE,
        path("m.csv"),
        path("model.txt"),
    );
    std::fs::write(path("job.toml"), job).unwrap();
    gradflow_ok([
        "train".as_ref(),
        path("job.toml").as_os_str(),
        "-w".as_ref(),
        "2".as_ref(),
    ]);
    // K weights per feature, the intercept's the last K.
    let model = gradflow::model::file::ModelFile::load(&path("model.txt")).unwrap();
    assert_eq!(model.classes, Some(K));
    assert_eq!(model.weights.len() as u32, (SIDE * SIDE + 1) * K);
    assert_eq!(model.intercept, Some(SIDE * SIDE * K));

    let metrics = std::fs::read_to_string(path("m.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(metrics.as_bytes());
    let header = rows.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let last = rows
        .records()
        .map(|r| r.unwrap())
        .filter(|r| &r[column("kind")] == "epoch")
        .last()
        .unwrap();
    let accuracy: f64 = last[column("test_accuracy")].parse().unwrap();
    assert!(accuracy > 0.8, "{accuracy}");
    assert!(last[column("test_auc")].is_empty(), "no AUC for 4 classes");

    let (_, said) = gradflow_outputs([
        "predict".as_ref(),
        path("model.txt").as_os_str(),
        path("test.svm").as_os_str(),
        "--out".as_ref(),
        path("p.txt").as_os_str(),
    ]);
    assert!(
        said.contains(&format!("accuracy {accuracy:.4}")) && !said.contains("auc"),
        "{said}"
    );
    // A prediction is the most likely class, with its probability (at least 1/K, at most 1);
    // the share of classes that are right is the accuracy.
    let lines: Vec<(f32, f32)> = std::fs::read_to_string(path("p.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let (c, p) = l.split_once(' ').unwrap();
            (c.parse().unwrap(), p.parse().unwrap())
        })
        .collect();
    assert!(lines
        .iter()
        .all(|&(_, p)| (1.0 / K as f32 - 1e-6..=1.0).contains(&p)));
    let predicted: Vec<f32> = lines.iter().map(|l| l.0).collect();
    let (_, labels) = images(1000, 2);
    assert_eq!(predicted.len(), labels.len());
    assert!(predicted
        .iter()
        .all(|&p| p.fract() == 0.0 && (0.0..K as f32).contains(&p)));
    let right = predicted
        .iter()
        .zip(&labels)
        .filter(|(&p, &l)| p == l as f32)
        .count();
    assert!((right as f64 / 1000.0 - accuracy).abs() < 1e-9);
}

#[test]
fn labels_that_are_not_classes_and_bad_settings_are_errors_naming_their_place() {
    let dir = tempfile::tempdir().unwrap();
    write_images(dir.path());
    let job = dir.path().join("job.toml");
    let fails = |text: &str, overrides: &[&str]| {
        std::fs::write(&job, text).unwrap();
        let mut args = vec!["train".to_string(), job.display().to_string()];
        for o in overrides {
            args.extend(["--set".to_string(), o.to_string()]);
        }
        let out = gradflow(&args);
        assert!(!out.status.success(), "{text} {overrides:?} trained");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // The generated labels are 0..4: with three classes, label 3 is the first bad one.
    let (_, labels) = images(4000, 1);
    let first = labels.iter().position(|&l| l == 3).unwrap();
    let e = fails(&job_text(dir.path()), &["model.classes=3"]);
    assert!(
        e.contains("train-labels: byte")
            && e.contains(&format!("label 3 of image {} is not a class", first + 1)),
        "{e}"
    );
    let svm = dir.path().join("bad.svm");
    std::fs::write(&svm, "0 1:0.5\n2 2:1\n1.5 1:1\n").unwrap();
    let text = format!(
        "[data]\ntrain = {:?}\n[model]\nloss = \"softmax\"\nclasses = 3\n",
        svm.display().to_string()
    );
    let e = fails(&text, &[]);
    assert!(e.contains("bad.svm:3:1: label '1.5' is not a class"), "{e}");
    let e = fails(&text, &["model.loss=\"logistic\""]);
    assert!(e.contains("model.classes: only softmax"), "{e}");
    let e = fails(&text, &["model.classes=1"]);
    assert!(e.contains("model.classes: must be 2 to"), "{e}");
    let text = text.replace("classes = 3\n", "");
    let e = fails(&text, &[]);
    assert!(e.contains("model.classes: softmax needs"), "{e}");
    // K weights per feature: 65 features × 4 classes do not fit data.max_dim = 100.
    let e = fails(&job_text(dir.path()), &["data.max_dim=100"]);
    assert!(
        e.contains(
            "with model.classes = 4 the model has 260 weights, more than data.max_dim = 100"
        ),
        "{e}"
    );
    // Generated data has labels ±1: -1 is not a class (the check after any reader).
    let e = fails(
        "[model]\nloss = \"softmax\"\nclasses = 2\n[data.synth]\nrows = 200\n",
        &[],
    );
    assert!(
        e.contains("the generated data: training row")
            && e.contains("of this worker's share: label -1 is not a class"),
        "{e}"
    );
    let e = fails(
        &text,
        &[&format!(
            "data.train_labels={:?}",
            svm.display().to_string()
        )],
    );
    assert!(e.contains("set data.format = \"idx\" to use them"), "{e}");
    // Test images of another size than the training images.
    let (small, labels) = (vec![vec![1u8; 16]; 3], [0u8, 1, 2]);
    write_idx(
        &dir.path().join("small-images"),
        &dir.path().join("small-labels"),
        4,
        4,
        &small,
        &labels,
    )
    .unwrap();
    let other = job_text(dir.path())
        .replace("test-images", "small-images")
        .replace("test-labels", "small-labels");
    let e = fails(&other, &[]);
    assert!(
        e.contains("small-images: images of 16 pixels, the training images have 64"),
        "{e}"
    );
    // No images at all.
    write_idx(
        &dir.path().join("none-images"),
        &dir.path().join("none-labels"),
        8,
        8,
        &[],
        &[],
    )
    .unwrap();
    let empty = job_text(dir.path())
        .replace("train-images", "none-images")
        .replace("train-labels", "none-labels");
    let e = fails(&empty, &[]);
    assert!(e.contains("none-images: no images to train on"), "{e}");
    let no_test_labels: String = job_text(dir.path())
        .lines()
        .filter(|l| !l.starts_with("test_labels"))
        .map(|l| format!("{l}\n"))
        .collect();
    let e = fails(&no_test_labels, &[]);
    assert!(
        e.contains("data.test, data.test_labels: an idx test set needs both"),
        "{e}"
    );
}

#[test]
fn a_programs_loss_must_have_the_jobs_number_of_outputs() {
    use gradflow::dataflow::{Supervisor, Training, WorkerData};
    use gradflow::model::{Loss, Softmax};
    let training = |job: &str| {
        let job = job_from(job, "job.toml", &[]);
        let supervisor = Supervisor::new();
        let t = Training::new(
            &job.plan(65, 1),
            WorkerData::default(),
            supervisor.clone(),
            None,
            Box::new(|_| {}),
        );
        (t, supervisor)
    };
    // The job sized its model for one output: a 3-class loss would index past it.
    let (mut t, supervisor) = training("[model]\nloss = \"logistic\"\n");
    t.set_loss(Softmax::new(3));
    let e = supervisor.message().expect("a failure");
    assert!(
        e.contains("set_loss: the loss 'softmax' has 3 outputs per row, the job's model 1"),
        "{e}"
    );
    assert_eq!(t.plan().loss.name(), "logistic", "the job's loss stays");
    let (mut t, supervisor) = training("[model]\nloss = \"softmax\"\nclasses = 3\n");
    assert_eq!(t.plan().dim, 65 * 3);
    t.set_loss(Loss::Hinge);
    assert!(supervisor.message().is_some());
    let (mut t, supervisor) = training("[model]\nloss = \"softmax\"\nclasses = 3\n");
    t.set_loss(Softmax::new(3));
    assert_eq!(supervisor.message(), None);
    assert_eq!(t.plan().loss.outputs(), 3);
}

/// Fashion-MNIST as Debian's `dataset-fashion-mnist` installs it.
const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

/// Ignored unless asked for (`cargo test --release -- --ignored`, as CI does), so that a
/// machine without the dataset lists it as not run instead of passing it.
#[test]
#[ignore = "needs Debian's dataset-fashion-mnist; run with -- --ignored"]
fn fashion_mnist_trains_as_a_two_process_cluster_with_and_without_compression() {
    assert!(
        Path::new(FASHION_MNIST).exists(),
        "{FASHION_MNIST} is missing: apt-get install dataset-fashion-mnist"
    );
    let dir = tempfile::tempdir().unwrap();
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs/fashion_mnist.toml");
    let run = |name: &str, codec: &str| {
        let metrics = dir.path().join(format!("{name}.csv"));
        let out = gradflow_ok([
            "cluster",
            job,
            "-n",
            "2",
            "--epochs",
            "2",
            "--set",
            &format!("output.metrics=\"{}\"", metrics.display()),
            "--set",
            &format!("output.model=\"{}\"", dir.path().join(name).display()),
            "--set",
            &format!("train.compressor={{name=\"{codec}\"}}"),
        ]);
        assert!(
            out.contains("trained 2 epochs (200 rounds) on 2 worker(s)"),
            "{out}"
        );
        let text = std::fs::read_to_string(&metrics).unwrap();
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header = reader.headers().unwrap().clone();
        let column = |name: &str| header.iter().position(|h| h == name).unwrap();
        reader
            .records()
            .map(|r| r.unwrap())
            .filter(|r| &r[column("kind")] == "epoch")
            .map(|r| {
                let number = |name: &str| r[column(name)].parse::<f64>().unwrap();
                (
                    number("test_loss"),
                    number("test_accuracy"),
                    number("uplink_bytes"),
                )
            })
            .collect::<Vec<_>>()
    };
    let exact = run("none", "none");
    let qsgd = run("qsgd", "qsgd");
    // Softmax regression reaches 80-85% on Fashion-MNIST; chance is 10%.
    assert!(exact[1].1 > 0.8, "{exact:?}");
    for (e, q) in exact.iter().zip(&qsgd) {
        // QSGD's 8-bit buckets: within 3% of the loss and 2 points of accuracy at each
        // epoch (measured +1.1% and -0.2 points after 5 epochs), in a fifth of the bytes.
        assert!(q.0 / e.0 - 1.0 < 0.03 && e.1 - q.1 < 0.02, "{e:?} {q:?}");
        assert!(q.2 > 0.0 && q.2 < e.2 / 5.0, "{e:?} {q:?}");
    }
}

#[test]
fn predict_on_a_table_with_a_label_outside_the_classes_is_an_error_naming_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let mut table = String::from("y,c\n");
    for i in 0..300 {
        table += &format!("{},v{}\n", i % 3, i % 3);
    }
    std::fs::write(path("train.csv"), &table).unwrap();
    std::fs::write(path("bad.csv"), "y,c\n1,v1\n7,v2\n").unwrap();
    let job = format!(
        "[data]\nformat = \"csv\"\ntrain = {:?}\n[data.label]\ncolumn = \"y\"\n\
         [data.features]\ncategorical = [\"c\"]\n[model]\nloss = \"softmax\"\nclasses = 3\n\
         [train]\nepochs = 2\n[output]\nmodel = {:?}\n",
        path("train.csv"),
        path("model.txt"),
    );
    std::fs::write(path("job.toml"), job).unwrap();
    gradflow_ok(["train".as_ref(), path("job.toml").as_os_str()]);
    let out = gradflow([
        "predict".as_ref(),
        path("model.txt").as_os_str(),
        path("bad.csv").as_os_str(),
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains(&format!("{}: row 2: ", path("bad.csv").display())) && e.contains('7'),
        "{e}"
    );
    // A table's model reads tables: IDX labels are an error naming the option.
    let out = gradflow([
        "predict".as_ref(),
        path("model.txt").as_os_str(),
        path("bad.csv").as_os_str(),
        "--labels".as_ref(),
        path("bad.csv").as_os_str(),
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("--labels: for IDX images"),
        "{e}"
    );
}

#[test]
fn predict_reads_idx_images_with_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    write_images(dir.path());
    let path = |name: &str| dir.path().join(name);
    let job = format!(
        "{}[output]\nmetrics = {:?}\nmodel = {:?}\n",
        job_text(dir.path()),
        path("m.csv"),
        path("model.txt")
    );
    std::fs::write(path("job.toml"), job).unwrap();
    gradflow_ok(["train".as_ref(), path("job.toml").as_os_str()]);
    let metrics = std::fs::read_to_string(path("m.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(metrics.as_bytes());
    let at = rows
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "test_accuracy")
        .unwrap();
    let epochs = rows
        .records()
        .map(|r| r.unwrap())
        .filter(|r| &r[0] == "epoch");
    let trained: f64 = epochs.last().unwrap()[at].parse().unwrap();

    let predict = |images: &str, labels: &str| {
        gradflow([
            "predict".as_ref(),
            path("model.txt").as_os_str(),
            path(images).as_os_str(),
            "--labels".as_ref(),
            path(labels).as_os_str(),
        ])
    };
    let out = predict("test-images", "test-labels");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // The accuracy training measured on the same images, to the printed digits; the
    // predictions on standard output, a line per image.
    assert!(said.contains("rows 1000"), "{said}");
    assert!(
        said.contains(&format!("accuracy {trained:.4}")),
        "{said} vs {trained}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1000);

    // Images of another size, fewer or more rows of pixels, are an error naming the file and
    // the model's size (not a job's data.max_dim).
    let (pixels, labels) = images(10, 3);
    let side = SIDE as usize;
    for (name, rows) in [("small", SIDE - 1), ("large", SIDE + 1)] {
        let resized: Vec<Vec<u8>> = pixels
            .iter()
            .map(|p| [p.as_slice(), &p[..side]].concat()[..rows as usize * side].to_vec())
            .collect();
        let (images, labels_file) = (
            path(&format!("{name}-images")),
            path(&format!("{name}-labels")),
        );
        write_idx(&images, &labels_file, rows, SIDE, &resized, &labels).unwrap();
        let out = predict(&format!("{name}-images"), &format!("{name}-labels"));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}");
        assert!(
            e.contains(&images.display().to_string()) && e.contains("but the model has"),
            "{e}"
        );
    }
}
