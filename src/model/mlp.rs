//! `mlp`: a small neural network over sparse rows. The first layer is an embedding bag: feature
//! `i` owns a vector `eᵢ` of `h₁` weights, and a row's first hidden layer is
//! `z₁ = relu(b₁ + Σᵢ xᵢ eᵢ)`, so a row's gradient reaches only its own features' vectors (a
//! dense input, an image's pixels, is the same layer with every feature present). One more
//! hidden layer `z₂ = relu(W₂ z₁ + b₂)` is optional; the output layer `Wₒ z + bₒ` gives the
//! loss's margins (1, or `K` for softmax). Forward and backward are written out by hand
//! (backpropagation, Rumelhart et al. 1986): for this shape they are a few loops.
//!
//! Layout: the features' vectors (`width() = h₁` keys each), then the dense weights
//! (`dense()`): `b₁`, then for two hidden layers `W₂` (`h₁` columns of `h₂`) and `b₂`, then
//! `Wₒ` (`h` columns of `K`) and `bₒ`. Each matrix is stored by input unit, so that a layer is
//! a sum of columns scaled by its (mostly non-zero only after ReLU) inputs: loops that
//! vectorise and skip the units ReLU silenced.

use super::gradient::{Accumulator, Batch};
use super::Model;

/// A multilayer perceptron with one or two ReLU hidden layers over an embedding bag.
#[derive(Clone, Debug)]
pub struct Mlp {
    hidden: Vec<u32>,
    outputs: u32,
    init_std: f32,
    /// The dense layers after the first hidden one, in order (laid out once, read every row).
    layers: Vec<Layer>,
}

/// Where a dense layer's weights lie in the dense block: `inputs` columns of `outputs` weights
/// from `weights`, then `outputs` biases.
#[derive(Clone, Copy, Debug)]
struct Layer {
    inputs: usize,
    outputs: usize,
    weights: usize,
}

impl Layer {
    fn biases(self) -> usize {
        self.weights + self.inputs * self.outputs
    }

    fn end(self) -> usize {
        self.biases() + self.outputs
    }

    /// `out = b + W·x`, skipping the inputs that are 0.
    fn forward(self, dense: &[f32], x: &[f32], out: &mut [f32]) {
        out.copy_from_slice(&dense[self.biases()..self.end()]);
        let columns = dense[self.weights..self.biases()].chunks_exact(self.outputs);
        for (&xc, column) in x.iter().zip(columns) {
            if xc != 0.0 {
                axpy(xc, column, out);
            }
        }
    }

    /// Given `d`, the loss's derivative with respect to this layer's outputs, adds its
    /// weights' and biases' gradients into `grads` (laid out as the dense block) and writes
    /// the derivative with respect to its inputs `x` into `dx` (0 where `x` is 0: the units
    /// ReLU silenced, whose derivative the layer below would drop anyway).
    fn backward(self, dense: &[f32], x: &[f32], d: &[f32], grads: &mut [f32], dx: &mut [f32]) {
        let n = self.outputs;
        axpy(1.0, d, &mut grads[self.biases()..self.end()]);
        let columns = dense[self.weights..self.biases()].chunks_exact(n);
        let grad_columns = grads[self.weights..self.biases()].chunks_exact_mut(n);
        for (((&xc, column), grad), dxc) in x.iter().zip(columns).zip(grad_columns).zip(dx) {
            if xc > 0.0 {
                axpy(xc, d, grad);
                *dxc = dot(column, d);
            } else {
                *dxc = 0.0;
            }
        }
    }
}

/// `y += a·x`.
#[inline(always)]
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// `x·y`, in 8 lanes so that it vectorises (one running float sum would not).
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (xa, xr) = x.split_at(x.len() / 8 * 8);
    let (ya, yr) = y.split_at(xa.len());
    for (xs, ys) in xa.chunks_exact(8).zip(ya.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] += xs[l] * ys[l];
        }
    }
    let rest: f32 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + rest
}

fn relu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

impl Mlp {
    /// A network with `hidden` ReLU layers (one or two sizes) and `outputs` margins; the
    /// features' vectors start N(0, `init_std`), the dense layers N(0, 2 / inputs) (He et al.
    /// 2015), the biases at 0.
    pub fn new(hidden: &[u32], outputs: u32, init_std: f32) -> Mlp {
        assert!(
            matches!(hidden.len(), 1 | 2) && hidden.iter().all(|&h| h > 0) && outputs > 0,
            "an mlp has one or two hidden layers of at least one unit"
        );
        // The dense block starts with b₁ (`hidden[0]` biases); each layer's weights follow.
        let mut sizes: Vec<usize> = hidden.iter().map(|&h| h as usize).collect();
        sizes.push(outputs as usize);
        let mut at = sizes[0];
        let layers = sizes
            .windows(2)
            .map(|w| {
                let l = Layer {
                    inputs: w[0],
                    outputs: w[1],
                    weights: at,
                };
                at = l.end();
                l
            })
            .collect();
        Mlp {
            hidden: hidden.to_vec(),
            outputs,
            init_std,
            layers,
        }
    }

    /// The units of every layer, the outputs last: where [`Self::activations`] puts them.
    fn units(&self) -> usize {
        self.hidden.iter().sum::<u32>() as usize + self.outputs as usize
    }

    /// Every layer's outputs for a row, into `acts` (`units()` of them: the hidden layers
    /// after ReLU, then the margins).
    fn activations(&self, weights: &[f32], keys: &[u32], vals: &[f32], acts: &mut [f32]) {
        let (h1, layers) = (self.hidden[0] as usize, &self.layers);
        let dense = &weights[weights.len() - self.dense() as usize..];
        let (z1, mut rest) = acts.split_at_mut(h1);
        z1.copy_from_slice(&dense[..h1]);
        for (&i, &x) in keys.iter().zip(vals) {
            let e = i as usize * h1;
            axpy(x, &weights[e..e + h1], z1);
        }
        relu(z1);
        let mut input: &[f32] = z1;
        for (n, layer) in layers.iter().enumerate() {
            let (out, next) = std::mem::take(&mut rest).split_at_mut(layer.outputs);
            layer.forward(dense, input, out);
            if n + 1 < layers.len() {
                relu(out);
            }
            input = out;
            rest = next;
        }
    }
}

impl Model for Mlp {
    fn name(&self) -> &str {
        "mlp"
    }

    /// `mlp:H1` or `mlp:H1,H2`.
    fn spec(&self) -> String {
        let sizes: Vec<String> = self.hidden.iter().map(u32::to_string).collect();
        format!("mlp:{}", sizes.join(","))
    }

    fn outputs(&self) -> u32 {
        self.outputs
    }

    fn width(&self) -> u32 {
        self.hidden[0]
    }

    fn dense(&self) -> u32 {
        self.layers.last().map_or(0, |l| l.end()) as u32
    }

    /// The features' vectors N(0, `init_std`); each dense layer's weights He-normal
    /// (N(0, 2/inputs)), the biases 0.
    fn initial(&self, seed: u64, dim: u32, key: u32) -> f32 {
        let dense_start = dim - self.dense();
        if key < dense_start {
            return self.init_std * super::seeded_normal(seed, key as u64);
        }
        let k = (key - dense_start) as usize;
        match self
            .layers
            .iter()
            .find(|l| (l.weights..l.biases()).contains(&k))
        {
            Some(layer) => {
                let std = (2.0 / layer.inputs as f32).sqrt();
                std * super::seeded_normal(seed, key as u64)
            }
            None => 0.0,
        }
    }

    fn forward(
        &self,
        weights: &[f32],
        keys: &[u32],
        vals: &[f32],
        outputs: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        scratch.resize(self.units(), 0.0);
        self.activations(weights, keys, vals, scratch);
        outputs.copy_from_slice(&scratch[self.units() - self.outputs as usize..]);
    }

    fn accumulate(&self, batch: &Batch, sums: &mut Accumulator) -> f64 {
        let (h1, layers) = (self.hidden[0] as usize, &self.layers);
        let (units, k, dense_len) = (self.units(), self.outputs as usize, self.dense() as usize);
        let dense_start = batch.weights.len() - dense_len;
        let dense = &batch.weights[dense_start..];
        // Room: the activations, the derivatives of every layer's outputs, the dense gradients.
        let mut scratch = std::mem::take(&mut sums.scratch);
        scratch.clear();
        scratch.resize(2 * units + dense_len, 0.0);
        let (acts, rest) = scratch.split_at_mut(units);
        let (derivs, grads) = rest.split_at_mut(units);
        let mut loss_sum = 0.0;
        for &r in batch.rows {
            let r = r as usize;
            let (keys, vals) = batch.data.row(r);
            self.activations(batch.weights, keys, vals, acts);
            let (d_hidden, d_out) = derivs.split_at_mut(units - k);
            loss_sum += batch
                .loss
                .row(&acts[units - k..], batch.data.labels[r], d_out);
            d_out.iter_mut().for_each(|d| *d *= batch.scale);
            // Backward, from the output layer down to the first hidden one.
            let (mut top, mut above) = (units - k, None);
            for layer in layers.iter().rev() {
                let below = top - layer.inputs;
                let (lower, upper) = d_hidden.split_at_mut(top);
                let d_above: &[f32] = match above {
                    None => d_out,
                    Some(end) => &upper[..end - top],
                };
                layer.backward(
                    dense,
                    &acts[below..top],
                    d_above,
                    grads,
                    &mut lower[below..],
                );
                (above, top) = (Some(top), below);
            }
            let d1 = &d_hidden[..h1];
            axpy(1.0, d1, &mut grads[..h1]);
            for (&i, &x) in keys.iter().zip(vals) {
                axpy(x, d1, sums.run(i as usize * h1, h1));
            }
        }
        axpy(1.0, grads, sums.run(dense_start, dense_len));
        sums.scratch = scratch;
        loss_sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;
    use crate::model::gradient::{GradientWorkspace, L2};
    use crate::model::{Loss, ModelLoss, Softmax, SparseGrad};

    /// Four rows of features 0-4 with the given labels.
    fn toy(labels: [f32; 4]) -> Dataset {
        let mut d = Dataset::new(5);
        d.push_row(&[0, 2, 4], &[1.0, -0.5, 1.0], labels[0]);
        d.push_row(&[1, 2, 3, 4], &[0.3, 1.5, 2.0, 1.0], labels[1]);
        d.push_row(&[0, 1, 3, 4], &[0.7, 1.0, -1.2, 1.0], labels[2]);
        d.push_row(&[2, 3], &[0.4, -0.9], labels[3]);
        d
    }

    /// The gradient of one and of two hidden layers, for one output (logistic) and three
    /// (softmax), equals the loss's finite differences at every key it reaches; it reaches
    /// the rows' features' vectors and every dense weight, and no other feature's.
    #[test]
    fn the_gradient_is_the_finite_differences_of_the_loss() {
        let logistic: &dyn ModelLoss = &Loss::Logistic;
        let softmax = Softmax::new(3);
        let (labels_pm, d) = (toy([1.0, -1.0, 1.0, -1.0]), toy([1.0, 0.0, 2.0, 1.0]));
        for hidden in [&[4u32][..], &[5, 3]] {
            for (loss, data, outputs) in [
                (logistic, &labels_pm, 1u32),
                (&softmax as &dyn ModelLoss, &d, 3),
            ] {
                let mlp = Mlp::new(hidden, outputs, 0.5);
                let features = 6; // feature 5 is in no row
                let dim = features * mlp.width() + mlp.dense();
                let mut w = vec![0.0f32; dim as usize];
                mlp.init(3, &mut w);
                // Biases away from 0, so that no unit sits at ReLU's kink.
                let dense_start = w.len() - mlp.dense() as usize;
                for (j, b) in w[dense_start..dense_start + hidden[0] as usize]
                    .iter_mut()
                    .enumerate()
                {
                    *b = 0.3 * j as f32 - 0.2;
                }
                let rows = [0u32, 1, 2, 3];
                let objective = |w: &[f32]| -> f64 {
                    let (mut out, mut scratch) = (vec![0.0f32; outputs as usize], Vec::new());
                    let mut derivs = vec![0.0f32; outputs as usize];
                    rows.iter()
                        .map(|&r| {
                            let (k, v) = data.row(r as usize);
                            mlp.forward(w, k, v, &mut out, &mut scratch);
                            loss.row(&out, data.labels[r as usize], &mut derivs)
                        })
                        .sum::<f64>()
                        / rows.len() as f64
                };
                let mut ws = GradientWorkspace::new(dim);
                let mut g = SparseGrad::default();
                ws.minibatch(data, &rows, &w, &mlp, loss, L2::default(), &mut g);
                let h1 = mlp.width();
                assert_eq!(g.len() as u32, 5 * h1 + mlp.dense(), "{hidden:?} {outputs}");
                assert!(g.keys.iter().all(|&k| !(5 * h1..6 * h1).contains(&k)));
                crate::model::gradient::assert_finite_differences(&g, &w, objective);
            }
        }
    }

    #[test]
    fn the_layout_and_the_spec() {
        let mlp = Mlp::new(&[16, 8], 10, 0.01);
        assert_eq!(mlp.width(), 16);
        assert_eq!(mlp.dense(), 16 + (16 * 8 + 8) + (8 * 10 + 10));
        assert_eq!(mlp.spec(), "mlp:16,8");
        assert_eq!(Mlp::new(&[32], 1, 0.01).dense(), 32 + 32 + 1);
        let mut w = vec![0.0f32; (100 * 16 + mlp.dense()) as usize];
        mlp.init(1, &mut w);
        let dense = &w[1600..];
        assert!(dense[..16].iter().all(|&b| b == 0.0), "b₁ starts at 0");
        assert!(w[..1600].iter().all(|&e| e.abs() < 0.1) && w[..1600].iter().any(|&e| e != 0.0));
        let w2 = &dense[16..16 + 128];
        let std = (w2.iter().map(|x| x * x).sum::<f32>() / 128.0).sqrt();
        assert!((std - (2.0f32 / 16.0).sqrt()).abs() < 0.1, "He: {std}");
    }
}
