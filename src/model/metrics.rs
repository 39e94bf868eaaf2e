//! Test metrics: loss, accuracy and AUC for two classes, log loss and accuracy for several,
//! RMSE for regression. Each worker evaluates its share of the test rows into an [`EvalPart`];
//! parts merge into an [`EvalSummary`].

use serde::{Deserialize, Serialize};

use super::softmax::argmax;
use super::{Model, ModelLoss, Task};
use crate::data::Dataset;

/// One worker's share of a test evaluation. Two-class scores are binned ([`ScoreBins`]): parts
/// merge by adding counts, and their size is bounded by the bin count, not by the test rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalPart {
    /// Sum of the data loss.
    pub loss_sum: f64,
    /// Rows evaluated.
    pub count: u64,
    /// Correctly classified rows (classification).
    pub correct: u64,
    /// Sum of squared errors (regression).
    pub sq_err: f64,
    /// The rows' scores and classes, for the AUC (two classes only).
    pub scores: ScoreBins,
}

impl EvalPart {
    /// Evaluates `weights` on every row of `data`; two-class scores go into `2^auc_bits` bins
    /// (32: exact).
    pub fn evaluate(
        data: &Dataset,
        weights: &[f32],
        model: &dyn Model,
        loss: &dyn ModelLoss,
        auc_bits: u8,
    ) -> Self {
        let mut eval = PartialEval::default();
        eval.rows(data, 0..data.rows(), weights, model, loss);
        eval.finish(auc_bits)
    }

    /// Adds another part into this one.
    pub fn merge(&mut self, other: &EvalPart) {
        self.loss_sum += other.loss_sum;
        self.count += other.count;
        self.correct += other.correct;
        self.sq_err += other.sq_err;
        self.scores.merge(&other.scores);
    }

    /// The metrics of the merged parts.
    /// With no rows evaluated every metric is absent.
    pub fn summary(&self, loss: &dyn ModelLoss) -> EvalSummary {
        if self.count == 0 {
            return EvalSummary::default();
        }
        let n = self.count as f64;
        let task = loss.task();
        EvalSummary {
            loss: Some(self.loss_sum / n),
            accuracy: (task != Task::Regression).then(|| self.correct as f64 / n),
            auc: (task == Task::Binary).then(|| self.scores.auc()),
            auc_error: (task == Task::Binary).then(|| self.scores.auc_error_bound()),
            rmse: (task == Task::Regression).then(|| (self.sq_err / n).sqrt()),
        }
    }
}

/// An evaluation done a range of rows at a time ([`EvalPart::evaluate`] in steps): the same
/// part, bit for bit, whatever the ranges, as long as they cover the rows in order.
#[derive(Default)]
pub struct PartialEval {
    part: EvalPart,
    scores: Vec<(f32, f32)>,
    margins: Vec<f32>,
    scratch: Vec<f32>,
    /// The model's room ([`Model::forward`]).
    hidden: Vec<f32>,
}

impl PartialEval {
    /// Evaluates `model` of `weights` on the rows `rows` of `data`.
    pub fn rows(
        &mut self,
        data: &Dataset,
        rows: std::ops::Range<usize>,
        weights: &[f32],
        model: &dyn Model,
        loss: &dyn ModelLoss,
    ) {
        let outputs = model.outputs() as usize;
        self.margins.resize(outputs, 0.0);
        self.scratch.resize(outputs, 0.0);
        let (m, part) = (&mut self.margins, &mut self.part);
        for i in rows {
            let (k, v) = data.row(i);
            model.forward(weights, k, v, m, &mut self.hidden);
            let label = data.labels[i];
            part.loss_sum += loss.row(m, label, &mut self.scratch);
            part.count += 1;
            let y = loss.target(label);
            match loss.task() {
                Task::Binary => {
                    part.correct += ((m[0] >= 0.0) == (y > 0.0)) as u64;
                    self.scores.push((m[0], y));
                }
                Task::Multiclass => part.correct += (argmax(m) as f32 == y) as u64,
                Task::Regression => part.sq_err += ((m[0] - y) as f64).powi(2),
            }
        }
    }

    /// The part of the rows evaluated, two-class scores in `2^auc_bits` bins.
    pub fn finish(self, auc_bits: u8) -> EvalPart {
        EvalPart {
            scores: ScoreBins::of(&self.scores, auc_bits),
            ..self.part
        }
    }
}

/// Test metrics of one evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalSummary {
    /// Mean data loss (absent when there were no test rows).
    pub loss: Option<f64>,
    /// Fraction classified correctly (classification).
    pub accuracy: Option<f64>,
    /// Area under the ROC curve (two classes).
    pub auc: Option<f64>,
    /// At most this far from the exact AUC (binned scores; 0 when exact).
    pub auc_error: Option<f64>,
    /// Root mean squared error (regression).
    pub rmse: Option<f64>,
}

/// Exact ROC AUC of `(score, target)` pairs (target > 0 is positive), ties counted half
/// (Mann-Whitney rank statistic). Returns 0.5 when one class is absent.
///
/// A NaN score (a margin of `inf - inf`, from weights or features near `f32::MAX`) ranks
/// below every other score, all NaNs tied; `-0.0` ties with `0.0`.
pub fn auc(scores: &[(f32, f32)]) -> f64 {
    ScoreBins::of(scores, 32).auc()
}

/// A score's place in order: its bits mapped so that unsigned order is `f32::total_cmp`'s
/// order, but for NaN (every NaN is 0, below `-inf`) and `-0.0` (as `0.0`). The leading bits
/// are the sign, the exponent and the mantissa's first bits: a prefix of the key is a bin of
/// scores of one sign and magnitude, as wide relative to the score as the mantissa bits kept.
fn order_key(score: f32) -> u32 {
    if score.is_nan() {
        return 0;
    }
    let bits = (score + 0.0).to_bits(); // -0.0 + 0.0 = 0.0
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// Two-class test scores binned by the leading `bits` bits of their order key ([`order_key`]):
/// `2^bits` bins, each a run of scores of one sign and magnitude (16 bits: 7 mantissa bits, a
/// bin spans under 1% of its scores' value). Only bins holding a score are kept, as
/// `(bin, positives, negatives)` in bin order; parts merge by adding counts (a sorted merge),
/// in any order. With 32 bits every distinct score is its own bin and the AUC is exact.
/// Serialized, each bin is three LEB128 varints (the distance from the previous bin, then the
/// counts): 3 bytes for a bin of one score at 16 bits, 5-7 exact, at most 15.
///
/// The AUC counts a positive and a negative of one bin as a tie (one half), as Spark's
/// `BinaryClassificationMetrics` with `numBins` does for its downsampled curve: only such
/// pairs can differ from the exact AUC, each by at most one half, so the error is at most
/// `Σ_b pos_b · neg_b / (2 · P · N)` ([`ScoreBins::auc_error_bound`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "serde_bytes::ByteBuf", try_from = "serde_bytes::ByteBuf")]
pub struct ScoreBins {
    bits: u8,
    bins: Vec<(u32, u32, u32)>,
}

impl ScoreBins {
    /// The bins of `(score, target)` pairs (target > 0 is positive), `bits` in `1..=32`.
    pub fn of(scores: &[(f32, f32)], bits: u8) -> Self {
        let bits = bits.clamp(1, 32);
        let shift = 32 - bits as u32;
        let mut packed: Vec<u64> = scores
            .iter()
            .map(|&(s, y)| ((order_key(s) >> shift) as u64) << 1 | (y > 0.0) as u64)
            .collect();
        radsort::sort(&mut packed);
        let mut bins: Vec<(u32, u32, u32)> = Vec::new();
        for p in packed {
            let (bin, positive) = ((p >> 1) as u32, p & 1 == 1);
            match bins.last_mut() {
                Some(last) if last.0 == bin => {}
                _ => bins.push((bin, 0, 0)),
            }
            let last = bins.last_mut().expect("pushed above");
            if positive {
                last.1 = last.1.saturating_add(1);
            } else {
                last.2 = last.2.saturating_add(1);
            }
        }
        ScoreBins { bits, bins }
    }

    /// Bins holding a score.
    pub fn len(&self) -> usize {
        self.bins.len()
    }

    /// Whether no score is in.
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }

    /// Adds `other`'s counts (a sorted merge). Parts of different bit counts (every worker of
    /// a job uses the job's) merge at the coarser one.
    pub fn merge(&mut self, other: &ScoreBins) {
        if other.bins.is_empty() {
            return;
        }
        if self.bins.is_empty() {
            *self = other.clone();
            return;
        }
        let bits = self.bits.min(other.bits);
        fn coarse(b: &ScoreBins, bits: u8) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
            let shift = (b.bits - bits) as u32;
            b.bins.iter().map(move |&(k, p, n)| (k >> shift, p, n))
        }
        let (mut a, mut b) = (
            coarse(self, bits).peekable(),
            coarse(other, bits).peekable(),
        );
        let mut merged: Vec<(u32, u32, u32)> = Vec::with_capacity(self.len() + other.len());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if y.0 < x.0 => b.next(),
                (Some(_), _) => a.next(),
                (None, _) => b.next(),
            };
            let Some((k, p, n)) = next else {
                break;
            };
            match merged.last_mut() {
                Some(last) if last.0 == k => {
                    last.1 = last.1.saturating_add(p);
                    last.2 = last.2.saturating_add(n);
                }
                _ => merged.push((k, p, n)),
            }
        }
        drop((a, b));
        *self = ScoreBins { bits, bins: merged };
    }

    fn totals(&self) -> (f64, f64) {
        let pos = self.bins.iter().map(|b| b.1 as f64).sum();
        let neg = self.bins.iter().map(|b| b.2 as f64).sum();
        (pos, neg)
    }

    /// The ROC AUC, a positive and a negative of one bin counted one half; 0.5 when one class
    /// is absent.
    pub fn auc(&self) -> f64 {
        let (pos, neg) = self.totals();
        if pos == 0.0 || neg == 0.0 {
            return 0.5;
        }
        let (mut wins, mut below) = (0.0, 0.0);
        for &(_, p, n) in &self.bins {
            wins += p as f64 * (below + n as f64 / 2.0);
            below += n as f64;
        }
        wins / (pos * neg)
    }

    /// The most [`Self::auc`] can differ from the exact AUC of the same scores: 0 with 32
    /// bits (a bin is one score value, and ties are counted half either way).
    pub fn auc_error_bound(&self) -> f64 {
        let (pos, neg) = self.totals();
        if self.bits >= 32 || pos == 0.0 || neg == 0.0 {
            return 0.0;
        }
        let same_bin: f64 = self.bins.iter().map(|&(_, p, n)| p as f64 * n as f64).sum();
        same_bin / (2.0 * pos * neg)
    }
}

impl From<ScoreBins> for serde_bytes::ByteBuf {
    fn from(b: ScoreBins) -> Self {
        let mut out = Vec::with_capacity(1 + 3 * b.bins.len());
        out.push(b.bits);
        let mut previous = 0;
        for &(bin, p, n) in &b.bins {
            crate::le::put_uleb128(&mut out, bin - previous);
            crate::le::put_uleb128(&mut out, p);
            crate::le::put_uleb128(&mut out, n);
            previous = bin;
        }
        serde_bytes::ByteBuf::from(out)
    }
}

impl TryFrom<serde_bytes::ByteBuf> for ScoreBins {
    type Error = String;

    /// Checks what may have crossed a socket: bits in `1..=32` (or 0 with no bins), bins
    /// increasing and below `2^bits`, every varint whole.
    fn try_from(buf: serde_bytes::ByteBuf) -> Result<Self, String> {
        let bad = |what: &str| format!("score bins: {what}");
        let (&bits, mut rest) = buf.split_first().ok_or_else(|| bad("no bit count"))?;
        if bits > 32 || (bits == 0 && !rest.is_empty()) {
            return Err(bad(&format!("{bits} bits")));
        }
        let top = (1u64 << bits) - 1;
        // At least 3 bytes a bin: the allocation is bounded by what arrived.
        let mut bins = Vec::with_capacity(rest.len() / 3);
        let mut previous: Option<u64> = None;
        while !rest.is_empty() {
            let mut next = || crate::le::get_uleb128(&mut rest).ok_or_else(|| bad("cut short"));
            let (step, p, n) = (next()? as u64, next()?, next()?);
            let bin = previous.map_or(step, |b| b + step);
            if (previous.is_some() && step == 0) || bin > top {
                return Err(bad(&format!("bin {bin} out of order or above {top}")));
            }
            bins.push((bin as u32, p, n));
            previous = Some(bin);
        }
        Ok(ScoreBins { bits, bins })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Loss;

    #[test]
    fn auc_of_known_orderings() {
        assert_eq!(
            auc(&[(0.1, -1.0), (0.2, -1.0), (0.3, 1.0), (0.4, 1.0)]),
            1.0
        );
        assert_eq!(auc(&[(0.4, -1.0), (0.3, 1.0)]), 0.0);
        assert_eq!(auc(&[(0.5, -1.0), (0.5, 1.0)]), 0.5);
        // one inversion out of 2x2 pairs
        assert_eq!(
            auc(&[(0.1, -1.0), (0.3, -1.0), (0.2, 1.0), (0.4, 1.0)]),
            0.75
        );
    }

    /// The Mann-Whitney statistic by its definition: over all (positive, negative) pairs, 1
    /// when the positive scores higher, 1/2 on a tie; a NaN is below every number.
    fn auc_by_pairs(scores: &[(f32, f32)]) -> f64 {
        let low = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
        let nan_last = |(p, n): (f32, f32)| match (p.is_nan(), n.is_nan()) {
            (true, true) => (0.0, 0.0),
            (true, false) => (f32::NEG_INFINITY, f32::INFINITY),
            (false, true) => (f32::INFINITY, f32::NEG_INFINITY),
            _ => (low(p), low(n)),
        };
        let (pos, neg): (Vec<&(f32, f32)>, Vec<_>) = scores.iter().partition(|p| p.1 > 0.0);
        if pos.is_empty() || neg.is_empty() {
            return 0.5;
        }
        let wins: f64 = pos
            .iter()
            .flat_map(|p| neg.iter().map(move |n| (p.0, n.0)))
            .map(nan_last)
            .map(|(p, n)| {
                if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                }
            })
            .sum();
        wins / (pos.len() * neg.len()) as f64
    }

    fn scores_strategy() -> impl proptest::strategy::Strategy<Value = Vec<(f32, f32)>> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(
            (
                proptest::prop_oneof![
                    proptest::sample::select(vec![
                        0.0f32,
                        -0.0,
                        1.0,
                        -1.0,
                        f32::INFINITY,
                        f32::NEG_INFINITY,
                        f32::NAN,
                        -f32::NAN
                    ]),
                    -3.0f32..3.0,
                ],
                proptest::bool::ANY,
            ),
            0..60,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(m, p)| (m, if p { 1.0 } else { -1.0 }))
                .collect()
        })
    }

    proptest::proptest! {
        /// Exact parts (32 bits) of any cut of the rows merge to the exact AUC of the whole,
        /// ties (±0 included), infinities and NaNs included, in either order.
        #[test]
        fn exact_parts_merge_to_the_auc_of_the_whole(scores in scores_strategy(), cut in 0usize..60) {
            let cut = cut.min(scores.len());
            let (a, b) = (ScoreBins::of(&scores[..cut], 32), ScoreBins::of(&scores[cut..], 32));
            let (mut ab, mut ba) = (a.clone(), b.clone());
            ab.merge(&b);
            ba.merge(&a);
            proptest::prop_assert_eq!(&ab, &ba);
            proptest::prop_assert_eq!(&ab, &ScoreBins::of(&scores, 32));
            let expected = auc_by_pairs(&scores);
            proptest::prop_assert!((ab.auc() - expected).abs() < 1e-12);
            proptest::prop_assert_eq!(ab.auc_error_bound(), 0.0);
            proptest::prop_assert!((auc(&scores) - expected).abs() < 1e-12);
        }

        /// Binned at any resolution, the AUC is within its stated bound of the exact one, and
        /// parts of two resolutions merge at the coarser.
        #[test]
        fn binned_auc_is_within_its_bound_of_the_exact_auc(
            scores in scores_strategy(),
            bits in 1u8..=32,
            other_bits in 1u8..=32,
            cut in 0usize..60,
        ) {
            let whole = ScoreBins::of(&scores, bits);
            let exact = auc_by_pairs(&scores);
            proptest::prop_assert!(
                (whole.auc() - exact).abs() <= whole.auc_error_bound() + 1e-12,
                "binned {} exact {} bound {}", whole.auc(), exact, whole.auc_error_bound()
            );
            let cut = cut.min(scores.len());
            let mut merged = ScoreBins::of(&scores[..cut], bits);
            merged.merge(&ScoreBins::of(&scores[cut..], other_bits));
            let coarser = if cut == 0 || cut == scores.len() {
                merged.bits
            } else {
                bits.min(other_bits)
            };
            proptest::prop_assert_eq!(&merged, &ScoreBins::of(&scores, coarser));
        }
    }

    proptest::proptest! {
        /// Bins cross the wire and come back equal; any change of their bytes is an error or
        /// another valid set of bins, never a panic.
        #[test]
        fn bins_round_trip_and_damage_is_an_error(
            scores in scores_strategy(),
            bits in 1u8..=32,
            flip in proptest::num::usize::ANY,
            cut in proptest::num::usize::ANY,
        ) {
            let bins = ScoreBins::of(&scores, bits);
            let bytes = bincode::serialize(&bins).unwrap();
            proptest::prop_assert_eq!(&bincode::deserialize::<ScoreBins>(&bytes).unwrap(), &bins);
            let mut damaged = bytes.clone();
            let i = flip % damaged.len();
            damaged[i] ^= 0x55;
            if let Ok(b) = bincode::deserialize::<ScoreBins>(&damaged) {
                proptest::prop_assert!(b.bins.windows(2).all(|w| w[0].0 < w[1].0));
                let _ = (b.auc(), b.auc_error_bound());
            }
            let _ = bincode::deserialize::<ScoreBins>(&bytes[..cut % bytes.len()]);
        }
    }

    /// A bin of one score costs 3 bytes at 16 bits, and exact bins fewer than the 8 bytes a
    /// `(score, target)` pair took.
    #[test]
    fn bins_are_small_on_the_wire() {
        let scores: Vec<(f32, f32)> = (0..10_000)
            .map(|i| (i as f32 / 1000.0 - 5.0, if i % 3 == 0 { 1.0 } else { -1.0 }))
            .collect();
        let size = |bits| bincode::serialized_size(&ScoreBins::of(&scores, bits)).unwrap();
        let bins16 = ScoreBins::of(&scores, 16).len() as u64;
        assert!(
            size(16) <= 9 + 1 + 3 * bins16 + 8,
            "{} for {bins16} bins",
            size(16)
        );
        assert!(size(32) < 8 * 10_000 * 3 / 4, "{}", size(32));
    }

    /// 16 bits keep scores one bin apart when they differ by more than 1%: far apart scores
    /// give the exact AUC, with an error bound of 0; a positive and a negative in one bin (1.0
    /// and 1.001) tie.
    #[test]
    fn bins_tie_only_close_scores() {
        let apart = [(0.5, -1.0), (0.6, 1.0), (-2.0, -1.0), (3.0, 1.0)];
        let b = ScoreBins::of(&apart, 16);
        assert_eq!((b.auc(), b.auc_error_bound(), b.len()), (1.0, 0.0, 4));
        let close = [(1.0, -1.0), (1.001, 1.0)];
        let b = ScoreBins::of(&close, 16);
        assert_eq!((b.auc(), b.auc_error_bound(), b.len()), (0.5, 0.5, 1));
        assert_eq!(ScoreBins::of(&close, 32).auc(), 1.0);
    }

    /// A NaN score once made the tie loop spin forever (`NaN == NaN` is false).
    #[test]
    fn nan_scores_rank_last_and_end() {
        let s = [(f32::NAN, 1.0), (0.5, -1.0), (f32::NAN, -1.0), (1.0, 1.0)];
        // Positives: NaN (ties the negative NaN: 1/2, below 0.5: 0) and 1.0 (wins both).
        assert_eq!(auc(&s), (0.5 + 0.0 + 1.0 + 1.0) / 4.0);
        assert_eq!(auc(&[(f32::NAN, 1.0), (f32::NAN, -1.0)]), 0.5);
    }

    #[test]
    fn parts_merge_to_the_whole() {
        let mut d = Dataset::new(3);
        d.push_row(&[0], &[1.0], 1.0);
        d.push_row(&[1], &[1.0], -1.0);
        d.push_row(&[2], &[1.0], 1.0);
        let w = [0.5, 0.2, -0.1];
        let whole = EvalPart::evaluate(&d, &w, &crate::model::Linear::new(1), &Loss::Logistic, 32);
        assert_eq!(whole.count, 3);
        assert_eq!(whole.correct, 1); // row 0 right; row 1 (m=0.2 ≥ 0) wrong; row 2 (m<0) wrong
        let s = whole.summary(&Loss::Logistic);
        assert!((s.accuracy.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }
}
