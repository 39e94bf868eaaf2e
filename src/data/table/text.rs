//! Free text as features: words split on every character that is not a letter or a digit,
//! optionally lower-cased, and their n-grams hashed (xxh3, seeded by the job's `hash_seed` and the
//! column's name) into a range of `2^hash_bits` keys that belongs to the column alone, as Spark's
//! `Tokenizer` + `HashingTF` and Vowpal Wabbit's text namespaces do (Weinberger et al., "Feature
//! hashing for large scale multitask learning", 2009).

use super::spec::TextSpec;

/// One text column made ready to encode: where its range starts, its hash seed, and buffers
/// reused from row to row (encoding a row allocates nothing once they have grown).
#[derive(Clone, Debug)]
pub struct TextColumn {
    spec: TextSpec,
    /// First key of the column's range.
    base: u32,
    seed: u64,
    /// The row's words, each followed by one space.
    words: Vec<u8>,
    /// Each word's `(start, end)` in `words`.
    spans: Vec<(u32, u32)>,
}

impl TextColumn {
    /// The column of `spec`, its range starting at key `base`; `hash_seed` is the job's.
    pub fn new(spec: &TextSpec, base: u32, hash_seed: u64) -> TextColumn {
        TextColumn {
            seed: xxhash_rust::xxh3::xxh3_64_with_seed(spec.column.as_bytes(), hash_seed),
            spec: spec.clone(),
            base,
            words: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Number of keys of the column's range.
    pub fn width(spec: &TextSpec) -> u32 {
        1 << spec.hash_bits
    }

    /// Appends the features of `text` to `out`, sorted by key: each n-gram's count (or 1 when
    /// `binary`), scaled to unit length when `normalize`.
    pub fn push(&mut self, text: &str, out: &mut Vec<(u32, f32)>) {
        split_words(text, self.spec.lowercase, &mut self.words, &mut self.spans);
        let start = out.len();
        let mask = (1u64 << self.spec.hash_bits) - 1;
        for n in 1..=self.spec.ngrams as usize {
            for gram in self.spans.windows(n) {
                let bytes = &self.words[gram[0].0 as usize..gram[n - 1].1 as usize];
                let h = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.seed);
                out.push((self.base + (h & mask) as u32, 1.0));
            }
        }
        let features = &mut out[start..];
        features.sort_unstable_by_key(|f| f.0);
        let mut kept = start;
        for i in start..out.len() {
            if kept > start && out[kept - 1].0 == out[i].0 {
                if !self.spec.binary {
                    out[kept - 1].1 += 1.0;
                }
            } else {
                out[kept] = out[i];
                kept += 1;
            }
        }
        out.truncate(kept);
        if self.spec.normalize {
            let norm = out[start..].iter().map(|f| f.1 * f.1).sum::<f32>().sqrt();
            if norm > 0.0 {
                out[start..].iter_mut().for_each(|f| f.1 /= norm);
            }
        }
    }
}

/// Splits `text` into its words (maximal runs of letters and digits), written to `words` each
/// followed by one space, with their spans (the space excluded).
pub fn split_words(text: &str, lowercase: bool, words: &mut Vec<u8>, spans: &mut Vec<(u32, u32)>) {
    words.clear();
    spans.clear();
    let mut start = None;
    let mut end_word = |words: &mut Vec<u8>, start: &mut Option<usize>| {
        if let Some(s) = start.take() {
            spans.push((s as u32, words.len() as u32));
            words.push(b' ');
        }
    };
    for c in text.chars() {
        if !c.is_alphanumeric() {
            end_word(words, &mut start);
            continue;
        }
        start.get_or_insert(words.len());
        if c.is_ascii() {
            let b = c as u8;
            words.push(if lowercase { b.to_ascii_lowercase() } else { b });
        } else if lowercase {
            for l in c.to_lowercase() {
                let mut utf8 = [0u8; 4];
                words.extend_from_slice(l.encode_utf8(&mut utf8).as_bytes());
            }
        } else {
            let mut utf8 = [0u8; 4];
            words.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        }
    }
    end_word(words, &mut start);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, lowercase: bool) -> Vec<String> {
        let (mut buf, mut spans) = (Vec::new(), Vec::new());
        split_words(text, lowercase, &mut buf, &mut spans);
        spans
            .iter()
            .map(|&(a, b)| String::from_utf8(buf[a as usize..b as usize].to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn words_are_runs_of_letters_and_digits() {
        assert_eq!(
            words("Love it!! Fits true-to-size; 5'4\" 120lbs", true),
            ["love", "it", "fits", "true", "to", "size", "5", "4", "120lbs"]
        );
        assert_eq!(words("Ça VA, Ärger", true), ["ça", "va", "ärger"]);
        assert_eq!(words("Ça VA", false), ["Ça", "VA"]);
        assert!(words(" ,.;- ", true).is_empty());
        assert!(words("", true).is_empty());
    }

    fn spec(ngrams: u32, binary: bool, normalize: bool) -> TextSpec {
        TextSpec {
            ngrams,
            binary,
            normalize,
            ..TextSpec::new("review")
        }
    }

    /// The features of `text` as a map from key to value.
    fn features(spec: &TextSpec, base: u32, text: &str) -> Vec<(u32, f32)> {
        let mut out = vec![(0, 9.0)];
        TextColumn::new(spec, base, 7).push(text, &mut out);
        assert_eq!(out[0], (0, 9.0), "features before the column's are kept");
        out.remove(0);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "sorted, unique");
        out
    }

    #[test]
    fn n_grams_are_counted_in_the_columns_own_range() {
        let s = spec(2, false, false);
        let base = 1000;
        let f = features(&s, base, "good, GOOD good dress");
        // Words: good x3, dress; pairs: "good good" x2, "good dress".
        let total: f32 = f.iter().map(|x| x.1).sum();
        assert_eq!(total, 4.0 + 3.0);
        assert!(f.iter().all(|x| (base..base + (1 << 18)).contains(&x.0)));
        assert!(f.iter().any(|x| x.1 == 3.0), "good counted three times");
        // The same text in other case and spacing gives the same features.
        assert_eq!(f, features(&s, base, "Good good;good   Dress!"));
        // Word order matters to pairs, not to words.
        let swapped = features(&s, base, "dress good good good");
        assert_ne!(f, swapped);
        let unigrams = |t| features(&spec(1, false, false), base, t);
        assert_eq!(
            unigrams("good good good dress"),
            unigrams("dress good good good")
        );
        // Another column (another seed) hashes the same words elsewhere.
        let other = TextSpec::new("title");
        let g = features(&other, base, "dress");
        assert_ne!(g, unigrams("dress"));
    }

    #[test]
    fn binary_and_normalized_values() {
        let f = features(&spec(1, true, false), 0, "a a a b");
        assert_eq!(f.iter().map(|x| x.1).collect::<Vec<_>>(), [1.0, 1.0]);
        let f = features(&spec(1, false, true), 0, "a a a a b b b");
        let norm: f32 = f.iter().map(|x| x.1 * x.1).sum();
        assert!((norm - 1.0).abs() < 1e-6);
        let mut v: Vec<f32> = f.iter().map(|x| x.1).collect();
        v.sort_by(f32::total_cmp);
        assert!(
            (v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6,
            "{v:?}"
        );
        assert!(features(&spec(2, false, true), 0, "...").is_empty());
    }
}
