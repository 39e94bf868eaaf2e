//! Bytes on the wire, from timely's communication layer.
//!
//! The communication configuration is built with a log hook ([`WireCounters::hooks`]): every
//! message a send thread writes to a TCP stream is logged by timely with its header and a
//! timestamp, and the hook records `header + length` bytes for the message's channel. Progress
//! channels are told apart from data channels by timely's own `CommChannels` log events
//! ([`WireCounters::register_worker`]). Only bytes that cross processes exist here: within a
//! process nothing is serialized.
//!
//! timely buffers log events (about a hundred per batch) and hands them over when a batch fills
//! or its thread ends, so exact figures are available once the run has finished: [`totals`] and
//! the per-round split [`per_round`]. Each message is added to its round (by its timestamp
//! against the round start times recorded with [`mark_round`]) as its batch arrives, so memory
//! grows with rounds (40 bytes each), not with messages.
//!
//! [`totals`]: WireCounters::totals
//! [`per_round`]: WireCounters::per_round
//! [`mark_round`]: WireCounters::mark_round

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use timely::communication::initialize::Hooks;
use timely::communication::logging::CommunicationEvent;
use timely::logging::{CommChannelKind, TimelyEvent, TimelyEventBuilder};

/// Bytes sent between processes, split by channel kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WireBytes {
    /// Bytes on data channels (the dataflow's exchanges), framing included.
    pub data: u64,
    /// Bytes on progress-tracking channels.
    pub progress: u64,
    /// Number of data-channel messages.
    pub data_messages: u64,
}

/// A message whose channel's kind is not known yet.
struct Sent {
    at: Duration,
    channel: usize,
    bytes: u64,
}

/// Messages held back at most, waiting for their channel's kind; beyond it a message of an
/// unknown channel counts as data.
const MAX_UNCLASSIFIED: usize = 1 << 16;

#[derive(Default)]
struct Inner {
    /// Channel id to whether it carries progress, from timely's `CommChannels` events.
    kinds: BTreeMap<usize, bool>,
    /// Messages of channels whose kind has not arrived yet.
    unclassified: Vec<Sent>,
    /// Round start times, increasing.
    round_starts: Vec<(u64, Duration)>,
    /// Bytes per round (a message counts for the last round that had started when it was
    /// sent; before round 0, for round 0).
    per_round: Vec<WireBytes>,
    totals: WireBytes,
    /// Keep no per-round figures.
    totals_only: bool,
}

impl Inner {
    /// Counts a message for its round and the totals.
    fn count(&mut self, at: Duration, progress: bool, bytes: u64) {
        WireCounters::add(&mut self.totals, progress, bytes);
        if self.totals_only {
            return;
        }
        let i = self.round_starts.partition_point(|&(_, t)| t <= at);
        let round = if i == 0 {
            0
        } else {
            self.round_starts[i - 1].0 as usize
        };
        if self.per_round.len() <= round {
            self.per_round.resize(round + 1, WireBytes::default());
        }
        WireCounters::add(&mut self.per_round[round], progress, bytes);
    }

    fn sent(&mut self, s: Sent) {
        match self.kinds.get(&s.channel) {
            Some(&progress) => self.count(s.at, progress, s.bytes),
            None if self.unclassified.len() >= MAX_UNCLASSIFIED => self.count(s.at, false, s.bytes),
            None => self.unclassified.push(s),
        }
    }

    /// At the end: messages of channels never classified count as data.
    fn settle(&mut self) {
        for s in std::mem::take(&mut self.unclassified) {
            self.count(s.at, false, s.bytes);
        }
    }

    fn classify(&mut self, channel: usize, progress: bool) {
        self.kinds.insert(channel, progress);
        let waiting = std::mem::take(&mut self.unclassified);
        for s in waiting {
            self.sent(s);
        }
    }
}

/// Per-process record of bytes sent, fed by timely's communication log.
#[derive(Clone)]
pub struct WireCounters {
    start: Instant,
    inner: Arc<Mutex<Inner>>,
}

impl Default for WireCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl WireCounters {
    /// New, empty counters; timestamps count from now.
    pub fn new() -> Self {
        WireCounters {
            start: Instant::now(),
            inner: Arc::default(),
        }
    }

    /// Counters that keep totals only ([`WireCounters::per_round`] is all zeros): for a
    /// process that writes no metrics rows.
    pub fn totals_only() -> Self {
        let counters = Self::new();
        counters.lock().totals_only = true;
        counters
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Communication hooks whose logger records every message this process sends.
    pub fn hooks(&self) -> Hooks {
        let counters = self.clone();
        Hooks {
            log_fn: Arc::new(move |setup| {
                if !setup.sender {
                    return None; // each byte is counted once, by its sender
                }
                let counters = counters.clone();
                Some(timely::logging_core::Logger::new(
                    counters.start,
                    Duration::ZERO,
                    move |_time, batch: &mut Option<Vec<(Duration, CommunicationEvent)>>| {
                        if let Some(events) = batch {
                            let mut inner = counters.lock();
                            for (at, event) in events.iter() {
                                if let CommunicationEvent::Message(m) = event {
                                    if m.is_send && m.header.length > 0 {
                                        inner.sent(Sent {
                                            at: *at,
                                            channel: m.header.channel,
                                            bytes: m.header.required_bytes() as u64,
                                        });
                                    }
                                }
                            }
                        }
                    },
                ))
            }),
            ..Hooks::default()
        }
    }

    /// Installs a timely logger on `worker` that records which channels carry progress traffic.
    /// Call before building dataflows.
    pub fn register_worker(&self, worker: &mut timely::worker::Worker) {
        let counters = self.clone();
        if let Some(mut registry) = worker.log_register() {
            registry.insert::<TimelyEventBuilder, _>("timely", move |_time, batch| {
                if let Some(events) = batch {
                    for (_, event) in events.iter() {
                        if let TimelyEvent::CommChannels(c) = event {
                            let progress = c.kind == CommChannelKind::Progress;
                            counters.lock().classify(c.identifier, progress);
                        }
                    }
                }
            });
        }
    }

    /// Records that `round` starts now (called by one worker per process).
    pub fn mark_round(&self, round: u64) {
        let at = self.start.elapsed();
        let mut inner = self.lock();
        if !inner.totals_only {
            inner.round_starts.push((round, at));
        }
    }

    fn add(out: &mut WireBytes, progress: bool, bytes: u64) {
        if progress {
            out.progress += bytes;
        } else {
            out.data += bytes;
            out.data_messages += 1;
        }
    }

    /// Everything this process has sent (complete once its communication threads have ended).
    pub fn totals(&self) -> WireBytes {
        let mut inner = self.lock();
        inner.settle();
        inner.totals
    }

    /// Bytes sent during each of `rounds` rounds: a message counts for the last round that had
    /// started when it was sent (messages before round 0 count for round 0, after the last
    /// round for the last).
    pub fn per_round(&self, rounds: usize) -> Vec<WireBytes> {
        let mut inner = self.lock();
        inner.settle();
        let mut out = vec![WireBytes::default(); rounds];
        for (r, b) in inner.per_round.iter().enumerate() {
            if let Some(last) = rounds.checked_sub(1) {
                let o = &mut out[r.min(last)];
                o.data += b.data;
                o.progress += b.progress;
                o.data_messages += b.data_messages;
            }
        }
        out
    }
}
