//! The feature map: how a table's row becomes a sparse feature vector, given the statistics of
//! the training rows (vocabularies, numeric moments and bucket edges).
//!
//! Layout without hashing: one key per scalar numeric column, then per discrete slot its
//! vocabulary in sorted order, preceded by its "other" key when `min_count > 1`. With
//! `hash_bits = b`, every feature's key is `xxh3(slot, 0x1f, token; hash_seed) mod 2^b`
//! (Weinberger et al., "Feature hashing for large scale multitask learning"), and colliding
//! features add up.

use serde::{Deserialize, Serialize};

use super::spec::{DatePart, Slot, SlotSource, TableSpec, Transform};

/// Statistics of one numeric column over the training rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NumericStats {
    /// Rows with a value.
    pub count: u64,
    /// Mean of the values.
    pub mean: f64,
    /// Standard deviation (population); 1 when the column is constant.
    pub std: f64,
    /// Upper edges of the quantile buckets but the last (`bucket` only): a value `x` is in
    /// bucket `edges.partition_point(|e| *e < x)`.
    pub edges: Vec<f64>,
}

/// How rows become features: the spec and what the training rows taught it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FeatureMap {
    /// The table spec.
    pub spec: TableSpec,
    /// Per numeric spec (in order), its statistics.
    pub numeric: Vec<NumericStats>,
    /// Per discrete slot (in layout order), its sorted vocabulary (empty with hashing).
    pub vocabulary: Vec<Vec<String>>,
    /// Number of features (the intercept not included).
    pub dim: u32,
}

/// One row's values by column name, as the encoder reads them.
pub trait RowValues {
    /// The value of `column`, or `None` when it is missing.
    fn value(&self, column: &str) -> Option<&str>;
}

/// A value the encoder could not use, with its column.
#[derive(Clone, Debug, PartialEq)]
pub struct BadValue {
    /// The column.
    pub column: String,
    /// What is wrong.
    pub message: String,
}

/// Parses a number; `column` names it in the error.
pub fn number(column: &str, s: &str) -> Result<f64, BadValue> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(BadValue {
            column: column.into(),
            message: format!("'{s}' is not a finite number"),
        }),
    }
}

/// The number a scalar or bucketised numeric spec is computed from (`log1p` applied).
pub fn numeric_input(column: &str, t: Transform, s: &str) -> Result<f64, BadValue> {
    let x = number(column, s)?;
    if t == Transform::Log1p {
        if x <= -1.0 {
            return Err(BadValue {
                column: column.into(),
                message: format!("log1p needs a value above -1, got {x}"),
            });
        }
        return Ok(x.ln_1p());
    }
    Ok(x)
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS][Z]]` and returns the part.
pub fn date_part(column: &str, s: &str, part: DatePart) -> Result<u32, BadValue> {
    let bad = || BadValue {
        column: column.into(),
        message: format!("'{s}' is not a date (YYYY-MM-DD, optionally THH:MM[:SS])"),
    };
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Result<u32, BadValue> {
        let t = b.get(r).ok_or_else(bad)?;
        if !t.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(t.iter().fold(0, |a, d| a * 10 + (d - b'0') as u32))
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let days_in_month = [
        31,
        28 + leap(y) as u32,
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month[m as usize - 1] {
        return Err(bad());
    }
    let hour = if b.len() > 10 {
        if !(b[10] == b'T' || b[10] == b' ') || b.len() < 16 || b[13] != b':' {
            return Err(bad());
        }
        let (h, min) = (digits(11..13)?, digits(14..16)?);
        if h > 23 || min > 59 {
            return Err(bad());
        }
        h
    } else {
        0
    };
    Ok(match part {
        DatePart::Hour => hour,
        DatePart::Month => m,
        DatePart::Day => d,
        DatePart::Dow => ((days_from_civil(y as i64, m, d) + 3).rem_euclid(7)) as u32,
    })
}

fn leap(y: u32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days since 1970-01-01 (a Thursday) of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The separator of a cross's component tokens.
const CROSS: char = '\u{1f}';

/// The tokens of a row's discrete slots (`None` where a value is missing), in layout order;
/// `numeric` gives the bucket edges.
pub fn tokens(
    slots: &[Slot],
    spec: &TableSpec,
    numeric: &[NumericStats],
    row: &impl RowValues,
) -> Result<Vec<Option<String>>, BadValue> {
    let mut out: Vec<Option<String>> = Vec::with_capacity(slots.len());
    for slot in slots {
        let t = match &slot.source {
            SlotSource::Column(c) => row.value(c).map(str::to_string),
            SlotSource::Part(c, p) => match row.value(c) {
                Some(v) => Some(date_part(c, v, *p)?.to_string()),
                None => None,
            },
            SlotSource::Bucket(i) => {
                let n = &spec.features.numeric[*i];
                match row.value(&n.column) {
                    Some(v) => {
                        let x = numeric_input(&n.column, n.transform, v)?;
                        let edges = &numeric[*i].edges;
                        Some(edges.partition_point(|e| *e < x).to_string())
                    }
                    None => None,
                }
            }
            SlotSource::Cross(parts) => {
                let mut s = String::new();
                let mut all = true;
                for (k, &p) in parts.iter().enumerate() {
                    match &out[p] {
                        Some(t) => {
                            if k > 0 {
                                s.push(CROSS);
                            }
                            s.push_str(t);
                        }
                        None => all = false,
                    }
                }
                all.then_some(s)
            }
        };
        out.push(t);
    }
    Ok(out)
}

impl FeatureMap {
    /// Builds the layout from the statistics; `vocabulary` is per slot, sorted.
    pub fn new(
        spec: TableSpec,
        numeric: Vec<NumericStats>,
        vocabulary: Vec<Vec<String>>,
    ) -> FeatureMap {
        let dim = match spec.features.hash_bits {
            Some(b) => 1u32 << b,
            None => {
                let other = (spec.features.min_count > 1) as usize;
                let scalars = spec.scalars().count();
                (scalars + vocabulary.iter().map(|v| v.len() + other).sum::<usize>()) as u32
            }
        };
        FeatureMap {
            spec,
            numeric,
            vocabulary,
            dim,
        }
    }

    fn hashed(&self, slot: &str, token: &str) -> u32 {
        let bits = self.spec.features.hash_bits.unwrap_or(31);
        let mut h = xxhash_rust::xxh3::Xxh3::with_seed(self.spec.features.hash_seed);
        h.update(slot.as_bytes());
        h.update(&[0x1f]);
        h.update(token.as_bytes());
        (h.digest() & ((1u64 << bits) - 1)) as u32
    }

    /// Encodes a row into sorted `(key, value)` features (colliding hashed features summed).
    /// Returns the number of values not in the vocabulary that were ignored (`min_count` 1) or
    /// folded into their slot's "other" feature.
    pub fn encode(
        &self,
        slots: &[Slot],
        row: &impl RowValues,
        out: &mut Vec<(u32, f32)>,
    ) -> Result<u64, BadValue> {
        out.clear();
        let hashing = self.spec.features.hash_bits.is_some();
        let mut unknown = 0;
        let mut key = 0u32;
        for (i, n) in self.spec.scalars() {
            if let Some(v) = row.value(&n.column) {
                let mut x = numeric_input(&n.column, n.transform, v)?;
                if n.transform == Transform::Standardize {
                    let s = &self.numeric[i];
                    x = (x - s.mean) / s.std;
                }
                let k = if hashing {
                    self.hashed(&n.column, "")
                } else {
                    key
                };
                out.push((k, x as f32));
            }
            key += 1;
        }
        let other = self.spec.features.min_count > 1;
        let tokens = tokens(slots, &self.spec, &self.numeric, row)?;
        for (s, t) in tokens.iter().enumerate() {
            let base = key;
            if !hashing {
                key += (self.vocabulary[s].len() + other as usize) as u32;
            }
            let Some(t) = t else { continue };
            if hashing {
                out.push((self.hashed(&slots[s].name, t), 1.0));
                continue;
            }
            let vocab = &self.vocabulary[s];
            match vocab.binary_search_by(|v| v.as_str().cmp(t)) {
                Ok(at) => out.push((base + other as u32 + at as u32, 1.0)),
                Err(_) => {
                    unknown += 1;
                    if other {
                        out.push((base, 1.0));
                    }
                }
            }
        }
        out.sort_unstable_by_key(|f| f.0);
        out.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        Ok(unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::table::spec::{FeatureSpec, NumericSpec};

    struct Row(Vec<(&'static str, &'static str)>);

    impl RowValues for Row {
        fn value(&self, column: &str) -> Option<&str> {
            self.0.iter().find(|(c, _)| *c == column).map(|(_, v)| *v)
        }
    }

    fn spec(min_count: u64, hash_bits: Option<u32>) -> TableSpec {
        TableSpec {
            features: FeatureSpec {
                categorical: vec!["a".into(), "b".into()],
                numeric: vec![NumericSpec {
                    column: "x".into(),
                    transform: Transform::Standardize,
                    buckets: 10,
                }],
                crosses: vec![vec!["a".into(), "b".into()]],
                min_count,
                hash_bits,
                ..FeatureSpec::default()
            },
            ..TableSpec::default()
        }
    }

    #[test]
    fn vocabulary_layout_folds_unknown_values_into_other_or_ignores_them() {
        let stats = vec![NumericStats {
            count: 4,
            mean: 2.0,
            std: 4.0,
            edges: vec![],
        }];
        let vocab = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let vocabulary = vec![vocab(&["p", "q"]), vocab(&["u"]), vocab(&["p\u{1f}u"])];
        let row = Row(vec![("a", "q"), ("b", "u"), ("x", "10")]);
        let unseen = Row(vec![("a", "zz"), ("b", "u")]);
        let mut out = Vec::new();

        // min_count 2: key 0 is x; then a: other 1, p 2, q 3; b: other 4, u 5; a*b: other 6,
        // p*u 7.
        let s = spec(2, None);
        let slots = s.slots().unwrap();
        let map = FeatureMap::new(s, stats.clone(), vocabulary.clone());
        assert_eq!(map.dim, 8);
        assert_eq!(map.encode(&slots, &row, &mut out), Ok(1)); // q*u is not in a*b's vocabulary
        assert_eq!(out, vec![(0, 2.0), (3, 1.0), (5, 1.0), (6, 1.0)]);
        assert_eq!(map.encode(&slots, &unseen, &mut out), Ok(2));
        assert_eq!(out, vec![(1, 1.0), (5, 1.0), (6, 1.0)]);

        // min_count 1: no "other" keys; unknown values are ignored and counted.
        let s = spec(1, None);
        let slots = s.slots().unwrap();
        let map = FeatureMap::new(s, stats.clone(), vocabulary);
        assert_eq!(map.dim, 5);
        assert_eq!(map.encode(&slots, &unseen, &mut out), Ok(2));
        assert_eq!(out, vec![(3, 1.0)]);

        // Hashing: keys below 2^bits, sorted, colliding features summed (1 bit: 2 keys).
        let s = spec(1, Some(1));
        let slots = s.slots().unwrap();
        let map = FeatureMap::new(s, stats, vec![vec![]; 3]);
        assert_eq!(map.dim, 2);
        assert_eq!(map.encode(&slots, &row, &mut out), Ok(0));
        assert!(out.len() <= 2 && out.windows(2).all(|w| w[0].0 < w[1].0));
        let total: f32 = out.iter().map(|f| f.1).sum();
        assert_eq!(
            total,
            2.0 + 3.0,
            "x standardised (2) and three one-hot features"
        );
    }

    #[test]
    fn date_parts_follow_the_calendar() {
        let p = |s: &str, part| date_part("d", s, part);
        assert_eq!(p("1970-01-01", DatePart::Dow), Ok(3)); // a Thursday (0 = Monday)
        assert_eq!(p("2013-01-01T05:15", DatePart::Dow), Ok(1)); // a Tuesday
        assert_eq!(p("2024-02-29 23:59:10", DatePart::Hour), Ok(23));
        assert_eq!(p("2000-03-01", DatePart::Dow), Ok(2)); // a Wednesday
        assert_eq!(p("2013-12-31T07:00Z", DatePart::Month), Ok(12));
        for bad in [
            "2013-02-29",
            "2013-13-01",
            "2013-1-01",
            "2013-01-01T24:00",
            "2013-01-01X",
            "yesterday",
            "",
        ] {
            assert!(p(bad, DatePart::Day).is_err(), "{bad}");
        }
    }
}
