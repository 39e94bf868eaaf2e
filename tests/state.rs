//! `train.state = "sharded"`: each key's weight and optimizer state live only with its owner,
//! and workers pull what their batches and test rows reach. With a lossless exchange it trains
//! the replicated model bit for bit: the same model file and the same test metrics every
//! epoch, at 1, 2 and 4 processes and with 2 workers per process, for logistic regression
//! under plain SGD, softmax, a factorization machine and the MLP (real `gradflow` processes).

use std::path::Path;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

mod common;

use common::{epoch_fields, gradflow, gradflow_ok, FIELDS_JOB};
use gradflow::data::{write_libsvm, Dataset};

/// The `pairs` rows (the label is a product of two features: a linear model cannot learn it).
fn pairs(model: &str) -> String {
    format!(
        r#"
[data]
test_fraction = 0.2
[data.synth]
kind = "pairs"
rows = 6000
dim = 300
nnz = 8
[model]
{model}
lambda = 1e-4
[train]
epochs = 2
batch_fraction = 0.02
seed = 42
"#
    )
}

/// Softmax over 4 classes of sparse rows written as a LibSVM file: each class has its own
/// frequent features.
fn softmax(dir: &Path) -> String {
    let path = dir.join("classes.svm");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let mut data = Dataset::new(400);
    for _ in 0..4000 {
        let class = rng.random_range(0..4u32);
        let mut keys: Vec<u32> = (0..6)
            .map(|i| match i {
                0 | 1 => class * 50 + rng.random_range(0..50),
                _ => 200 + rng.random_range(0..200),
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let values = vec![1.0; keys.len()];
        data.push_row(&keys, &values, class as f32);
    }
    write_libsvm(&path, &data).unwrap();
    format!(
        r#"
[data]
train = {path:?}
test_fraction = 0.2
[model]
loss = "softmax"
classes = 4
lambda = 1e-4
[optimizer]
lr = 0.05
[train]
epochs = 2
batch_fraction = 0.02
seed = 5
"#,
        path = path.display().to_string()
    )
}

/// The layouts every model is trained on: one process, 2 and 4 processes of one worker, and
/// 2 processes of 2 workers.
const LAYOUTS: [&[&str]; 4] = [
    &["train", "-w=1"],
    &["cluster", "-n=2", "-w=1"],
    &["cluster", "-n=4", "-w=1"],
    &["cluster", "-n=2", "-w=2"],
];

/// Trains `job` with each state on each layout: the model files are equal byte for byte and
/// the epoch lines (train and test loss, accuracy, AUC) are equal; the model learned.
/// Returns the epoch lines of the last layout.
fn assert_states_train_alike(dir: &Path, name: &str, job: &str) -> Vec<String> {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, job).unwrap();
    let mut lines = Vec::new();
    for layout in LAYOUTS {
        let run = |state: &str| {
            let model = dir.join(format!("{name}-{state}-{}.txt", layout.join("")));
            let mut args: Vec<String> = layout.iter().map(|s| s.to_string()).collect();
            args.insert(1, path.display().to_string());
            args.push(format!("--set=train.state=\"{state}\""));
            args.push(format!(
                "--set=output.model={:?}",
                model.display().to_string()
            ));
            let out = gradflow_ok(&args);
            (std::fs::read_to_string(&model).unwrap(), epoch_fields(&out))
        };
        let (replicated, sharded) = (run("replicated"), run("sharded"));
        assert_eq!(
            replicated.1.len(),
            2,
            "{name} {layout:?}: {:?}",
            replicated.1
        );
        assert!(
            replicated.0 == sharded.0,
            "{name} {layout:?}: the model files differ"
        );
        assert_eq!(replicated.1, sharded.1, "{name} {layout:?}");
        let weights = sharded.0.lines().skip_while(|l| *l != "weights").count();
        assert!(weights > 100, "{name} {layout:?}: {weights} weight lines");
        // No shard file is left beside the model.
        let left: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".shard-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        lines = sharded.1;
    }
    lines
}

#[test]
fn logistic_regression_under_sgd_trains_the_replicated_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = FIELDS_JOB
        .replace("rows = 20000", "rows = 6000")
        .replace("epochs = 3", "epochs = 2");
    assert_states_train_alike(dir.path(), "logistic", &job);
}

/// A warm start (`train.init_model`) of shards: each process reads only its owners' keys of
/// the model file, and the runs train the replicated warm start's model; starting from a
/// trained model shows (a lower first-epoch test loss than from zeros).
#[test]
fn a_warm_start_of_shards_trains_the_replicated_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = FIELDS_JOB
        .replace("rows = 20000", "rows = 6000")
        .replace("epochs = 3", "epochs = 2");
    let first = dir.path().join("first.toml");
    let start = dir.path().join("start.txt");
    std::fs::write(&first, &job).unwrap();
    let cold = gradflow_ok(&[
        "train".into(),
        first.display().to_string(),
        format!("--set=output.model={:?}", start.display().to_string()),
    ]);
    let warm = job.replace(
        "[train]\n",
        &format!("[train]\ninit_model = {:?}\n", start.display().to_string()),
    );
    assert_ne!(warm, job, "the job has a [train] table");
    let lines = assert_states_train_alike(dir.path(), "warm", &warm);
    let test_loss = |lines: &[String]| {
        let mut words = lines[0].split_whitespace();
        words.find(|&w| w == "test_loss");
        words.next().unwrap().parse::<f64>().unwrap()
    };
    let cold = epoch_fields(&cold);
    assert!(
        test_loss(&lines) < test_loss(&cold),
        "warm {lines:?}, cold {cold:?}"
    );
}

#[test]
fn softmax_trains_the_replicated_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = softmax(dir.path());
    assert_states_train_alike(dir.path(), "softmax", &job);
}

#[test]
fn a_factorization_machine_trains_the_replicated_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = pairs("kind = \"fm\"\nfactors = 4\nintercept = true");
    assert_states_train_alike(dir.path(), "fm", &job);
}

#[test]
fn the_mlp_trains_the_replicated_model() {
    let dir = tempfile::tempdir().unwrap();
    assert_states_train_alike(dir.path(), "mlp", &pairs("kind = \"mlp\"\nhidden = [8]"));
}

/// What owners that keep the only copy of their keys cannot serve is refused before training,
/// naming both fields.
#[test]
fn what_sharded_state_cannot_serve_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, FIELDS_JOB).unwrap();
    let cases: [(&str, &[&str]); 4] = [
        (
            "train.downlink = \"topk\"",
            &["train.downlink={ name = \"topk\" }"],
        ),
        (
            "train.exchange = \"allgather\"",
            &["train.exchange=\"allgather\""],
        ),
        (
            "train.exchange = \"sketch\"",
            &["train.exchange=\"sketch\""],
        ),
        ("train.staleness", &["train.staleness=1"]),
    ];
    for (field, sets) in cases {
        let mut args = vec![
            "train".to_string(),
            path.display().to_string(),
            "--set=train.state=\"sharded\"".into(),
        ];
        args.extend(sets.iter().map(|s| format!("--set={s}")));
        let out = gradflow(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{field}: trained");
        assert!(
            err.contains(field) && err.contains("train.state = \"sharded\""),
            "{field}: {err}"
        );
    }
}

/// A model whose replicated state does not fit the process's address-space limit is refused
/// before training, with the figures; sharded over 4 processes, each under the same limit,
/// it trains (LR + Adam over 2^27 features: 2.2 GB a replica, 0.4 GB a shard).
#[test]
fn a_model_too_large_for_a_process_is_refused_and_trains_sharded() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.toml");
    std::fs::write(
        &path,
        r#"
[data]
max_dim = 134217728
test_fraction = 0.2
[data.synth]
kind = "ctr"
rows = 4000
dim = 134217727
nnz = 20
[model]
loss = "logistic"
[train]
epochs = 1
batch_fraction = 0.1
"#,
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gradflow"));
        command.args(args).arg(&path);
        // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 1_500_000_000,
                    rlim_max: 1_500_000_000,
                };
                match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            })
        };
        command.output().unwrap()
    };
    let refused = run(&["train", "-w=1"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("the model's state needs 2.16 GB")
            && err.contains("more than 1.50 GB allowed by the address-space limit")
            && err.contains("train.state = \"sharded\""),
        "{err}"
    );
    let sharded = run(&["cluster", "-n=4", "-w=1", "--set=train.state=\"sharded\""]);
    let out = String::from_utf8_lossy(&sharded.stdout);
    assert!(
        sharded.status.success(),
        "{}",
        String::from_utf8_lossy(&sharded.stderr)
    );
    assert!(out.contains("trained 1 epochs"), "{out}");
}

/// A compressed pull reply (`train.downlink = "logquant"`) across two processes: the replies
/// carry under a third of f32's bytes, training stays within 1% of the exact reply's test
/// loss at every epoch (plain SGD), and the test metrics are those of the saved model
/// (an evaluation's reply is exact): `predict` scores the test file as the last epoch did.
#[test]
fn a_compressed_reply_sends_fewer_bytes_and_evaluates_the_saved_model() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.svm");
    gradflow_ok([
        "data",
        "synth",
        "--kind=ctr",
        "--rows=7500",
        "--dim=3000",
        "--nnz=10",
        "--seed=1",
        &format!("--out={}", all.display()),
    ]);
    let lines: Vec<String> = std::fs::read_to_string(&all)
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    let (train, test) = (dir.path().join("train.svm"), dir.path().join("test.svm"));
    std::fs::write(&train, lines[..6000].concat()).unwrap();
    std::fs::write(&test, lines[6000..].concat()).unwrap();
    let job = dir.path().join("job.toml");
    let text = format!(
        "[data]\ntrain = {:?}\ntest = {:?}\n[model]\nloss = \"logistic\"\nlambda = 1e-4\n\
         [optimizer]\nkind = \"sgd\"\nlr = 1.0\n[train]\nepochs = 3\nbatch_fraction = 0.02\n\
         seed = 3\nstate = \"sharded\"\n",
        train.display().to_string(),
        test.display().to_string()
    );
    std::fs::write(&job, text).unwrap();
    // Each epoch's (test loss, downlink bytes), and the last epoch's line.
    let run = |downlink: &str| {
        let (model, metrics) = (
            dir.path().join(format!("{downlink}.txt")),
            dir.path().join(format!("{downlink}.csv")),
        );
        let out = gradflow_ok(&[
            "cluster".into(),
            job.display().to_string(),
            "-n=2".into(),
            "-w=1".into(),
            format!("--set=train.downlink={{ name = {downlink:?} }}"),
            format!("--set=output.model={:?}", model.display().to_string()),
            format!("--set=output.metrics={:?}", metrics.display().to_string()),
        ]);
        let csv = std::fs::read_to_string(&metrics).unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (loss, down) = (column("test_loss"), column("downlink_bytes"));
        let epochs: Vec<(f64, f64)> = (csv.lines())
            .filter(|l| l.starts_with("epoch,"))
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[loss].parse().unwrap(), f[down].parse().unwrap())
            })
            .collect();
        (epochs, epoch_fields(&out).pop().unwrap(), model)
    };
    let (exact, _, _) = run("none");
    let (compressed, last, model) = run("logquant");
    assert_eq!((exact.len(), compressed.len()), (3, 3));
    for (e, c) in exact.iter().zip(&compressed) {
        assert!(
            (c.0 - e.0).abs() < 0.01 * e.0,
            "test loss {exact:?} {compressed:?}"
        );
        assert!(c.1 < e.1 / 3.0, "downlink bytes {exact:?} {compressed:?}");
    }
    assert!(exact[2].0 < 0.6, "learned: {exact:?}");
    let predictions = dir.path().join("predictions.txt");
    let (_, said) = common::gradflow_outputs([
        "predict",
        model.to_str().unwrap(),
        test.to_str().unwrap(),
        "-o",
        predictions.to_str().unwrap(),
    ]);
    let word = |text: &str, name: &str| {
        let mut words = text.split_whitespace();
        words.find(|&w| w == name);
        words.next().unwrap().to_string()
    };
    for (trained, predicted) in [("test_loss", "loss"), ("acc", "accuracy"), ("auc", "auc")] {
        assert_eq!(
            word(&last, trained),
            word(&said, predicted),
            "{last} / {said}"
        );
    }
}
