//! `train.exchange = "auto"` and `train.compressor = "auto"`: the job's exchange and compressor
//! chosen before training, on every worker alike. The cost model of [`crate::exchange::cost`]
//! ranks every candidate from a round measured on the job's own gradients and link
//! ([`crate::dataflow::calibrate`]); the first few, and the best uncompressed one of each
//! exchange, are then tried for a few real rounds each ([`crate::dataflow::trial`]), and the
//! fastest tried wins (a lossy codec only by a margin). The model ranks; real rounds decide,
//! because they show what the model misses: processes sharing cores, caches emptied by other
//! processes' rounds, a parked worker's wake-up.

use timely::worker::Worker;

use crate::codec::CodecSpec;
use crate::dataflow::calibrate::{agree, calibrate, median, warmed_memory, Candidate as Measured};
use crate::dataflow::trial::trial;
use crate::dataflow::{Supervisor, TrainPlan, WorkerData};
use crate::exchange::cost::{choose as rank, keeps_the_loss, least, Candidate, Strategy};
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
        true => keeps_the_loss(plan.model.name())
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
    let started = std::time::Instant::now();
    let measured = calibrate(worker, data, plan, &codecs, supervisor)?;
    let (ranked, predicted) = rank(&measured.round, &strategies, &measured.codecs);
    let configured = |c: &Candidate| {
        let mut job = job.clone();
        job.train.auto = Auto::default();
        job.train.exchange = match c.strategy {
            Strategy::Sharded => ExchangeKind::Sharded,
            Strategy::AllGather => ExchangeKind::Allgather,
        };
        if let Some((_, spec, _)) = codecs.iter().find(|(n, _, _)| *n == c.codec) {
            job.train.compressor = spec.clone();
        }
        job
    };
    // The shortlist, each tried for a few real rounds on every worker.
    let tried = shortlist(&ranked, predicted);
    let rounds = TRIAL_ROUNDS.min(plan.rounds());
    let plans: Vec<TrainPlan> = tried
        .iter()
        .map(|&i| {
            let job = configured(&ranked[i]);
            TrainPlan {
                exchange: job.train.exchange,
                codec: job.train.compressor.clone(),
                memory: job.memory(),
                ..plan.clone()
            }
        })
        .collect();
    // Each memory warmed as a run's first rounds warm it, so that the trials time the codec on
    // training's messages.
    let (me, workers) = (worker.index() as u32, worker.peers());
    let warm = WARM_ROUNDS.min(plan.rounds());
    let memories: Vec<Option<Vec<u8>>> = plans
        .iter()
        .map(|p| warmed_memory(data, p, me, workers, warm))
        .collect::<Result<_, _>>()?;
    // In turns, so that a slow spell of the machine falls on every candidate alike; in each,
    // the model's first last, so that training follows the lightest traffic (on a shaped link,
    // training that followed uncompressed trials ran slower: docs/auto.md).
    let mut timed = vec![Vec::new(); plans.len()];
    for _ in 0..TRIAL_TURNS {
        for ((plan, timed), memory) in plans.iter().zip(&mut timed).zip(&memories).rev() {
            let times = trial(worker, plan, data, rounds, memory.as_deref(), supervisor)?;
            timed.extend(typical_rounds(&times));
        }
    }
    let mine: Vec<f64> = timed.into_iter().map(median).collect();
    let trials = agree(worker, &mine, supervisor)?;
    let lossless: Vec<bool> = tried.iter().map(|&i| ranked[i].codec == "none").collect();
    let chosen = tried[least(&trials, &lossless)];
    let choice = &ranked[chosen];
    let job = configured(choice);
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
    let mut measured_ms = vec![None; ranked.len()];
    for (&i, &ms) in tried.iter().zip(&trials) {
        measured_ms[i] = Some(ms);
    }
    report.push_str(&table(&ranked, &measured_ms, chosen));
    report.push_str(&format!(
        "auto: predicted all, tried {} in {TRIAL_TURNS} turns of {rounds} rounds, each memory \
         warmed for {warm} rounds ({:.2} s in all)\n",
        tried.len(),
        started.elapsed().as_secs_f64()
    ));
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

/// Real rounds of each turn of a trial (fewer when the job has fewer).
const TRIAL_ROUNDS: u64 = 16;
/// Rounds of a worker's own gradients each candidate's error-feedback memory runs before its
/// trials (fewer when the job has fewer): a residual grows over a run's first rounds, and with
/// it the messages and the codec's work.
const WARM_ROUNDS: u64 = 64;
/// Turns each configuration of the shortlist is tried in.
const TRIAL_TURNS: usize = 3;
/// A trial's first rounds, not timed: the caches settle.
const TRIAL_WARMUP: usize = 4;
/// The cost model's first this many candidates are tried, with the first and the first
/// uncompressed one of each exchange (the guards against a model that misjudges an exchange, and
/// against a lossy codec that is slower than none).
const SHORTLIST: usize = 3;

/// The indices of `ranked` to try: the first [`SHORTLIST`], the model's choice, and each
/// exchange's first candidate and first uncompressed candidate, in rank order.
fn shortlist(ranked: &[Candidate], predicted: usize) -> Vec<usize> {
    let first_of_its_exchange = |i: usize, only_none: bool| {
        let c = &ranked[i];
        let like = |o: &Candidate| o.strategy == c.strategy && (!only_none || o.codec == "none");
        like(c) && !ranked[..i].iter().any(like)
    };
    (0..ranked.len())
        .filter(|&i| {
            i < SHORTLIST
                || i == predicted
                || first_of_its_exchange(i, false)
                || first_of_its_exchange(i, true)
        })
        .collect()
}

/// A trial's rounds that tell its round time: those after the warm-up, without the last (it
/// evaluates the model), or all of them when the trial is too short for that.
fn typical_rounds(times: &[f64]) -> Vec<f64> {
    match times.len() > TRIAL_WARMUP + 2 {
        true => times[TRIAL_WARMUP..times.len() - 1].to_vec(),
        false => times.to_vec(),
    }
}

/// The candidates, fastest predicted first, with the measured round of those tried, the choice
/// marked.
fn table(ranked: &[Candidate], measured: &[Option<f64>], chosen: usize) -> String {
    let mut s = format!(
        "  {:<10} {:<10} {:>8} {:>10} {:>8} {:>5} {:>9} {:>9}\n",
        "exchange", "codec", "cpu ms", "sent kB", "link ms", "hops", "round ms", "tried ms"
    );
    for (i, c) in ranked.iter().enumerate() {
        let p = &c.prediction;
        s.push_str(&format!(
            "{} {:<10} {:<10} {:>8.3} {:>10.1} {:>8.3} {:>5} {:>9.3} {:>9}\n",
            if i == chosen { '*' } else { ' ' },
            c.strategy.name(),
            c.codec,
            p.cpu_ms,
            p.sent_bytes / 1e3,
            p.wire_ms,
            p.hops,
            p.round_ms,
            measured[i].map_or("-".into(), |ms| format!("{ms:.3}"))
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::cost::Prediction;

    /// The model's first three, then each exchange's first candidate and first uncompressed one:
    /// an exchange the model ranks below the first three is still tried.
    #[test]
    fn the_shortlist_tries_the_best_of_each_exchange_and_its_best_uncompressed() {
        let c = |strategy, codec: &str| Candidate {
            strategy,
            codec: codec.into(),
            prediction: Prediction {
                cpu_ms: 0.0,
                sent_bytes: 0.0,
                wire_ms: 0.0,
                hops: 1,
                round_ms: 0.0,
            },
        };
        let (a, s) = (Strategy::AllGather, Strategy::Sharded);
        let ranked = [
            c(a, "threshold"),
            c(a, "fastsgd"),
            c(a, "logquant"),
            c(a, "zipml"),
            c(s, "logquant"),
            c(s, "threshold"),
            c(a, "none"),
            c(s, "none"),
        ];
        assert_eq!(shortlist(&ranked, 0), [0, 1, 2, 4, 6, 7]);
        assert_eq!(shortlist(&ranked, 5), [0, 1, 2, 4, 5, 6, 7]);
    }
}
