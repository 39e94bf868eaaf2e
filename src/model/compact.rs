//! Some rows' view of a model: the features the rows reach, renumbered `0..n` in order, and
//! the weights of just those features (plus a network's dense weights). A worker that keeps
//! no replica (`train.state = "sharded"`) computes a mini-batch's gradient, or scores its
//! test rows, on this view.
//!
//! Feature `f` of the model owns keys `f·width ..` and the dense weights follow the features
//! ([`super::Model`]); in the view, the `i`-th feature the rows reach owns keys `i·width ..`
//! and the dense weights follow. Both numberings keep key order, so a row's features, a
//! gradient's keys and every sum come out in the same order as on the whole model: the same
//! arithmetic, bit for bit.

use crate::data::Dataset;
use crate::sparse::SparseGrad;

use super::gradient::L2;
use super::ModelFn;

/// The view of some rows: their features, the rows renumbered, and the weights.
#[derive(Debug, Default)]
pub struct Compact {
    /// The features the rows reach, increasing (the model's numbers).
    pub features: Vec<u32>,
    /// The rows, features renumbered (`features[i]` is feature `i` here).
    pub rows: Dataset,
    /// The view's weights: the features' (`width` each) then the dense ones.
    pub weights: Vec<f32>,
    width: u32,
    /// The model's key of the first dense weight, and their number.
    dense: (u32, u32),
}

impl Compact {
    /// The view of rows `rows` of `data` under a model of `width` weights per feature and
    /// the dense weights `dense` (keys). The weights are zeros until [`Self::fill`].
    pub fn of(data: &Dataset, rows: &[u32], width: u32, dense: std::ops::Range<u32>) -> Compact {
        // Every (feature, place among the rows' features) pair, sorted by feature (a radix
        // sort: linear in the rows' features), numbers the distinct features in order and
        // tells each place its new number: no search, no table the size of the model.
        let mut places: Vec<(u32, u32)> = Vec::new();
        for &i in rows {
            let at = places.len() as u32;
            let row = data.row(i as usize).0;
            places.extend(row.iter().zip(at..).map(|(&f, p)| (f, p)));
        }
        let mut keys = vec![0u32; places.len()];
        radsort::sort_by_key(&mut places, |&(f, _)| f);
        let mut features: Vec<u32> = Vec::new();
        for &(f, p) in &places {
            if features.last() != Some(&f) {
                features.push(f);
            }
            keys[p as usize] = features.len() as u32 - 1;
        }
        let mut local = Dataset::new(features.len() as u32);
        local.reserve(rows.len(), keys.len());
        let mut start = 0;
        for &i in rows {
            let values = data.row(i as usize).1;
            let end = start + values.len();
            local.push_row(&keys[start..end], values, data.labels[i as usize]);
            start = end;
        }
        let len = features.len() * width as usize + dense.len();
        Compact {
            features,
            rows: local,
            weights: vec![0.0; len],
            width,
            dense: (dense.start, dense.len() as u32),
        }
    }

    /// The model's key of the view's key `local`.
    #[inline]
    pub fn key(&self, local: u32) -> u32 {
        let features = self.features.len() as u32 * self.width;
        if local < features {
            self.features[(local / self.width) as usize] * self.width + local % self.width
        } else {
            self.dense.0 + (local - features)
        }
    }

    /// The model's keys of the view's weights, increasing.
    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        let width = self.width;
        let features = self
            .features
            .iter()
            .flat_map(move |&f| f * width..(f + 1) * width);
        features.chain(self.dense.0..self.dense.0 + self.dense.1)
    }

    /// Sets every weight of the view from `weight` (the model's weight at a key, asked in
    /// increasing key order).
    pub fn fill(
        &mut self,
        mut weight: impl FnMut(u32) -> Result<f32, String>,
    ) -> Result<(), String> {
        let mut weights = std::mem::take(&mut self.weights);
        for (w, k) in weights.iter_mut().zip(self.keys()) {
            *w = weight(k)?;
        }
        self.weights = weights;
        Ok(())
    }

    /// Renumbers a gradient over the view's keys (increasing) to the model's keys (still
    /// increasing).
    pub fn to_model_keys(&self, grad: &mut SparseGrad) {
        for k in grad.keys.iter_mut() {
            *k = self.key(*k);
        }
    }

    /// The intercept's feature in the view, when the model's (`intercept`, a feature) is one
    /// of the rows'.
    fn intercept(&self, intercept: Option<u32>) -> Option<u32> {
        let f = intercept?;
        self.features.binary_search(&f).ok().map(|i| i as u32)
    }

    /// The L2 penalty on the view's keys: the intercept's keys renumbered.
    pub fn l2(&self, l2: L2) -> L2 {
        let width = self.width;
        let intercept = l2
            .intercept
            .and_then(|(start, _)| self.intercept(Some(start / width)))
            .map(|i| (i * width, (i + 1) * width));
        L2 { intercept, ..l2 }
    }

    /// The model for the view's rows: `model` itself, or, for a model that reads feature
    /// numbers ([`Model::renumbered`]), the one whose intercept is the view's.
    pub fn model(&self, model: &ModelFn, intercept_key: Option<u32>) -> ModelFn {
        let intercept = self.intercept(intercept_key.map(|k| k / self.width));
        model.renumbered(intercept).unwrap_or_else(|| model.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Fm, GradientWorkspace, Loss, LossFn, Mlp};

    /// The gradient of a batch on its view, renumbered, equals the gradient on the whole
    /// model bit for bit, for a linear model, a factorization machine with an intercept and
    /// a network with dense weights; and the view's scores equal the model's.
    #[test]
    fn a_batch_on_its_view_gives_the_whole_models_gradient() {
        let mut data = Dataset::new(50);
        let rows: [&[u32]; 5] = [&[1, 7, 30], &[0, 7, 49], &[3, 30, 31, 48], &[49], &[2, 9]];
        for (i, r) in rows.iter().enumerate() {
            let values: Vec<f32> = r.iter().map(|&k| 0.5 + k as f32 * 0.01).collect();
            data.push_row(r, &values, if i % 2 == 0 { 1.0 } else { -1.0 });
        }
        let intercept = data.add_intercept(); // feature 50, in every row
        let loss = LossFn::new(Loss::Logistic);
        let models: Vec<(ModelFn, u32)> = vec![
            (ModelFn::new(crate::model::Linear::new(1)), 1),
            (ModelFn::new(Fm::new(3, 0.1, Some(intercept))), 4),
            (ModelFn::new(Mlp::new(&[4], 1, 0.1)), 4),
        ];
        for (model, width) in models {
            let dim = (intercept + 1) * width + model.dense();
            let mut weights = vec![0.0f32; dim as usize];
            model.init(5, &mut weights);
            for (k, w) in weights.iter_mut().enumerate() {
                *w += (k as f32 * 0.37).sin() * 0.1;
            }
            let l2 = L2 {
                lambda: 0.01,
                intercept: Some((intercept * width, (intercept + 1) * width)),
                factors: (width > 1 && model.dense() == 0).then_some((0.02, width)),
            };
            let batch = [0u32, 2, 4];
            let mut want = SparseGrad::default();
            let stats = GradientWorkspace::new(dim)
                .minibatch(&data, &batch, &weights, &*model, &*loss, l2, &mut want);
            let dense = dim - model.dense()..dim;
            let mut view = Compact::of(&data, &batch, width, dense);
            view.fill(|k| Ok(weights[k as usize])).unwrap();
            let keys: Vec<u32> = view.keys().collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]));
            let local_model = view.model(&model, Some(intercept * width));
            let all: Vec<u32> = (0..batch.len() as u32).collect();
            let mut got = SparseGrad::default();
            let local_stats = GradientWorkspace::new(view.weights.len() as u32).minibatch(
                &view.rows,
                &all,
                &view.weights,
                &*local_model,
                &*loss,
                view.l2(l2),
                &mut got,
            );
            view.to_model_keys(&mut got);
            assert_eq!(got.keys, want.keys, "{}", model.name());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.values), bits(&want.values), "{}", model.name());
            assert_eq!(stats.loss_sum.to_bits(), local_stats.loss_sum.to_bits());
            let (mut a, mut b, mut scratch) = ([0.0f32], [0.0f32], Vec::new());
            for (i, &row) in batch.iter().enumerate() {
                let (k, v) = data.row(row as usize);
                model.forward(&weights, k, v, &mut a, &mut scratch);
                let (k, v) = view.rows.row(i);
                local_model.forward(&view.weights, k, v, &mut b, &mut scratch);
                assert_eq!(a[0].to_bits(), b[0].to_bits(), "{} row {row}", model.name());
            }
        }
    }
}
