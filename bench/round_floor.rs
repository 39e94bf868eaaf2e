//! The floor of a training round in timely: what one round costs when it computes nothing, only
//! hands messages from operator to operator around the loop, in µs per round.
//!
//!   cargo bench --bench round_floor [-- ROUNDS]
//!
//! The loop has the shape of gradflow's: an iterative scope whose timestamp is the round, and
//! `hops` exchange operators in a row around the feedback edge. Each sends one message to every
//! worker per round and moves on the moment all of its round's messages are in (counted, as
//! gradflow's operators do, not waiting for timely's progress messages). `sharded` has two hops
//! a round (gradient pieces to their owners, the owners' changes back), `allgather` one. With
//! `report`, every worker also sends worker 0 one message a round into an operator that reads
//! its frontier, as the round statistics go to the metrics collector.
//!
//! Run with one worker and with two (threads of one process). What two workers add is what
//! crosses between their cores: on this VM about 1-1.5 µs a hop when the two vCPUs share a
//! cache and about 8.5 µs when they sit on different chiplets, a large part of a two-worker
//! round on the 600k-row job of `bench/sklearn.sh` (see "The two CPUs' distance" in
//! `docs/architecture.md`). Before each two-worker run its workers measure a cache line's round trip between
//! their cores (`gradflow::cores::CoreDistance`, as the runtime does), printed beside the result.

mod round_loop;

use round_loop::{show_ns, timed_loop, Messages, Round, RoundCounts};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::{Operator, OutputBuilderSession};

/// One hop: once all of round `r`'s messages are in, sends one message to every worker at `r`
/// (the first hop also starts round 0, and stops the loop after `rounds` rounds).
fn hop<'s>(input: Messages<'s>, first: bool, rounds: u64) -> Messages<'s> {
    let peers = input.scope().peers() as u64;
    let me = input.scope().index() as u64;
    input.unary(
        Exchange::new(|m: &(u64, u64)| m.0),
        "Hop",
        move |start, _| {
            let mut start = first.then_some(start);
            let mut arrived = RoundCounts::new(peers);
            move |input, output| {
                if let Some(cap) = start.take() {
                    output
                        .session(&cap)
                        .give_iterator((0..peers).map(|d| (d, me)));
                }
                input.for_each(|cap, batch| {
                    arrived.add(&cap, batch.len());
                });
                while let Some((r, cap)) = arrived.next_complete() {
                    if !first || r + 1 < rounds {
                        output
                            .session(&cap)
                            .give_iterator((0..peers).map(|d| (d, me)));
                    }
                }
            }
        },
    )
}

/// Every worker's messages of a round to worker 0, into an operator that reads its frontier.
fn report(messages: &Messages<'_>) {
    messages.clone().unary_frontier(
        Exchange::new(|_: &(u64, u64)| 0),
        "Report",
        |_, _| {
            move |(input, _frontier), _: &mut OutputBuilderSession<'_, Round, CapacityContainerBuilder<Vec<u64>>>| {
                input.for_each(|_, _| {});
            }
        },
    );
}

/// µs per round of `rounds` rounds on `workers` threads, and with two or more the round trip
/// in ns between the first two workers' cores.
fn floor(workers: usize, hops: usize, with_report: bool, rounds: u64) -> (f64, Option<f64>) {
    timed_loop(workers, rounds, move |messages| {
        let mut messages = hop(messages, true, rounds);
        if with_report {
            report(&messages);
        }
        for _ in 1..hops {
            messages = hop(messages, false, rounds);
        }
        messages
    })
}

fn main() {
    let rounds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000)
        .max(1);
    println!("timely's floor of a round, µs (median of 3 runs of {rounds} rounds)");
    println!("| loop | 1 worker | 2 workers | the 2 workers' cores apart |");
    println!("|---|---|---|---|");
    for (name, hops, with_report) in [
        ("1 hop (allgather's shape)", 1, false),
        ("2 hops (sharded's shape)", 2, false),
        ("2 hops and a report to worker 0", 2, true),
    ] {
        let median = |workers| {
            let mut runs: Vec<(f64, Option<f64>)> = (0..3)
                .map(|_| floor(workers, hops, with_report, rounds))
                .collect();
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let apart: Vec<String> = runs.iter().map(|r| show_ns(r.1)).collect();
            (runs[1].0, apart.join(", "))
        };
        let ((one, _), (two, apart)) = (median(1), median(2));
        println!("| {name} | {one:.2} | {two:.2} | {apart} ns |");
    }
}
