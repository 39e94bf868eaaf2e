//! The neural network end to end: pairs of features a linear model cannot learn, the same model
//! from 2 processes as from 2 threads under every exchange, pulled as pushed, every codec
//! against uncompressed training at the same epoch, `predict` through the model file, bad
//! fields.

mod common;

use common::models::{
    assert_exchanges_learn_alike_on_processes, assert_pull_equals_push, last_auc, pairs_job,
    parity_args as args, randomk_half_under_sgd, write_parity, CodecSweep,
};
use common::{epoch_fields, gradflow, gradflow_ok, gradflow_outputs};
use gradflow::model::file::ModelFile;

#[test]
fn an_mlp_learns_pairs_a_linear_model_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test) = (dir.path().join("train.csv"), dir.path().join("test.csv"));
    write_parity(&train, 4000, 3);
    write_parity(&test, 1000, 11);
    let linear = last_auc(&gradflow_ok(
        [&["train", "-w", "2"][..], &args(&train, &test, &[])].concat(),
    ));
    assert!(linear < 0.6, "linear: AUC {linear}");
    let model = |name: &str| dir.path().join(format!("{name}.txt"));
    for hidden in ["16", "16,8"] {
        let mlp = ["--model", "mlp", "--hidden", hidden];
        let (threads_file, processes_file) = (model("threads"), model("processes"));
        let mut t = vec![
            "train",
            "-w",
            "2",
            "--model-out",
            threads_file.to_str().unwrap(),
        ];
        t.extend(args(&train, &test, &mlp));
        let threads = gradflow_ok(&t);
        let auc = last_auc(&threads);
        assert!(auc > 0.9, "mlp {hidden}: AUC {auc}");
        // Two processes train the model two threads train, bit for bit.
        let mut c = vec![
            "cluster",
            "-n",
            "2",
            "--model-out",
            processes_file.to_str().unwrap(),
        ];
        c.extend(args(&train, &test, &mlp));
        let (processes, _) = gradflow_outputs(&c);
        assert_eq!(
            epoch_fields(&threads),
            epoch_fields(&processes),
            "mlp {hidden}"
        );
        let (a, b) = (
            ModelFile::load(&threads_file).unwrap(),
            ModelFile::load(&processes_file).unwrap(),
        );
        assert_eq!(a.weights, b.weights);
        assert_eq!(a.model.as_deref(), Some(format!("mlp:{hidden}").as_str()));
        // `predict` scores the test file through the model file as training evaluated it.
        let (_, said) = gradflow_outputs([
            "predict",
            threads_file.to_str().unwrap(),
            test.to_str().unwrap(),
        ]);
        let predicted: f64 = said.split("auc ").nth(1).unwrap()[..6].parse().unwrap();
        assert!(
            (predicted - auc).abs() < 1e-3,
            "predict {predicted}, training {auc}: {said}"
        );
    }

    // Lossy exchanges and pulls carry the network too, 2 processes as 2 threads.
    assert_exchanges_learn_alike_on_processes(
        &train,
        &test,
        &["--model", "mlp", "--hidden", "16"],
        &[
            &["--exchange", "allgather", "--compressor", "sketchml"],
            &["--compressor", "topk:ratio=0.1", "--memory", "residual"],
            &["--exchange", "sketch", "--set", "train.sketch.k=200"],
            &["--set", "train.pull=true"],
        ],
    );
}

/// `train.pull` asks the owners for the dense weights as well as the rows' features' vectors:
/// the pulled network is the pushed one, bit for bit.
#[test]
fn pulling_the_network_trains_the_model_pushing_it_does() {
    assert_pull_equals_push(&pairs_job(MLP));
}

/// Every codec under both codec exchanges, and the sketch exchange, trains the network within a
/// stated tolerance of uncompressed training's test loss at every epoch, under Adam and SGD.
/// Under Adam each also runs as a 2-process cluster, which trains the 2 threads' model bit for bit.
#[test]
fn every_codec_and_exchange_trains_the_mlp_within_tolerance_of_uncompressed() {
    let sweep = CodecSweep {
        job: pairs_job(MLP),
        optimizers: &[("adam", "0.01"), ("sgd", "2")],
        trained_below: 0.665,
        sketch_k: 2000,
        tolerance,
    };
    sweep.run(randomk_half_under_sgd);
}

/// How far above uncompressed training a codec's (or the sketch exchange's, k = 2000) test log
/// loss may be at any epoch under the network, with Adam and with plain SGD: about 1.5 times the worst
/// measured of both exchanges, at least 1%. Under Adam every lossy codec lags in the first
/// epochs (+1.5% to +19%); plain SGD keeps them within 2%, randomk (at ratio 0.5) within 3.2%.
fn tolerance(codec: &str) -> (f64, f64) {
    match codec {
        "randomk" => (0.29, 0.05),
        "signsgd" => (0.29, 0.01),
        "gspar" => (0.24, 0.03),
        "terngrad" => (0.18, 0.01),
        "topk" => (0.11, 0.01),
        "sketchml" | "skcompress" => (0.1, 0.01),
        "qsgd" => (0.09, 0.02),
        "logquant" | "sketch" => (0.08, 0.01),
        "threshold" => (0.07, 0.01),
        "fastsgd" => (0.05, 0.02),
        "zipml" => (0.03, 0.02),
        _ => (0.01, 0.01),
    }
}

/// A network of 16 hidden units on the planted pairs: 8,000 embedding weights and 33 dense ones.
const MLP: &str = "kind = \"mlp\"\nhidden = [16]";

#[test]
fn bad_mlp_fields_are_errors_naming_them() {
    for (sets, expected) in [
        (
            vec!["model.kind=\"mlp\"", "model.hidden=[]"],
            "model.hidden: one or two layers of 1 to 4096 units",
        ),
        (
            vec!["model.kind=\"mlp\"", "model.hidden=[8,0]"],
            "model.hidden: one or two layers",
        ),
        (
            vec!["model.kind=\"mlp\"", "model.hidden=[8,8,8]"],
            "model.hidden: one or two layers",
        ),
        (
            vec!["model.kind=\"mlp\"", "model.init_std=-1"],
            "model.init_std: must be",
        ),
        (
            vec!["model.hidden=[32]"],
            "model.hidden: for model.kind = \"mlp\"",
        ),
    ] {
        let mut a = vec!["train"];
        for s in &sets {
            a.extend(["--set", s]);
        }
        let out = gradflow(&a);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && e.contains(expected),
            "{sets:?}: {e}"
        );
    }
}
