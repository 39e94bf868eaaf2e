//! How far apart two threads' cores are: the round trip of one cache line between them.
//!
//! Everything two workers of a process share crosses between their cores at this cost: the
//! channels, the gradient pieces and changes, and the lines of a shared replica. On a VM the
//! two vCPUs may sit on cores that share a cache or on different chiplets, several times
//! farther (figures: `docs/results.md`, "Design measurements"), and the hypervisor moves them; what the
//! operating system reports (`/sys/devices/system/cpu/*/cache`) stays the same either way. So
//! the runtime measures it ([`CoreDistance`]) where a choice depends on it: whether the two
//! workers of a process share one replica of a small model
//! ([`crate::dataflow::ReplicaMode::Auto`]). `cargo bench --bench core_latency` measures it
//! between CPUs 0 and 1 with the same [`LinePair`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A round trip below this is two cores that share a cache (on the machine measured: 100-140
/// ns near, 450-630 ns far).
pub const NEAR_NS: f64 = 300.0;

/// A counter alone on its cache lines (two, against an adjacent-line prefetcher).
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

/// Two cache lines two threads bounce a counter through: one calls [`LinePair::ping`], the
/// other [`LinePair::echo`] with the same `trips`, as many times.
#[derive(Default)]
pub struct LinePair {
    ping: Line,
    echo: Line,
}

/// How many spins between two looks at the clock (a look costs about as much as a near round
/// trip, so looking at every spin would be measured).
const SPINS_PER_LOOK: u32 = 1024;

/// Spins until `done()`; false when `give_up()` (looked at every [`SPINS_PER_LOOK`] spins)
/// said so first.
#[inline]
fn spin_until(mut done: impl FnMut() -> bool, give_up: &impl Fn() -> bool) -> bool {
    let mut spins = 0u32;
    while !done() {
        std::hint::spin_loop();
        spins += 1;
        if spins == SPINS_PER_LOOK {
            if give_up() {
                return false;
            }
            spins = 0;
        }
    }
    true
}

impl LinePair {
    /// `trips` round trips from this side: stores the next count and waits for the other side
    /// to store it back. The time per round trip, or `None` when `give_up()` said so first.
    pub fn ping(&self, trips: u64, give_up: impl Fn() -> bool) -> Option<Duration> {
        let base = self.ping.0.load(Ordering::Relaxed);
        let start = Instant::now();
        for i in base + 1..=base + trips {
            self.ping.0.store(i, Ordering::Release);
            if !spin_until(|| self.echo.0.load(Ordering::Acquire) >= i, &give_up) {
                return None;
            }
        }
        Some(start.elapsed().div_f64(trips.max(1) as f64))
    }

    /// The other side of [`Self::ping`]: stores back each count it sees. False when
    /// `give_up()` said so before the last.
    pub fn echo(&self, trips: u64, give_up: impl Fn() -> bool) -> bool {
        let base = self.echo.0.load(Ordering::Relaxed);
        for i in base + 1..=base + trips {
            if !spin_until(|| self.ping.0.load(Ordering::Acquire) >= i, &give_up) {
                return false;
            }
            self.echo.0.store(i, Ordering::Release);
        }
        true
    }
}

/// Round trips per run of [`CoreDistance::measure`], and runs: a fraction of a millisecond to
/// about a millisecond in all.
const TRIPS: u64 = 250;
const RUNS: usize = 8;

/// The longest the bouncing may take once both workers are there (two workers on one core
/// would bounce once per time slice: they are far apart for this purpose).
const MEASURING: Duration = Duration::from_millis(20);

/// Yields until `done()`; false when `give_up()` said so first. For waits that may be long
/// (another worker still loading its data, on a core this one may share).
fn yield_until(done: impl Fn() -> bool, give_up: impl Fn() -> bool) -> bool {
    while !done() {
        if give_up() {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// How far apart the cores of a process's first two workers are, measured once by the two of
/// them together ([`Self::measure`]); every worker of the process reads the same verdict.
#[derive(Default)]
pub struct CoreDistance {
    lines: LinePair,
    /// Set by the second worker when it is there to echo.
    arrived: AtomicBool,
    /// The round trip in ns, `None` when it could not be measured; set once.
    verdict: OnceLock<Option<f64>>,
}

impl CoreDistance {
    /// The round trip in ns between the cores of the process's workers `place` 0 and 1 (every
    /// worker calls it with its place in the process; 0 and 1 measure, the others wait for the
    /// verdict): the fastest of several runs, since interference only adds time. `None` when
    /// it could not be measured: the other worker did not come within `patience` (it failed
    /// while loading), the bouncing took longer than [`MEASURING`], or `give_up()` said so.
    /// Every caller gets the same answer.
    pub fn measure(
        &self,
        place: usize,
        patience: Duration,
        give_up: impl Fn() -> bool,
    ) -> Option<f64> {
        let deadline = Instant::now() + patience;
        let decided = || self.verdict.get().is_some();
        let waited_too_long = || give_up() || decided() || Instant::now() > deadline;
        match place {
            0 => {
                let mut best: Option<Duration> = None;
                if yield_until(|| self.arrived.load(Ordering::Acquire), waited_too_long) {
                    let until = Instant::now() + MEASURING;
                    let over = || Instant::now() > until;
                    for _ in 0..RUNS {
                        match self.lines.ping(TRIPS, over) {
                            Some(t) => best = Some(best.map_or(t, |b| b.min(t))),
                            None => {
                                best = None;
                                break;
                            }
                        }
                    }
                }
                // A verdict already set (the other worker gave up) stays.
                let _ = self.verdict.set(best.map(|t| t.as_nanos() as f64));
            }
            1 => {
                self.arrived.store(true, Ordering::Release);
                let first_ping = || self.lines.ping.0.load(Ordering::Acquire) > 0;
                let echoed = yield_until(first_ping, waited_too_long) && {
                    let until = Instant::now() + MEASURING;
                    self.lines
                        .echo(TRIPS * RUNS as u64, || decided() || Instant::now() > until)
                };
                if !echoed {
                    let _ = self.verdict.set(None);
                }
            }
            _ => {}
        }
        // Whoever gives up waiting sets `None`: the first verdict set is everyone's.
        if !yield_until(decided, || Instant::now() > deadline) {
            let _ = self.verdict.set(None);
        }
        *self.verdict.get().expect("set above")
    }

    /// Whether a measured round trip is that of two cores that share a cache ([`NEAR_NS`]).
    pub fn near(ns: Option<f64>) -> bool {
        ns.is_some_and(|ns| ns < NEAR_NS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Two threads measure and agree. The tests run beside others on two cores, and two
    /// threads that do not run at the same time give no verdict (the bouncing overruns
    /// [`MEASURING`]): some of several tries must give one.
    #[test]
    fn two_threads_measure_the_same_round_trip() {
        let mut measured = Vec::new();
        for _ in 0..20 {
            let d = Arc::new(CoreDistance::default());
            let other = d.clone();
            let echo =
                std::thread::spawn(move || other.measure(1, Duration::from_secs(10), || false));
            let ping = d.measure(0, Duration::from_secs(10), || false);
            assert_eq!(
                Some(ping),
                echo.join().ok(),
                "both workers read one verdict"
            );
            measured.extend(ping);
            if measured.len() == 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!measured.is_empty(), "no verdict in 20 tries");
        // A cache line's round trip between two cores: tens to hundreds of ns (a wrong unit,
        // or a count of spins, would be far off).
        for ns in measured {
            assert!((10.0..100_000.0).contains(&ns), "{ns} ns");
        }
    }

    #[test]
    fn a_missing_partner_gives_no_verdict_to_everyone() {
        let d = CoreDistance::default();
        let started = Instant::now();
        assert_eq!(d.measure(0, Duration::from_millis(50), || false), None);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Later callers read the same verdict at once.
        assert_eq!(d.measure(1, Duration::from_millis(50), || false), None);
        assert_eq!(d.measure(2, Duration::from_millis(50), || false), None);
    }

    #[test]
    fn giving_up_ends_the_wait() {
        let d = CoreDistance::default();
        assert_eq!(d.measure(1, Duration::from_secs(60), || true), None);
    }
}
