//! Text columns end to end: words and n-grams learnt where a categorical column of the same
//! text cannot be, the same features in `predict` as in training, and bad specs refused.

use std::path::{Path, PathBuf};

mod common;

use common::{gradflow, gradflow_ok, row_list};

/// Generated reviews whose label only word pairs tell: "good" and "not bad" recommend, "bad"
/// and "not good" do not (each word alone is as often in one as in the other), among random
/// filler words, in mixed case and punctuation; 10% of the labels are flipped. Returns the
/// labels.
fn write_reviews(path: &Path, rows: usize, seed: u64) -> Vec<bool> {
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let phrases = [
        ("good", true),
        ("Not good!", false),
        ("bad", false),
        ("NOT bad.", true),
    ];
    let mut t = String::from("id,stars,review,recommended\n");
    let mut labels = Vec::new();
    for i in 0..rows {
        let (phrase, mut label) = phrases[(next() % 4) as usize];
        if next() % 10 == 0 {
            label = !label;
        }
        let mut words: Vec<String> = (0..6 + next() % 10)
            .map(|_| format!("w{}", next() % 300))
            .collect();
        let at = (next() as usize) % (words.len() + 1);
        words.insert(at, phrase.to_string());
        let review = words.join(if i % 2 == 0 { " " } else { ", " });
        t += &format!("{i},{},\"{review}\",{}\n", next() % 5, label as u8);
        labels.push(label);
    }
    std::fs::write(path, t).unwrap();
    labels
}

/// The last epoch's test AUC in `train`'s output.
fn last_auc(out: &str) -> f64 {
    let last = out.lines().rfind(|l| l.starts_with("epoch")).unwrap();
    last.split("auc ").nth(1).unwrap()[..6].parse().unwrap()
}

/// The area under the ROC curve of `scores` for `labels` (ties count one half).
fn auc(scores: &[f64], labels: &[bool]) -> f64 {
    let (mut pairs, mut wins) = (0.0, 0.0);
    for (s, &l) in scores.iter().zip(labels) {
        for (t, &m) in scores.iter().zip(labels) {
            if l && !m {
                pairs += 1.0;
                wins += if s > t {
                    1.0
                } else if s == t {
                    0.5
                } else {
                    0.0
                };
            }
        }
    }
    wins / pairs
}

fn files(dir: &Path) -> (PathBuf, PathBuf, Vec<bool>) {
    let train = dir.join("train.csv");
    let test = dir.join("test.csv");
    write_reviews(&train, 3000, 7);
    let labels = write_reviews(&test, 800, 99);
    (train, test, labels)
}

fn flags<'a>(train: &'a Path, test: &'a Path) -> Vec<&'a str> {
    vec![
        "train",
        "--data",
        train.to_str().unwrap(),
        "--test-file",
        test.to_str().unwrap(),
        "--label",
        "recommended=1",
        "--epochs",
        "8",
        "--lr",
        "0.05",
        "--lambda",
        "0",
        "-w",
        "2",
    ]
}

#[test]
fn word_pairs_are_learnt_where_words_alone_or_whole_texts_cannot_be() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test, labels) = files(dir.path());
    let run = |extra: &[&str]| {
        let mut args = flags(&train, &test);
        args.extend(extra);
        last_auc(&gradflow_ok(args))
    };
    // Labels flipped at 10% cap the AUC near 0.9.
    let pairs = run(&["--text", "review:ngrams=2", "--categorical", "stars"]);
    assert!(pairs > 0.85, "words and pairs: AUC {pairs}");
    let words = run(&["--text", "review", "--categorical", "stars"]);
    assert!(words < 0.65, "words alone: AUC {words}");
    // The whole text as one categorical value: every review is new, nothing generalises.
    let whole = run(&["--categorical", "review,stars"]);
    assert!(whole < 0.65, "whole texts: AUC {whole}");
    // Binary values learn the pairs too.
    let binary = run(&["--text", "review:ngrams=2,binary=true"]);
    assert!(binary > 0.85, "binary: AUC {binary}");

    // `predict` reads the raw test file through the model's feature map: its probabilities
    // rank the rows as the training run's evaluation did.
    let model = dir.path().join("model.txt");
    let mut args = flags(&train, &test);
    args.extend(["--text", "review:ngrams=2", "--model-out"]);
    args.push(model.to_str().unwrap());
    let trained = last_auc(&gradflow_ok(args));
    let predicted = gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        test.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let p: Vec<f64> = predicted
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(p.len(), labels.len());
    let ranked = auc(&p, &labels);
    assert!(
        (ranked - trained).abs() < 1e-3,
        "predict's AUC {ranked}, training's {trained}"
    );
}

#[test]
fn the_pipeline_encodes_text_as_predict_does() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test, _) = files(dir.path());
    let job = gradflow::job::Job::parse(
        "",
        Path::new("flags"),
        &[
            format!("data.train={:?}", train.display().to_string()),
            format!("data.test={:?}", test.display().to_string()),
            "data.format=\"csv\"".into(),
            "data.label.column=\"recommended\"".into(),
            "data.label.equals=\"1\"".into(),
            "data.features.categorical=[\"stars\"]".into(),
            "data.features.text=[{column=\"review\",ngrams=3,hash_bits=12},\
             {column=\"id\",binary=true,normalize=true}]"
                .into(),
        ],
    );
    let job = job.unwrap();
    let input = job.table_input();
    let parts = timely::execute(timely::Config::process(2), move |w| {
        let p = gradflow::data::table::prepare(w, &input).unwrap();
        (row_list(&p.test), p.map)
    })
    .unwrap()
    .join();
    let mut pipeline = Vec::new();
    let mut map = None;
    for part in parts {
        let (rows, m) = part.unwrap();
        pipeline.extend(rows);
        map = Some(m);
    }
    pipeline.sort();
    let map = map.unwrap();
    // Vocabulary keys (stars: 5 values), then 2^12 keys of review, then 2^18 of id.
    assert_eq!(map.dim, 5 + (1 << 12) + (1 << 18));
    let each = gradflow::data::table::encode_file(&map, &test, None).unwrap();
    assert_eq!(pipeline, row_list(&each.data));
    assert!(pipeline.iter().all(|r| r.1.len() > 10), "text features");
}

#[test]
fn bad_text_specs_are_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test, _) = files(dir.path());
    let err = |extra: &[&str]| {
        let mut args = flags(&train, &test);
        args.extend(extra);
        let out = gradflow(&args);
        assert!(!out.status.success(), "{extra:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&["--text", "review:ngrams=9"]);
    assert!(
        e.contains("data.features.text 'review': ngrams must be 1 to 8"),
        "{e}"
    );
    let e = err(&["--text", "review:hash_bits=32"]);
    assert!(e.contains("hash_bits must be 1 to 31"), "{e}");
    let e = err(&["--text", "review:ngram=2"]);
    assert!(e.contains("unknown field `ngram`"), "{e}");
    let e = err(&["--text", "recommended"]);
    assert!(e.contains("'recommended' is the label's column"), "{e}");
    let e = err(&["--text", "review", "--text", "review:ngrams=2"]);
    assert!(e.contains("'review' is listed twice"), "{e}");
    let e = err(&["--text", "opinion"]);
    assert!(e.contains("opinion"), "{e}");
    let e = err(&["--text", "review:hash_bits=27", "--hash-bits", "27"]);
    assert!(
        e.contains("(the table's and its text columns') makes a model of 268435456 features"),
        "{e}"
    );
    let e = err(&[
        "--text",
        "review:hash_bits=20",
        "--hash-bits",
        "31",
        "--set",
        "data.max_dim=4000000000",
    ]);
    assert!(e.contains("more than 2^31 features"), "{e}");
}

#[test]
fn the_reviews_job_loads() {
    // The data is fetched, not committed: the job must still parse and validate.
    let job = gradflow::job::Job::load(Path::new("jobs/reviews.toml"), &[]).unwrap();
    let text = job.data.features.text;
    assert_eq!(text.len(), 2);
    assert!(text.iter().all(|t| t.ngrams == 2 && t.normalize));
}
