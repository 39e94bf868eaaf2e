//! A worker's model replica: its own, or one shared by the workers of its process.
//!
//! Under `sharded` every owner adds the change of its keys to its replica and sends it to every
//! other replica, which adds it too. When all workers are threads of one process, keeping a
//! replica per worker means every worker adds every owner's change: the update does not shrink
//! with workers. A shared replica ([`Training::place_model`](crate::dataflow::Training::place_model))
//! is written by each owner for its own keys only, and the owner sends the other workers an
//! [`APPLIED`](crate::exchange::APPLIED) mark instead of its change.
//!
//! Why this is sound: within a round the workers only read the replica (the gradient step:
//! changes applied, evaluation, checkpoint, mini-batch gradient), then only write it, each its
//! own keys (the exchange step, which starts once every worker's gradient of the round is in:
//! so after every worker's reads), and a worker reads again only once every owner's mark for
//! the round is in (after every write; the marks travel through timely's channels, which
//! order them). Writes are relaxed atomic stores and [`Replica::get`] a relaxed atomic load,
//! so a program's own operator that reads the model at any time races with nothing; the
//! gradient step reads a plain slice ([`Replica::in_round`]) inside its window.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::mem::ZeroedArray;
use crate::sparse::SparseGrad;

/// Where the workers of a process keep the model (`train.replica`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReplicaMode {
    /// One per process when it can be shared and is larger than [`SHARE_FROM_BYTES`], or when
    /// the process's two workers measured their cores near ([`crate::cores::CoreDistance`]);
    /// one per worker otherwise.
    #[default]
    Auto,
    /// One per worker.
    Worker,
    /// One per process (`sharded` without pulls, all workers in one process).
    Process,
}

/// `auto` shares replicas from this size on: about a core's L2 cache. Larger models train
/// faster with one replica per process. A smaller one is close either way, and which wins
/// depends on where the two cores are: with the owners' staggered passes ([`Replica::add`]) a
/// shared replica is faster on cores that share a cache and slower on cores of different
/// chiplets, where a replica per worker moves changes between them in bulk instead of line by
/// line (figures: `docs/results.md`, "Design measurements"); so below this size two workers measure their cores
/// ([`crate::cores::CoreDistance`]) and share when they are near.
pub const SHARE_FROM_BYTES: usize = 1 << 20;

/// The weights a worker trains: a replica of the whole model.
pub struct Replica {
    cells: Arc<Cells>,
    /// Whether other workers of this process use the same weights.
    shared: bool,
    /// This worker's place among the workers that use these weights, and their number: (0, 1)
    /// for a replica of its own. The process's first worker (place 0) restores checkpoints.
    place: (usize, usize),
}

/// The weights' memory, reached through `ptr` only.
struct Cells {
    /// Owns the memory `ptr` points into; never accessed through after creation.
    _array: ZeroedArray<f32>,
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the memory is accessed through atomics, or as a plain slice under the round
// protocol described in the module docs.
unsafe impl Send for Cells {}
unsafe impl Sync for Cells {}

impl Cells {
    fn new(mut array: ZeroedArray<f32>) -> Cells {
        let (ptr, len) = (array.as_mut_ptr(), array.len());
        Cells {
            _array: array,
            ptr,
            len,
        }
    }

    /// The weight at `k < len`, as an atomic.
    #[inline]
    fn cell(&self, k: usize) -> &AtomicU32 {
        debug_assert!(k < self.len);
        // SAFETY: `k < len` (callers index-check), `ptr` is aligned for f32 (so for u32) and
        // lives as long as `self`; every concurrent access to the cell is atomic.
        unsafe { AtomicU32::from_ptr(self.ptr.add(k).cast()) }
    }
}

impl Replica {
    /// `len` zeros, this worker's own.
    pub fn zeros(len: usize) -> Replica {
        Replica::own(ZeroedArray::new(len))
    }

    /// The weights `array`, this worker's own.
    pub fn own(array: ZeroedArray<f32>) -> Replica {
        Replica {
            cells: Arc::new(Cells::new(array)),
            shared: false,
            place: (0, 1),
        }
    }

    /// Number of weights.
    pub fn len(&self) -> usize {
        self.cells.len
    }

    /// Whether the model has no weights.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether other workers of this process share these weights.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The weight of `key` (panics beyond [`Self::len`], like indexing). Safe at any time; in
    /// a shared replica, outside the gradient step it may already hold some owners' changes of
    /// the current round.
    pub fn get(&self, key: usize) -> f32 {
        assert!(key < self.len(), "key {key} beyond {} weights", self.len());
        f32::from_bits(self.cells.cell(key).load(Ordering::Relaxed))
    }

    /// A copy of every weight.
    pub fn to_vec(&self) -> Vec<f32> {
        (0..self.len()).map(|k| self.get(k)).collect()
    }

    /// Calls `f` with the weights as a slice: this worker's own replica in place, a shared one
    /// copied ([`Self::to_vec`]).
    pub fn read<R>(&self, f: impl FnOnce(&[f32]) -> R) -> R {
        if self.shared {
            f(&self.to_vec())
        } else {
            // SAFETY: no other worker has this replica (`ReplicaSlot::share` marks every
            // handle it gives out), and writes need `&mut self`.
            f(unsafe { self.in_round() })
        }
    }

    /// The weights as a slice, for the reads of the gradient step.
    ///
    /// # Safety
    /// No worker may write the replica while the slice lives: in a shared replica, call it
    /// only in the gradient step of a round (once every owner's mark is in, before this
    /// worker's gradient is sent), or after training.
    pub(crate) unsafe fn in_round(&self) -> &[f32] {
        // SAFETY: the caller guarantees no concurrent writes; `ptr` points at `len` floats.
        unsafe { std::slice::from_raw_parts(self.cells.ptr, self.cells.len) }
    }

    /// Adds a model change (keys below [`Self::len`]; in a shared replica, keys this worker
    /// owns) and checks that the weights it touched stay finite (in the same pass; the
    /// failing key is looked up only on failure).
    ///
    /// In a shared replica the owners add their changes at the same time, and ownership by key
    /// spreads every owner's keys over all the cache lines: passes that all went up from the
    /// lowest key would write the same lines at the same moment, and the lines would go back
    /// and forth between the cores. So worker `i` of `n` starts at `i/n` of its keys and wraps
    /// around: at any moment the owners write lines far apart, and a line moves once a round.
    /// The additions are the same (one per key, in any order) (figures: `docs/results.md`, "Design measurements").
    pub fn add(&mut self, change: &SparseGrad) -> Result<(), String> {
        let (place, n) = self.place;
        let start = change.len() * place / n;
        let (keys, values) = (&change.keys, &change.values);
        let from_start = keys[start..].iter().zip(&values[start..]);
        let mut finite = true;
        for (&k, &c) in from_start.chain(keys[..start].iter().zip(&values[..start])) {
            let k = k as usize;
            assert!(k < self.len(), "key {k} beyond {} weights", self.len());
            let cell = self.cells.cell(k);
            let w = f32::from_bits(cell.load(Ordering::Relaxed)) + c;
            cell.store(w.to_bits(), Ordering::Relaxed);
            finite &= w.is_finite();
        }
        if finite {
            return Ok(());
        }
        match change
            .keys
            .iter()
            .find(|&&k| !self.get(k as usize).is_finite())
        {
            Some(k) => Err(format!("weight {k} is not finite")),
            None => Ok(()),
        }
    }

    /// Sets the weight of `key` in this worker's own replica (a pulled weight, a test's
    /// state).
    ///
    /// # Panics
    /// Beyond [`Self::len`], or in a shared replica, which only its keys' owners write.
    pub fn set(&mut self, key: usize, value: f32) {
        assert!(
            !self.shared,
            "a shared replica is written by its keys' owners only"
        );
        self.store(key, value);
    }

    fn store(&mut self, key: usize, value: f32) {
        assert!(key < self.len(), "key {key} beyond {} weights", self.len());
        self.cells
            .cell(key)
            .store(value.to_bits(), Ordering::Relaxed);
    }

    /// Runs `restore` on the weights if this worker restores them from a checkpoint (its own
    /// replica, or the process's first worker of a shared one: the runtime restores before
    /// any worker of the process builds its dataflow, so before anyone reads), and returns
    /// whether it did.
    pub(crate) fn restore_with(
        &mut self,
        restore: impl FnOnce(&mut [f32]) -> Result<(), String>,
    ) -> Result<bool, String> {
        if self.place.0 != 0 {
            return Ok(false);
        }
        if !self.shared {
            // SAFETY: no other worker has this replica, and `&mut self` excludes this one's.
            let weights = unsafe { std::slice::from_raw_parts_mut(self.cells.ptr, self.cells.len) };
            return restore(weights).map(|_| true);
        }
        let mut weights = vec![0.0; self.len()];
        restore(&mut weights)?;
        for (k, w) in weights.into_iter().enumerate() {
            self.store(k, w);
        }
        Ok(true)
    }
}

/// Where the workers of one process meet to share one replica: the first that calls
/// [`ReplicaSlot::share`] leaves its replica there, the others take it.
#[derive(Clone, Default)]
pub struct ReplicaSlot(Arc<Mutex<Option<Arc<Cells>>>>);

impl ReplicaSlot {
    /// Replaces `replica` (this worker's, holding the initial model every worker starts from)
    /// with the process's shared one; this worker is number `place` of the `sharers` workers
    /// that share it (place 0, the process's first, restores checkpoints). Every worker's
    /// replica must have the same length.
    pub fn share(&self, replica: &mut Replica, place: usize, sharers: usize) -> Result<(), String> {
        assert!(place < sharers, "worker {place} of {sharers}");
        let mut slot = self
            .0
            .lock()
            .map_err(|_| "a worker failed while sharing".to_owned())?;
        let cells = slot.get_or_insert_with(|| replica.cells.clone()).clone();
        if cells.len != replica.len() {
            return Err(format!(
                "the workers of this process have models of {} and {} weights",
                cells.len,
                replica.len()
            ));
        }
        *replica = Replica {
            cells,
            shared: true,
            place: (place, sharers),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_write_their_keys_and_every_worker_sees_them() {
        let slot = ReplicaSlot::default();
        let mut a = Replica::zeros(4);
        a.set(1, 2.0); // the initial model the first worker brings
        let mut b = Replica::zeros(4);
        slot.share(&mut a, 0, 2).unwrap();
        slot.share(&mut b, 1, 2).unwrap();
        assert!(a.is_shared() && b.is_shared());
        let change = |keys: Vec<u32>, values: Vec<f32>| SparseGrad { keys, values };
        a.add(&change(vec![0, 1], vec![1.0, 0.5])).unwrap();
        b.add(&change(vec![3], vec![-1.0])).unwrap();
        assert_eq!(b.to_vec(), [1.0, 2.5, 0.0, -1.0]);
        assert_eq!(a.to_vec(), b.to_vec());
        // Only the first worker restores a checkpoint into the shared weights.
        let sevens = |w: &mut [f32]| {
            w.fill(7.0);
            Ok(())
        };
        assert!(!b.restore_with(sevens).unwrap() && a.get(2) == 0.0);
        assert!(a.restore_with(sevens).unwrap());
        assert_eq!(b.to_vec(), [7.0; 4]);
        let err = slot.share(&mut Replica::zeros(5), 1, 2).unwrap_err();
        assert!(err.contains("4 and 5 weights"), "{err}");
    }

    /// A change is added key by key; one that overflows a weight is an error naming that
    /// weight's key (the check runs in the same pass as the addition).
    #[test]
    fn changes_are_added_and_an_overflow_names_its_key() {
        let mut weights = Replica::zeros(4);
        for (k, w) in [1.0f32, 2.0, f32::MAX, 4.0].into_iter().enumerate() {
            weights.set(k, w);
        }
        let change = |keys: Vec<u32>, values: Vec<f32>| SparseGrad { keys, values };
        weights.add(&change(vec![0, 3], vec![0.5, -1.0])).unwrap();
        assert_eq!(weights.to_vec(), vec![1.5, 2.0, f32::MAX, 3.0]);
        let e = weights
            .add(&change(vec![1, 2], vec![1.0, f32::MAX]))
            .unwrap_err();
        assert_eq!(e, "weight 2 is not finite");
    }
}
