//! Reductions over a message's values, written in independent lanes so that the compiler
//! vectorises them: a single f64 accumulator is bound by the latency of one add per value,
//! eight lanes are not (figures: `docs/results.md`, "Design measurements").

const LANES: usize = 8;

/// `Σ f(v)` in f64, summed in eight lanes and then across them (the grouping, and so the last
/// bits of the result, are fixed for a given length: deterministic).
#[inline]
pub fn sum_f64(values: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v);
        }
    }
    lanes.iter().sum::<f64>() + tail.iter().map(|&v| f(v)).sum::<f64>()
}

/// `Σ |v|` in f64.
#[inline]
pub fn sum_abs(values: &[f32]) -> f64 {
    sum_f64(values, |v| v.abs() as f64)
}

/// The largest `|v|` (0 for no values). Values must be finite: on their bit patterns with the
/// sign cleared, integer order is float order, and an integer maximum vectorises.
#[inline]
pub fn max_abs(values: &[f32]) -> f32 {
    f32::from_bits(
        values
            .iter()
            .map(|v| v.to_bits() & 0x7FFF_FFFF)
            .max()
            .unwrap_or(0),
    )
}

/// Mean and (population) variance in f64, in two passes (the second about the mean, which
/// keeps the variance accurate when the mean is large against the spread).
pub fn mean_and_variance(values: &[f32]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = sum_f64(values, |v| v as f64) / n;
    let var = sum_f64(values, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
    (mean, var)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_match_the_plain_loops() {
        let values: Vec<f32> = (0..1003)
            .map(|i| ((i * 7919 % 201) as f32 - 100.0) * 1e-3)
            .collect();
        let plain_abs: f64 = values.iter().map(|v| v.abs() as f64).sum();
        assert!((sum_abs(&values) - plain_abs).abs() < 1e-12);
        let plain_max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(max_abs(&values), plain_max);
        assert_eq!(max_abs(&[]), 0.0);
        assert_eq!(max_abs(&[-3.0, 2.0]), 3.0);
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / 1003.0;
        let var = values
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            / 1003.0;
        let (m, v) = mean_and_variance(&values);
        assert!(
            (m - mean).abs() < 1e-15 && (v - var).abs() < 1e-15,
            "{m} {v}"
        );
    }
}
