//! `train.exchange = "auto"` and `train.compressor = "auto"`: the job's exchange and compressor
//! (and, with the compressor, pipelined rounds and `sharded`'s downlink codec) chosen before
//! training, on every worker alike. Named steps:
//! 1. **rank**: the cost model of [`crate::exchange::cost`] ranks every candidate from a round
//!    measured on the job's own gradients and link ([`crate::auto::calibrate`]);
//! 2. **check the loss**: every candidate that trains another model than the job's own
//!    settings (a lossy codec, a round in flight, a lossy downlink) is trained for a few real
//!    rounds from the initial model beside uncompressed training, and scored on rows held out
//!    of the workers' own training rows; it stays a candidate only when it ends within
//!    [`MAX_GAP`] of uncompressed training's loss and keeps [`KEPT_PROGRESS`] of its progress
//!    ([`keeps_progress`]);
//! 3. **try**: the first few that stay, and the best uncompressed one of each exchange, run a
//!    few real rounds each ([`crate::auto::trial`]), and the fastest wins (a lossy one
//!    only by a margin). The model ranks; real rounds decide, because they show what the model
//!    misses: processes sharing cores, caches emptied by other processes' rounds, a parked
//!    worker's wake-up.
//!
//! The choice's time and the bytes it sent are part of the run: [`Choice::cost`].

pub mod calibrate;
pub mod trial;

use std::time::Instant;

use timely::worker::Worker;

use crate::codec::CodecSpec;
use crate::data::Dataset;
use crate::dataflow::{ChoiceCost, Supervisor, TrainPlan, WorkerData};
use crate::exchange::cost::{self, choose_among, least, Candidate, DownlinkCost, Variant};
use crate::exchange::ExchangeKind;
use crate::job::{Auto, Job};
use crate::memory::MemorySpec;
use crate::model::EvalPart;
use calibrate::{
    agree, agreement_bytes, calibrate, initial_weights, median, warmed_memory,
    Candidate as Measured, Downlink,
};
use trial::trial;

/// What `auto` chose, why, and what choosing cost.
pub struct Choice {
    /// The job with its `"auto"` fields chosen.
    pub job: Job,
    /// The candidates, the loss check and the trials, with the settings that replay the
    /// choice (for process 0 to print).
    pub report: String,
    /// The choice's time and the payload it sent, every process together.
    pub cost: ChoiceCost,
}

/// Chooses the job's `"auto"` fields on this worker; every worker of the run calls it, and all
/// choose alike.
pub fn choose(
    worker: &mut Worker,
    job: &Job,
    data: &WorkerData,
    plan: &TrainPlan,
    supervisor: &Supervisor,
) -> Result<Choice, String> {
    let started = Instant::now();
    let t = &job.train;
    let (strategies, codecs) = candidates(job, plan);
    let offers_more = t.auto.compressor && t.staleness == 0 && t.downlink == CodecSpec::default();
    // A downlink codec only where its codec keeps the model's loss as an uplink codec.
    let listed = cost::keeps_the_loss(plan.model.name());
    let downlinks: Vec<Downlink> = match offers_more
        && strategies
            .iter()
            .any(|&k| cost::round_model(k).is_some_and(|m| m.downlink))
    {
        true => downlinks()
            .into_iter()
            .filter(|(_, spec)| listed.contains(&spec.name()))
            .collect(),
        false => Vec::new(),
    };
    // Step 1: rank.
    let (measured, sent) = calibrate(worker, data, plan, &codecs, &downlinks, supervisor)?;
    let variants = match offers_more {
        true => variants(&measured.downlinks),
        false => vec![Variant {
            staleness: t.staleness,
            downlink: None,
        }],
    };
    let r = &measured.round;
    let configured = |c: &Candidate| configure(job, c, &codecs);
    let (ranked, _) = choose_among(r, &strategies, &measured.codecs, &variants);
    let ranked: Vec<Candidate> = ranked
        .into_iter()
        .filter(|c| configured(c).validate().is_ok())
        .collect();
    let (train, validation) = hold_out(data);
    let mut run = Rounds {
        remote: worker.peers().saturating_sub(plan.threads_per_process),
        worker,
        supervisor,
        train,
        sent,
    };
    // Step 2: check the loss.
    let check = match t.auto.compressor {
        true => run.check_losses(plan, &ranked, &configured, &validation, t.staleness)?,
        false => LossCheck::default(),
    };
    let kept = |c: &Candidate| !t.auto.compressor || check.verdict(c).is_some_and(|v| v.kept);
    // Step 3: try the first that stay.
    let staying: Vec<usize> = (0..ranked.len()).filter(|&i| kept(&ranked[i])).collect();
    let tried: Vec<usize> = shortlist(&ranked, t.staleness, |i| staying.contains(&i));
    let plans: Vec<TrainPlan> = tried
        .iter()
        .map(|&i| plan_of(plan, &configured(&ranked[i])))
        .collect();
    let checked: Vec<Option<Vec<f64>>> = tried
        .iter()
        .zip(&plans)
        .map(|(&i, p)| check.timed(&ranked[i], p.exchange))
        .collect();
    let (trials, sent) = run.time(plan, &plans, &checked)?;
    let lossless: Vec<bool> = tried.iter().map(|&i| ranked[i].lossless(r)).collect();
    let chosen = tried[least(&trials, &lossless)];
    let cost = ChoiceCost {
        seconds: started.elapsed().as_secs_f64(),
        sent_bytes: sent,
    };
    let mut measured_ms = vec![None; ranked.len()];
    for (&i, &ms) in tried.iter().zip(&trials) {
        measured_ms[i] = Some(ms);
    }
    let choice = &ranked[chosen];
    let chosen_job = configured(choice);
    let report = Report {
        round: r,
        check: &check,
        staleness: t.staleness,
        ranked: &ranked,
        measured_ms: &measured_ms,
        chosen,
        cost,
        rounds: plan.rounds(),
    }
    .to_string()
        + &format!(
            "auto: chose {}; replay it with {}",
            describe(choice, &chosen_job),
            replay(choice, &chosen_job)
        );
    Ok(Choice {
        job: chosen_job,
        report,
        cost,
    })
}

/// The exchanges and the codecs (each with the memory the job gives it: its paper's, unless
/// the job names one) that `job`'s `"auto"` fields leave to choose from.
fn candidates(job: &Job, plan: &TrainPlan) -> (Vec<ExchangeKind>, Vec<Measured>) {
    let t = &job.train;
    let strategies = match t.auto.exchange {
        true => cost::modelled(),
        false => vec![t.exchange],
    };
    let specs: Vec<(String, CodecSpec)> = match t.auto.compressor {
        true => cost::keeps_the_loss(plan.model.name())
            .iter()
            .map(|&n| (n.to_string(), CodecSpec::with_defaults(n).expect("a codec")))
            .collect(),
        false => vec![(t.compressor.name().to_string(), t.compressor.clone())],
    };
    let codecs = specs
        .into_iter()
        .map(|(name, spec)| {
            let mut with = job.clone();
            with.train.compressor = spec.clone();
            let memory = with.memory();
            (name, spec, memory)
        })
        .collect();
    (strategies, codecs)
}

/// Real rounds run for the choice on this worker: the loss check's and the trials', on the
/// training rows left after the held-out ones, with the payload bytes sent so far.
struct Rounds<'w, 's> {
    worker: &'w mut Worker,
    supervisor: &'s Supervisor,
    train: WorkerData,
    /// Payload bytes this worker sent to other processes for the choice so far.
    sent: u64,
    /// Workers in other processes.
    remote: usize,
}

impl Rounds<'_, '_> {
    /// Step 2: the loss of each codec at the job's `staleness` and downlink, and of every lossy
    /// setting the trials would pick, until those all passed (or [`CHECK_PASSES`]), each
    /// scored on the `validation` rows.
    fn check_losses(
        &mut self,
        plan: &TrainPlan,
        ranked: &[Candidate],
        configured: &dyn Fn(&Candidate) -> Job,
        validation: &Dataset,
        staleness: u64,
    ) -> Result<LossCheck, String> {
        let rounds = CHECK_ROUNDS.min(plan.rounds());
        let mut check = LossCheck {
            rounds,
            ..LossCheck::default()
        };
        for pass in 0..CHECK_PASSES {
            let open = |i: usize| check.verdict(&ranked[i]).is_none_or(|v| v.kept);
            let would_try = shortlist(ranked, staleness, open);
            let mut settings: Vec<(Setting, TrainPlan)> = Vec::new();
            for (i, c) in ranked.iter().enumerate() {
                let s = Setting::of(c);
                let base = pass == 0 && c.staleness == staleness && c.downlink.is_none();
                let new = check.verdict(c).is_none() && !settings.iter().any(|(k, _)| *k == s);
                if new && (base || would_try.contains(&i)) {
                    settings.push((s, plan_of(plan, &configured(c))));
                }
            }
            if settings.is_empty() {
                break;
            }
            let mut scores = Vec::new();
            let mut timings = Vec::new();
            for (_, p) in &settings {
                let tried = trial(
                    self.worker,
                    p,
                    &self.train,
                    rounds,
                    None,
                    Some(validation),
                    self.supervisor,
                )?;
                self.sent += tried.sent_bytes;
                let part = tried.validation.unwrap_or_default();
                scores.extend([part.loss_sum, part.count as f64]);
                timings.push((p.exchange, typical_rounds(&tried.round_ms)));
            }
            if pass == 0 {
                let initial = initial_part(plan, validation);
                scores.extend([initial.loss_sum, initial.count as f64]);
            }
            let scores = self.agree(scores, false)?;
            let loss = |i: usize| scores[2 * i] / scores[2 * i + 1].max(1e-300);
            if pass == 0 {
                check.initial = loss(settings.len());
                let workers = self.worker.peers() as f64;
                check.rows = (scores[2 * settings.len() + 1] * workers).round() as u64;
                check.reference = (0..settings.len())
                    .find(|&i| settings[i].0.lossless(staleness))
                    .map(loss)
                    .expect("none at the job's staleness is checked first");
            }
            for (i, ((s, p), (exchange, rounds))) in settings.into_iter().zip(timings).enumerate() {
                let v = Verdict::of(&s, loss(i), check.reference, check.initial, staleness);
                let timed = (p.memory == MemorySpec::None).then_some((exchange, rounds));
                check.settings.push((s, v, timed));
            }
        }
        Ok(check)
    }

    /// Step 3: each of `plans` tried in [`TRIAL_TURNS`] turns of [`TRIAL_ROUNDS`] rounds; the
    /// median round of each, averaged over the workers, and the payload bytes every process
    /// sent for the choice, all together.
    ///
    /// A plan whose rounds the loss check already timed (`checked`: its rounds after the
    /// warm-up, on the same exchange, without a memory to warm) is not run again.
    fn time(
        &mut self,
        plan: &TrainPlan,
        plans: &[TrainPlan],
        checked: &[Option<Vec<f64>>],
    ) -> Result<(Vec<f64>, u64), String> {
        let rounds = TRIAL_ROUNDS.min(plan.rounds());
        // Each memory warmed as a run's first rounds warm it, so that the trials time the
        // codec on training's messages.
        let (me, workers) = (self.worker.index() as u32, self.worker.peers());
        let warm = WARM_ROUNDS.min(plan.rounds());
        let memories: Vec<Option<Vec<u8>>> = plans
            .iter()
            .map(|p| warmed_memory(&self.train, p, me, workers, warm))
            .collect::<Result<_, _>>()?;
        // In turns, so that a slow spell of the machine falls on every candidate alike; in
        // each, the model's first last, so that training follows the lightest traffic (on a
        // shaped link, training that followed uncompressed trials ran slower: docs/auto.md).
        let mut timed: Vec<Vec<f64>> = checked
            .iter()
            .map(|c| c.clone().unwrap_or_default())
            .collect();
        for _ in 0..TRIAL_TURNS {
            let runs = plans.iter().zip(&mut timed).zip(&memories).zip(checked);
            for (((p, timed), memory), _) in runs.rev().filter(|(_, c)| c.is_none()) {
                let tried = trial(
                    self.worker,
                    p,
                    &self.train,
                    rounds,
                    memory.as_deref(),
                    None,
                    self.supervisor,
                )?;
                self.sent += tried.sent_bytes;
                timed.extend(typical_rounds(&tried.round_ms));
            }
        }
        let medians: Vec<f64> = timed.into_iter().map(median).collect();
        let mut agreed = self.agree(medians, true)?;
        let sent = agreed.pop().expect("the bytes") * workers as f64;
        Ok((agreed, sent.round() as u64))
    }

    /// The mean of every worker's `numbers` ([`agree`]), the bytes of sharing them counted;
    /// `with_sent`: this worker's bytes so far (these included) shared too, as the last.
    fn agree(&mut self, mut numbers: Vec<f64>, with_sent: bool) -> Result<Vec<f64>, String> {
        self.sent += agreement_bytes(numbers.len() + with_sent as usize, self.remote);
        if with_sent {
            numbers.push(self.sent as f64);
        }
        agree(self.worker, &numbers, self.supervisor)
    }
}

/// What process 0 prints of a choice, before the choice itself.
struct Report<'a> {
    round: &'a cost::RoundInputs,
    check: &'a LossCheck,
    staleness: u64,
    ranked: &'a [Candidate],
    measured_ms: &'a [Option<f64>],
    chosen: usize,
    cost: ChoiceCost,
    rounds: u64,
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.round;
        writeln!(
            f,
            "auto: a round measured before training: gradient {:.2} ms ({:.0} pairs, {:.0} keys \
             summed over {} workers); link {:.3} ms a hop, {}",
            r.gradient_ms,
            r.pairs,
            r.union_keys,
            r.workers,
            r.link.hop_ms,
            rate(r.link.bytes_per_s, r.workers > r.threads),
        )?;
        if !self.check.settings.is_empty() {
            write!(f, "{}", self.check.table(self.staleness))?;
        }
        let refused = |c: &Candidate| self.check.verdict(c).is_some_and(|v| !v.kept);
        write!(
            f,
            "{}",
            table(self.ranked, self.measured_ms, self.chosen, &refused)
        )?;
        writeln!(
            f,
            "auto: predicted {}, checked the loss of {}, tried {} in {TRIAL_TURNS} turns of {} \
             rounds, each memory warmed for {} rounds ({:.2} s, {:.1} MB sent by all processes)",
            self.ranked.len(),
            self.check.settings.len(),
            self.measured_ms.iter().flatten().count(),
            TRIAL_ROUNDS.min(self.rounds),
            WARM_ROUNDS.min(self.rounds),
            self.cost.seconds,
            self.cost.sent_bytes as f64 / 1e6
        )
    }
}

/// The job of candidate `c`: its exchange, codec (of `codecs`), staleness and downlink.
fn configure(job: &Job, c: &Candidate, codecs: &[Measured]) -> Job {
    let mut job = job.clone();
    job.train.auto = Auto::default();
    job.train.exchange = c.strategy;
    if let Some((_, spec, _)) = codecs.iter().find(|(n, _, _)| *n == c.codec) {
        job.train.compressor = spec.clone();
    }
    job.train.staleness = c.staleness;
    if let Some(d) = &c.downlink {
        job.train.downlink = downlink_spec(DOWNLINKS.iter().find(|t| t.0 == d).expect("offered")).1;
    }
    job
}

/// `plan` with `job`'s exchange, codec, memory, staleness and downlink.
fn plan_of(plan: &TrainPlan, job: &Job) -> TrainPlan {
    TrainPlan {
        exchange: job.train.exchange,
        codec: job.train.compressor.clone(),
        memory: job.memory(),
        staleness: job.train.staleness,
        downlink: job.train.downlink.clone(),
        ..plan.clone()
    }
}

/// What a candidate changes of the model's training (its exchange does not: `sharded` and
/// `allgather` train the same model): the loss check's unit.
#[derive(Clone, Debug, PartialEq)]
struct Setting {
    codec: String,
    staleness: u64,
    downlink: Option<String>,
}

impl Setting {
    fn of(c: &Candidate) -> Setting {
        Setting {
            codec: c.codec.clone(),
            staleness: c.staleness,
            downlink: c.downlink.clone(),
        }
    }

    fn lossless(&self, staleness: u64) -> bool {
        self.codec == "none" && self.staleness == staleness && self.downlink.is_none()
    }

    fn name(&self) -> String {
        let mut s = self.codec.clone();
        if self.staleness > 0 {
            s.push_str(&format!(", staleness {}", self.staleness));
        }
        if let Some(d) = &self.downlink {
            s.push_str(&format!(", downlink {d}"));
        }
        s
    }
}

/// Rounds a loss check timed (after the warm-up) and the exchange they ran on.
type Timed = (ExchangeKind, Vec<f64>);

/// The loss check so far: the settings checked, their verdicts, and the rounds each check timed
/// (after the warm-up) on its exchange when its codec has no memory (a trial would time the
/// same rounds).
#[derive(Default)]
struct LossCheck {
    settings: Vec<(Setting, Verdict, Option<Timed>)>,
    /// Rounds each setting ran.
    rounds: u64,
    /// The initial model's loss on the held-out rows.
    initial: f64,
    /// Uncompressed training's loss there after the check's rounds.
    reference: f64,
    /// The held-out rows, every worker's together.
    rows: u64,
}

impl LossCheck {
    /// The verdict on `c`'s setting, if it was checked.
    fn verdict(&self, c: &Candidate) -> Option<&Verdict> {
        let s = Setting::of(c);
        self.settings
            .iter()
            .find(|(k, _, _)| *k == s)
            .map(|(_, v, _)| v)
    }

    /// The rounds the check timed of `c`'s setting on `c`'s exchange, if it did.
    fn timed(&self, c: &Candidate, exchange: ExchangeKind) -> Option<Vec<f64>> {
        let s = Setting::of(c);
        let (_, _, timed) = self.settings.iter().find(|(k, _, _)| *k == s)?;
        timed
            .as_ref()
            .filter(|(e, _)| *e == exchange)
            .map(|(_, rounds)| rounds.clone())
    }

    /// Each setting's loss and the share of uncompressed training's progress it kept.
    fn table(&self, staleness: u64) -> String {
        let mut s = format!(
            "auto: the loss after {} rounds on {} held-out training rows (from {:.4}); a lossy \
             setting must end within {:.1}% of uncompressed training's and keep {:.0}% of its \
             progress\n",
            self.rounds,
            self.rows,
            self.initial,
            MAX_GAP * 100.0,
            KEPT_PROGRESS * 100.0
        );
        for (c, v, _) in &self.settings {
            s.push_str(&format!(
                "  {:<36} loss {:.4} ({:+.2}%)  progress {:>5.1}%  {}\n",
                c.name(),
                v.loss,
                (v.loss / self.reference - 1.0) * 100.0,
                v.progress * 100.0,
                match (c.lossless(staleness), v.kept) {
                    (true, _) => "reference",
                    (false, true) => "kept",
                    (false, false) => "refused",
                }
            ));
        }
        s
    }
}

/// The loss check's verdict on a setting.
struct Verdict {
    /// Its validation loss after the check's rounds.
    loss: f64,
    /// The share of uncompressed training's progress it kept.
    progress: f64,
    kept: bool,
}

impl Verdict {
    /// A setting of validation loss `loss` where uncompressed training reached `reference`
    /// from `initial`: kept when it is lossless, or when [`keeps_progress`] says it keeps
    /// the loss.
    fn of(s: &Setting, loss: f64, reference: f64, initial: f64, staleness: u64) -> Verdict {
        let progress = keeps_progress(loss, reference, initial);
        Verdict {
            loss,
            progress: progress.1,
            kept: s.lossless(staleness) || progress.0,
        }
    }
}

/// Whether a model of validation loss `loss` keeps the loss of uncompressed training, which
/// went from `initial` to `reference` in the same rounds: whether it is within [`MAX_GAP`] of
/// `reference` and made at least [`KEPT_PROGRESS`] of that progress, and the share it made.
/// When uncompressed training did not lower the loss there is nothing to keep, and nothing
/// lossy passes.
pub fn keeps_progress(loss: f64, reference: f64, initial: f64) -> (bool, f64) {
    let gained = initial - reference;
    let share = (initial - loss) / gained;
    let valid = gained > 0.0 && loss.is_finite() && reference.is_finite();
    let close = loss <= reference * (1.0 + MAX_GAP);
    (
        valid && close && share >= KEPT_PROGRESS,
        if valid { share } else { 0.0 },
    )
}

/// The share of uncompressed training's progress on the held-out rows a lossy setting must keep
/// over the check's rounds.
pub const KEPT_PROGRESS: f64 = 0.97;
/// How far above uncompressed training's loss on the held-out rows a lossy setting may end the
/// check's rounds: the tolerance it must end training within.
pub const MAX_GAP: f64 = 0.005;
/// Rounds of the loss check (fewer when the job has fewer).
const CHECK_ROUNDS: u64 = 32;
/// Passes of the loss check: a refusal moves the trials' shortlist down to settings not yet
/// checked, which the next pass checks; what no pass checked is not tried.
const CHECK_PASSES: usize = 2;
/// Most rows each worker holds out of its training rows to score the loss check on.
const VALIDATION_ROWS: usize = 1024;

/// This worker's training rows split in two: those the loss check and the trials train on, and
/// every `k`-th row (at most [`VALIDATION_ROWS`]) held out to score the check on. The test rows
/// are never used.
fn hold_out(data: &WorkerData) -> (WorkerData, Dataset) {
    let rows = data.train.rows();
    let every = rows.div_ceil(VALIDATION_ROWS).max(2);
    let mut train = Dataset::new(data.train.dim);
    let mut held = Dataset::new(data.train.dim);
    for i in 0..rows {
        let (keys, values) = data.train.row(i);
        let into = match i % every == every - 1 {
            true => &mut held,
            false => &mut train,
        };
        into.push_row(keys, values, data.train.labels[i]);
    }
    let train = WorkerData {
        train,
        test: Dataset::new(data.test.dim),
        ignored_test_features: 0,
        shares: Vec::new(),
    };
    (train, held)
}

/// The initial model scored on `rows`.
fn initial_part(plan: &TrainPlan, rows: &Dataset) -> EvalPart {
    let w = initial_weights(plan);
    EvalPart::evaluate(rows, &w, &*plan.model, &*plan.loss, plan.auc_bits)
}

/// The downlink codecs `auto` offers `sharded` besides the job's: a label and the codec as an
/// inline TOML table.
const DOWNLINKS: [(&str, &str); 2] = [
    ("logquant", "{ name = \"logquant\" }"),
    ("topk 3%", "{ name = \"topk\", ratio = 0.03 }"),
];

/// The downlink codecs `compressor = "auto"` offers `sharded` besides uncompressed changes.
pub fn downlinks() -> Vec<Downlink> {
    DOWNLINKS.iter().map(downlink_spec).collect()
}

/// The variants `compressor = "auto"` offers a job of staleness 0 without a downlink codec:
/// its own, each of `downlinks` (measured), and each of those with a round in flight.
pub fn variants(downlinks: &[DownlinkCost]) -> Vec<Variant> {
    let downlink = std::iter::once(None).chain(downlinks.iter().cloned().map(Some));
    let downlinks: Vec<Option<DownlinkCost>> = downlink.collect();
    [0, 1]
        .into_iter()
        .flat_map(|staleness| {
            downlinks.iter().map(move |d| Variant {
                staleness,
                downlink: d.clone(),
            })
        })
        .collect()
}

fn downlink_spec((label, table): &(&str, &str)) -> Downlink {
    let spec = toml::from_str::<toml::Table>(&format!("d = {table}"))
        .ok()
        .and_then(|t| t.get("d").cloned())
        .and_then(|d| d.try_into::<CodecSpec>().ok())
        .expect("a downlink codec");
    (label.to_string(), spec)
}

fn rate(bytes_per_s: f64, measured: bool) -> String {
    match measured && bytes_per_s < 1e15 {
        true => format!("{:.1} MB/s", bytes_per_s / 1e6),
        false => "no rate measured".into(),
    }
}

/// Real rounds of each turn of a trial (fewer when the job has fewer).
const TRIAL_ROUNDS: u64 = 12;
/// Rounds of a worker's own gradients each candidate's error-feedback memory runs before its
/// trials (fewer when the job has fewer): a residual grows over a run's first rounds, and with
/// it the messages and the codec's work.
const WARM_ROUNDS: u64 = 64;
/// Turns each configuration of the shortlist is tried in.
const TRIAL_TURNS: usize = 2;
/// A trial's first rounds, not timed: the caches settle.
const TRIAL_WARMUP: usize = 4;
/// The cost model's first this many candidates are tried, with the first and the first
/// uncompressed one of each exchange (the guards against a model that misjudges an exchange, and
/// against a lossy codec that is slower than none).
const SHORTLIST: usize = 3;

/// The indices of `ranked` to try among those `eligible`: the first [`SHORTLIST`], and each
/// exchange's first candidate and first uncompressed candidate (at the job's `staleness`), in
/// rank order.
fn shortlist(ranked: &[Candidate], staleness: u64, eligible: impl Fn(usize) -> bool) -> Vec<usize> {
    let open: Vec<usize> = (0..ranked.len()).filter(|&i| eligible(i)).collect();
    let first_of_its_exchange = |n: usize, only_none: bool| {
        let c = &ranked[open[n]];
        let like = |o: &Candidate| {
            o.strategy == c.strategy && (!only_none || Setting::of(o).lossless(staleness))
        };
        like(c) && !open[..n].iter().any(|&j| like(&ranked[j]))
    };
    (0..open.len())
        .filter(|&n| {
            n < SHORTLIST || first_of_its_exchange(n, false) || first_of_its_exchange(n, true)
        })
        .map(|n| open[n])
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

/// The candidates, fastest predicted first, with the measured round of those tried (`loss`:
/// refused by the loss check), the choice marked; the first [`TABLE_ROWS`] and every one tried.
fn table(
    ranked: &[Candidate],
    measured: &[Option<f64>],
    chosen: usize,
    refused: &dyn Fn(&Candidate) -> bool,
) -> String {
    let mut s = format!(
        "  {:<10} {:<36} {:>8} {:>10} {:>8} {:>5} {:>9} {:>9}\n",
        "exchange", "codec", "cpu ms", "sent kB", "link ms", "hops", "round ms", "tried ms"
    );
    let mut left = 0;
    for (i, c) in ranked.iter().enumerate() {
        if i >= TABLE_ROWS && measured[i].is_none() {
            left += 1;
            continue;
        }
        let p = &c.prediction;
        let tried = match (measured[i], refused(c)) {
            (Some(ms), _) => format!("{ms:.3}"),
            (None, false) => "-".into(),
            (None, true) => "loss".into(),
        };
        s.push_str(&format!(
            "{} {:<10} {:<36} {:>8.3} {:>10.1} {:>8.3} {:>5} {:>9.3} {:>9}\n",
            if i == chosen { '*' } else { ' ' },
            c.strategy.name(),
            Setting::of(c).name(),
            p.cpu_ms,
            p.sent_bytes / 1e3,
            p.wire_ms,
            p.hops,
            p.round_ms,
            tried
        ));
    }
    if left > 0 {
        s.push_str(&format!("  ... {left} more, predicted slower\n"));
    }
    s
}

/// Rows of the candidates' table beyond those tried.
const TABLE_ROWS: usize = 12;

/// The choice in words: exchange, codec, memory, and what else it changes.
fn describe(c: &Candidate, job: &Job) -> String {
    let mut s = format!(
        "{} + {} (memory {})",
        c.strategy.name(),
        c.codec,
        job.memory().name()
    );
    if c.staleness != 0 {
        s.push_str(&format!(", staleness {}", c.staleness));
    }
    if let Some(d) = &c.downlink {
        s.push_str(&format!(", downlink {d}"));
    }
    s
}

/// The settings that replay the choice.
fn replay(c: &Candidate, job: &Job) -> String {
    let mut s = format!(
        "--set 'train.exchange=\"{}\"' --set 'train.compressor={{ name = \"{}\" }}'",
        c.strategy.name(),
        c.codec
    );
    if c.staleness != 0 {
        s.push_str(&format!(" --set 'train.staleness={}'", job.train.staleness));
    }
    if let Some(d) = &c.downlink {
        let table = DOWNLINKS.iter().find(|t| t.0 == d).expect("offered").1;
        s.push_str(&format!(" --set 'train.downlink={table}'"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::cost::Prediction;

    fn c(strategy: ExchangeKind, codec: &str) -> Candidate {
        Candidate {
            strategy,
            codec: codec.into(),
            staleness: 0,
            downlink: None,
            prediction: Prediction {
                cpu_ms: 0.0,
                sent_bytes: 0.0,
                wire_ms: 0.0,
                hops: 1,
                round_ms: 0.0,
            },
        }
    }

    /// The model's first three, then each exchange's first candidate and first uncompressed one:
    /// an exchange the model ranks below the first three is still tried; a candidate the loss
    /// check refused is not, and the next takes its place.
    #[test]
    fn the_shortlist_tries_the_best_of_each_exchange_and_its_best_uncompressed() {
        let (a, s) = (ExchangeKind::Allgather, ExchangeKind::Sharded);
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
        assert_eq!(shortlist(&ranked, 0, |_| true), [0, 1, 2, 4, 6, 7]);
        let refused = |i: usize| ranked[i].codec != "threshold";
        assert_eq!(shortlist(&ranked, 0, refused), [1, 2, 3, 4, 6, 7]);
    }

    /// A lossy setting is kept when it makes 97% of uncompressed training's progress, not at
    /// 96%, and ends within 0.5% of its loss; nothing lossy passes where uncompressed training
    /// made none, or on a loss that is not a number.
    #[test]
    fn the_loss_check_keeps_97_percent_of_the_progress_within_half_a_percent() {
        // Within 0.5% of the reference (9.045) either way: the progress decides.
        let (initial, reference) = (10.0, 9.0);
        assert!(keeps_progress(9.0, reference, initial).0);
        assert!(keeps_progress(9.029, reference, initial).0);
        assert!(!keeps_progress(9.041, reference, initial).0);
        // 99.5% of a large progress, but 0.67% above the reference's loss; 0.47% passes.
        assert!(!keeps_progress(0.302, 0.300, 0.70).0);
        assert!(keeps_progress(0.3014, 0.300, 0.70).0);
        assert!(keeps_progress(0.55, reference, initial).0);
        assert!(!keeps_progress(0.60, 0.70, 0.70).0);
        assert!(!keeps_progress(f64::NAN, reference, initial).0);
        let share = keeps_progress(9.2, reference, initial).1;
        assert!((share - 0.8).abs() < 1e-9, "{share}");
    }

    /// The check's rounds stand for a trial only of the same setting on the same exchange, and
    /// only when they were timed (a codec without memory): another exchange, another staleness
    /// or an untimed setting is tried for real.
    #[test]
    fn the_checks_rounds_time_only_the_same_setting_on_the_same_exchange() {
        let verdict = || Verdict {
            loss: 0.5,
            progress: 1.0,
            kept: true,
        };
        let (a, s) = (ExchangeKind::Allgather, ExchangeKind::Sharded);
        let check = LossCheck {
            settings: vec![
                (
                    Setting::of(&c(a, "logquant")),
                    verdict(),
                    Some((ExchangeKind::Allgather, vec![1.0, 2.0])),
                ),
                (Setting::of(&c(a, "topk")), verdict(), None),
            ],
            ..LossCheck::default()
        };
        let timed = |cand: &Candidate, e| check.timed(cand, e);
        assert_eq!(
            timed(&c(a, "logquant"), ExchangeKind::Allgather),
            Some(vec![1.0, 2.0])
        );
        assert_eq!(timed(&c(s, "logquant"), ExchangeKind::Sharded), None);
        let mut pipelined = c(a, "logquant");
        pipelined.staleness = 1;
        assert_eq!(timed(&pipelined, ExchangeKind::Allgather), None);
        assert_eq!(timed(&c(a, "topk"), ExchangeKind::Allgather), None);
        assert_eq!(timed(&c(a, "zipml"), ExchangeKind::Allgather), None);
    }

    /// Every few rows held out, at most 1024, none lost, the test rows untouched.
    #[test]
    fn holding_out_keeps_every_row_once() {
        let mut train = Dataset::new(10);
        for i in 0..5000u32 {
            train.push_row(&[i % 10], &[1.0], (i % 2) as f32);
        }
        let data = WorkerData {
            train,
            test: Dataset::new(10),
            ignored_test_features: 0,
            shares: Vec::new(),
        };
        let (rest, held) = hold_out(&data);
        assert_eq!(rest.train.rows() + held.rows(), 5000);
        assert!(held.rows() <= VALIDATION_ROWS && held.rows() >= VALIDATION_ROWS / 2);
        assert_eq!(rest.train.nnz() + held.nnz(), 5000);
    }
}
