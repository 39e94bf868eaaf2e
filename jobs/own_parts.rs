//! A job program with a codec, an exchange and an optimizer of its own. The codec and the
//! exchange are registered (one line each in `main`), so job files, `--compressor` and
//! `--exchange`, `bench` suites and `auto` name them like built-in ones; the optimizer replaces
//! the job's through the program API (`Training::set_optimizer`):
//!
//! * `int8` (`compressor = { name = "int8", levels = 127 }`): every value scaled by the
//!   message's largest magnitude and rounded stochastically to one of `±levels` (unbiased:
//!   `E[decoded] = value`), keys as 32-bit integers; 5 bytes a pair against `none`'s 8. The
//!   decoder checks everything it reads (sizes, key order, dimension, the scale) and never
//!   trusts a count it cannot hold.
//! * `central` (`train.exchange = "central"`): one parameter server, worker 0. Every worker
//!   sends its whole gradient (the job's codec, no error feedback) to it; it sums them in worker
//!   order, takes the optimizer step and sends the change to every worker. With a lossless
//!   codec it trains `allgather`'s model bit for bit, with `W` gradients into one worker instead
//!   of `W²` between all of them, and a change back. Its round model lets `auto` rank it.
//! * AdaGrad (Duchi, Hazan & Singer 2011): `G ← G + g²; w ← w − lr·g / (√G + ε)`, unless
//!   `OWN_OPTIMIZER=0` keeps the job's optimizer. It is the built-in `adagrad`'s rule, written
//!   here to show the program API; a rule a job file names is added with
//!   `gradflow::optim::register` instead, as the codec and the exchange are.
//!
//! ```sh
//! cargo run --release --example own_parts -- cluster jobs/quickstart.toml -n 2 --lr 0.05 \
//!     --compressor int8 --exchange central
//! ```

use std::sync::Arc;

use gradflow::codec::{build_codec, check_keys, read_header, write_header};
use gradflow::codec::{Codec, CodecError, EncodeContext, FromParams};
use gradflow::data::WorkerData;
use gradflow::dataflow::{build_training, Training};
use gradflow::exchange::aggregate::Update;
use gradflow::exchange::cost::{CodecCost, RoundInputs, RoundModel};
use gradflow::exchange::uplink::add_change;
use gradflow::exchange::{
    broadcast, Endpoint, Envelope, Exchange, ExchangePlan, ModelState, Place, Step,
};
use gradflow::optim::UpdateRule;
use gradflow::sparse::SparseGrad;
use rand::RngExt;
use serde::{Deserialize, Serialize};

/// Signed bytes scaled by the largest magnitude, stochastic rounding.
struct Int8 {
    levels: f32,
}

/// `int8`'s parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Int8Params {
    /// The largest magnitude, in steps of the scale: 1 to 127.
    levels: u32,
}

impl Default for Int8Params {
    fn default() -> Self {
        Int8Params { levels: 127 }
    }
}

impl FromParams for Int8 {
    type Params = Int8Params;
    fn from_params(p: &Int8Params) -> Result<Self, String> {
        if !(1..=127).contains(&p.levels) {
            return Err(format!("int8.levels = {}: 1 to 127", p.levels));
        }
        Ok(Int8 {
            levels: p.levels as f32,
        })
    }
}

const ID: u8 = 200;

impl Codec for Int8 {
    fn name(&self) -> &'static str {
        "int8"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        gradflow::codec::check_finite(keys, values)?;
        let scale = values.iter().fold(0f32, |m, v| m.max(v.abs())) / self.levels;
        write_header(out, ID, 1, dim, keys.len() as u32);
        out.extend_from_slice(&scale.to_le_bytes());
        keys.iter()
            .for_each(|k| out.extend_from_slice(&k.to_le_bytes()));
        let mut rng = ctx.rng();
        for &v in values {
            let x = if scale > 0.0 { v / scale } else { 0.0 };
            let low = x.floor();
            let q = low + (rng.random::<f32>() < x - low) as u8 as f32;
            out.push(q.clamp(-self.levels, self.levels) as i8 as u8);
        }
        Ok(())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let (h, body) = read_header(bytes, ID, 1)?;
        let n = h.count as usize;
        let needed = 4 + 5 * n;
        if body.len() != needed {
            return Err(CodecError::Corrupt(format!(
                "{n} pairs need {needed} body bytes, the message has {}",
                body.len()
            )));
        }
        let scale = f32::from_le_bytes(body[..4].try_into().unwrap());
        if !(scale.is_finite() && scale >= 0.0) {
            return Err(CodecError::Corrupt(format!("scale {scale}")));
        }
        out.clear();
        let (keys, values) = body[4..].split_at(4 * n);
        out.keys.extend(
            keys.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap())),
        );
        check_keys(&out.keys, h.dim)?;
        out.values
            .extend(values.iter().map(|&b| b as i8 as f32 * scale));
        Ok(h.dim)
    }
}

/// AdaGrad over the keys `lo..hi`.
struct AdaGrad {
    lr: f32,
    lo: u32,
    sum_sq: Vec<f32>,
}

impl UpdateRule for AdaGrad {
    fn step(&mut self, _step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let s = &mut self.sum_sq[(k - self.lo) as usize];
            *s += g * g;
            changes.push(-self.lr * g / (s.sqrt() + 1e-8));
        }
    }
}

/// One parameter server, worker 0.
struct Central;

impl Exchange for Central {
    fn name(&self) -> &str {
        "central"
    }

    fn endpoint(&self, at: &Place<'_>, _: &WorkerData) -> Result<Box<dyn Endpoint>, String> {
        Ok(Box::new(Client {
            me: at.me,
            peers: at.peers,
            plan: at.plan.clone(),
            codec: build_codec(&at.plan.codec)?,
            scratch: SparseGrad::default(),
        }))
    }

    fn steps(&self, at: &Place<'_>) -> Result<Vec<Box<dyn Step>>, String> {
        Ok(vec![Box::new(Server {
            me: at.me,
            peers: at.peers,
            plan: at.plan.clone(),
            update: Update::new(at)?,
            codec: build_codec(&at.plan.codec)?,
        })])
    }

    /// Up to the server and back: it decodes every remote gradient, sums all of them, updates
    /// the keys of the sum and encodes the change, which every worker decodes and applies.
    /// The server's link carries the most: every remote gradient in, the change out to each.
    fn round_model(&self) -> Option<RoundModel> {
        Some(RoundModel {
            hops: 2,
            cost: |r: &RoundInputs, codec: &CodecCost| {
                let (w, remote) = (r.workers.max(1) as f64, r.remote());
                let cpu = codec.encode_whole_ms
                    + remote * codec.decode_whole_ms
                    + w * r.sum_ms()
                    + r.union_keys * r.update_ns * 1e-6
                    + w * (r.change_encode_ms + r.change_decode_ms)
                    + r.apply_ms();
                let bytes = (remote * codec.whole_bytes).max(remote * w * r.change_bytes);
                (cpu, bytes)
            },
            downlink: false,
        })
    }
}

/// A worker's side: its gradient to the server, the server's change into its replica.
struct Client {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    codec: Box<dyn Codec>,
    scratch: SparseGrad,
}

impl Endpoint for Client {
    fn changes_per_round(&self) -> Option<usize> {
        Some(1)
    }

    fn receive(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut ModelState,
    ) -> Result<(), String> {
        let at = Place {
            me: self.me,
            peers: self.peers,
            plan: &self.plan,
        };
        for msg in changes {
            if msg.src != 0 {
                return Err(format!(
                    "worker {}, round {r}: a change from worker {}, not the server",
                    self.me, msg.src
                ));
            }
            add_change(
                &at,
                r,
                &msg,
                self.codec.as_mut(),
                &mut self.scratch,
                None,
                st,
            )?;
        }
        Ok(())
    }

    fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        _: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        let ctx = EncodeContext {
            seed: self.plan.seed,
            round: r,
            worker: self.me,
            piece: 0,
        };
        let mut payload = Vec::new();
        (self.codec)
            .encode(&grad.keys, &grad.values, self.plan.dim, ctx, &mut payload)
            .map_err(|e| format!("worker {}, round {r}: {e}", self.me))?;
        broadcast(self.me, rows, [0], payload, |e| out.push(e));
        Ok((grad.len() as u64, grad.len() as u64))
    }
}

/// The server's step (on worker 0; the others receive nothing).
struct Server {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    update: Update,
    codec: Box<dyn Codec>,
}

impl Step for Server {
    fn name(&self) -> &str {
        "Server"
    }

    fn expected(&self) -> Option<usize> {
        (self.me == 0).then_some(self.peers as usize)
    }

    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let plan = &self.plan;
        let remote = |w: u32| plan.process_of(w) != plan.process_of(self.me);
        msgs.iter()
            .for_each(|m| st.received(true, m.len(), remote(m.src)));
        self.update.run(r, &mut msgs, None, st)?;
        let change = &self.update.change;
        let ctx = EncodeContext {
            seed: plan.seed,
            round: r,
            worker: self.me,
            piece: 0,
        };
        let mut payload = Vec::new();
        (self.codec)
            .encode(&change.keys, &change.values, plan.dim, ctx, &mut payload)
            .map_err(|e| format!("worker {}, round {r}: model diverged: {e}", self.me))?;
        broadcast(self.me, 0, 0..self.peers, payload, |e| {
            st.sent(false, e.len(), remote(e.dest));
            out.push(e);
        });
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    gradflow::codec::register::<Int8>("int8");
    gradflow::exchange::register(Central);
    if std::env::var("OWN_OPTIMIZER").is_ok_and(|v| v == "0") {
        return gradflow::cli::main();
    }
    gradflow::cli::main_with(Arc::new(|scope, mut training: Training| {
        let lr = training.plan().optimizer.lr;
        training.set_optimizer("own_adagrad", move |lo, hi| {
            Box::new(AdaGrad {
                lr,
                lo,
                sum_sq: vec![0.0; (hi - lo) as usize],
            })
        });
        build_training(scope, training)
    }))
}
