//! A model of one training round's time, from what a round is made of: the CPU of each stage
//! (gradient, encode, decode, sum and apply), the bytes each process sends, and the link's
//! rate and latency per hop. `train.exchange = "auto"` and `compressor = "auto"` choose with it
//! from numbers measured on the job's own gradients and link (`auto::calibrate`).
//!
//! Each strategy gives its own terms ([`super::Exchange::round_model`], in its file): the CPU
//! per worker beyond the gradient, the payload bytes a worker sends to other processes, and the
//! hops a round waits for; a strategy without a model is not ranked. A round costs its CPU plus
//! its hops' latency plus its bytes over the link's rate; with pipelined rounds
//! (`staleness ≥ 1`) the exchange overlaps the next round's CPU, and the round costs the larger
//! of the two. Every process sends as much as it receives (the exchanges are symmetric), so one
//! direction's bytes give the link time.

use super::{build_exchange, ExchangeKind};

/// What one codec costs on a worker's gradient, measured (`auto::calibrate`).
#[derive(Clone, Debug, PartialEq)]
pub struct CodecCost {
    /// The codec's name.
    pub name: String,
    /// Encoding the whole gradient as one message (`allgather`), ms.
    pub encode_whole_ms: f64,
    /// Decoding that message, ms.
    pub decode_whole_ms: f64,
    /// Its size, bytes.
    pub whole_bytes: f64,
    /// Encoding the gradient as one piece per owner (`sharded`), all pieces, ms.
    pub encode_pieces_ms: f64,
    /// Decoding one piece (the pieces' mean), ms.
    pub decode_piece_ms: f64,
    /// All pieces' size, bytes.
    pub pieces_bytes: f64,
}

/// A link between processes, probed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkCost {
    /// Bytes a process sends per second while every process sends.
    pub bytes_per_s: f64,
    /// One hop's time without payload (a message and timely's progress), ms.
    pub hop_ms: f64,
}

/// What a round is made of, measured on one job.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundInputs {
    /// Workers in all.
    pub workers: usize,
    /// Workers per process.
    pub threads: usize,
    /// A worker's gradient, ms.
    pub gradient_ms: f64,
    /// Pairs of a worker's gradient (`n`).
    pub pairs: f64,
    /// Keys of the sum of all workers' gradients (`u`).
    pub union_keys: f64,
    /// Adding one pair into the sum, or one change into the model, ns.
    pub add_ns: f64,
    /// The optimizer's step on one key, ns.
    pub update_ns: f64,
    /// `sharded`'s downlink: one owner's change (`u / W` keys) uncompressed: its bytes, and
    /// the ms to encode and to decode it.
    pub change_bytes: f64,
    /// Encoding one owner's change, ms.
    pub change_encode_ms: f64,
    /// Decoding one owner's change, ms.
    pub change_decode_ms: f64,
    /// The link.
    pub link: LinkCost,
    /// Rounds in flight (`train.staleness`).
    pub staleness: u64,
}

/// A strategy's terms in the round model ([`super::Exchange::round_model`]).
#[derive(Clone, Copy, Debug)]
pub struct RoundModel {
    /// The messages a round waits for in turn (`sharded`: up and back down).
    pub hops: u32,
    /// Its round's CPU per worker beyond the gradient, ms, and the payload bytes a worker
    /// sends to other processes, from the measured inputs and the codec's costs.
    pub cost: fn(&RoundInputs, &CodecCost) -> (f64, f64),
    /// Whether it has a downlink codec that `auto` may choose (`train.downlink`).
    pub downlink: bool,
}

impl RoundInputs {
    /// Workers in other processes than a given worker's (`W − T`).
    pub fn remote(&self) -> f64 {
        self.workers.saturating_sub(self.threads) as f64
    }

    /// Summing `pairs` received pairs into the round's sum, ms.
    pub fn sum_ms(&self) -> f64 {
        self.pairs * self.add_ns * 1e-6
    }

    /// Adding the round's change (`union_keys` keys) to a replica, ms.
    pub fn apply_ms(&self) -> f64 {
        self.union_keys * self.add_ns * 1e-6
    }
}

/// The round model of the strategy `kind` names, if it has one.
pub fn round_model(kind: ExchangeKind) -> Option<RoundModel> {
    build_exchange(kind).round_model()
}

/// Every strategy the round model covers, in registry order: those `auto` ranks.
pub fn modelled() -> Vec<ExchangeKind> {
    ExchangeKind::all()
        .into_iter()
        .filter(|&k| round_model(k).is_some())
        .collect()
}

/// A predicted round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// CPU per worker and round, ms.
    pub cpu_ms: f64,
    /// Bytes a process sends per round (payload).
    pub sent_bytes: f64,
    /// Those bytes over the link's rate, ms: the round's link-time floor.
    pub wire_ms: f64,
    /// Hops a round waits for.
    pub hops: u32,
    /// The round, ms.
    pub round_ms: f64,
}

/// Predicts a round of `strategy` with `codec`'s messages; `None` when the strategy has no
/// round model.
pub fn predict(r: &RoundInputs, strategy: ExchangeKind, codec: &CodecCost) -> Option<Prediction> {
    Some(predict_with(r, &round_model(strategy)?, codec))
}

/// Predicts a round of the strategy whose round model is `model`, with `codec`'s messages.
pub fn predict_with(r: &RoundInputs, model: &RoundModel, codec: &CodecCost) -> Prediction {
    let (cpu, per_worker_bytes) = (model.cost)(r, codec);
    let hops = model.hops;
    let remote = r.remote();
    let cpu_ms = r.gradient_ms + cpu;
    let sent_bytes = per_worker_bytes * r.threads as f64;
    let wire_ms = match remote > 0.0 {
        true => sent_bytes / r.link.bytes_per_s.max(1.0) * 1e3,
        false => 0.0,
    };
    let round_ms = round_ms(cpu_ms, hops, r.link.hop_ms, wire_ms, r.staleness);
    Prediction {
        cpu_ms,
        sent_bytes,
        wire_ms,
        hops,
        round_ms,
    }
}

/// A round of `cpu_ms` per worker that waits for `hops` hops of `hop_ms` each and sends bytes
/// that take `wire_ms` on the link: their sum, or with rounds in flight (`staleness ≥ 1`) the
/// larger of the CPU and the exchange.
pub fn round_ms(cpu_ms: f64, hops: u32, hop_ms: f64, wire_ms: f64, staleness: u64) -> f64 {
    let exchange_ms = hops as f64 * hop_ms + wire_ms;
    match staleness {
        0 => cpu_ms + exchange_ms,
        _ => cpu_ms.max(exchange_ms),
    }
}

/// The time a link shaped by a token bucket (`tc tbf`) spends sending `wire_ms` worth of bytes
/// at its rate, when its bucket holds `bucket_ms` worth and refills while the link is idle for
/// `idle_ms` of the round: the bytes the refilled bucket covers pass at once (a link without
/// a bucket, `bucket_ms` = 0, takes the whole `wire_ms`).
pub fn bucket_link_ms(wire_ms: f64, bucket_ms: f64, idle_ms: f64) -> f64 {
    (wire_ms - bucket_ms.min(idle_ms).max(0.0)).max(0.0)
}

/// A configuration `auto` may choose, with its prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The exchange.
    pub strategy: ExchangeKind,
    /// The codec's name (with its defaults and its paper's memory).
    pub codec: String,
    /// Rounds in flight (`train.staleness`).
    pub staleness: u64,
    /// `sharded`'s downlink codec, when the candidate changes the job's ([`Variant`]).
    pub downlink: Option<String>,
    /// Its round.
    pub prediction: Prediction,
}

impl Candidate {
    /// Whether it trains the model the job's own settings train: no lossy codec, and the
    /// job's staleness and downlink (`r`'s).
    pub fn lossless(&self, r: &RoundInputs) -> bool {
        self.codec == "none" && self.staleness == r.staleness && self.downlink.is_none()
    }
}

/// `sharded`'s downlink with another codec than the job's: one owner's change encoded with it
/// (with the owner's residual), measured.
#[derive(Clone, Debug, PartialEq)]
pub struct DownlinkCost {
    /// The codec's name.
    pub name: String,
    /// One owner's change encoded: bytes.
    pub change_bytes: f64,
    /// Encoding it, ms.
    pub change_encode_ms: f64,
    /// Decoding it, ms.
    pub change_decode_ms: f64,
}

/// What a candidate may change of a round besides the exchange and the codec: rounds in flight,
/// and `sharded`'s downlink codec (`None`: the job's).
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// `train.staleness`.
    pub staleness: u64,
    /// The downlink, for `sharded` only.
    pub downlink: Option<DownlinkCost>,
}

impl RoundInputs {
    /// The round of `variant`: its staleness, and its downlink's change in place of the job's.
    pub fn with(&self, variant: &Variant) -> RoundInputs {
        let mut r = self.clone();
        r.staleness = variant.staleness;
        if let Some(d) = &variant.downlink {
            r.change_bytes = d.change_bytes;
            r.change_encode_ms = d.change_encode_ms;
            r.change_decode_ms = d.change_decode_ms;
        }
        r
    }
}

/// Codecs `compressor = "auto"` chooses among for a model (its [`crate::model::Model::name`]):
/// lossless, or within 0.5% of uncompressed training's lowest test loss in every column of that
/// model's convergence table (logistic, hinge and squared loss, each with Adam and plain SGD,
/// each codec with its paper's memory; `docs/results.md`). The tables are the linear model's
/// (`bench/convergence.sh`), a factorization machine's and a network's (the same script on
/// `bench/convergence_fm.toml` and `bench/convergence_mlp.toml`); a model without one (a
/// program's own) gets lossless messages only.
pub fn keeps_the_loss(model: &str) -> &'static [&'static str] {
    match model {
        "linear" | "fm" => &["none", "logquant", "topk", "threshold", "fastsgd", "zipml"],
        // logquant, threshold, fastsgd and zipml end 1-4% above uncompressed under plain SGD.
        "mlp" => &["none", "topk"],
        _ => &["none"],
    }
}

/// A lossy candidate is chosen over uncompressed messages only when predicted at least this
/// much faster (the model's error is of this order; a wrong lossy choice also costs loss).
pub const LOSSY_MARGIN: f64 = 0.9;

/// Ranks every pair of `strategies` and `codecs` by predicted round time (fastest first; ties
/// keep the given order) and returns them with the index of the choice: the fastest, unless
/// it is lossy and not [`LOSSY_MARGIN`] faster than the fastest uncompressed candidate.
pub fn choose(
    r: &RoundInputs,
    strategies: &[ExchangeKind],
    codecs: &[CodecCost],
) -> (Vec<Candidate>, usize) {
    let job = Variant {
        staleness: r.staleness,
        downlink: None,
    };
    choose_among(r, strategies, codecs, &[job])
}

/// [`choose`] over every variant of each pair as well (a downlink variant for `sharded` only):
/// a candidate that changes the job's staleness or downlink is lossy, as a lossy codec is.
pub fn choose_among(
    r: &RoundInputs,
    strategies: &[ExchangeKind],
    codecs: &[CodecCost],
    variants: &[Variant],
) -> (Vec<Candidate>, usize) {
    let mut ranked: Vec<Candidate> = Vec::new();
    for &strategy in strategies {
        let Some(model) = round_model(strategy) else {
            continue;
        };
        for v in variants {
            if v.downlink.is_some() && !model.downlink {
                continue;
            }
            let round = r.with(v);
            ranked.extend(codecs.iter().map(|c| Candidate {
                strategy,
                codec: c.name.clone(),
                staleness: v.staleness,
                downlink: v.downlink.as_ref().map(|d| d.name.clone()),
                prediction: predict_with(&round, &model, c),
            }));
        }
    }
    ranked.sort_by(|a, b| a.prediction.round_ms.total_cmp(&b.prediction.round_ms));
    let times: Vec<f64> = ranked.iter().map(|c| c.prediction.round_ms).collect();
    let lossless: Vec<bool> = ranked.iter().map(|c| c.lossless(r)).collect();
    let chosen = least(&times, &lossless);
    (ranked, chosen)
}

/// The index of the least of `times` (the first of equal ones), unless it is lossy and not
/// [`LOSSY_MARGIN`] below the least lossless time: then that one's.
pub fn least(times: &[f64], lossless: &[bool]) -> usize {
    let first_least = |only_lossless: bool| {
        (0..times.len())
            .filter(|&i| lossless[i] || !only_lossless)
            .min_by(|&a, &b| times[a].total_cmp(&times[b]))
    };
    match (first_least(false), first_least(true)) {
        (Some(any), Some(safe)) if times[any] > LOSSY_MARGIN * times[safe] => safe,
        (Some(any), _) => any,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model without a convergence table (a program's own) gets lossless messages only; every
    /// list holds `none` and only codecs the registry knows.
    #[test]
    fn a_model_without_a_convergence_table_keeps_uncompressed_messages() {
        assert_eq!(keeps_the_loss("my_model"), ["none"]);
        for model in ["linear", "fm", "mlp", "my_model"] {
            let list = keeps_the_loss(model);
            assert_eq!(list[0], "none");
            assert!(list.iter().all(|c| crate::codec::CODEC_NAMES.contains(c)));
        }
    }

    fn codec(name: &str, whole_bytes: f64, encode_ms: f64) -> CodecCost {
        CodecCost {
            name: name.into(),
            encode_whole_ms: encode_ms,
            decode_whole_ms: encode_ms / 2.0,
            whole_bytes,
            encode_pieces_ms: encode_ms,
            decode_piece_ms: encode_ms / 8.0,
            pieces_bytes: whole_bytes,
        }
    }

    fn inputs(bytes_per_s: f64, staleness: u64) -> RoundInputs {
        RoundInputs {
            workers: 4,
            threads: 1,
            gradient_ms: 2.0,
            pairs: 10_000.0,
            union_keys: 30_000.0,
            add_ns: 1.0,
            update_ns: 4.0,
            change_bytes: 60_000.0,
            change_encode_ms: 0.01,
            change_decode_ms: 0.02,
            link: LinkCost {
                bytes_per_s,
                hop_ms: 0.5,
            },
            staleness,
        }
    }

    #[test]
    fn a_round_adds_cpu_hops_and_bytes_over_the_rate() {
        let r = inputs(1e7, 0);
        let c = codec("none", 80_000.0, 0.1);
        let all = predict(&r, ExchangeKind::Allgather, &c).unwrap();
        // 3 remote copies of 80 kB; CPU: encode, 3 decodes, 4 sums of 10k pairs, 30k updates
        // and 30k applies.
        assert_eq!(all.sent_bytes, 240_000.0);
        assert!((all.wire_ms - 24.0).abs() < 1e-9);
        let cpu = 2.0 + 0.1 + 3.0 * 0.05 + 4.0 * 0.01 + 0.12 + 0.03;
        assert!((all.cpu_ms - cpu).abs() < 1e-9, "{}", all.cpu_ms);
        assert!((all.round_ms - (cpu + 0.5 + 24.0)).abs() < 1e-9);
        let sh = predict(&r, ExchangeKind::Sharded, &c).unwrap();
        // 3 of 4 pieces up, 3 copies of the owner's change down, two hops.
        assert_eq!(sh.sent_bytes, 60_000.0 + 180_000.0);
        assert_eq!(sh.hops, 2);
        let cpu = 2.0 + 0.1 + 3.0 * 0.0125 + 0.01 + 0.03 + 0.01 + 3.0 * 0.02 + 0.03;
        assert!((sh.cpu_ms - cpu).abs() < 1e-9, "{}", sh.cpu_ms);
    }

    /// A refilled bucket covers its size or the idle time's worth of bytes, whichever is less.
    #[test]
    fn a_token_bucket_lets_what_refilled_while_idle_through_at_once() {
        assert_eq!(bucket_link_ms(8.0, 0.0, 3.0), 8.0);
        assert_eq!(bucket_link_ms(8.0, 5.0, 3.0), 5.0);
        assert_eq!(bucket_link_ms(8.0, 5.0, 10.0), 3.0);
        assert_eq!(bucket_link_ms(4.0, 5.0, 10.0), 0.0);
    }

    #[test]
    fn pipelined_rounds_cost_the_larger_of_cpu_and_exchange() {
        let c = codec("none", 80_000.0, 0.1);
        let (plain, piped) = (
            predict(&inputs(1e7, 0), ExchangeKind::Allgather, &c).unwrap(),
            predict(&inputs(1e7, 1), ExchangeKind::Allgather, &c).unwrap(),
        );
        assert_eq!(piped.round_ms, (piped.wire_ms + 0.5).max(piped.cpu_ms));
        assert!(piped.round_ms < plain.round_ms);
    }

    #[test]
    fn one_process_sends_nothing_over_a_link() {
        let mut r = inputs(1.0, 0);
        r.threads = 4;
        let p = predict(&r, ExchangeKind::Allgather, &codec("none", 80_000.0, 0.1)).unwrap();
        assert_eq!((p.sent_bytes, p.wire_ms), (0.0, 0.0));
    }

    #[test]
    fn a_slow_link_chooses_the_smaller_messages_and_a_fast_one_the_cheaper_cpu() {
        let codecs = [
            codec("none", 80_000.0, 0.05),
            codec("logquant", 15_000.0, 0.4),
        ];
        let both = [ExchangeKind::Sharded, ExchangeKind::Allgather];
        let (ranked, i) = choose(&inputs(1.25e7, 0), &both, &codecs);
        assert_eq!(ranked[i].codec, "logquant");
        let (ranked, i) = choose(&inputs(1e10, 0), &both, &codecs);
        assert_eq!(ranked[i].codec, "none");
        assert!(ranked
            .windows(2)
            .all(|p| p[0].prediction.round_ms <= p[1].prediction.round_ms));
    }

    #[test]
    fn a_lossy_codec_must_win_by_the_margin() {
        // logquant saves a little wire time on a fast link: not enough.
        let codecs = [
            codec("none", 80_000.0, 0.05),
            codec("logquant", 70_000.0, 0.05),
        ];
        let (ranked, i) = choose(&inputs(1e9, 0), &[ExchangeKind::Allgather], &codecs);
        assert_eq!(ranked[0].codec, "logquant");
        assert_eq!(ranked[i].codec, "none");
    }

    /// Variants: a downlink codec only for `sharded`, whose predicted change shrinks to its
    /// bytes; a round in flight costs the larger of CPU and exchange; each is lossy (it trains
    /// another model than the job's settings), so uncompressed `sharded` at the job's staleness
    /// is the one lossless candidate of `sharded`.
    #[test]
    fn variants_change_the_downlink_of_sharded_only_and_are_lossy() {
        let r = inputs(1e7, 0);
        let small = DownlinkCost {
            name: "logquant".into(),
            change_bytes: 15_000.0,
            change_encode_ms: 0.02,
            change_decode_ms: 0.01,
        };
        let variants = [
            Variant {
                staleness: 0,
                downlink: None,
            },
            Variant {
                staleness: 0,
                downlink: Some(small.clone()),
            },
            Variant {
                staleness: 1,
                downlink: None,
            },
        ];
        let codecs = [codec("none", 80_000.0, 0.1)];
        let both = [ExchangeKind::Sharded, ExchangeKind::Allgather];
        let (ranked, _) = choose_among(&r, &both, &codecs, &variants);
        // sharded: 3 variants; allgather: 2 (no downlink).
        assert_eq!(ranked.len(), 5);
        assert!(ranked
            .iter()
            .all(|c| c.downlink.is_none() || c.strategy == ExchangeKind::Sharded));
        let find = |s: ExchangeKind, st: u64, d: bool| {
            ranked
                .iter()
                .find(|c| c.strategy == s && c.staleness == st && c.downlink.is_some() == d)
                .unwrap()
        };
        let plain = find(ExchangeKind::Sharded, 0, false);
        let down = find(ExchangeKind::Sharded, 0, true);
        let expected = plain.prediction.sent_bytes - 3.0 * (60_000.0 - 15_000.0);
        assert!((down.prediction.sent_bytes - expected).abs() < 1e-6);
        let piped = find(ExchangeKind::Sharded, 1, false);
        let p = plain.prediction;
        assert_eq!(
            piped.prediction.round_ms,
            p.cpu_ms.max(p.round_ms - p.cpu_ms)
        );
        let lossless: Vec<_> = ranked.iter().filter(|c| c.lossless(&r)).collect();
        assert_eq!(lossless.len(), 2, "one per exchange");
        assert!(lossless
            .iter()
            .all(|c| c.staleness == 0 && c.downlink.is_none()));
    }

    #[test]
    fn the_least_time_wins_unless_lossy_and_within_the_margin() {
        let lossless = [false, true, false, true];
        // The least lossy (index 2) is 10% below the least lossless (index 3): it wins.
        assert_eq!(least(&[2.0, 3.0, 1.8, 2.0], &lossless), 2);
        // Within the margin: the lossless one.
        assert_eq!(least(&[2.0, 3.0, 1.81, 2.0], &lossless), 3);
        // A lossless one least: it, the first of equals.
        assert_eq!(least(&[2.0, 1.0, 2.0, 1.0], &lossless), 1);
        // No lossless candidate: the least.
        assert_eq!(least(&[2.0, 1.5], &[false, false]), 1);
    }

    /// The strategies with a round model are those `auto` ranks, in registry order; one
    /// without (`sketch`) is skipped, never predicted.
    #[test]
    fn only_strategies_with_a_round_model_are_ranked() {
        assert_eq!(modelled(), [ExchangeKind::Sharded, ExchangeKind::Allgather]);
        let none = codec("none", 80_000.0, 0.1);
        assert!(predict(&inputs(1e9, 0), ExchangeKind::Sketch, &none).is_none());
        let strategies = [ExchangeKind::Sketch, ExchangeKind::Allgather];
        let (ranked, chosen) = choose(&inputs(1e9, 0), &strategies, &[none]);
        assert_eq!(ranked.len(), 1);
        assert_eq!(ranked[chosen].strategy, ExchangeKind::Allgather);
    }
}
