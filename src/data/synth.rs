//! Deterministic synthetic datasets.
//!
//! * [`ctr`]: a click-through-rate–like set. Feature popularity follows a Zipf law (a few features
//!   in most rows, a long tail), features are binary, a hidden sparse weight vector decides the
//!   click probability and labels are Bernoulli(sigmoid(w*·x)) in {+1, -1}. This is the embedded
//!   default dataset of the quickstart.
//! * [`gspar`]: the synthetic logistic-regression data of the GSpar paper (Wang et al., NeurIPS'18,
//!   §4): dense Gaussian rows multiplied element-wise by a magnitude vector whose entries below
//!   `C2` are shrunk by `C1`, so that most gradient coordinates are tiny (controlled sparsity),
//!   labels `sign(a·w)` with `w ~ N(0, I)`.
//!
//! * [`fields`]: the structure of a real one-hot CTR table: each row takes one value from each
//!   of 14 categorical fields (7 to 40,000 values, laid out smallest field first, values in
//!   popularity order, so low indices are the popular ones, as in a vocabulary-encoded table),
//!   plus two hashed crosses of field pairs; 16 nonzeros per row, ~20% positives.
//! * [`pairs`]: planted pairwise interactions. Each row takes one value from each of a few
//!   equal fields, and a factorization machine of low rank with hidden weights decides the
//!   click probability, its pairwise term dominating: a linear model sees little of it, a
//!   factorization machine can learn it (Rendle, ICDM 2010, eq. 1).
//!
//! Same parameters and seed, same bytes.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal, Zipf};

use super::partition::unit_hash;
use super::Dataset;

/// Parameters of the CTR-like generator.
#[derive(Clone, Debug, PartialEq)]
pub struct CtrParams {
    /// Number of rows.
    pub rows: usize,
    /// Number of features.
    pub dim: u32,
    /// Mean number of distinct active features per row (each row draws its count uniformly in
    /// `[nnz/2, 3nnz/2]`).
    pub nnz: usize,
    /// Zipf exponent of feature popularity.
    pub zipf_exponent: f64,
    /// Fraction of features with a nonzero hidden weight.
    pub weight_density: f64,
    /// Standard deviation of the nonzero hidden weights.
    pub weight_scale: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for CtrParams {
    /// The quickstart's embedded default dataset.
    fn default() -> Self {
        CtrParams {
            rows: 40_000,
            dim: 100_000,
            nnz: 40,
            zipf_exponent: 1.05,
            weight_density: 0.3,
            weight_scale: 0.8,
            seed: 1,
        }
    }
}

/// Generates a CTR-like dataset (see the module docs).
pub fn ctr(p: &CtrParams) -> Dataset {
    assert!(p.dim > 0 && p.nnz > 0, "dim and nnz must be positive");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(p.seed);
    let zipf = Zipf::new(p.dim as f64, p.zipf_exponent).expect("valid Zipf parameters");
    let scramble = Scramble::new(p.dim);
    let mut data = Dataset::new(p.dim);
    let mut keys: Vec<u32> = Vec::with_capacity(2 * p.nnz);
    let mut ones: Vec<f32> = Vec::with_capacity(2 * p.nnz);
    let lo = (p.nnz / 2).max(1);
    let hi = (3 * p.nnz / 2).max(lo);
    for _ in 0..p.rows {
        let k = rng.random_range(lo..=hi);
        // k distinct features: popular ones repeat in a Zipf draw, so draw until k are distinct
        // (bounded: a row of a tiny feature space keeps what it has).
        keys.clear();
        for _ in 0..8 {
            while keys.len() < k {
                let rank = zipf.sample(&mut rng) as u64 - 1; // Zipf samples in [1, dim]
                keys.push(scramble.apply(rank.min(p.dim as u64 - 1)));
            }
            keys.sort_unstable();
            keys.dedup();
            if keys.len() == k {
                break;
            }
        }
        let margin: f64 = keys.iter().map(|&j| hidden_weight(p, j)).sum();
        let prob = 1.0 / (1.0 + (-margin).exp());
        let label = if rng.random::<f64>() < prob {
            1.0
        } else {
            -1.0
        };
        ones.clear();
        ones.resize(keys.len(), 1.0);
        data.push_row(&keys, &ones, label);
    }
    data
}

/// The hidden weight of feature `j`: nonzero with probability `weight_density`, then normal.
fn hidden_weight(p: &CtrParams, j: u32) -> f64 {
    if unit_hash(p.seed ^ 0xA5A5, j as u64) >= p.weight_density {
        return 0.0;
    }
    p.weight_scale * hashed_normal(p.seed ^ 0x1111, p.seed ^ 0x2222, j as u64)
}

/// A standard normal drawn from two hashes of `key` (Box-Muller), so a hidden weight is a
/// function of its key and needs no table.
fn hashed_normal(seed_a: u64, seed_b: u64, key: u64) -> f64 {
    let u1 = unit_hash(seed_a, key).max(1e-12);
    let u2 = unit_hash(seed_b, key);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// A bijection of `[0, dim)` that spreads popular (small) Zipf ranks over the key space, as hashed
/// feature ids are in real CTR data (otherwise a range-sharded parameter server would put every
/// popular key on worker 0).
struct Scramble {
    dim: u64,
    mult: u64,
}

impl Scramble {
    fn new(dim: u32) -> Self {
        let dim = dim as u64;
        let mut mult = 2_654_435_761 % dim.max(1);
        while mult == 0 || gcd(mult, dim) != 1 {
            mult += 1;
            if mult >= dim {
                mult = 1;
                break;
            }
        }
        Scramble { dim, mult }
    }
    fn apply(&self, rank: u64) -> u32 {
        ((rank * self.mult + 12_345) % self.dim) as u32
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Parameters of the GSpar synthetic generator.
#[derive(Clone, Debug, PartialEq)]
pub struct GsparParams {
    /// Number of rows.
    pub rows: usize,
    /// Number of (dense) features.
    pub dim: u32,
    /// Shrink factor for the small magnitudes.
    pub c1: f64,
    /// Magnitudes `<= c2` are shrunk by `c1`.
    pub c2: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for GsparParams {
    fn default() -> Self {
        GsparParams {
            rows: 4_000,
            dim: 512,
            c1: 0.01,
            c2: 0.9,
            seed: 1,
        }
    }
}

/// Generates the GSpar paper's synthetic logistic data (see the module docs).
pub fn gspar(p: &GsparParams) -> Dataset {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(p.seed);
    let d = p.dim as usize;
    let magnitude: Vec<f64> = (0..d)
        .map(|_| {
            let b: f64 = rng.random();
            if b <= p.c2 {
                p.c1 * b
            } else {
                b
            }
        })
        .collect();
    let w: Vec<f64> = (0..d).map(|_| StandardNormal.sample(&mut rng)).collect();
    let keys: Vec<u32> = (0..p.dim).collect();
    let mut vals = vec![0f32; d];
    let mut data = Dataset::new(p.dim);
    for _ in 0..p.rows {
        let mut dot = 0.0;
        for j in 0..d {
            let a: f64 = StandardNormal.sample(&mut rng);
            let x = a * magnitude[j];
            vals[j] = x as f32;
            dot += x * w[j];
        }
        data.push_row(&keys, &vals, if dot >= 0.0 { 1.0 } else { -1.0 });
    }
    data
}

/// Field sizes of [`fields`]: 14 categorical fields, smallest first (88,676 values).
pub const FIELD_SIZES: [u32; 14] = [
    7, 12, 24, 31, 52, 100, 250, 700, 1_500, 3_000, 6_000, 12_000, 25_000, 40_000,
];

/// Pairs of fields crossed by [`fields`] (indices into [`FIELD_SIZES`]), each hashed into
/// [`CROSS_SIZE`] values.
pub const CROSSES: [(usize, usize); 2] = [(2, 9), (5, 12)];

/// Values per hashed cross.
pub const CROSS_SIZE: u32 = 8_192;

/// Parameters of the field-structured CTR generator.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldsParams {
    /// Number of rows.
    pub rows: usize,
    /// Zipf exponent of value popularity within each field.
    pub zipf_exponent: f64,
    /// Standard deviation of the hidden weight of each value.
    pub weight_scale: f64,
    /// Target fraction of positive labels.
    pub positive_rate: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for FieldsParams {
    fn default() -> Self {
        FieldsParams {
            rows: 100_000,
            zipf_exponent: 1.1,
            weight_scale: 0.5,
            positive_rate: 0.2,
            seed: 1,
        }
    }
}

/// The dimension of [`fields`] data.
pub fn fields_dim() -> u32 {
    FIELD_SIZES.iter().sum::<u32>() + CROSSES.len() as u32 * CROSS_SIZE
}

/// Generates a field-structured CTR-like dataset (see the module docs). Labels are
/// Bernoulli(sigmoid(w*·x − b)) with `b` chosen so that the mean click probability is
/// `positive_rate`.
pub fn fields(p: &FieldsParams) -> Dataset {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(p.seed);
    let zipfs: Vec<Zipf<f64>> = FIELD_SIZES
        .iter()
        .map(|&n| Zipf::new(n as f64, p.zipf_exponent).expect("valid Zipf parameters"))
        .collect();
    let mut offsets = Vec::with_capacity(FIELD_SIZES.len());
    let mut next = 0u32;
    for &n in &FIELD_SIZES {
        offsets.push(next);
        next += n;
    }
    let weight =
        |key: u32| p.weight_scale * hashed_normal(p.seed ^ 0x3333, p.seed ^ 0x4444, key as u64);
    let width = FIELD_SIZES.len() + CROSSES.len();
    let mut keys = Vec::with_capacity(p.rows * width);
    let mut margins = Vec::with_capacity(p.rows);
    let mut values = vec![0u32; FIELD_SIZES.len()];
    for _ in 0..p.rows {
        for (f, z) in zipfs.iter().enumerate() {
            values[f] = z.sample(&mut rng) as u32 - 1; // Zipf samples in [1, n]: the rank
            keys.push(offsets[f] + values[f]);
        }
        for (c, &(a, b)) in CROSSES.iter().enumerate() {
            let pair = ((values[a] as u64) << 32) | values[b] as u64;
            let h =
                (crate::data::partition::mix64(p.seed ^ c as u64, pair) % CROSS_SIZE as u64) as u32;
            keys.push(next + c as u32 * CROSS_SIZE + h);
        }
        let row = &keys[keys.len() - width..];
        margins.push(row.iter().map(|&k| weight(k)).sum::<f64>());
    }
    let bias = bias_for_rate(&margins, p.positive_rate);
    let mut data = Dataset::new(fields_dim());
    let ones = vec![1f32; width];
    for (row, m) in keys.chunks_exact_mut(width).zip(&margins) {
        let prob = 1.0 / (1.0 + (bias - m).exp());
        let label = if rng.random::<f64>() < prob {
            1.0
        } else {
            -1.0
        };
        row.sort_unstable();
        data.push_row(row, &ones, label);
    }
    data
}

/// The bias `b` that makes the mean of sigmoid(margin − b) equal `rate` (bisection).
fn bias_for_rate(margins: &[f64], rate: f64) -> f64 {
    let mean_prob = |b: f64| {
        margins
            .iter()
            .map(|m| 1.0 / (1.0 + (b - m).exp()))
            .sum::<f64>()
            / margins.len().max(1) as f64
    };
    let (mut lo, mut hi) = (-50.0, 50.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if mean_prob(mid) > rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Parameters of the planted-interactions generator.
#[derive(Clone, Debug, PartialEq)]
pub struct PairsParams {
    /// Number of rows.
    pub rows: usize,
    /// Number of fields: each row takes one value of each.
    pub fields: u32,
    /// Values per field, drawn uniformly; the dimension is `fields × values`.
    pub values: u32,
    /// Rank of the hidden factors.
    pub rank: usize,
    /// Standard deviation of the margin's pairwise term.
    pub pair_std: f64,
    /// Standard deviation of the margin's linear term.
    pub linear_std: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for PairsParams {
    fn default() -> Self {
        PairsParams {
            rows: 100_000,
            fields: 10,
            values: 1_000,
            rank: 4,
            pair_std: 2.0,
            linear_std: 0.5,
            seed: 1,
        }
    }
}

/// Generates rows with planted pairwise interactions (see the module docs). Value `j` of field
/// `f` is feature `f·values + j`; it has a hidden weight `wᵢ` and hidden factors `vᵢ` (normal,
/// from hashes of the key), and a row's margin is `Σ wᵢ + Σ_{i<j} ⟨vᵢ, vⱼ⟩`, scaled so that the
/// two terms have standard deviations `linear_std` and `pair_std`. Labels are
/// Bernoulli(sigmoid(margin − b)) with `b` giving half positives.
pub fn pairs(p: &PairsParams) -> Dataset {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(p.seed);
    let planted = PlantedPairs::draw(p, &mut rng);
    let margins: Vec<f64> = planted
        .linear
        .iter()
        .zip(&planted.pair)
        .map(|(l, q)| l + q)
        .collect();
    let bias = bias_for_rate(&margins, 0.5);
    let mut data = Dataset::new(p.fields * p.values);
    let ones = vec![1f32; p.fields as usize];
    for (row, m) in planted.keys.chunks_exact(p.fields as usize).zip(&margins) {
        let prob = 1.0 / (1.0 + (bias - m).exp());
        let label = if rng.random::<f64>() < prob {
            1.0
        } else {
            -1.0
        };
        data.push_row(row, &ones, label);
    }
    data
}

/// The rows of [`pairs`] and the two terms of their hidden margins.
struct PlantedPairs {
    keys: Vec<u32>,
    linear: Vec<f64>,
    pair: Vec<f64>,
}

impl PlantedPairs {
    fn draw(p: &PairsParams, rng: &mut Xoshiro256PlusPlus) -> Self {
        assert!(
            p.fields >= 2 && p.values >= 1 && p.rank >= 1,
            "pairs needs 2 fields, 1 value, rank 1"
        );
        let f = p.fields as usize;
        // Var ⟨vᵢ, vⱼ⟩ = rank·s⁴ for independent N(0, s) entries, summed over f(f−1)/2 pairs.
        let pair_count = (f * (f - 1) / 2) as f64;
        let factor_std = (p.pair_std.powi(2) / (pair_count * p.rank as f64)).powf(0.25);
        let weight_std = p.linear_std / (f as f64).sqrt();
        let weight = |key: u64| weight_std * hashed_normal(p.seed ^ 0x5555, p.seed ^ 0x6666, key);
        let factor = |key: u64, r: usize| {
            let salt = (r as u64 + 1) << 40;
            factor_std * hashed_normal(p.seed ^ 0x7777 ^ salt, p.seed ^ 0x8888 ^ salt, key)
        };
        let mut out = PlantedPairs {
            keys: Vec::with_capacity(p.rows * f),
            linear: Vec::with_capacity(p.rows),
            pair: Vec::with_capacity(p.rows),
        };
        let (mut sums, mut squares) = (vec![0f64; p.rank], vec![0f64; p.rank]);
        for _ in 0..p.rows {
            sums.fill(0.0);
            squares.fill(0.0);
            let mut linear = 0.0;
            for field in 0..p.fields {
                let key = field * p.values + rng.random_range(0..p.values);
                out.keys.push(key);
                linear += weight(key as u64);
                for r in 0..p.rank {
                    let v = factor(key as u64, r);
                    sums[r] += v;
                    squares[r] += v * v;
                }
            }
            // Σ_{i<j} ⟨vᵢ, vⱼ⟩ = ½ Σ_r [(Σᵢ v_{i,r})² − Σᵢ v²_{i,r}] (Rendle 2010, Lemma 3.1).
            let pair = sums
                .iter()
                .zip(&squares)
                .map(|(s, q)| s * s - q)
                .sum::<f64>();
            out.linear.push(linear);
            out.pair.push(0.5 * pair);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctr_is_deterministic_sorted_and_skewed() {
        let p = CtrParams {
            rows: 2_000,
            dim: 10_000,
            ..CtrParams::default()
        };
        let a = ctr(&p);
        assert_eq!(a, ctr(&p));
        assert_eq!(a.rows(), 2_000);
        for i in 0..a.rows() {
            let (k, _) = a.row(i);
            assert!(k.windows(2).all(|w| w[0] < w[1]) && k.iter().all(|&j| j < p.dim));
        }
        // Zipf skew: the most popular feature appears in far more rows than the average one.
        let mut count = vec![0usize; p.dim as usize];
        a.indices.iter().for_each(|&j| count[j as usize] += 1);
        let max = *count.iter().max().unwrap();
        let mean = a.nnz() as f64 / p.dim as f64;
        assert!(max as f64 > 50.0 * mean, "max {max} mean {mean}");
        let pos = a.labels.iter().filter(|&&y| y > 0.0).count();
        assert!(
            (400..1600).contains(&pos),
            "labels should be mixed: {pos} positives"
        );
        assert_ne!(
            ctr(&CtrParams {
                seed: 2,
                ..p.clone()
            }),
            a
        );
    }

    #[test]
    fn gspar_data_has_controlled_magnitudes() {
        let p = GsparParams {
            rows: 200,
            dim: 64,
            ..GsparParams::default()
        };
        let a = gspar(&p);
        assert_eq!(a, gspar(&p));
        assert_eq!(a.nnz(), 200 * 64);
        // About 90% of the columns are shrunk by c1 = 0.01.
        let small = (0..64)
            .filter(|&j| (0..200).all(|i| a.values[i * 64 + j].abs() < 0.1))
            .count();
        assert!(small > 40, "{small} of 64 columns should be tiny");
    }

    #[test]
    fn fields_have_one_value_per_field_skew_and_the_positive_rate() {
        let d = fields(&FieldsParams {
            rows: 20_000,
            ..Default::default()
        });
        assert_eq!(d.dim, fields_dim());
        assert_eq!(d.nnz(), 20_000 * 16, "14 fields and 2 crosses per row");
        let positives = (0..d.rows()).filter(|&r| d.labels[r] > 0.0).count() as f64 / 20_000.0;
        assert!(
            (0.18..0.22).contains(&positives),
            "positive rate {positives}"
        );
        // Skew: the first 1% of the key space holds far more than 1% of the nonzeros.
        let low = (0..d.rows())
            .map(|r| {
                d.row(r)
                    .0
                    .iter()
                    .filter(|&&k| k < fields_dim() / 100)
                    .count()
            })
            .sum::<usize>() as f64;
        assert!(
            low / d.nnz() as f64 > 0.3,
            "low keys hold {}",
            low / d.nnz() as f64
        );
        assert_eq!(
            d,
            fields(&FieldsParams {
                rows: 20_000,
                ..Default::default()
            })
        );
    }

    /// The planted pairs decide the labels: the hidden margin ranks them well, its linear term
    /// alone barely. So a linear model cannot do well here and a factorization machine can.
    #[test]
    fn pairs_plant_interactions_a_linear_term_cannot_see() {
        let p = PairsParams {
            rows: 20_000,
            ..Default::default()
        };
        let d = pairs(&p);
        assert_eq!(d, pairs(&p));
        assert_eq!((d.dim, d.nnz()), (10_000, 200_000));
        for r in 0..d.rows() {
            let keys = d.row(r).0;
            let fields: Vec<u32> = keys.iter().map(|k| k / 1_000).collect();
            assert_eq!(fields, (0..10).collect::<Vec<_>>(), "one value per field");
        }
        let positives = d.labels.iter().filter(|&&y| y > 0.0).count();
        assert!((9_000..11_000).contains(&positives), "{positives}");
        // Score the rows by each term of the hidden margin, drawn as `pairs` drew it.
        let planted = PlantedPairs::draw(&p, &mut Xoshiro256PlusPlus::seed_from_u64(p.seed));
        let auc_of = |term: &[f64]| {
            let scores: Vec<(f32, f32)> = term
                .iter()
                .zip(&d.labels)
                .map(|(&t, &y)| (t as f32, y))
                .collect();
            crate::model::metrics::auc(&scores)
        };
        let (lin, pair) = (auc_of(&planted.linear), auc_of(&planted.pair));
        let both: Vec<f64> = planted
            .linear
            .iter()
            .zip(&planted.pair)
            .map(|(l, q)| l + q)
            .collect();
        let all = auc_of(&both);
        assert!(
            all > 0.8 && pair > lin + 0.2 && lin < 0.65,
            "both {all} pairs {pair} linear {lin}"
        );
        assert!(pair > lin + 0.1, "pairs {pair} linear {lin}");
    }
}
