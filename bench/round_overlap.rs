//! How much of a two-worker round's hand-offs could hide behind the round's work: timely's cost
//! of a round of gradflow's `sharded` shape that does work, with its messages sent after the
//! work (as gradflow does) or in the middle of it (a pipelined round), in µs per round beyond
//! the work itself.
//!
//!   cargo bench --bench round_overlap [-- RUNS ROUNDS WORK_US AGGREGATE_US]
//!
//! Two operators around the loop. `Gradient` spins `WORK` µs (the mini-batch gradient) and sends
//! one piece to every worker; `Aggregate`, once a round's pieces are all in, spins `AGGREGATE`
//! µs (the merge and the optimizer) and sends one change to every worker, which the gradient of
//! the next round waits for. Defaults: 250 and 20 µs, a two-worker round of the programs
//! issue's 600k-row job.
//!
//! - **serial**, gradflow's order: round `r` starts when every change of round `r - 1` is in,
//!   and sends its pieces at its end.
//! - **pipelined**, the order an exact SGD round could take with rows whose keys are ordered by
//!   owner: a third of the work (the margins over this worker's own keys, whose change is in
//!   first) starts when its own change is in; the second third (the other keys' margins, the
//!   other owners' part of the gradient) when all are in; then the other workers' pieces leave,
//!   and the last third (this worker's own part) runs while they travel.
//!
//! Each line is one triple of runs (one worker, two serial, two pipelined), with the round trip
//! in ns between the two workers' cores measured before each two-worker run (as the runtime does):
//! on this VM the placement changes within seconds, so runs are shown with theirs rather than
//! pooled. `docs/results.md` ("Two workers against one") has the results.

mod round_loop;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gradflow::cores::NEAR_NS;
use round_loop::{show_ns, timed_loop, Messages, Round, RoundCounts};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::{Operator, OutputBuilder};

/// The round's shape and work.
#[derive(Clone, Copy)]
struct Shape {
    pipelined: bool,
    rounds: u64,
    work_us: f64,
    aggregate_us: f64,
}

/// Busy for `us` µs, as computing would be.
fn work(us: f64) {
    let end = Instant::now() + Duration::from_secs_f64(us * 1e-6);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// The gradient: round 0 at once, round `r` once round `r - 1`'s changes are in. Each send
/// is its own output session, whose end hands the messages to the channel (a pipelined round
/// must not hold its first pieces until it returns).
fn gradient<'s>(changes: Messages<'s>, shape: Shape) -> Messages<'s> {
    let scope = changes.scope();
    let (peers, me) = (scope.peers() as u64, scope.index() as u64);
    let mut builder = OperatorBuilder::new("Gradient".to_owned(), scope);
    let mut input = builder.new_input(changes, Exchange::new(|m: &(u64, u64)| m.0));
    let (output, stream) = builder.new_output::<Vec<(u64, u64)>>();
    let mut output: OutputBuilder<Round, CapacityContainerBuilder<Vec<(u64, u64)>>> =
        OutputBuilder::from(output);
    builder.build(move |mut caps| {
        let mut start = caps.pop();
        let mut arrived = RoundCounts::new(peers);
        // The rounds whose own change is in, and the last round whose first third ran.
        let (mut own_in, mut first_third) = (BTreeSet::new(), None);
        move |_frontiers| {
            let mut send = |cap: &_, to_me: bool, to_others: bool| {
                let dests = (0..peers).filter(|&d| if d == me { to_me } else { to_others });
                (output.activate().session(cap)).give_iterator(dests.map(|d| (d, me)));
            };
            if let Some(cap) = start.take() {
                work(shape.work_us);
                send(&cap, true, true);
            }
            input.for_each(|cap, batch| {
                let r = arrived.add(&cap, batch.len());
                if batch.iter().any(|m| m.1 == me) {
                    own_in.insert(r);
                }
            });
            // The first third of the earliest round, once its own change is in.
            if let Some(&r) = own_in.first().filter(|_| shape.pipelined) {
                if r < shape.rounds && first_third != Some(r) {
                    work(shape.work_us / 3.0);
                    first_third = Some(r);
                }
            }
            while let Some((r, cap)) = arrived.next_complete() {
                own_in.remove(&r);
                if r >= shape.rounds {
                    continue;
                }
                if shape.pipelined {
                    work(shape.work_us / 3.0);
                    send(&cap, false, true);
                    work(shape.work_us / 3.0);
                    send(&cap, true, false);
                } else {
                    work(shape.work_us);
                    send(&cap, true, true);
                }
            }
        }
    });
    stream
}

/// The owners' step: once all of a round's pieces are in, works and sends every worker a change.
fn aggregate<'s>(pieces: Messages<'s>, shape: Shape) -> Messages<'s> {
    let (peers, me) = (pieces.scope().peers() as u64, pieces.scope().index() as u64);
    pieces.unary(
        Exchange::new(|m: &(u64, u64)| m.0),
        "Aggregate",
        move |_, _| {
            let mut arrived = RoundCounts::new(peers);
            move |input, output| {
                input.for_each(|cap, batch| {
                    arrived.add(&cap, batch.len());
                });
                while let Some((_, cap)) = arrived.next_complete() {
                    work(shape.aggregate_us);
                    output
                        .session(&cap)
                        .give_iterator((0..peers).map(|d| (d, me)));
                }
            }
        },
    )
}

/// µs per round beyond the work, on `workers` threads, and with two or more the round trip in
/// ns between the first two workers' cores, measured before the loop.
fn run(workers: usize, shape: Shape) -> (f64, Option<f64>) {
    let (per_round, apart) = timed_loop(workers, shape.rounds, move |changes| {
        aggregate(gradient(changes, shape), shape)
    });
    (per_round - shape.work_us - shape.aggregate_us, apart)
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied()
}

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let arg = |i: usize, default: f64| args.get(i).copied().unwrap_or(default);
    let runs = arg(0, 5.0).max(1.0) as usize;
    let shape = Shape {
        pipelined: false,
        rounds: arg(1, 4000.0).max(1.0) as u64,
        work_us: arg(2, 250.0),
        aggregate_us: arg(3, 20.0),
    };
    println!(
        "µs per round beyond {} µs of gradient and {} µs of aggregation ({} rounds a run)",
        shape.work_us, shape.aggregate_us, shape.rounds
    );
    println!("| 1 worker | 2 serial | cores apart, ns | 2 pipelined | cores apart, ns |");
    println!("|---|---|---|---|---|");
    // (placement is far, serial, pipelined) of the runs whose two measurements agree.
    let mut agreed = Vec::new();
    for _ in 0..runs {
        let (one, _) = run(1, shape);
        let (serial, apart_s) = run(2, shape);
        let pipelined = Shape {
            pipelined: true,
            ..shape
        };
        let (piped, apart_p) = run(2, pipelined);
        println!(
            "| {one:.2} | {serial:.2} | {} | {piped:.2} | {} |",
            show_ns(apart_s),
            show_ns(apart_p)
        );
        if let (Some(s), Some(p)) = (apart_s, apart_p) {
            if (s < NEAR_NS) == (p < NEAR_NS) {
                agreed.push((s >= NEAR_NS, serial, piped));
            }
        }
    }
    for (far, name) in [(false, "near"), (true, "far")] {
        let group: Vec<_> = agreed.iter().filter(|a| a.0 == far).collect();
        let serial = median(group.iter().map(|a| a.1).collect());
        let piped = median(group.iter().map(|a| a.2).collect());
        if let (Some(s), Some(p)) = (serial, piped) {
            let n = group.len();
            println!("{name} cores ({n} triples): serial {s:.2}, pipelined {p:.2} µs a round");
        }
    }
}
