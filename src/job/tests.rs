use super::*;
use crate::codec::CodecSpec;
use crate::exchange::ExchangeKind;
use crate::memory::MemorySpec;

fn parse(text: &str) -> Result<Job, JobError> {
    Job::parse(text, Path::new("job.toml"), &[])
}

#[test]
fn the_format_follows_the_file_name_unless_given() {
    let implied = |name: &str| Format::from_extension(Path::new(name));
    assert_eq!(implied("d/flights.csv.gz"), Some(Format::Csv));
    assert_eq!(implied("F.CSV"), Some(Format::Csv));
    assert_eq!(implied("a9a.libsvm.zst"), Some(Format::Libsvm));
    assert_eq!(implied("train.svm"), Some(Format::Libsvm));
    assert_eq!(implied("train-images-idx3-ubyte.gz"), Some(Format::Idx));
    assert_eq!(implied("rows.parquet"), Some(Format::Parquet));
    assert_eq!(implied("part-0.PARQ"), Some(Format::Parquet));
    assert_eq!(implied("rows.feather"), None);
    assert_eq!(implied("csv"), None);
    let csv = "[data]\ntrain = \"x.csv\"\n[data.label]\ncolumn = \"y\"\n\
               [data.features]\ncategorical = [\"a\"]\n";
    assert_eq!(parse(csv).unwrap().data.format, Format::Csv);
    // A format given, in the file or by an override, is kept (and checked).
    let given = format!("{csv}\n[model]\n").replace("[data]\n", "[data]\nformat = \"libsvm\"\n");
    let e = parse(&given).unwrap_err().to_string();
    assert!(e.contains("set data.format = \"csv\""), "{e}");
    let o = Job::parse(csv, Path::new("j"), &["data.format=\"libsvm\"".into()]);
    assert!(o.is_err());
    let svm = parse("[data]\ntrain = \"x.svm\"").unwrap();
    assert_eq!(svm.data.format, Format::Libsvm);
}

#[test]
fn auto_leaves_the_defaults_and_refuses_what_it_cannot_choose_with() {
    let job = parse("[train]\nexchange = \"auto\"\ncompressor = \"auto\"").unwrap();
    assert_eq!(
        (
            job.train.auto,
            job.train.exchange,
            job.train.compressor.clone()
        ),
        (
            Auto {
                exchange: true,
                compressor: true
            },
            ExchangeKind::Sharded,
            CodecSpec::default()
        )
    );
    assert!(job.describe_exchange().starts_with("auto"));
    let fixed =
        parse("[train]\nexchange = \"allgather\"\ncompressor = { name = \"auto\" }").unwrap();
    assert_eq!(
        fixed.train.auto,
        Auto {
            exchange: false,
            compressor: true
        }
    );
    assert_eq!(fixed.train.exchange, ExchangeKind::Allgather);
    let with_override = Job::parse(
        "",
        Path::new("job.toml"),
        &["train.exchange=auto".to_string()],
    )
    .unwrap();
    assert!(with_override.train.auto.exchange && !with_override.train.auto.compressor);
    for (extra, field) in [
        ("memory = \"residual\"", "train.memory"),
        ("pull = true", "train.pull"),
        (
            "checkpoint = { dir = \"c\", every_rounds = 5 }",
            "train.checkpoint",
        ),
    ] {
        let e = parse(&format!("[train]\ncompressor = \"auto\"\n{extra}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{e}");
    }
    let e = parse("[train]\nexchange = \"sketch\"\ncompressor = \"auto\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("sketch"), "{e}");
    let e = parse("[data]\nformat = \"program\"\n[train]\nexchange = \"auto\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.format"), "{e}");
    // Anything else named auto is still an unknown name.
    assert!(parse("[train]\ndownlink = \"auto\"").is_err());
}

#[test]
fn empty_job_is_the_default() {
    let job = parse("").unwrap();
    assert_eq!(job, Job::default());
    assert_eq!(job.rounds_per_epoch(), 10);
}

#[test]
fn unknown_and_invalid_fields_are_named() {
    let e = parse("[train]\nepochz = 3\n").unwrap_err().to_string();
    assert!(e.contains("epochz") && e.contains("line 2"), "{e}");
    let e = parse("[model]\nloss = \"cubic\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cubic"), "{e}");
    for (text, says) in [
        ("[train]\nepochs = 9223372036854775807\n", "train.epochs"),
        (
            "[train]\nbatch_fraction = 1e-12\n",
            "train.batch_fraction = 1000000000000",
        ),
        (
            "[train]\nepochs = 10000001\nbatch_fraction = 0.01\n",
            "1000000100 rounds",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("limit"), "{text}: {e}");
    }
    assert!(parse("[train]\nepochs = 10000000\nbatch_fraction = 0.01\n").is_ok());
    let e = parse("[train]\nbatch_fraction = 1.5\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("train.batch_fraction"), "{e}");
    let e = parse("[optimizer]\nlr = -1\n").unwrap_err().to_string();
    assert!(e.contains("optimizer.lr"), "{e}");
    let e = parse("[train]\ncompressor = { name = \"zip\" }\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("zip"), "{e}");
    let e = parse("[bogus]\n").unwrap_err().to_string();
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn a_program_job_names_its_dimension_and_files() {
    let ok = "[data]\nformat = \"program\"\ndim = 100\n[data.files]\nflights = \"f.csv\"\n";
    let job = parse(ok).unwrap();
    let inputs = job.program_inputs().unwrap();
    assert_eq!(inputs.files["flights"], PathBuf::from("f.csv"));
    assert_eq!(inputs.test_fraction, 0.25);
    // The model is sized from data.dim (plus the intercept); the program brings the rows.
    let e = job.load_worker_data(0, 1).unwrap_err();
    assert!(e.contains("program"), "{e}");
    for (text, says) in [
        ("[data]\nformat = \"program\"\n", "data.dim"),
        (
            "[data]\nformat = \"program\"\ndim = 10\ntrain = \"a.svm\"\n",
            "data.train",
        ),
        (
            "[data]\nformat = \"program\"\ndim = 10\nzero_based = true\n",
            "data.zero_based",
        ),
        ("[data.files]\nflights = \"f.csv\"\n", "data.files"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    assert!(parse("").unwrap().program_inputs().is_none());
}

#[test]
fn auc_bins_are_a_power_of_two_or_exact() {
    let bits =
        |v: &str| parse(&format!("[train]\nauc_bins = {v}\n")).map(|j| j.train.auc_bins.bits());
    assert_eq!(bits("65536").unwrap(), 16);
    assert_eq!(bits("2").unwrap(), 1);
    assert_eq!(bits("4294967296").unwrap(), 32);
    assert_eq!(bits("\"exact\"").unwrap(), 32);
    assert_eq!(parse("").unwrap().train.auc_bins, AucBins::default());
    for bad in ["1000", "1", "0", "8589934592", "\"Exact\"", "-4", "65536.0"] {
        let e = bits(bad).unwrap_err().to_string();
        assert!(
            e.contains("auc_bins") && e.contains("power of two"),
            "{bad}: {e}"
        );
    }
    // The job file a run writes (`--print-job`, checkpoints) reads back the same.
    let job = parse("[train]\nauc_bins = \"exact\"\n").unwrap();
    let text = toml::to_string(&job).unwrap();
    assert_eq!(parse(&text).unwrap().train.auc_bins, AucBins::EXACT);
}

#[test]
fn dimensions_above_max_dim_are_errors_that_say_how_to_raise_it() {
    let csv = "[data]\nformat = \"csv\"\ntrain = \"t.csv\"\n[data.label]\ncolumn = \"y\"\n\
               [data.features]\ncategorical = [\"a\"]\n";
    for (text, says) in [
        ("[data]\ndim = 200000000\n", "data.dim = 200000000"),
        ("[data]\ndim = 11\nmax_dim = 10\n", "data.dim = 11"),
        ("[data.synth]\ndim = 200000000\n", "data.synth.dim"),
        (
            &format!("{csv}hash_bits = 31\n"),
            "data.features.hash_bits = 31",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains(says) && e.contains("raise data.max_dim"),
            "{text}: {e}"
        );
    }
    assert!(parse(&format!("{csv}hash_bits = 27\n")).is_ok());
    let raised = format!(
        "[data]\nmax_dim = 2147483648\n{}hash_bits = 31\n",
        &csv[7..]
    );
    assert!(parse(&raised).is_ok(), "{raised}");
    for bad in ["0", "4294967295"] {
        let e = parse(&format!("[data]\nmax_dim = {bad}\n")).unwrap_err();
        assert!(e.to_string().contains("data.max_dim"), "{e}");
    }
}

#[test]
fn the_intercept_is_the_last_key_of_every_row_and_exempt_from_lambda() {
    let text = "[data.synth]\nrows = 200\ndim = 50\nnnz = 5\n";
    let with = parse(text).unwrap();
    let (data, dim) = with.load_worker_data(0, 1).unwrap();
    assert_eq!(dim, 51);
    assert_eq!((data.train.dim, data.test.dim), (51, 51));
    for d in [&data.train, &data.test] {
        for i in 0..d.rows() {
            let (k, v) = d.row(i);
            assert_eq!((k.last(), v.last()), (Some(&50), Some(&1.0)));
            assert!(k[..k.len() - 1].iter().all(|&k| k < 50));
        }
    }
    assert_eq!(with.plan(dim, 1).intercept, Some(50));
    let without = parse(&format!("{text}[model]\nintercept = false\n")).unwrap();
    let (data, dim) = without.load_worker_data(0, 1).unwrap();
    assert_eq!(dim, 50);
    assert!(data.train.indices.iter().all(|&k| k < 50));
    assert_eq!(without.plan(dim, 1).intercept, None);
}

#[test]
fn overrides_replace_fields_and_are_checked() {
    let job = Job::parse(
        "[train]\nepochs = 3\n",
        Path::new("j"),
        &["train.epochs=5".into(), "train.exchange=allgather".into()],
    )
    .unwrap();
    assert_eq!(job.train.epochs, 5);
    assert_eq!(job.train.exchange, ExchangeKind::Allgather);
    let e = Job::parse("", Path::new("j"), &["train.epochx=5".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("epochx"), "{e}");
    assert!(Job::parse("", Path::new("j"), &["noequals".into()]).is_err());
}

#[test]
fn exchange_fields_are_checked_and_memory_defaults_follow_the_papers() {
    for (text, says) in [
        (
            "[train]\npull = true\nexchange = \"allgather\"\n",
            "train.pull",
        ),
        (
            "[train]\npull = true\ndownlink = { name = \"topk\" }\n",
            "train.downlink must be none",
        ),
        (
            "[train]\nreplica = \"process\"\nexchange = \"allgather\"\n",
            "train.replica",
        ),
        ("[train]\nreplica = \"everywhere\"\n", "replica"),
        (
            "[train]\ndownlink = { name = \"topk\", ratio = 2.0 }\n",
            "train.downlink",
        ),
        ("[train]\nmemory = \"resid\"\n", "resid"),
        (
            "[train]\nexchange = \"allgather\"\ndownlink = { name = \"topk\" }\n",
            "only the sharded exchange has a downlink",
        ),
        ("[train]\nownership = \"random\"\n", "random"),
        ("[train.sketch]\nrows = 40\n", "train.sketch.rows"),
        (
            "[train]\nexchange = \"sketch\"\ncompressor = { name = \"topk\" }\n",
            "sketch exchange",
        ),
        ("[train.sketch]\ncolumns = -1\n", "columns"),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    let memory = |text: &str| parse(text).unwrap().memory();
    assert_eq!(memory(""), MemorySpec::None);
    let topk = "[train]\ncompressor = { name = \"topk\" }\n";
    assert_eq!(memory(topk), MemorySpec::Residual);
    let sign = "[train]\ncompressor = { name = \"signsgd\" }\n";
    assert_eq!(memory(sign), MemorySpec::None, "with Adam");
    let sign_sgd = format!("{sign}[optimizer]\nkind = \"sgd\"\n");
    assert_eq!(memory(&sign_sgd), MemorySpec::Residual);
    let sketchml = "[train]\ncompressor = { name = \"sketchml\" }\n";
    assert_eq!(memory(sketchml), MemorySpec::None, "with Adam");
    let sketchml_sgd = format!("{sketchml}[optimizer]\nkind = \"sgd\"\n");
    assert_eq!(memory(&sketchml_sgd), MemorySpec::LazyResidual);
    let sketch = "[train]\nexchange = \"sketch\"\n";
    assert_eq!(memory(sketch), MemorySpec::Dgc { momentum: 0.9 });
    let explicit = "[train]\ncompressor = { name = \"topk\" }\nmemory = \"none\"\n";
    assert_eq!(memory(explicit), MemorySpec::None);
}

/// A registered model is a `model.kind` like a built-in one: the plan builds it with the job's
/// outputs, its width sizes the model, and the job writes its name back.
#[test]
fn a_registered_model_is_named_by_model_kind() {
    use crate::model::{Linear, ModelArgs};
    crate::model::register("test-wide", |a: &ModelArgs| Linear::new(a.outputs * 3));
    let job = parse("[data]\ntrain = \"x.svm\"\n[model]\nkind = \"test-wide\"\n").unwrap();
    assert_eq!(job.model.kind, ModelKind::Added("test-wide"));
    assert_eq!(job.width(), 3);
    assert_eq!(job.plan(10, 1).dim, 30);
    let written = toml::to_string(&job.model).unwrap();
    assert!(written.contains("kind = \"test-wide\""), "{written}");
    let e = parse("[model]\nkind = \"test-narrow\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown model 'test-narrow' (expected linear, fm, mlp, test-wide"),
        "{e}"
    );
}

/// A model's keys are 32-bit: features × weights per feature + dense weights must fit, or the
/// error names the model's size and the fields that set it.
#[test]
fn a_model_of_more_keys_than_a_u32_numbers_is_refused() {
    let fm = parse("[model]\nkind = \"fm\"\nfactors = 8").unwrap();
    assert!(fm.check_model_keys(1 << 28).is_ok(), "9 x 2^28 keys fit");
    let e = fm.check_model_keys(1 << 29).unwrap_err();
    assert!(
        e.contains("536870912 features make a fm model of 4831838208 weights (9 per feature")
            && e.contains("at most 4294967295"),
        "{e}"
    );
    let linear = parse("").unwrap();
    assert!(linear.check_model_keys(u32::MAX).is_ok());
}

/// `train.state = "sharded"` pulls, serves hashed ownership as strided, and is refused with
/// what it cannot serve.
#[test]
fn sharded_state_plans_pulls_and_strided_owners() {
    let job = parse("[train]\nstate = \"sharded\"").unwrap();
    let plan = job.plan(1000, 1);
    assert!(plan.pull);
    assert_eq!(plan.ownership, crate::exchange::Ownership::Strided);
    let ranges = parse("[train]\nstate = \"sharded\"\nownership = \"ranges\"").unwrap();
    assert_eq!(
        ranges.plan(1000, 1).ownership,
        crate::exchange::Ownership::Ranges
    );
    assert!(parse("[train]\nstate = \"sharded\"\ninit_model = \"m.txt\"").is_ok());
}
