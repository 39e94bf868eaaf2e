//! What `round_floor` and `round_overlap` share: a timely loop of gradflow's shape, timed on
//! one or more worker threads, and the per-round count of arrived messages its operators act on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gradflow::cores::CoreDistance;

use timely::dataflow::operators::{Capability, ConnectLoop, InputCapability, LoopVariable};
use timely::dataflow::Stream;
use timely::order::Product;

/// The loop's timestamp: the round.
pub type Round = Product<(), u64>;
/// Messages of the loop: (destination worker, source worker).
pub type Messages<'s> = Stream<'s, Round, Vec<(u64, u64)>>;

/// Runs one loop on `workers` threads of one process: `body` maps the feedback edge (the
/// messages of round `r - 1`, at `r`) to what goes back around it, and stops the loop after
/// `rounds` rounds. Returns the slowest worker's µs per round and, with two or more workers,
/// the round trip in ns between the first two workers' cores, measured before the loop
/// ([`CoreDistance`], as the runtime does).
pub fn timed_loop<B>(workers: usize, rounds: u64, body: B) -> (f64, Option<f64>)
where
    B: for<'s> Fn(Messages<'s>) -> Messages<'s> + Send + Sync + 'static,
{
    let distance = Arc::new(CoreDistance::default());
    let results = timely::execute(timely::Config::process(workers), move |worker| {
        let apart = (worker.peers() > 1)
            .then(|| distance.measure(worker.index(), Duration::from_secs(5), || false))
            .flatten();
        let start = Instant::now();
        worker.dataflow::<(), _, _>(|scope| {
            scope.iterative::<u64, _, _>(|round| {
                let (feedback, messages) = round.loop_variable::<Vec<(u64, u64)>>(1);
                body(messages).connect_loop(feedback);
            });
        });
        while worker.step_or_park(None) {}
        (start.elapsed().as_secs_f64(), apart)
    })
    .expect("timely runs")
    .join();
    let runs: Vec<(f64, Option<f64>)> = results
        .into_iter()
        .map(|r| r.expect("a worker finishes"))
        .collect();
    let slowest = runs.iter().map(|r| r.0).fold(0.0, f64::max);
    (slowest / rounds as f64 * 1e6, runs[0].1)
}

/// A measured round trip in ns, or `?` where the cores could not be measured.
pub fn show_ns(ns: Option<f64>) -> String {
    ns.map_or("?".into(), |ns| format!("{ns:.0}"))
}

/// Messages counted by round, each round holding a capability at its time, as gradflow's
/// operators count theirs: a round is complete once `expected` messages are in, without
/// waiting for timely's progress messages.
pub struct RoundCounts {
    rounds: BTreeMap<u64, (u64, Capability<Round>)>,
    expected: u64,
}

impl RoundCounts {
    pub fn new(expected: u64) -> Self {
        RoundCounts {
            rounds: BTreeMap::new(),
            expected,
        }
    }

    /// Counts `n` messages that arrived at `cap`'s time; returns their round.
    pub fn add(&mut self, cap: &InputCapability<Round>, n: usize) -> u64 {
        let t = *cap.least().expect("a batch has a time");
        let entry = (self.rounds.entry(t.inner)).or_insert_with(|| (0, cap.delayed(&t, 0)));
        entry.0 += n as u64;
        t.inner
    }

    /// The earliest round, once all of its messages are in (rounds complete in order).
    pub fn next_complete(&mut self) -> Option<(u64, Capability<Round>)> {
        let entry = self.rounds.first_entry()?;
        if entry.get().0 < self.expected {
            return None;
        }
        let (r, (_, cap)) = entry.remove_entry();
        Some((r, cap))
    }
}
