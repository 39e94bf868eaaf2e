//! The round model ([`crate::exchange::cost::round_ms`]) fit to a suite's own measurements: the
//! round each cell would take from its stage times, its bytes and its link, beside the round it
//! took.
//!
//! For a cell of `P` processes of `T` workers on a machine of `C` cores (a suite runs all its
//! processes on one machine):
//!
//! ```text
//! round ≈ a · cpu + hops · hop + link,   link = max(0, sent / rate − min(bucket, a · cpu + hops · hop))
//! ```
//!
//! - `cpu`: the cell's mean gradient + encode + aggregate + update + evaluation per round (its
//!   stage times, the mean of its workers');
//! - `a`, between 1 and `o = max(1, P·T / C)`: how much of the other processes' CPU a round
//!   waits for when they share the cores. Stage times are wall times, so they already hold some
//!   of it, and a process waiting on the link leaves its core to the others;
//! - `hops`: the strategy's round model's (1 for `allgather`, 2 for `sharded`; a strategy
//!   without a round model and `auto` are not predicted);
//! - `sent`: bytes per process and round: the payload, both directions, and timely's progress
//!   messages (process 0's; at 10 Mbit they are a quarter of a small model's round);
//!   `rate`: the link's shaped rate (an unshaped link has no rate: the term is left out) —
//!   `sent / rate` is the cell's link-time floor;
//! - `bucket`: the shaped link's token bucket at its rate ([`super::Link::bucket`]), which
//!   refills while the link idles and then lets its bytes through at once
//!   ([`bucket_link_ms`]);
//! - `a` and `hop` are fit per link and number of processes, by least squares on the relative
//!   error over the runs without rounds in flight; with fewer than [`MIN_RUNS_FOR_SHARE`] runs,
//!   `a = o` and `hop` is the median of what the rest leaves of each measured round.
//!
//! The CPU comes from the cell itself, so the fit tests how a round's parts add up on a link,
//! not whether its CPU can be foreseen.

use std::fmt::Write as _;

use super::report::{median, CellRun, MetricsRecord};
use super::Suite;
use crate::exchange::cost::{bucket_link_ms, round_model, round_ms};
use crate::exchange::ExchangeKind;

/// Rounds at the start of a run that are not counted (caches and memories settle).
const SKIP_ROUNDS: usize = 5;
/// Runs of one link and number of processes needed to fit the CPU share `a` beside the hop.
pub const MIN_RUNS_FOR_SHARE: usize = 6;
/// Rounds of fitting (the bucket's refill depends on the fit).
const ITERATIONS: usize = 8;

/// One cell's round, measured and predicted.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundFit {
    /// The cell's index in the runs.
    pub run: usize,
    /// Mean round, ms.
    pub measured_ms: f64,
    /// Mean CPU of a round, ms.
    pub cpu_ms: f64,
    /// Bytes per process and round: payload and progress messages.
    pub sent_bytes: f64,
    /// Those bytes at the link's rate, ms (None: unshaped).
    pub floor_ms: Option<f64>,
    /// The model's round, ms (None: an exchange the model does not cover).
    pub predicted_ms: Option<f64>,
}

/// The numbers fit to one link's runs of one number of processes.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupFit {
    /// The link's name.
    pub link: String,
    /// Processes of the runs.
    pub processes: usize,
    /// A hop, ms.
    pub hop_ms: f64,
    /// The CPU share `a`.
    pub cpu_share: f64,
    /// Its upper bound `o` (processes × workers over cores, at least 1).
    pub cores_shared: f64,
}

/// A run's numbers the fit works from.
struct Sample {
    fit: RoundFit,
    strategy: Option<ExchangeKind>,
    staleness: u64,
    bucket_ms: f64,
}

impl Sample {
    fn hops(&self) -> f64 {
        self.strategy.and_then(round_model).map_or(1, |m| m.hops) as f64
    }

    /// The link's part of the round, with CPU share `a` and hop `hop`.
    fn link_ms(&self, a: f64, hop: f64) -> f64 {
        let floor = self.fit.floor_ms.unwrap_or(0.0);
        bucket_link_ms(
            floor,
            self.bucket_ms,
            a * self.fit.cpu_ms + self.hops() * hop,
        )
    }

    fn predict(&self, a: f64, hop: f64) -> Option<f64> {
        let hops = round_model(self.strategy?)?.hops;
        let link = self.link_ms(a, hop);
        Some(round_ms(
            a * self.fit.cpu_ms,
            hops,
            hop,
            link,
            self.staleness,
        ))
    }
}

/// The fit of every run whose rounds it can read, and the numbers fit to each link and number
/// of processes, on a machine of `cores` cores.
pub fn fit(suite: &Suite, runs: &[CellRun], cores: usize) -> (Vec<RoundFit>, Vec<GroupFit>) {
    let mut samples: Vec<Sample> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let c = &run.cell;
        let rounds: Vec<_> = run.rows.iter().filter(|r| r.kind == "round").collect();
        if rounds.len() < SKIP_ROUNDS + 2 {
            continue;
        }
        let counted = &rounds[SKIP_ROUNDS..];
        let n = (counted.len() - 1) as f64;
        let measured_ms = (counted[counted.len() - 1].seconds - counted[0].seconds) * 1e3 / n;
        let cpu_ms = counted[1..]
            .iter()
            .map(|r| r.gradient_ms + r.encode_ms + r.aggregate_ms + r.update_ms + r.eval_ms)
            .sum::<f64>()
            / n;
        let per_round = |f: &dyn Fn(&MetricsRecord) -> u64| {
            counted[1..].iter().map(|r| f(r) as f64).sum::<f64>() / n
        };
        let payload = per_round(&|r| r.uplink_bytes + r.downlink_bytes);
        let sent_bytes =
            payload / c.processes.max(1) as f64 + per_round(&|r| r.wire_progress_bytes);
        let (floor_ms, bucket_ms) = match c.link.rate_bits() {
            Some(Ok(bits)) => (
                Some(sent_bytes * 8.0 / bits as f64 * 1e3),
                c.link.bucket(bits) as f64 * 8.0 / bits as f64 * 1e3,
            ),
            _ => (None, 0.0),
        };
        let (exchange, staleness) = settings(suite, c);
        samples.push(Sample {
            fit: RoundFit {
                run: i,
                measured_ms,
                cpu_ms,
                sent_bytes,
                floor_ms,
                predicted_ms: None,
            },
            strategy: exchange.parse().ok().filter(|&k| round_model(k).is_some()),
            staleness,
            bucket_ms,
        });
    }
    let mut groups = Vec::new();
    for link in &suite.links {
        for &processes in &suite.processes {
            let of_group = |s: &Sample| {
                let c = &runs[s.fit.run].cell;
                c.link.name == link.name && c.processes == processes
            };
            let modelled: Vec<&Sample> = samples
                .iter()
                .filter(|s| of_group(s) && s.strategy.is_some())
                .collect();
            if modelled.is_empty() {
                continue;
            }
            let o = ((processes * suite.workers) as f64 / cores.max(1) as f64).max(1.0);
            let (a, hop) = fit_group(&modelled, o);
            for s in samples.iter_mut().filter(|s| of_group(s)) {
                s.fit.predicted_ms = s.predict(a, hop);
            }
            groups.push(GroupFit {
                link: link.name.clone(),
                processes,
                hop_ms: hop,
                cpu_share: a,
                cores_shared: o,
            });
        }
    }
    (samples.into_iter().map(|s| s.fit).collect(), groups)
}

/// The CPU share `a` (within 1 ..= `o`) and the hop fit to one group's modelled runs.
fn fit_group(runs: &[&Sample], o: f64) -> (f64, f64) {
    let plain: Vec<&&Sample> = runs.iter().filter(|s| s.staleness == 0).collect();
    let (mut a, mut hop) = (o, 0.0);
    for _ in 0..ITERATIONS {
        if plain.len() < MIN_RUNS_FOR_SHARE {
            let left = runs.iter().map(|s| {
                let rest = s.fit.measured_ms - o * s.fit.cpu_ms - s.link_ms(o, hop);
                rest / s.hops()
            });
            hop = median(left.collect()).unwrap_or(0.0).max(0.0);
            continue;
        }
        // measured − link ≈ a · cpu + hop · hops, each run weighted by 1 / measured² (its
        // relative error).
        let (mut xx, mut xh, mut hh, mut xy, mut hy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for s in &plain {
            let (x, h) = (s.fit.cpu_ms, s.hops());
            let y = s.fit.measured_ms - s.link_ms(a, hop);
            let w = 1.0 / s.fit.measured_ms.max(1e-9).powi(2);
            (xx, xh, hh) = (xx + w * x * x, xh + w * x * h, hh + w * h * h);
            (xy, hy) = (xy + w * x * y, hy + w * h * y);
        }
        let det = xx * hh - xh * xh;
        (a, hop) = match det.abs() > 1e-12 * (xx * hh).max(1e-300) {
            true => ((xy * hh - hy * xh) / det, (xx * hy - xh * xy) / det),
            false => (o, 0.0),
        };
        if !(1.0..=o).contains(&a) {
            a = a.clamp(1.0, o);
            hop = (hy - a * xh) / hh.max(1e-300);
        }
        if hop < 0.0 {
            hop = 0.0;
            a = (xy / xx.max(1e-300)).clamp(1.0, o);
        }
    }
    (a, hop)
}

/// A cell's `train.exchange` and `train.staleness`, from its job (the exchange's label and 0
/// when the job cannot be read).
fn settings(suite: &Suite, cell: &super::Cell) -> (String, u64) {
    let table = cell
        .job_text(&suite.job, &[])
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok());
    let train = table.as_ref().and_then(|t| t.get("train"));
    let field = |name: &str| train.and_then(|t| t.get(name));
    (
        field("exchange")
            .and_then(|e| e.as_str())
            .unwrap_or(&cell.exchange)
            .to_string(),
        field("staleness")
            .and_then(|s| s.as_integer())
            .map_or(0, |s| s.max(0) as u64),
    )
}

/// The fit as markdown: per link and number of processes, the fitted numbers, how many runs
/// the model predicts within 20%, and every cell (repeats folded into medians).
pub fn fit_markdown(suite: &Suite, runs: &[CellRun], cores: usize) -> String {
    let (fits, groups) = fit(suite, runs, cores);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n## The round model\n\nPredicted: a · cpu + hops · hop + link (`src/bench/fit.rs`), \
         with each cell's own CPU (gradient, encode, aggregate, update, evaluation), the hops of each \
         strategy's round model (allgather 1, sharded 2), and link its payload and progress bytes per process at the link's \
         shaped rate (the floor) less what the link's token bucket refilled while idle. Fit per link and number \
         of processes: the hop, and the share a (from 1 to o = processes × workers / {cores} \
         cores) of the other processes' CPU a round waits for. Measured: the mean round after \
         the first {SKIP_ROUNDS}."
    );
    for g in &groups {
        let of_link: Vec<&RoundFit> = fits
            .iter()
            .filter(|f| {
                let c = &runs[f.run].cell;
                c.link.name == g.link && c.processes == g.processes
            })
            .collect();
        let predicted: Vec<f64> = of_link
            .iter()
            .filter_map(|f| f.predicted_ms.map(|p| p / f.measured_ms - 1.0))
            .collect();
        let within = predicted.iter().filter(|e| e.abs() <= 0.2).count();
        let _ = writeln!(
            md,
            "\n### Link `{}`, {} processes: hop {:.3} ms, a = {:.2} of {:.2}; {within} of {} runs within 20%\n",
            g.link,
            g.processes,
            g.hop_ms,
            g.cpu_share,
            g.cores_shared,
            predicted.len()
        );
        let _ = writeln!(
            md,
            "| W | model | exchange | compressor | runs | cpu ms | sent kB | floor ms | predicted ms | measured ms | error |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
        let mut seen = Vec::new();
        for f in &of_link {
            let c = &runs[f.run].cell;
            let key = (c.processes, &c.model, &c.exchange, &c.compressor);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let same: Vec<&&RoundFit> = of_link
                .iter()
                .filter(|g| {
                    let d = &runs[g.run].cell;
                    (d.processes, &d.model, &d.exchange, &d.compressor) == key
                })
                .collect();
            let med = |x: &dyn Fn(&RoundFit) -> Option<f64>| {
                median(same.iter().filter_map(|g| x(g)).collect())
            };
            let show = |x: Option<f64>, digits: usize| {
                x.map_or("–".to_string(), |v| format!("{v:.digits$}"))
            };
            let error = med(&|g| g.predicted_ms.map(|p| 100.0 * (p / g.measured_ms - 1.0)));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.processes,
                c.model,
                c.exchange,
                c.compressor,
                same.len(),
                show(med(&|g| Some(g.cpu_ms)), 3),
                show(med(&|g| Some(g.sent_bytes / 1e3)), 1),
                show(med(&|g| g.floor_ms), 3),
                show(med(&|g| g.predicted_ms), 3),
                show(med(&|g| Some(g.measured_ms)), 3),
                error.map_or("–".into(), |e| format!("{e:+.0}%")),
            );
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::super::report::MetricsRecord;
    use super::super::{AxisValue, Link};
    use super::*;

    /// Runs whose rounds are exactly `1.5 · cpu + hops · 0.5 ms + link` on a 10 Mbit link, where
    /// the link's part is a 60 ms floor less the 52.43 ms its 64 KiB bucket holds (the CPU idles
    /// the link for longer than that): the fit finds the share and the hop, predicts every run
    /// exactly, and a run twice as slow is out of 20%. With too few runs to fit the share it takes
    /// o = 2.
    #[test]
    fn the_fit_finds_the_share_and_the_hop_of_rounds_made_by_the_model() {
        let v = |l: &str| AxisValue {
            label: l.into(),
            sets: vec![],
        };
        let suite = Suite {
            name: "t".into(),
            job: "missing.toml".into(),
            repeats: 3,
            target: 0.01,
            target_of: super::super::TargetOf::Final,
            processes: vec![4],
            workers: 1,
            links: vec![Link {
                name: "slow".into(),
                rate: Some("10mbit".into()),
                delay: None,
                burst: None,
            }],
            models: vec![v("job")],
            exchanges: vec![v("sharded"), v("allgather"), v("sketch")],
            compressors: vec![v("none")],
            sets: vec![],
            baseline: ("sharded".into(), "none".into()),
        };
        let (cores, cpu, up) = (2, 40.0, 300_000u64);
        // 300,000 bytes a round from 4 processes is 75,000 a process: 60 ms at 10 Mbit/s, of
        // which 65,536 bytes (52.4288 ms) pass at once.
        let round = |hops: f64| 1.5 * cpu + hops * 0.5 + (60.0 - 52.4288);
        let run = |cell: &super::super::Cell, ms: f64| CellRun {
            cell: cell.clone(),
            rows: (0..30)
                .map(|r| MetricsRecord {
                    kind: "round".into(),
                    round: r,
                    seconds: r as f64 * ms / 1e3,
                    uplink_bytes: up,
                    gradient_ms: cpu / 2.0,
                    encode_ms: cpu / 2.0,
                    ..Default::default()
                })
                .collect(),
            wall_seconds: 1.0,
        };
        let cells = suite.cells(); // r0: sharded, allgather, sketch; r1; r2
        let ms = |i: usize| [round(2.0), round(1.0), 9.0][i % 3];
        let mut runs: Vec<CellRun> = (0..9).map(|i| run(&cells[i], ms(i))).collect();
        let (fits, groups) = fit(&suite, &runs, cores);
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert!((g.hop_ms - 0.5).abs() < 1e-9, "{groups:?}");
        assert!(
            (g.cpu_share - 1.5).abs() < 1e-9 && g.cores_shared == 2.0,
            "{groups:?}"
        );
        assert!((fits[0].floor_ms.unwrap() - 60.0).abs() < 1e-9);
        for (i, f) in fits.iter().enumerate() {
            assert!((f.measured_ms - ms(i)).abs() < 1e-9, "{f:?}");
            match i % 3 {
                2 => assert_eq!(f.predicted_ms, None, "sketch is not modelled"),
                _ => assert!((f.predicted_ms.unwrap() - ms(i)).abs() < 1e-9, "{f:?}"),
            }
        }
        let md = fit_markdown(&suite, &runs, cores);
        let head =
            "Link `slow`, 4 processes: hop 0.500 ms, a = 1.50 of 2.00; 6 of 6 runs within 20%";
        assert!(md.contains(head), "{md}");
        // Two modelled runs: a = o, and the hop what is left (none: the CPU alone is more).
        let (_, groups) = fit(&suite, &runs[..3], cores);
        assert_eq!((groups[0].cpu_share, groups[0].hop_ms), (2.0, 0.0));
        // Timely's progress messages cross the link too: 12,500 bytes a round more are 10 ms
        // more of floor at 10 Mbit.
        let mut chatty = run(&cells[0], ms(0));
        chatty
            .rows
            .iter_mut()
            .for_each(|r| r.wire_progress_bytes = 12_500);
        let (fits, _) = fit(&suite, &[chatty], cores);
        assert!((fits[0].floor_ms.unwrap() - 70.0).abs() < 1e-9, "{fits:?}");
        // One sharded run twice as slow falls out (least squares moves toward it: it pulls the
        // hop up, but not that far).
        runs[3] = run(&cells[3], 2.0 * round(2.0));
        let md = fit_markdown(&suite, &runs, cores);
        assert!(md.contains("; 5 of 6 runs within 20%"), "{md}");
    }
}
