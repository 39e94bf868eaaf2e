//! The round model ([`crate::exchange::cost::round_ms`]) fit to a suite's own measurements: the
//! round each cell would take from its stage times, its bytes and its link, beside the round it
//! took.
//!
//! For a cell of `P` processes of `T` workers on a machine of `C` cores (a suite runs all its
//! processes on one machine):
//!
//! ```text
//! round ≈ o · cpu + hops · hop + sent / rate
//! ```
//!
//! - `cpu`: the cell's mean gradient + encode + aggregate + update per round (its stage times,
//!   worker 0's);
//! - `o = max(1, P·T / C)`: workers share the cores, and a round waits for the slowest;
//! - `hops`: 1 for `allgather`, 2 for `sharded` (other exchanges and `auto` are not predicted);
//! - `sent`: payload bytes per process and round, both directions; `rate`: the link's shaped
//!   rate (an unshaped link has no rate: the term is left out) — `sent / rate` is the cell's
//!   link-time floor;
//! - `hop`: the one number fit, per link: the median over the link's cells of what the rest
//!   leaves of the measured round, per hop (at least 0).
//!
//! The CPU comes from the cell itself, so the fit tests how a round's parts add up on a link,
//! not whether its CPU can be foreseen.

use std::fmt::Write as _;

use super::report::{median, CellRun};
use super::Suite;
use crate::exchange::cost::{round_ms, Strategy};

/// Rounds at the start of a run that are not counted (caches and memories settle).
const SKIP_ROUNDS: usize = 5;

/// One cell's round, measured and predicted.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundFit {
    /// The cell's index in the runs.
    pub run: usize,
    /// Mean round, ms.
    pub measured_ms: f64,
    /// Mean CPU of a round, ms.
    pub cpu_ms: f64,
    /// Payload bytes per process and round.
    pub sent_bytes: f64,
    /// Those bytes at the link's rate, ms (None: unshaped).
    pub floor_ms: Option<f64>,
    /// The model's round, ms (None: an exchange the model does not cover).
    pub predicted_ms: Option<f64>,
}

/// The fit of every run whose rounds it can read, and each link's fitted hop (ms), on a
/// machine of `cores` cores.
pub fn fit(suite: &Suite, runs: &[CellRun], cores: usize) -> (Vec<RoundFit>, Vec<(String, f64)>) {
    let mut fits: Vec<(RoundFit, Option<Strategy>, f64, u64)> = Vec::new();
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
            .map(|r| r.gradient_ms + r.encode_ms + r.aggregate_ms + r.update_ms)
            .sum::<f64>()
            / n;
        let sent_bytes = counted[1..]
            .iter()
            .map(|r| (r.uplink_bytes + r.downlink_bytes) as f64)
            .sum::<f64>()
            / n
            / c.processes.max(1) as f64;
        let floor_ms = match c.link.rate_bits() {
            Some(Ok(bits)) => Some(sent_bytes * 8.0 / bits as f64 * 1e3),
            _ => None,
        };
        let shared = (c.processes * c.workers) as f64 / cores.max(1) as f64;
        let fit = RoundFit {
            run: i,
            measured_ms,
            cpu_ms,
            sent_bytes,
            floor_ms,
            predicted_ms: None,
        };
        let (exchange, staleness) = settings(suite, c);
        fits.push((fit, Strategy::named(&exchange), shared.max(1.0), staleness));
    }
    let mut hops = Vec::new();
    for link in &suite.links {
        let of_link = |f: &RoundFit| runs[f.run].cell.link.name == link.name;
        let left: Vec<f64> = fits
            .iter()
            .filter(|(f, s, _, _)| of_link(f) && s.is_some())
            .map(|(f, s, o, _)| {
                let rest = f.measured_ms - o * f.cpu_ms - f.floor_ms.unwrap_or(0.0);
                rest / s.map_or(1, |s| s.hops()) as f64
            })
            .collect();
        let Some(hop) = median(left) else { continue };
        let hop = hop.max(0.0);
        for (f, s, o, staleness) in fits.iter_mut().filter(|(f, _, _, _)| of_link(f)) {
            let floor = f.floor_ms.unwrap_or(0.0);
            f.predicted_ms = s.map(|s| round_ms(*o * f.cpu_ms, s.hops(), hop, floor, *staleness));
        }
        hops.push((link.name.clone(), hop));
    }
    (fits.into_iter().map(|(f, _, _, _)| f).collect(), hops)
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

/// The fit as markdown: per link, the fitted hop, how many cells the model predicts within
/// 20%, and every cell (repeats folded into medians).
pub fn fit_markdown(suite: &Suite, runs: &[CellRun], cores: usize) -> String {
    let (fits, hops) = fit(suite, runs, cores);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n## The round model\n\nPredicted: o · cpu + hops · hop + sent / rate (`src/bench/fit.rs`), \
         with each cell's own CPU (gradient, encode, aggregate, update), o = processes × \
         workers / {cores} cores when above 1, hops 1 for allgather and 2 for sharded, its \
         payload per process at the link's shaped rate (the floor), and one number fit per \
         link: the hop. Measured: the mean round after the first {SKIP_ROUNDS}."
    );
    for (link, hop) in &hops {
        let of_link: Vec<&RoundFit> = fits
            .iter()
            .filter(|f| &runs[f.run].cell.link.name == link)
            .collect();
        let predicted: Vec<f64> = of_link
            .iter()
            .filter_map(|f| f.predicted_ms.map(|p| p / f.measured_ms - 1.0))
            .collect();
        let within = predicted.iter().filter(|e| e.abs() <= 0.2).count();
        let _ = writeln!(
            md,
            "\n### Link `{link}`: hop {hop:.3} ms; {within} of {} runs within 20%\n",
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

    /// Runs whose rounds are exactly `o · cpu + hops · 0.5 ms + floor` on a 10 Mbit link: the
    /// fit finds the hop, predicts every run exactly, and a run 30% slower is out of 20%.
    #[test]
    fn the_fit_finds_the_hop_and_predicts_rounds_made_by_the_model() {
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
            }],
            models: vec![v("job")],
            exchanges: vec![v("sharded"), v("allgather"), v("sketch")],
            compressors: vec![v("none")],
            sets: vec![],
            baseline: ("sharded".into(), "none".into()),
        };
        let (cores, cpu, up) = (2, 0.25, 1250u64);
        // 4 processes of 1 worker on 2 cores: o = 2. 1,250 bytes a round from 4 processes is
        // 312.5 a process: 0.25 ms at 10 Mbit/s.
        let round = |hops: f64| 2.0 * cpu + hops * 0.5 + 0.25;
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
        let (fits, hops) = fit(&suite, &runs, cores);
        assert_eq!(hops.len(), 1);
        assert!((hops[0].1 - 0.5).abs() < 1e-9, "{hops:?}");
        assert!((fits[0].floor_ms.unwrap() - 0.25).abs() < 1e-9);
        for (i, f) in fits.iter().enumerate() {
            assert!((f.measured_ms - ms(i)).abs() < 1e-9, "{f:?}");
            match i % 3 {
                2 => assert_eq!(f.predicted_ms, None, "sketch is not modelled"),
                _ => assert!((f.predicted_ms.unwrap() - ms(i)).abs() < 1e-9, "{f:?}"),
            }
        }
        let md = fit_markdown(&suite, &runs, cores);
        assert!(md.contains("hop 0.500 ms; 6 of 6 runs within 20%"), "{md}");
        // One sharded run 30% slower: the median hop stays, and that run falls out.
        runs[3] = run(&cells[3], 1.3 * round(2.0));
        let md = fit_markdown(&suite, &runs, cores);
        assert!(md.contains("hop 0.500 ms; 5 of 6 runs within 20%"), "{md}");
    }
}
