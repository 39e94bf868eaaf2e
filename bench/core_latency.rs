//! How far apart the machine's first two CPUs are: the round trip of one cache line between two
//! threads pinned to CPUs 0 and 1 (each waits for the other's store, then stores), in ns.
//!
//!   cargo bench --bench core_latency [-- ROUND_TRIPS]
//!
//! Everything two workers of a process share (channels, a shared replica's lines, the pieces
//! of a gradient) crosses between their cores at this cost. On this VM it has two values that
//! alternate over minutes to tens of minutes, as the hypervisor moves the two vCPUs: about
//! 120 ns (two cores that share a cache) and about 580 ns (two cores of different chiplets),
//! and with it the two-worker speed-up of a training epoch. `bench/sklearn.sh` prints it beside
//! every pair of runs, so that a ratio can be read with the placement it was measured on.
//! The runtime measures the same between a process's two workers to decide whether they share
//! one replica of a small model (`gradflow::cores`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use gradflow::cores::LinePair;

/// Pins the calling thread to `cpu`; false where that is not possible.
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set, filled and passed by reference.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Median round trip in ns over `runs` runs of `trips` round trips; `None` when the threads
/// cannot be pinned to CPUs 0 and 1.
fn round_trip(trips: u64, runs: usize) -> Option<f64> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let lines = Arc::new(LinePair::default());
        let unpinned = Arc::new(AtomicBool::new(false));
        let (theirs, stop) = (lines.clone(), unpinned.clone());
        let echo = std::thread::spawn(move || {
            let pinned = pin(1);
            if !pinned {
                stop.store(true, Ordering::Relaxed);
            }
            pinned && theirs.echo(trips, || stop.load(Ordering::Relaxed))
        });
        if !pin(0) {
            unpinned.store(true, Ordering::Relaxed);
        }
        let time = lines.ping(trips, || unpinned.load(Ordering::Relaxed));
        if !echo.join().unwrap_or(false) {
            return None;
        }
        times.push(time?.as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    Some(times[runs / 2])
}

fn main() {
    // `cargo bench` passes `--bench`; a number among the arguments is the round trips per run.
    let trips = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(200_000);
    match round_trip(trips, 5) {
        Some(ns) => println!("cpu 0 <-> cpu 1 round trip: {ns:.0} ns"),
        None => println!("cpu 0 <-> cpu 1 round trip: not measured (cannot pin to cpus 0 and 1)"),
    }
}
