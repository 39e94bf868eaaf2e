//! `train.exchange = "auto"` and `train.compressor = "auto"`: the job's exchange and compressor
//! chosen before training, on every worker alike, from a round measured on the job's own
//! gradients and link ([`crate::dataflow::calibrate`]) and the cost model of
//! [`crate::exchange::cost`].

use timely::worker::Worker;

use crate::codec::CodecSpec;
use crate::dataflow::calibrate::{calibrate, Candidate as Measured};
use crate::dataflow::{Supervisor, TrainPlan, WorkerData};
use crate::exchange::cost::{choose as rank, Candidate, Strategy, KEEPS_THE_LOSS};
use crate::exchange::ExchangeKind;
use crate::job::{codec_name, Auto, Job};

/// The job with its `"auto"` fields chosen, and a report of the choice and the numbers
/// behind it (with the settings that replay it).
pub fn choose(
    worker: &mut Worker,
    job: &Job,
    data: &WorkerData,
    plan: &TrainPlan,
    supervisor: &Supervisor,
) -> Result<(Job, String), String> {
    let t = &job.train;
    let strategies = match (t.auto.exchange, t.exchange) {
        (true, _) => vec![Strategy::Sharded, Strategy::AllGather],
        (false, ExchangeKind::Allgather) => vec![Strategy::AllGather],
        (false, _) => vec![Strategy::Sharded],
    };
    let specs: Vec<(String, CodecSpec)> = match t.auto.compressor {
        true => KEEPS_THE_LOSS
            .iter()
            .map(|&n| (n.to_string(), CodecSpec::with_defaults(n).expect("a codec")))
            .collect(),
        false => vec![(codec_name(&t.compressor), t.compressor.clone())],
    };
    // Each codec with the memory the job gives it (its paper's, unless the job names one).
    let codecs: Vec<Measured> = specs
        .into_iter()
        .map(|(name, spec)| {
            let mut with = job.clone();
            with.train.compressor = spec.clone();
            let memory = with.memory();
            (name, spec, memory)
        })
        .collect();
    let measured = calibrate(worker, data, plan, &codecs, supervisor)?;
    let (ranked, chosen) = rank(&measured.round, &strategies, &measured.codecs);
    let choice = &ranked[chosen];
    let mut job = job.clone();
    job.train.auto = Auto::default();
    job.train.exchange = match choice.strategy {
        Strategy::Sharded => ExchangeKind::Sharded,
        Strategy::AllGather => ExchangeKind::Allgather,
    };
    if let Some((_, spec, _)) = codecs.iter().find(|(n, _, _)| *n == choice.codec) {
        job.train.compressor = spec.clone();
    }
    let r = &measured.round;
    let mut report = format!(
        "auto: a round measured before training: gradient {:.2} ms ({:.0} pairs, {:.0} keys \
         summed over {} workers); link {:.3} ms a hop, {}\n",
        r.gradient_ms,
        r.pairs,
        r.union_keys,
        r.workers,
        r.link.hop_ms,
        rate(r.link.bytes_per_s, r.workers > r.threads),
    );
    report.push_str(&table(&ranked, chosen));
    report.push_str(&format!(
        "auto: chose {} + {} (memory {}); replay it with --set 'train.exchange=\"{}\"' --set \
         'train.compressor={{ name = \"{}\" }}'",
        choice.strategy.name(),
        choice.codec,
        job.memory().name(),
        choice.strategy.name(),
        choice.codec
    ));
    Ok((job, report))
}

fn rate(bytes_per_s: f64, measured: bool) -> String {
    match measured && bytes_per_s < 1e15 {
        true => format!("{:.1} MB/s", bytes_per_s / 1e6),
        false => "no rate measured".into(),
    }
}

/// The candidates, fastest first, the choice marked.
fn table(ranked: &[Candidate], chosen: usize) -> String {
    let mut s = format!(
        "  {:<10} {:<10} {:>8} {:>10} {:>8} {:>5} {:>9}\n",
        "exchange", "codec", "cpu ms", "sent kB", "link ms", "hops", "round ms"
    );
    for (i, c) in ranked.iter().enumerate() {
        let p = &c.prediction;
        s.push_str(&format!(
            "{} {:<10} {:<10} {:>8.3} {:>10.1} {:>8.3} {:>5} {:>9.3}\n",
            if i == chosen { '*' } else { ' ' },
            c.strategy.name(),
            c.codec,
            p.cpu_ms,
            p.sent_bytes / 1e3,
            p.wire_ms,
            p.hops,
            p.round_ms
        ));
    }
    s
}
