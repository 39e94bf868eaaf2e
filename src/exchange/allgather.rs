//! `allgather`: every worker sends its whole gradient to every worker (encoded once), and
//! every worker sums all of them in worker order and takes the same optimizer step on its
//! whole replica. No downlink: every replica computes the change itself. Bytes grow with
//! `W²`; with a lossless codec the model is bit for bit `sharded`'s (both sum in worker order
//! with the same arithmetic).

use super::cost::{CodecCost, RoundInputs, RoundModel};
use super::uplink::{add_change, CodecUplink};
use super::{aggregate::Update, local_message};
use super::{Endpoint, Envelope, Exchange, Place, Step, DATA};
use super::{ExchangePlan, ModelState};
use crate::codec::none::NoneCodec;
use crate::data::WorkerData;
use crate::sparse::SparseGrad;

/// The `allgather` strategy.
pub struct Allgather;

impl Exchange for Allgather {
    fn name(&self) -> &str {
        "allgather"
    }

    fn endpoint(&self, at: &Place<'_>, _data: &WorkerData) -> Result<Box<dyn Endpoint>, String> {
        Ok(Box::new(AllgatherEndpoint {
            me: at.me,
            peers: at.peers,
            plan: at.plan.clone(),
            uplink: CodecUplink::new(at, false)?,
            scratch: SparseGrad::default(),
        }))
    }

    fn steps(&self, at: &Place<'_>) -> Result<Vec<Box<dyn Step>>, String> {
        Ok(vec![Box::new(Aggregate {
            me: at.me,
            peers: at.peers,
            plan: at.plan.clone(),
            update: Update::new(at)?,
        })])
    }

    /// Encode the whole gradient once, send a copy to each remote worker (one hop), decode
    /// their messages, sum every worker's gradient, update and apply every key of the sum.
    fn round_model(&self) -> Option<RoundModel> {
        Some(RoundModel {
            hops: 1,
            cost: |r: &RoundInputs, codec: &CodecCost| {
                let cpu = codec.encode_whole_ms
                    + r.remote() * codec.decode_whole_ms
                    + r.workers.max(1) as f64 * r.sum_ms()
                    + r.union_keys * r.update_ns * 1e-6
                    + r.apply_ms();
                (cpu, r.remote() * codec.whole_bytes)
            },
            downlink: false,
        })
    }
}

/// A worker's side of `allgather`.
struct AllgatherEndpoint {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    uplink: CodecUplink,
    scratch: SparseGrad,
}

impl Endpoint for AllgatherEndpoint {
    /// The worker's own step's change.
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
            if msg.src != self.me || msg.kind != DATA {
                return Err(format!(
                    "worker {}, round {r}: a model change from worker {}, under allgather, \
                     where every worker computes its own",
                    self.me, msg.src
                ));
            }
            // A local message: its pairs, never decoded.
            add_change(&at, r, &msg, &mut NoneCodec, &mut self.scratch, None, st)?;
        }
        Ok(())
    }

    fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        self.uplink.send(r, grad, rows, st, out)
    }
}

/// Every worker's step. Input: every worker's whole gradient. Output: the change, to this
/// worker's own gradient step.
struct Aggregate {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    update: Update,
}

impl Step for Aggregate {
    fn name(&self) -> &str {
        "Aggregate"
    }

    fn expected(&self) -> Option<usize> {
        Some(self.peers as usize)
    }

    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let (me, plan) = (self.me, &self.plan);
        for m in &msgs {
            let remote = plan.process_of(m.src) != plan.process_of(me);
            st.received(true, m.len(), remote);
        }
        let t_update = self.update.run(r, &mut msgs, None, st)?;
        let change = &self.update.change;
        if let Some(dc) = self.update.delay.as_mut() {
            dc.record(change);
        }
        out.push(local_message(me, me, 0, plan.dim, change.clone(), 0));
        st.update_ms = crate::metrics::ms(t_update);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::harness::{grad, mean_step, plan, round};

    /// Every replica takes the same step, −lr times the rows-weighted mean of every worker's
    /// gradient, whether the workers share a process (the pairs themselves) or not (codec
    /// bytes); each worker's step sends the change to its own endpoint only.
    #[test]
    fn every_replica_takes_the_step_of_the_rows_weighted_mean() {
        for threads in [1, 2] {
            let plan = plan("exchange = \"allgather\"", "", 10, threads);
            let (grads, want) = mean_step();
            let (states, sent) = round(&plan, &grads).unwrap();
            assert_eq!(sent.len(), 1, "one step");
            assert_eq!(sent[0].len(), 2);
            assert!(sent[0].iter().all(|e| e.src == e.dest && e.local.is_some()));
            for st in &states {
                let w = st.borrow().weights.to_vec();
                assert_eq!(w[..5], want, "{threads} threads");
            }
        }
    }

    /// Under allgather every replica computes its own change: one from another worker is an
    /// error naming it.
    #[test]
    fn a_change_from_another_worker_is_an_error() {
        let plan = plan("exchange = \"allgather\"", "", 10, 2);
        let exchange = plan.exchange_plan();
        let at = Place {
            me: 0,
            peers: 2,
            plan: &exchange,
        };
        let mut endpoint = Allgather.endpoint(&at, &WorkerData::default()).unwrap();
        let st = std::cell::RefCell::new(plan.model_state());
        let forged = local_message(1, 0, 0, 10, grad(&[(2, 1.0)]), 0);
        let e = endpoint
            .receive(1, vec![forged], &mut st.borrow_mut())
            .unwrap_err();
        assert!(e.contains("from worker 1"), "{e}");
        assert_eq!(st.borrow().weights.get(2), 0.0);
    }
}
