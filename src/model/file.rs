//! The model file format (text, one line per nonzero weight):
//!
//! ```text
//! # gradflow model v1
//! loss logistic
//! dim 100000
//! <key> <weight>        (0-based key, shortest round-trip decimal; zero weights omitted)
//! ...
//! ```

use std::fmt::Write as _;
use std::path::Path;

use super::Loss;

/// A trained linear model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelFile {
    /// The loss it was trained with (decides how predictions are read).
    pub loss: Loss,
    /// Dense weights.
    pub weights: Vec<f32>,
}

const MAGIC: &str = "# gradflow model v1";

impl ModelFile {
    /// Writes the model to `path`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut s = String::new();
        let loss = match self.loss {
            Loss::Logistic => "logistic",
            Loss::Hinge => "hinge",
            Loss::Squared => "squared",
        };
        let _ = writeln!(s, "{MAGIC}\nloss {loss}\ndim {}", self.weights.len());
        for (k, w) in self.weights.iter().enumerate().filter(|(_, w)| **w != 0.0) {
            let _ = writeln!(s, "{k} {w}");
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, s)
    }

    /// Reads a model file; errors name the file and line.
    pub fn load(path: &Path) -> Result<ModelFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let err = |line: usize, m: &str| format!("{}:{line}: {m}", path.display());
        let mut lines = text.lines().enumerate();
        if lines.next().map(|(_, l)| l.trim()) != Some(MAGIC) {
            return Err(err(
                1,
                "not a gradflow model file (expected '# gradflow model v1')",
            ));
        }
        let loss = match lines.next().map(|(_, l)| l.trim()) {
            Some("loss logistic") => Loss::Logistic,
            Some("loss hinge") => Loss::Hinge,
            Some("loss squared") => Loss::Squared,
            _ => return Err(err(2, "expected 'loss logistic|hinge|squared'")),
        };
        let dim: usize = lines
            .next()
            .and_then(|(_, l)| l.trim().strip_prefix("dim "))
            .and_then(|d| d.trim().parse().ok())
            .ok_or_else(|| err(3, "expected 'dim N'"))?;
        let mut weights = vec![0f32; dim];
        for (i, line) in lines {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let (k, w) = line
                .split_once(' ')
                .ok_or_else(|| err(i + 1, "expected '<key> <weight>'"))?;
            let k: usize = k
                .parse()
                .map_err(|_| err(i + 1, &format!("bad key '{k}'")))?;
            let w: f32 = w
                .trim()
                .parse()
                .map_err(|_| err(i + 1, &format!("bad weight '{w}'")))?;
            if k >= dim {
                return Err(err(i + 1, &format!("key {k} beyond dim {dim}")));
            }
            weights[k] = w;
        }
        Ok(ModelFile { loss, weights })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bit_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.txt");
        let m = ModelFile {
            loss: Loss::Hinge,
            weights: vec![0.0, 1.5e-7, -3.25, 0.0, 1.0 / 3.0],
        };
        m.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p).unwrap(), m);
        std::fs::write(&p, "# gradflow model v1\nloss hinge\ndim 2\n5 1.0\n").unwrap();
        assert!(ModelFile::load(&p).unwrap_err().contains(":4:"));
    }
}
