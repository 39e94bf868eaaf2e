//! Model layer: linear models over sparse rows, their losses, the mini-batch sparse gradient and
//! the test metrics. Knows the data layer only.
//!
//! Losses follow the papers (`shared/papers/NOTES.md`): logistic regression, SVM (hinge) and linear
//! regression (squared), each with L2 regularisation `λ/2 ‖w‖²` (λ = 0.01 in the papers); and
//! multiclass softmax regression ([`softmax`]), whose model has one weight per feature and class.

pub mod compact;
pub mod file;
pub mod fm;
pub mod gradient;
pub mod linear;
pub mod metrics;
pub mod mlp;
pub mod softmax;

pub use compact::Compact;
pub use fm::Fm;
pub use gradient::{Accumulator, Batch, GradientWorkspace, SparseGrad};
pub use linear::Linear;
pub use metrics::{auc, EvalPart, EvalSummary, PartialEval, ScoreBins};
pub use mlp::Mlp;
pub use softmax::Softmax;

/// The most factors a factorization machine may have (`model.factors`).
pub const MAX_FACTORS: u32 = 256;

/// The most classes a softmax model may have (`model.classes`).
pub const MAX_CLASSES: u32 = 1 << 16;

/// The most units a network's layer may have (`model.hidden`).
pub const MAX_HIDDEN: u32 = 4096;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A model: its parameter layout, a row's outputs from the weights (forward), and a
/// mini-batch's gradient (forward and backward through the loss's derivatives). The loss
/// ([`ModelLoss`]) reads the outputs; the model does not know which loss it serves.
///
/// Feature `f` owns the `width()` consecutive keys from `f·width()`, the intercept (when the
/// job has one) being the last feature; a network's `dense()` weights follow: the model has
/// `features · width() + dense()` weights.
/// [`Linear`], [`Fm`] and [`Mlp`] are the built-in models; a program plugs in its own through
/// [`crate::dataflow::Training::set_model`] (`jobs/own_model.rs`).
pub trait Model: Send + Sync + std::fmt::Debug {
    /// The model's name.
    fn name(&self) -> &str;
    /// What the model file records to rebuild it: the name, then `:` and its parameters, if
    /// any (`fm:8`).
    fn spec(&self) -> String {
        self.name().to_string()
    }
    /// Outputs per row: the margins the loss reads.
    fn outputs(&self) -> u32;
    /// Weights per input feature.
    fn width(&self) -> u32;
    /// Weights after the features' (`features · width()` of them): a network's dense layers,
    /// which every row reaches. None for a linear model or a factorization machine.
    fn dense(&self) -> u32 {
        0
    }
    /// The initial weight of `key` in a fresh model of `dim` weights, from the job's `seed`:
    /// a function of the seed and the key only, so that every worker starts from the same
    /// model and an owner of some keys (`train.state = "sharded"`) can set just those. The
    /// linear model starts at zero.
    fn initial(&self, seed: u64, dim: u32, key: u32) -> f32 {
        let _ = (seed, dim, key);
        0.0
    }
    /// Sets the initial weights of a fresh model (all zero before): [`Model::initial`] at
    /// every key. Zeros are not written, so that a model's untouched pages stay unallocated.
    fn init(&self, seed: u64, weights: &mut [f32]) {
        let dim = weights.len() as u32;
        for (k, w) in weights.iter_mut().enumerate() {
            let v = self.initial(seed, dim, k as u32);
            if v != 0.0 {
                *w = v;
            }
        }
    }
    /// The same model for rows whose features are renumbered (a batch's features, in order,
    /// as `0..n`: [`Compact`]), the intercept now being feature `intercept`; `None` when the
    /// model reads no feature number (the default: the built-in linear model and the network).
    fn renumbered(&self, intercept: Option<u32>) -> Option<ModelFn> {
        let _ = intercept;
        None
    }
    /// Row `(keys, vals)`'s outputs under `weights`, into `outputs` (`outputs()` of them);
    /// `scratch` is room the model may use, reused from row to row.
    fn forward(
        &self,
        weights: &[f32],
        keys: &[u32],
        vals: &[f32],
        outputs: &mut [f32],
        scratch: &mut Vec<f32>,
    );
    /// Adds `batch.scale` times the gradient of the loss over the batch's rows, with respect to
    /// every weight the rows reach, into `sums` ([`Accumulator::add`]); returns the sum of the
    /// rows' losses (before any update). Batched, so that a model's loop runs without a call
    /// per row.
    fn accumulate(&self, batch: &Batch, sums: &mut Accumulator) -> f64;
}

/// A standard normal number for `(seed, key)`: Box-Muller on two uniforms from a SplitMix64
/// hash, so that every worker draws the same value for a key without sharing a generator.
pub(crate) fn seeded_normal(seed: u64, key: u64) -> f32 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(seed ^ mix(key));
    let b = mix(a);
    let u1 = ((a >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // in (0, 1]
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// A model as a plan holds it: shared by every worker's operators, compared by name, outputs
/// and width.
#[derive(Clone, Debug)]
pub struct ModelFn(pub Arc<dyn Model>);

impl ModelFn {
    /// Wraps a model.
    pub fn new(model: impl Model + 'static) -> ModelFn {
        ModelFn(Arc::new(model))
    }
}

impl std::ops::Deref for ModelFn {
    type Target = dyn Model;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// What an added model is built from (besides its own code): the job's outputs per row (the
/// loss's margins: `model.classes` for softmax, 1 otherwise) and `model.init_std`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelArgs {
    /// Outputs per row.
    pub outputs: u32,
    /// Standard deviation of random initial weights, for a model that has them.
    pub init_std: f32,
}

/// Builds an added model.
pub type BuildModel = dyn Fn(&ModelArgs) -> ModelFn + Send + Sync;

/// The built-in models' `model.kind` names.
pub const MODEL_NAMES: &[&str] = &["linear", "fm", "mlp"];

/// Every model by `model.kind` name: the built-in ones (which the job builds from its `[model]`
/// fields) and those added by [`register`].
pub static MODELS: crate::named::Registry<BuildModel> =
    crate::named::Registry::new("model", MODEL_NAMES);

/// Adds a model under `name` (the [`Model::name`] of what `make` builds): `model.kind`, `bench`
/// suites and `predict` then accept it. Call it at the top of `main`, before
/// [`crate::cli::main_with`] reads the job.
///
/// # Panics
/// If `name` is taken (built in or added before).
pub fn register<M: Model + 'static>(
    name: &str,
    make: impl Fn(&ModelArgs) -> M + Send + Sync + 'static,
) {
    MODELS.add(
        name,
        Arc::new(move |args: &ModelArgs| ModelFn::new(make(args))),
    );
}

impl PartialEq for ModelFn {
    fn eq(&self, other: &ModelFn) -> bool {
        (self.name(), self.outputs(), self.width(), self.dense())
            == (other.name(), other.outputs(), other.width(), other.dense())
    }
}

/// What a model predicts, which decides its test metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Two classes (labels above 0 are positive): loss, accuracy and AUC.
    Binary,
    /// `K` classes (labels `0..K`): log loss and accuracy.
    Multiclass,
    /// A real target: loss and RMSE.
    Regression,
}

/// The loss of a linear model's outputs for one row: everything the mini-batch gradient, the
/// test metrics and predictions need. A model with `K = outputs()` outputs has `K` weights per
/// feature, feature `f`'s weight for output `c` at key `f·K + c`, and row `x` has the margins
/// `m_c = Σ_f w[f·K + c] x_f`.
///
/// Every [`MarginLoss`] (one output) is one; [`Softmax`] is the multiclass one. A program plugs
/// in its own through [`crate::dataflow::Training::set_loss`] without copying an operator.
pub trait ModelLoss: Send + Sync + std::fmt::Debug {
    /// The name the model file records.
    fn name(&self) -> &str;
    /// Outputs (margins) per row: `K` weights per feature.
    fn outputs(&self) -> u32;
    /// What the model predicts (the test metrics follow from it).
    fn task(&self) -> Task;
    /// The target the metrics compare with, of a stored label (±1 for [`Task::Binary`], the
    /// class for [`Task::Multiclass`], the value for [`Task::Regression`]).
    fn target(&self, label: f32) -> f32;
    /// The loss of a row with `margins` (`outputs()` of them) and stored `label`, writing the
    /// loss's derivative with respect to each margin into `derivatives`. Never panics: a label
    /// the loss cannot read gives a NaN loss ([`ModelLoss::check_label`] keeps those out).
    fn row(&self, margins: &[f32], label: f32, derivatives: &mut [f32]) -> f64;
    /// What a prediction reports for a row's margins (for one output, the margin or a
    /// probability; for classes, the most likely class).
    fn predict(&self, margins: &[f32]) -> f32;
    /// Why the loss cannot train on `label`, if it cannot (a class outside `0..K`).
    fn check_label(&self, label: f32) -> Result<(), String> {
        let _ = label;
        Ok(())
    }
}

impl<L: MarginLoss + ?Sized> ModelLoss for L {
    fn name(&self) -> &str {
        MarginLoss::name(self)
    }

    fn outputs(&self) -> u32 {
        1
    }

    fn task(&self) -> Task {
        if self.is_classification() {
            Task::Binary
        } else {
            Task::Regression
        }
    }

    #[inline]
    fn target(&self, label: f32) -> f32 {
        MarginLoss::target(self, label)
    }

    #[inline]
    fn row(&self, margins: &[f32], label: f32, derivatives: &mut [f32]) -> f64 {
        let (m, y) = (margins[0], MarginLoss::target(self, label));
        let (value, derivative) = self.value_and_derivative(m, y);
        derivatives[0] = derivative;
        value
    }

    fn predict(&self, margins: &[f32]) -> f32 {
        self.prediction(margins[0])
    }
}

/// A loss of a linear model's margin `m = w·x` against a target `y` (one output). The built-in
/// [`Loss`] implements it; a program's own (`jobs/huber.rs`) needs only these few methods.
pub trait MarginLoss: Send + Sync + std::fmt::Debug {
    /// The name the model file records.
    fn name(&self) -> &str;
    /// Whether labels are classes (mapped to ±1: positive labels are +1, the rest -1); the
    /// metrics are then accuracy and AUC, otherwise RMSE.
    fn is_classification(&self) -> bool;
    /// Loss value at margin `m` for target `y`.
    fn value(&self, m: f32, y: f32) -> f64;
    /// Derivative of the loss with respect to the margin.
    fn derivative(&self, m: f32, y: f32) -> f32;
    /// [`MarginLoss::value`] and [`MarginLoss::derivative`] at once, as training asks for
    /// them: a loss whose two share work (the logistic loss, its exponential) overrides it.
    #[inline]
    fn value_and_derivative(&self, m: f32, y: f32) -> (f64, f32) {
        (self.value(m, y), self.derivative(m, y))
    }
    /// The target the loss sees for a stored label.
    #[inline]
    fn target(&self, label: f32) -> f32 {
        match (self.is_classification(), label > 0.0) {
            (true, true) => 1.0,
            (true, false) => -1.0,
            (false, _) => label,
        }
    }
    /// What a prediction reports for margin `m` (the margin itself unless overridden).
    fn prediction(&self, m: f32) -> f32 {
        m
    }
}

/// A loss as a plan holds it: shared by every worker's operators, compared by name and outputs.
#[derive(Clone, Debug)]
pub struct LossFn(pub Arc<dyn ModelLoss>);

impl LossFn {
    /// Wraps a loss.
    pub fn new(loss: impl ModelLoss + 'static) -> LossFn {
        LossFn(Arc::new(loss))
    }
}

impl std::ops::Deref for LossFn {
    type Target = dyn ModelLoss;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for LossFn {
    fn eq(&self, other: &LossFn) -> bool {
        self.name() == other.name() && self.outputs() == other.outputs()
    }
}

impl From<Loss> for LossFn {
    fn from(loss: Loss) -> LossFn {
        LossFn::new(loss)
    }
}

/// The loss of a linear model `m = w·x` against a label `y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Logistic regression: `log(1 + exp(-y m))`, `y ∈ {-1, +1}`.
    Logistic,
    /// Linear SVM: `max(0, 1 - y m)`, `y ∈ {-1, +1}`.
    Hinge,
    /// Linear regression: `(m - y)² / 2`, real `y`.
    Squared,
}

/// A built-in loss as a job names it (`model.loss`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossName {
    /// [`Loss::Logistic`].
    Logistic,
    /// [`Loss::Hinge`].
    Hinge,
    /// [`Loss::Squared`].
    Squared,
    /// [`Softmax`] over `model.classes` classes.
    Softmax,
}

impl LossName {
    /// Every built-in loss.
    pub const ALL: [LossName; 4] = [
        LossName::Logistic,
        LossName::Hinge,
        LossName::Squared,
        LossName::Softmax,
    ];

    /// The name job and model files write.
    pub fn as_str(self) -> &'static str {
        match self {
            LossName::Logistic => "logistic",
            LossName::Hinge => "hinge",
            LossName::Squared => "squared",
            LossName::Softmax => "softmax",
        }
    }

    /// The built-in loss named `name`.
    pub fn from_name(name: &str) -> Option<LossName> {
        LossName::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The loss, for `classes` classes (softmax; the others have one output and ignore it).
    pub fn build(self, classes: u32) -> LossFn {
        match self {
            LossName::Logistic => LossFn::new(Loss::Logistic),
            LossName::Hinge => LossFn::new(Loss::Hinge),
            LossName::Squared => LossFn::new(Loss::Squared),
            LossName::Softmax => LossFn::new(Softmax::new(classes)),
        }
    }
}

impl MarginLoss for Loss {
    fn name(&self) -> &str {
        match self {
            Loss::Logistic => "logistic",
            Loss::Hinge => "hinge",
            Loss::Squared => "squared",
        }
    }

    fn is_classification(&self) -> bool {
        !matches!(self, Loss::Squared)
    }

    #[inline]
    fn value(&self, m: f32, y: f32) -> f64 {
        let (m, y) = (m as f64, y as f64);
        match self {
            Loss::Logistic => {
                let z = -y * m;
                // log(1 + e^z) computed stably.
                if z > 0.0 {
                    z + (-z).exp().ln_1p()
                } else {
                    z.exp().ln_1p()
                }
            }
            Loss::Hinge => (1.0 - y * m).max(0.0),
            Loss::Squared => 0.5 * (m - y) * (m - y),
        }
    }

    /// For the logistic loss, the value from the derivative's exponential `e = exp(y·m)`:
    /// `log(1 + exp(-y·m)) = log(1 + s) + max(-y·m, 0)` where `s = exp(-|y·m|)` is `e` or
    /// `1/e`, chosen without a branch (the margin's sign is a coin toss), in `f32`. The value
    /// is only reported, summed in `f64`, and is within 1e-6 of [`MarginLoss::value`]'s
    /// (relative above 1). An `f64` `exp` and `log1p` per row were 16% of a two-worker run's
    /// samples, and glibc's `log1pf` as much again; `logf` of `1 + s` loses only bits of `s`
    /// below 6e-8, far below what the loss is reported to.
    #[inline]
    fn value_and_derivative(&self, m: f32, y: f32) -> (f64, f32) {
        match self {
            Loss::Logistic => {
                let ym = y * m;
                let e = ym.exp();
                let s = if ym <= 0.0 { e } else { e.recip() };
                let value = (1.0 + s).ln() + (-ym).max(0.0);
                (value as f64, -y / (1.0 + e))
            }
            _ => (self.value(m, y), self.derivative(m, y)),
        }
    }

    #[inline]
    fn derivative(&self, m: f32, y: f32) -> f32 {
        match self {
            Loss::Logistic => -y / (1.0 + (y * m).exp()),
            Loss::Hinge => {
                if y * m < 1.0 {
                    -y
                } else {
                    0.0
                }
            }
            Loss::Squared => m - y,
        }
    }

    /// The probability of the positive class for logistic regression, the margin otherwise.
    fn prediction(&self, m: f32) -> f32 {
        match self {
            Loss::Logistic => 1.0 / (1.0 + (-m).exp()),
            _ => m,
        }
    }
}

/// The margins of a sparse row under a model of `margins.len()` outputs (keys `f·K + c`):
/// `margins[c] = Σ w[k·K + c] v`.
#[inline]
pub fn margins(weights: &[f32], keys: &[u32], vals: &[f32], margins: &mut [f32]) {
    let outputs = margins.len();
    if outputs == 1 {
        margins[0] = margin(weights, keys, vals);
        return;
    }
    margins.fill(0.0);
    for (&k, &v) in keys.iter().zip(vals) {
        let base = k as usize * outputs;
        for (m, &w) in margins.iter_mut().zip(&weights[base..base + outputs]) {
            *m += w * v;
        }
    }
}

/// `w · x` for a sparse row.
#[inline]
pub fn margin(weights: &[f32], keys: &[u32], vals: &[f32]) -> f32 {
    keys.iter()
        .zip(vals)
        .map(|(&k, &v)| weights[k as usize] * v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_and_derivative_at_once_agree_with_each_alone() {
        let margins = (-2000..=2000).map(|i| i as f32 * 0.01);
        let extremes = [
            -1e30f32, -1000.0, -88.0, -1e-30, 0.0, 1e-30, 88.0, 89.0, 1000.0, 1e30,
        ];
        for loss in [Loss::Logistic, Loss::Hinge, Loss::Squared] {
            for y in [1.0f32, -1.0, 0.7] {
                for m in margins.clone().chain(extremes) {
                    let (value, derivative) = loss.value_and_derivative(m, y);
                    let alone = loss.value(m, y);
                    assert_eq!(derivative.to_bits(), loss.derivative(m, y).to_bits());
                    assert!(
                        (value - alone).abs() <= 1e-6 * alone.max(1.0),
                        "{loss:?} y={y} m={m}: {value} vs {alone}"
                    );
                }
            }
        }
    }

    #[test]
    fn derivatives_match_finite_differences() {
        for loss in [Loss::Logistic, Loss::Hinge, Loss::Squared] {
            for &y in &[1.0f32, -1.0, 0.7] {
                let y = if loss.is_classification() {
                    MarginLoss::target(&loss, y)
                } else {
                    y
                };
                for &m in &[-3.0f32, -0.4, 0.3, 2.5] {
                    if loss == Loss::Hinge && (y * m - 1.0).abs() < 1e-3 {
                        continue; // the kink
                    }
                    let h = 1e-3f64;
                    let numeric = (loss.value((m as f64 + h) as f32, y)
                        - loss.value((m as f64 - h) as f32, y))
                        / (2.0 * h);
                    let analytic = loss.derivative(m, y) as f64;
                    assert!(
                        (numeric - analytic).abs() < 2e-3,
                        "{loss:?} y={y} m={m}: {numeric} vs {analytic}"
                    );
                }
            }
        }
    }
}
