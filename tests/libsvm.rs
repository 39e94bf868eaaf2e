//! The LibSVM reader: good files, and malformed ones with the exact error location.

use std::path::Path;

mod common;

use gradflow::data::libsvm::parse_libsvm;
use gradflow::data::{LibsvmOptions, RowFilter};

fn parse(
    text: &str,
    opts: &LibsvmOptions,
) -> Result<gradflow::data::libsvm::Split, gradflow::data::DataError> {
    parse_libsvm(
        text.as_bytes(),
        Path::new("in.svm"),
        opts,
        &RowFilter::all(),
    )
}

#[test]
fn reads_labels_comments_qid_and_both_index_bases() {
    let text =
        "# header comment\n+1 1:0.5 3:-2 # trailing comment\n\n-1 qid:7 2:1e-3\n0 4:1\n1.5 1:1\n";
    let s = parse(text, &LibsvmOptions::default()).unwrap();
    let d = &s.train;
    assert_eq!(s.total_rows, 4);
    assert_eq!(d.dim, 4);
    assert_eq!(d.labels, vec![1.0, -1.0, 0.0, 1.5]);
    assert_eq!(d.row(0), (&[0u32, 2][..], &[0.5f32, -2.0][..]));
    assert_eq!(d.row(1), (&[1u32][..], &[1e-3f32][..]));
    let z = parse(
        "1 0:1 5:2\n",
        &LibsvmOptions {
            zero_based: true,
            dim: Some(10),
            ignore_beyond_dim: false,
            ..LibsvmOptions::default()
        },
    )
    .unwrap();
    assert_eq!(z.train.row(0).0, &[0, 5]);
    assert_eq!(z.train.dim, 10);
    // an empty row is allowed (a row with no features)
    assert_eq!(
        parse("1\n", &LibsvmOptions::default())
            .unwrap()
            .train
            .rows(),
        1
    );
}

#[test]
fn workers_keep_disjoint_shares_and_the_split_is_seeded() {
    let text: String = (0..1000)
        .map(|i| format!("{} {}:1\n", if i % 2 == 0 { 1 } else { -1 }, i % 50 + 1))
        .collect();
    let opts = LibsvmOptions::default();
    let mut train = 0;
    let mut test = 0;
    for w in 0..3 {
        let f = RowFilter {
            tail_from: None,
            worker: w,
            workers: 3,
            test_fraction: 0.3,
            seed: 5,
        };
        let s = parse_libsvm(text.as_bytes(), Path::new("x"), &opts, &f).unwrap();
        assert_eq!(s.train.dim, 50, "every worker sees the same dimension");
        train += s.train.rows();
        test += s.test.rows();
    }
    assert_eq!(train + test, 1000);
    assert!((200..400).contains(&test), "{test}");
}

/// Each malformed input with the (line, column) of its error and a word the message must contain.
#[test]
fn malformed_inputs_name_file_line_and_column() {
    let dim10 = LibsvmOptions {
        zero_based: false,
        dim: Some(10),
        ignore_beyond_dim: false,
        ..LibsvmOptions::default()
    };
    let cases: &[(&str, &LibsvmOptions, usize, usize, &str)] = &[
        ("1 1:1\nabc 2:1\n", &dim10, 2, 1, "bad label"),
        ("1 1:1\n1 2:1 3\n", &dim10, 2, 7, "expected index:value"),
        ("1 x:1\n", &dim10, 1, 3, "bad feature index"),
        ("1 2:abc\n", &dim10, 1, 5, "bad feature value"),
        ("1 0:1\n", &dim10, 1, 3, "index 0"),
        ("1 3:1 2:1\n", &dim10, 1, 7, "not increasing"),
        ("1 3:1 3:2\n", &dim10, 1, 7, "repeated"),
        ("1 11:1\n", &dim10, 1, 3, "beyond the declared dimension"),
        ("1 2:nan\n", &dim10, 1, 5, "not finite"),
        ("1 2:inf\n", &dim10, 1, 5, "not finite"),
        ("1 -2:1\n", &dim10, 1, 3, "bad feature index"),
        ("1 2:\n", &dim10, 1, 5, "bad feature value"),
        ("1 2:1.5\u{00e9}\n", &dim10, 1, 5, "bad feature value"),
        ("1 2:\u{0661}\n", &dim10, 1, 5, "bad feature value"),
        ("nan 2:1\n", &dim10, 1, 1, "not finite"),
        (
            "\n\n  1 2:1 99999999999:1\n",
            &LibsvmOptions::default(),
            3,
            9,
            "data.max_dim",
        ),
    ];
    for (text, opts, line, column, word) in cases {
        let e = parse(text, opts).expect_err(text);
        assert_eq!((e.line, e.column), (*line, *column), "{text:?}: {e}");
        assert!(
            e.message.contains(word),
            "{text:?}: '{}' lacks '{word}'",
            e.message
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("in.svm:{line}:{column}: ")),
            "{shown}"
        );
    }
}

/// Under a two-class loss a label is +1/-1 or 1/0 (`2` and `0.5` used to become +1 silently);
/// a byte-order mark before the first label is skipped.
#[test]
fn two_class_labels_are_checked_and_a_byte_order_mark_is_skipped() {
    let binary = LibsvmOptions {
        binary: true,
        ..LibsvmOptions::default()
    };
    let good = parse("+1 1:1\n-1 1:1\n1 2:1\n0 2:1\n-0 1:1\n1.0 1:1\n", &binary).unwrap();
    assert_eq!(good.train.labels, vec![1.0, -1.0, 1.0, 0.0, 0.0, 1.0]);
    for (text, line, column, label) in [
        ("1 1:1\n2 1:1\n", 2, 1, "'2'"),
        ("  0.5 1:1\n", 1, 3, "'0.5'"),
        ("1 1:1\n-1 1:1\n-2 3:1\n", 3, 1, "'-2'"),
    ] {
        let e = parse(text, &binary).unwrap_err();
        assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
        assert!(
            e.message.contains(label) && e.message.contains("two classes"),
            "{e}"
        );
    }
    // The same file under a regression loss: any finite label.
    assert!(parse("2 1:1\n0.5 1:1\n", &LibsvmOptions::default()).is_ok());
    // A byte-order mark at the start of the file, not elsewhere.
    let bom = parse("\u{feff}1 1:1\n-1 2:1\n", &binary).unwrap();
    assert_eq!(bom.train.labels, vec![1.0, -1.0]);
    let e = parse("1 1:1\n\u{feff}1 2:1\n", &binary).unwrap_err();
    assert_eq!((e.line, e.column), (2, 1), "{e}");
}

/// An error quotes at most 80 characters of a token, then its length: a 20 MB line is not
/// echoed whole.
#[test]
fn an_error_quotes_a_long_token_clipped() {
    let text = format!("1 2:{}\n", "x".repeat(20_000_000));
    let e = parse(&text, &LibsvmOptions::default()).unwrap_err();
    let shown = e.to_string();
    assert!(shown.len() < 200, "{} bytes", shown.len());
    assert!(shown.ends_with("… (20000000 bytes)'"), "{shown}");
}

/// A FIFO with no writer used to block the run forever at `open`; a pipe (`<(cat file)`)
/// read as an empty file. Both are errors at once, naming the file.
#[test]
fn a_fifo_or_a_directory_as_input_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rows.svm");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let model = dir.path().join("model.txt");
    std::fs::create_dir(&model).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (f, m) = (fifo.clone(), model.clone());
    std::thread::spawn(move || {
        let data = job_for(&f, None)
            .load_worker_data(0, 1)
            .map(|_| ())
            .unwrap_err();
        let model = gradflow::model::file::ModelFile::load(&m).unwrap_err();
        let job = gradflow::job::Job::load(&f, &[]).unwrap_err().to_string();
        tx.send((data, model, job)).unwrap();
    });
    let (data, model, job) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("reading a FIFO must not block");
    assert!(
        data.contains("rows.svm") && data.contains("a pipe or FIFO, not a regular file: gradflow reads its inputs by byte ranges and more than once, so a stream"),
        "{data}"
    );
    assert!(
        job.contains("rows.svm") && job.contains("a pipe or FIFO"),
        "{job}"
    );
    assert!(
        model.contains("model.txt") && model.contains("a directory"),
        "{model}"
    );
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let e = gradflow::data::read_libsvm(
        Path::new("/nonexistent/x.svm"),
        &LibsvmOptions::default(),
        &RowFilter::all(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.svm"), "{e}");
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let bytes: &[u8] = b"1 1:1\n1 2:\xff\n";
    let e = parse_libsvm(
        bytes,
        Path::new("b.svm"),
        &LibsvmOptions::default(),
        &RowFilter::all(),
    )
    .unwrap_err();
    assert_eq!(e.line, 2);
}

#[test]
fn features_beyond_a_fixed_dimension_can_be_ignored_and_counted() {
    let ignore = LibsvmOptions {
        zero_based: false,
        dim: Some(10),
        ignore_beyond_dim: true,
        ..LibsvmOptions::default()
    };
    let s = parse("1 2:1 11:3 12:4\n0 1:1 10:2\n", &ignore).unwrap();
    assert_eq!(s.ignored_features, 2);
    assert_eq!(s.train.row(0), (&[1u32][..], &[1.0f32][..]));
    assert_eq!(s.train.row(1), (&[0u32, 9][..], &[1.0f32, 2.0][..]));
    assert_eq!(s.train.dim, 10);
    // Ignored features are still checked: order, repeats and values.
    for (text, word) in [
        ("1 12:1 11:1\n", "not increasing"),
        ("1 12:1 12:1\n", "repeated"),
        ("1 12:x\n", "bad feature value"),
    ] {
        let e = parse(text, &ignore).unwrap_err().to_string();
        assert!(e.contains(word), "{text}: {e}");
    }
    let strict = LibsvmOptions {
        ignore_beyond_dim: false,
        ..ignore
    };
    assert!(parse("1 11:3\n", &strict).is_err());
}

#[test]
fn a_tail_split_holds_out_the_last_rows_in_file_order() {
    use gradflow::job::Job;
    // Labels number the rows (a regression's labels); comments and blank lines are not rows.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.svm");
    let mut text = String::from("# ten rows\n\n");
    for i in 0..10 {
        text += &format!("{i} {}:1 # row {i}\n", i + 1);
        if i == 4 {
            text += "   \n# a comment line\n";
        }
    }
    std::fs::write(&path, &text).unwrap();
    assert_eq!(gradflow::data::count_rows(&path).unwrap(), 10);
    let job_text = format!(
        "[data]\ntrain = {:?}\ntest_fraction = 0.3\ntest_split = \"tail\"\n[model]\nloss = \"squared\"\n",
        path.display().to_string()
    );
    let job = Job::parse(&job_text, Path::new("j.toml"), &[]).unwrap();
    let labels = |d: &gradflow::data::Dataset| d.labels.to_vec();
    let (one, _) = job.load_worker_data(0, 1).unwrap();
    assert_eq!(labels(&one.test), [7.0, 8.0, 9.0]);
    assert_eq!(labels(&one.train), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Two workers: each reads the rows that start in its half of the file's bytes (the
    // comment lines make the halves uneven); the test side is the same tail.
    let (w0, _) = job.load_worker_data(0, 2).unwrap();
    let (w1, _) = job.load_worker_data(1, 2).unwrap();
    assert_eq!(
        (labels(&w0.train), labels(&w1.train), labels(&w1.test)),
        (
            vec![0.0, 1.0, 2.0, 3.0, 4.0],
            vec![5.0, 6.0],
            vec![7.0, 8.0, 9.0]
        )
    );
    assert!(w0.test.labels.is_empty());
    // The generated data splits the same way: the last quarter of its rows.
    let synth = Job::parse(
        "[data]\ntest_fraction = 0.25\ntest_split = \"tail\"\n[data.synth]\nrows = 1000\n",
        Path::new("s.toml"),
        &[],
    )
    .unwrap();
    let all = synth.data.synth.generate();
    let (d, _) = synth.load_worker_data(0, 1).unwrap();
    assert_eq!(d.test.labels, all.labels[750..].to_vec());
    assert_eq!(d.train.labels, all.labels[..750].to_vec());
    // The default is still the seeded hash split, which mixes the order.
    let hashed = Job::parse(
        "[data]\ntest_fraction = 0.25\n[data.synth]\nrows = 1000\n",
        Path::new("h.toml"),
        &[],
    )
    .unwrap();
    let (h, _) = hashed.load_worker_data(0, 1).unwrap();
    assert_ne!(h.test.labels, all.labels[750..].to_vec());
    assert!(
        Job::parse("[data]\ntest_split = \"head\"\n", Path::new("x.toml"), &[])
            .unwrap_err()
            .to_string()
            .contains("head")
    );
}

/// A LibSVM file of `rows` rows of uneven length, with comment lines, CRLF line ends, a
/// separate-test-file feature beyond the training dimension, and no final line break.
fn uneven_file(rows: usize, bad_line: Option<usize>) -> String {
    let mut text = String::from("# generated\r\n");
    for i in 0..rows {
        if bad_line == Some(text.lines().count() + 1) {
            text += "1 7:x\n";
            continue;
        }
        let label = if i % 3 == 0 { "1" } else { "-1" };
        text += label;
        for k in 0..(i * 7 % 23) {
            text += &format!(" {}:{}", 1 + k * 5 + i % 5, (i + k) % 4);
        }
        text += if i % 10 == 0 { " # note\r\n" } else { "\n" };
        if i % 17 == 0 {
            text += "# a comment line\n\n";
        }
    }
    text.pop();
    text
}

fn job_for(train: &Path, test: Option<&Path>) -> gradflow::job::Job {
    let mut text = format!("[data]\ntrain = {:?}\n", train.display().to_string());
    match test {
        Some(t) => text += &format!("test = {:?}\n", t.display().to_string()),
        None => text += "test_fraction = 0.3\n",
    }
    gradflow::job::Job::parse(&text, Path::new("j.toml"), &[]).unwrap()
}

#[test]
fn workers_read_their_own_byte_ranges_and_together_read_the_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.svm");
    std::fs::write(&train, uneven_file(301, None)).unwrap();
    let test = dir.path().join("test.svm");
    std::fs::write(&test, "1 2:1 500:1\n-1 3:1\n").unwrap();
    let job = job_for(&train, None);
    let (one, dim) = job.load_worker_data(0, 1).unwrap();
    assert_eq!(one.train.rows() + one.test.rows(), 301);
    for workers in 2..=5 {
        // The workers' rows, in worker order, are the one worker's rows in file order; every
        // worker has the same dimension; the split does not depend on the number of workers.
        let mut train = gradflow::data::Dataset::new(dim);
        let mut test = gradflow::data::Dataset::new(dim);
        for w in 0..workers {
            let (d, wdim) = job.load_worker_data(w, workers).unwrap();
            assert_eq!(wdim, dim);
            assert!(
                d.train.rows() > 20,
                "{workers} workers: worker {w} reads its share"
            );
            for (from, to) in [(&d.train, &mut train), (&d.test, &mut test)] {
                for i in 0..from.rows() {
                    let (k, v) = from.row(i);
                    to.push_row(k, v, from.labels[i]);
                }
            }
        }
        assert_eq!(
            (&train, &test),
            (&one.train, &one.test),
            "{workers} workers"
        );
    }
    // On timely workers (two threads), each reads its own part and they share only counts.
    let jobs = (job.clone(), job_for(&train, Some(&test)));
    let expected: Vec<_> = (0..2)
        .map(|w| {
            (
                jobs.0.load_worker_data(w, 2).unwrap(),
                jobs.1.load_worker_data(w, 2).unwrap(),
            )
        })
        .collect();
    assert_eq!(expected[0].1 .0.ignored_test_features, 1);
    let got = timely::execute(timely::Config::process(2), move |worker| {
        let a = jobs.0.load_on(worker).unwrap();
        let b = jobs.1.load_on(worker).unwrap();
        ((a.0, a.1), (b.0, b.1))
    })
    .unwrap()
    .join()
    .into_iter()
    .map(|r| r.unwrap())
    .collect::<Vec<_>>();
    // Every worker knows every worker's rows (for the run's report).
    let shares = |i: usize| -> Vec<(u64, u64)> {
        let rows = |d: &gradflow::data::WorkerData| (d.train.rows() as u64, d.test.rows() as u64);
        expected
            .iter()
            .map(|e| if i == 0 { rows(&e.0 .0) } else { rows(&e.1 .0) })
            .collect()
    };
    let got: Vec<_> = got
        .into_iter()
        .map(|((mut a, da), (mut b, db))| {
            assert_eq!((a.shares.clone(), b.shares.clone()), (shares(0), shares(1)));
            (a.shares, b.shares) = (vec![], vec![]);
            ((a, da), (b, db))
        })
        .collect();
    assert_eq!(got, expected);
}

/// What loading `job` on each of two timely workers returns as its error.
fn load_errors_on_two_workers(job: gradflow::job::Job) -> Vec<Option<String>> {
    timely::execute(timely::Config::process(2), move |worker| {
        job.load_on(worker).err()
    })
    .unwrap()
    .join()
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn every_worker_reports_the_first_bad_line_of_any_part() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("bad.svm");
    std::fs::write(&train, uneven_file(200, Some(190))).unwrap();
    let job = job_for(&train, None);
    let errors = load_errors_on_two_workers(job);
    let expected = format!("{}:190:5: bad feature value 'x'", train.display());
    assert_eq!(errors, vec![Some(expected.clone()), Some(expected)]);
}

/// `batch_fraction = 1e-5` on 2,000 rows ran 100,000 rounds, 98% of them empty and recorded as
/// loss 0. A batch of less than one row is an error with the smallest valid value, which the
/// test then uses.
#[test]
fn a_batch_fraction_that_selects_no_rows_is_an_error_naming_the_smallest_valid_value() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("rows.svm");
    std::fs::write(&train, uneven_file(2000, None)).unwrap();
    let with = |fraction: &str| {
        let mut job = job_for(&train, None);
        job.train.batch_fraction = fraction.parse().unwrap();
        job
    };
    let errors = load_errors_on_two_workers(with("1e-5"));
    let e = errors[0].clone().expect("an error");
    assert_eq!(errors[1].as_ref(), Some(&e), "both workers report the same");
    assert!(
        e.contains("train.batch_fraction = 0.00001 makes 100000 rounds"),
        "{e}"
    );
    let smallest = e.split("smallest valid value is ").nth(1).unwrap();
    let smallest = smallest.split(' ').next().unwrap();
    assert_eq!(
        load_errors_on_two_workers(with(smallest)),
        [None, None],
        "{smallest}"
    );
    let just_below = (smallest.parse::<f64>().unwrap() * 0.99).to_string();
    assert!(load_errors_on_two_workers(with(&just_below))[0].is_some());
}

#[test]
fn a_training_file_without_rows_is_an_error_not_an_empty_run() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty.svm", ""), ("comments.svm", "# nothing\n\n")] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let job = format!("[data]\ntrain = {:?}\n", path.display().to_string());
        let job = gradflow::job::Job::parse(&job, Path::new("job.toml"), &[]).unwrap();
        for workers in [1, 2] {
            let e = gradflow::runtime::run_job(
                &job,
                &gradflow::runtime::ClusterSpec {
                    workers,
                    ..Default::default()
                },
                &gradflow::dataflow::Supervisor::new(),
                gradflow::runtime::quiet(),
            )
            .unwrap_err();
            assert!(e.contains(name) && e.contains("no rows to train on"), "{e}");
        }
    }
    // A test file without rows is an error too, not a run that reports no test metrics.
    let train = dir.path().join("train.svm");
    std::fs::write(&train, "1 1:1\n-1 2:1\n").unwrap();
    let test = dir.path().join("comments.svm");
    let job = job_for(&train, Some(&test));
    for e in load_errors_on_two_workers(job) {
        let e = e.expect("an error on every worker");
        assert!(
            e.contains("comments.svm") && e.contains("no rows to test on"),
            "{e}"
        );
    }
}

#[test]
fn a_stray_huge_index_is_an_error_naming_its_place_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stray.svm");
    let run = |text: &str, max_dim: &str| {
        std::fs::write(&path, text).unwrap();
        let job = format!(
            "[data]\ntrain = {:?}\n{max_dim}\n[train]\nepochs = 1\nbatch_fraction = 1.0\n",
            path.display().to_string()
        );
        let job = gradflow::job::Job::parse(&job, Path::new("job.toml"), &[]).unwrap();
        gradflow::runtime::run_job(
            &job,
            &gradflow::runtime::ClusterSpec {
                workers: 2,
                ..Default::default()
            },
            &gradflow::dataflow::Supervisor::new(),
            gradflow::runtime::quiet(),
        )
    };
    // The 15-byte file: index 2^32 - 1 once made every worker reserve 33 GB.
    let e = run("1 4294967295:1\n", "").unwrap_err();
    let place = format!("{}:1:3:", path.display());
    assert!(e.contains(&place) && e.contains("data.max_dim"), "{e}");
    // The cap is the job's: at max_dim = 8 index 8 (1-based) fits and 9 does not.
    let rows = "1 1:1 8:1\n-1 2:1\n1 3:1\n-1 4:1\n";
    let trained = run(rows, "max_dim = 8").unwrap();
    let weights = trained.weights.unwrap();
    assert_eq!(weights.len(), 9, "8 features and the intercept");
    let e = run(&format!("{rows}1 9:1\n"), "max_dim = 8").unwrap_err();
    assert!(e.contains(&format!("{}:5:3:", path.display())), "{e}");
}

/// The notes of a run, one string.
fn notes(outcome: &gradflow::runtime::RunOutcome) -> String {
    outcome.notes.join("\n")
}

#[test]
fn the_row_cache_trains_the_same_model_and_is_rebuilt_when_stale_or_damaged() {
    use gradflow::data::cache;
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.svm");
    std::fs::write(&train, uneven_file(301, None)).unwrap();
    let cache_dir = dir.path().join("cache");
    let mut job = job_for(&train, None);
    job.train.epochs = 2;
    let plain = job.clone();
    job.data.cache = Some(cache_dir.clone());
    let expected = common::run_local(&plain, 2).weights.unwrap();

    let first = common::run_local(&job, 2);
    assert!(notes(&first).contains("wrote the cache") && notes(&first).contains("no cache yet"));
    assert_eq!(
        common::file_names(&cache_dir),
        ["worker-000-of-002.gfcache", "worker-001-of-002.gfcache"]
    );
    let second = common::run_local(&job, 2);
    assert!(
        notes(&second).contains("read from the cache"),
        "{}",
        notes(&second)
    );
    assert_eq!(first.weights.as_ref(), Some(&expected));
    assert_eq!(second.weights.as_ref(), Some(&expected));
    // Another number of workers has its own files.
    let one = common::run_local(&job, 1);
    assert!(notes(&one).contains("wrote the cache"));
    assert!(notes(&common::run_local(&job, 1)).contains("read from the cache"));

    // A changed input file makes the cache stale: the rows are read again.
    std::fs::write(&train, uneven_file(320, None)).unwrap();
    let changed = common::run_local(&job, 2);
    assert!(
        notes(&changed).contains("the cache was written for"),
        "{}",
        notes(&changed)
    );
    assert_eq!(changed.weights, common::run_local(&plain, 2).weights);
    let expected = changed.weights.unwrap();

    // A damaged file, and one whose rows were tampered with under the right key, are rebuilt
    // with a note naming the file and the problem, never trained on.
    let file = cache::path(&cache_dir, 0, 2);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let damaged = common::run_local(&job, 2);
    let n = notes(&damaged);
    assert!(
        n.contains("worker-000-of-002.gfcache: byte") && n.contains("checksum does not match"),
        "{n}"
    );
    assert_eq!(damaged.weights.as_ref(), Some(&expected));
    let key = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let mut rows = cache::read(&file, key).unwrap();
    rows.train.indices[0] = rows.dim + 5;
    cache::write(&file, key, &rows).unwrap();
    let tampered = common::run_local(&job, 2);
    let n = notes(&tampered);
    assert!(
        n.contains("row 0: keys must ascend and be below the dimension"),
        "{n}"
    );
    assert_eq!(tampered.weights.as_ref(), Some(&expected));
    assert!(notes(&common::run_local(&job, 2)).contains("read from the cache"));

    // A cache that cannot be written costs the run nothing but a note naming it.
    job.data.cache = Some(train.clone()); // a file, not a directory
    let unwritable = common::run_local(&job, 2);
    let n = notes(&unwritable);
    assert!(
        n.contains("could not write the cache") && n.contains("train.svm"),
        "{n}"
    );
    assert_eq!(unwritable.weights, Some(expected));
}

#[test]
fn two_processes_over_tcp_each_cache_their_workers_rows() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.svm");
    std::fs::write(&train, uneven_file(240, None)).unwrap();
    let mut job = job_for(&train, None);
    job.train.epochs = 2;
    let expected = common::run_local(&job, 2).weights;
    job.data.cache = Some(dir.path().join("cache"));
    let first = common::run_processes(&job, 2);
    let second = common::run_processes(&job, 2);
    assert!(notes(&first[0]).contains("wrote the cache"));
    assert!(
        notes(&second[0]).contains("read from the cache"),
        "{}",
        notes(&second[0])
    );
    assert_eq!(
        common::file_names(&dir.path().join("cache")),
        ["worker-000-of-002.gfcache", "worker-001-of-002.gfcache"]
    );
    // Two processes of one worker train the model two threads train.
    assert_eq!(first[0].weights, expected);
    assert_eq!(second[0].weights, expected);
}

/// LibSVM rows of one class under a binary loss are an error on one worker and on two; under
/// squared loss they train.
#[test]
fn training_rows_of_one_class_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.svm");
    let rows: String = (0..40)
        .map(|i| format!("+1 {}:1 {}:0.5\n", i % 7 + 1, i % 3 + 8))
        .collect();
    std::fs::write(&file, rows).unwrap();
    for workers in ["1", "2"] {
        let out = common::gradflow(["train", "--data", file.to_str().unwrap(), "-w", workers]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && e.contains("every training row's label is positive (")
                && e.contains("need rows of both classes"),
            "-w {workers}: {e}"
        );
    }
    let out = common::gradflow_ok([
        "train",
        "--data",
        file.to_str().unwrap(),
        "--loss",
        "squared",
    ]);
    assert!(out.contains("epoch"), "{out}");
}
