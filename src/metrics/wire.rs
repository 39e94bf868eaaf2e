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
//! the per-round split [`per_round`], which bins each message by its timestamp against the round
//! start times recorded with [`mark_round`].
//!
//! [`totals`]: WireCounters::totals
//! [`per_round`]: WireCounters::per_round
//! [`mark_round`]: WireCounters::mark_round

use std::collections::BTreeSet;
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

struct Sent {
    at: Duration,
    channel: usize,
    bytes: u64,
}

#[derive(Default)]
struct Inner {
    sent: Vec<Sent>,
    progress_channels: BTreeSet<usize>,
    round_starts: Vec<(u64, Duration)>,
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
                                        let bytes = m.header.required_bytes() as u64;
                                        inner.sent.push(Sent {
                                            at: *at,
                                            channel: m.header.channel,
                                            bytes,
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
                            if c.kind == CommChannelKind::Progress {
                                counters.lock().progress_channels.insert(c.identifier);
                            }
                        }
                    }
                }
            });
        }
    }

    /// Records that `round` starts now (called by one worker per process).
    pub fn mark_round(&self, round: u64) {
        let at = self.start.elapsed();
        self.lock().round_starts.push((round, at));
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
        let inner = self.lock();
        let mut out = WireBytes::default();
        for s in &inner.sent {
            Self::add(
                &mut out,
                inner.progress_channels.contains(&s.channel),
                s.bytes,
            );
        }
        out
    }

    /// Bytes sent during each of `rounds` rounds: a message counts for the last round that had
    /// started when it was sent (messages before round 0 count for round 0).
    pub fn per_round(&self, rounds: usize) -> Vec<WireBytes> {
        let inner = self.lock();
        let mut out = vec![WireBytes::default(); rounds];
        if rounds == 0 {
            return out;
        }
        let starts = &inner.round_starts;
        for s in &inner.sent {
            let i = starts.partition_point(|&(_, t)| t <= s.at);
            let round = if i == 0 { 0 } else { starts[i - 1].0 as usize };
            Self::add(
                &mut out[round.min(rounds - 1)],
                inner.progress_channels.contains(&s.channel),
                s.bytes,
            );
        }
        out
    }
}
