//! Loading a worker's rows for a job: every format, the cache, the checks of labels and
//! batch sizes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::*;
use crate::data::cache::{self, CachedRows};
use crate::data::gather::gather;
use crate::data::libsvm::{read_libsvm_part, PartRows};
use crate::data::table::TableInput;
use crate::data::{LibsvmOptions, Part, RowFilter};
use crate::dataflow::{ProgramInputs, WorkerData};
use crate::model::Task;

impl Job {
    /// The rows worker `worker` of `workers` trains and tests on, and the model's dimension
    /// (the intercept included). Deterministic: every worker computes the same dimension and
    /// split.
    pub fn load_worker_data(
        &self,
        worker: usize,
        workers: usize,
    ) -> Result<(WorkerData, u32), String> {
        let (data, dim) = self.load_rows(worker, workers)?;
        self.with_intercept(data, dim)
    }

    /// Adds the intercept to `data` of dimension `dim` when the job has one: the model's
    /// dimension grows by one. A dimension above `data.max_dim` (a vocabulary that large) is
    /// an error.
    pub(super) fn with_intercept(
        &self,
        mut data: WorkerData,
        dim: u32,
    ) -> Result<(WorkerData, u32), String> {
        if dim > self.data.max_dim {
            return Err(format!(
                "the data has {dim} features, more than data.max_dim = {}: raise data.max_dim \
                 in [data] if every worker has the memory (4-16 bytes per feature), or hash \
                 the features (data.features.hash_bits)",
                self.data.max_dim
            ));
        }
        let width = self.width() as u64;
        let dense = self.model_fn(dim + 1).dense() as u64;
        let keys = (dim as u64 + self.model.intercept as u64) * width + dense;
        if width > 1 && keys > self.data.max_dim as u64 + width {
            let per = match self.model.kind {
                ModelKind::Linear => format!("model.classes = {width}"),
                ModelKind::Fm => format!("model.factors = {}", self.model.factors),
                ModelKind::Mlp => format!("model.hidden = {:?}", self.model.hidden),
                ModelKind::Added(name) => format!("model.kind = \"{name}\""),
            };
            return Err(format!(
                "the data has {dim} features: with {per} the model has {keys} weights, more \
                 than data.max_dim = {} (plus the intercept's): raise data.max_dim in [data] \
                 if every worker has the memory (4-16 bytes per weight), or hash the features \
                 (data.features.hash_bits)",
                self.data.max_dim
            ));
        }
        self.check_labels(&data)?;
        if !self.model.intercept {
            return Ok((data, dim));
        }
        data.train.add_intercept();
        data.test.add_intercept();
        Ok((data, dim + 1))
    }

    /// What a job with `data.format = "program"` names for its program.
    pub fn program_inputs(&self) -> Option<ProgramInputs> {
        (self.data.format == Format::Program).then(|| ProgramInputs {
            files: self.data.files.clone(),
            test_fraction: self.data.test_fraction,
        })
    }

    /// What the table pipeline needs of a CSV job.
    pub fn table_input(&self) -> TableInput {
        let d = &self.data;
        TableInput {
            spec: d.table(),
            train: d.train.clone().unwrap_or_default(),
            test: d.test.clone(),
            test_fraction: d.test_fraction,
            tail: d.test_split == TestSplit::Tail,
            seed: self.train.seed,
            classification: self.loss().task() == Task::Binary,
        }
    }

    /// As [`Job::load_worker_data`], on a timely worker, for every format: a CSV job runs its
    /// differential-dataflow pipeline on the workers. Also returns the feature map (TOML) of a
    /// CSV job and notes for the user. With `data.cache`, the rows come from the cache when
    /// every worker has a current one, and are loaded and cached otherwise.
    ///
    /// A batch fraction that would give some worker a batch of less than one row is an error
    /// (the workers compare their row counts, so each reports the same smallest valid value).
    pub fn load_on(&self, worker: &mut timely::worker::Worker) -> Result<Loaded, String> {
        if self.stream().is_some() {
            return self.load_test_of_stream(worker);
        }
        let loaded = match &self.data.cache {
            Some(dir) if self.data.format != Format::Program => self.load_cached(worker, dir),
            _ => self.load_fresh(worker),
        };
        if self.data.format == Format::Program {
            return loaded; // the program's dataflow brings the rows later
        }
        // Every worker joins the comparison, a worker whose loading failed too.
        let (rows, tests, positives) = loaded.as_ref().map_or((u64::MAX, 0, 0), |l| {
            let labels = &l.0.train.labels;
            let positives = labels.iter().filter(|&&y| y > 0.0).count() as u64;
            (labels.len() as u64, l.0.test.rows() as u64, positives)
        });
        let me = worker.index();
        let counts = gather(worker, vec![((me, rows, tests, positives), 1)], |c| c);
        let fewest = counts.iter().min_by_key(|c| c.1);
        let mut loaded = loaded;
        if let (Ok(l), Some(&(w, rows, _, _))) = (&mut loaded, fewest) {
            self.check_batch(w, rows)?;
            let rows: u64 = counts.iter().map(|c| c.1).sum();
            let positives: u64 = counts.iter().map(|c| c.3).sum();
            self.check_both_classes(rows, positives)?;
            l.0.shares = counts.iter().map(|c| (c.1, c.2)).collect();
        }
        loaded
    }

    /// A binary loss over training rows of one class trains a constant model whose accuracy on
    /// rows of that class is perfect: an error. (A table's labels are checked as they are
    /// prepared, with the values the column has.)
    fn check_both_classes(&self, rows: u64, positives: u64) -> Result<(), String> {
        if self.loss().task() != Task::Binary || (0 < positives && positives < rows) {
            return Ok(());
        }
        let class = if positives > 0 {
            "positive"
        } else {
            "negative"
        };
        let file = self
            .data
            .train
            .as_deref()
            .map_or("the data".into(), |p| p.display().to_string());
        Err(format!(
            "{file}: every training row's label is {class} ({rows} rows): logistic and hinge \
             losses need rows of both classes (a LibSVM label is positive when above 0)"
        ))
    }

    /// Whether every batch of a worker with `rows` training rows (worker `w`, the one with the
    /// fewest) holds at least one row.
    pub(super) fn check_batch(&self, w: usize, rows: u64) -> Result<(), String> {
        let per_epoch = self.rounds_per_epoch();
        if rows >= per_epoch {
            return Ok(());
        }
        if rows == 0 {
            return Err(format!(
                "worker {w} has no training rows: the data has fewer rows than the run has \
                 workers (use fewer workers or more data)"
            ));
        }
        Err(format!(
            "train.batch_fraction = {} makes {per_epoch} rounds an epoch, but worker {w} trains \
             on {rows} rows: its batches would hold less than one row. With this data and \
             these workers the smallest valid value is {} (1/{rows})",
            self.train.batch_fraction,
            1.0 / rows.max(1) as f64,
        ))
    }

    /// [`Job::load_on`] through the cache in `dir`. Whether to read it is decided by all
    /// workers together (the loaders exchange summaries, so either every worker loads or none
    /// does): one worker's missing, stale or damaged file makes them all load and rewrite.
    pub(super) fn load_cached(
        &self,
        worker: &mut timely::worker::Worker,
        dir: &Path,
    ) -> Result<Loaded, String> {
        let (index, peers) = (worker.index(), worker.peers());
        let path = cache::path(dir, index, peers);
        let key = self.cache_key(index, peers);
        let hit = match key {
            Some(key) => cache::read(&path, key),
            None => Err(cache::Miss::Absent),
        };
        let every_worker_hit = !gather(worker, vec![(hit.is_ok(), 1)], |c| c).contains(&false);
        let miss = match (every_worker_hit, hit) {
            (true, Ok(c)) => {
                let data = WorkerData {
                    train: c.train,
                    test: c.test,
                    ignored_test_features: c.ignored_test_features,
                    shares: Vec::new(),
                };
                self.check_labels(&data)?;
                let mut notes = c.notes;
                notes.push(format!("data: read from the cache {}", dir.display()));
                return Ok((data, c.dim, c.features, notes));
            }
            (_, hit) => hit.err(),
        };
        let (data, dim, features, mut notes) = self.load_fresh(worker)?;
        let Some(key) = key else {
            return Ok((data, dim, features, notes));
        };
        let rows = CachedRows {
            dim,
            train: data.train,
            test: data.test,
            ignored_test_features: data.ignored_test_features,
            features,
            notes: notes.clone(),
        };
        notes.push(match cache::write(&path, key, &rows) {
            Ok(bytes) => format!(
                "data: wrote the cache {} ({:.1} MB for worker {index}; {}); later runs of \
                 this job read it",
                dir.display(),
                bytes as f64 / 1e6,
                match miss {
                    Some(miss) => miss.to_string(),
                    None => "another worker's cache was missing or stale".into(),
                }
            ),
            Err(e) => format!("data: could not write the cache {}: {e}", path.display()),
        });
        let data = WorkerData {
            train: rows.train,
            test: rows.test,
            ignored_test_features: rows.ignored_test_features,
            shares: Vec::new(),
        };
        Ok((data, dim, rows.features, notes))
    }

    /// Every file the job reads its rows from: training and test files (and their IDX
    /// labels), joined tables, a program's named inputs.
    pub fn input_files(&self) -> impl Iterator<Item = &PathBuf> {
        let d = &self.data;
        // A stream is no fixed input (its checkpoints record how far it was read).
        let train = d.train.as_ref().filter(|_| self.stream().is_none());
        [
            train,
            d.test.as_ref(),
            d.train_labels.as_ref(),
            d.test_labels.as_ref(),
        ]
        .into_iter()
        .flatten()
        .chain(d.join.iter().map(|j| &j.file))
        .chain(d.files.values())
    }

    /// The fingerprint a cache file is written under: gradflow's version and executable,
    /// everything in the job that decides the rows (the data section, the loss, classes and
    /// intercept, the split's seed), the worker's place, and each input file's size and
    /// modification time. `None` when an input cannot be looked at (loading then reports it).
    pub(super) fn cache_key(&self, worker: usize, peers: usize) -> Option<u64> {
        use std::fmt::Write;
        let data = DataSection {
            cache: None,
            ..self.data.clone()
        };
        let m = &self.model;
        let mut text = format!(
            "gradflow {} cache 1\n{}\n{:?} {:?} {} seed {} worker {worker} of {peers}\n",
            env!("CARGO_PKG_VERSION"),
            toml::to_string(&data).ok()?,
            m.loss,
            m.classes,
            m.intercept,
            self.train.seed,
        );
        let exe = std::env::current_exe().ok();
        let inputs = self
            .input_files()
            .map(|p| crate::data::source::input_parts(p).ok());
        let parts: Vec<PathBuf> = inputs.collect::<Option<Vec<_>>>()?.concat();
        for path in exe.iter().chain(&parts) {
            let meta = std::fs::metadata(path).ok()?;
            let modified = meta
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            writeln!(
                text,
                "{} {} {}",
                path.display(),
                meta.len(),
                modified.as_nanos()
            )
            .ok()?;
        }
        Some(xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }

    /// [`Job::load_on`] without the cache.
    /// An online run's data before its stream: no training rows (they arrive by round), the
    /// test file's rows if it has one; the model's size is `data.dim`.
    fn load_test_of_stream(&self, worker: &mut timely::worker::Worker) -> Result<Loaded, String> {
        if self.data.format.is_table() {
            return self.load_table_test_of_stream(worker);
        }
        let dim = self.data.dim.expect("validated: a stream has data.dim");
        let mut data = WorkerData::empty(dim);
        if self.data.test.is_some() {
            let part = Part {
                index: worker.index(),
                count: worker.peers(),
            };
            let read = self.libsvm_part(part, Some(dim));
            let summaries = gather(worker, vec![(PartSummary::of(part, &read), 1)], |c| c);
            first_error(&summaries)?;
            data.test = read?.data;
            data.ignored_test_features = summaries.iter().map(|s| s.ignored).sum();
        }
        let (data, dim) = self.with_intercept(data, dim)?;
        Ok((data, dim, None, vec![]))
    }

    /// [`Self::load_test_of_stream`] of a table: the model's size and feature map are the
    /// stream's ([`crate::data::table::stream_map`]); a worker keeps every `peers`-th row of the
    /// test table, which it encodes whole with that map.
    fn load_table_test_of_stream(
        &self,
        worker: &mut timely::worker::Worker,
    ) -> Result<Loaded, String> {
        let map = crate::data::table::stream_map(&self.data.table())?;
        let mut data = WorkerData::empty(map.dim);
        if let Some(test) = &self.data.test {
            let encoded = crate::data::table::encode_file(&map, test, None)?;
            if !encoded.labelled {
                let label = &map.spec.label.column;
                return Err(format!("{}: no label column '{label}'", test.display()));
            }
            let rows = &encoded.data;
            for i in (worker.index()..rows.rows()).step_by(worker.peers()) {
                let (keys, values) = rows.row(i);
                if !rows.labels[i].is_nan() {
                    data.test.push_row(keys, values, rows.labels[i]);
                }
            }
        }
        let (data, dim) = self.with_intercept(data, map.dim)?;
        let map = toml::to_string(&map).map_err(|e| format!("feature map: {e}"))?;
        Ok((data, dim, Some(map), vec![]))
    }

    pub(super) fn load_fresh(&self, worker: &mut timely::worker::Worker) -> Result<Loaded, String> {
        if self.data.format == Format::Program {
            // The program's dataflow brings the rows; the model's size is the job's.
            let dim = self
                .data
                .dim
                .expect("validated: a program job has data.dim");
            let (data, dim) = self.with_intercept(WorkerData::empty(dim), dim)?;
            return Ok((data, dim, None, vec![]));
        }
        if !self.data.format.is_table() {
            let part = Part {
                index: worker.index(),
                count: worker.peers(),
            };
            if self.data.train.is_none() || self.data.format == Format::Idx {
                let (data, dim) = self.load_worker_data(part.index, part.count)?;
                return Ok((data, dim, None, vec![]));
            }
            // Each worker parses its own byte range; the parts' summaries reach every worker.
            let mut share = |summary: PartSummary| -> Vec<PartSummary> {
                gather(worker, vec![(summary, 1)], |c| c)
            };
            let read = self.libsvm_part(part, None);
            let summaries = share(PartSummary::of(part, &read));
            let (mut data, dim) = self.split_libsvm(part, read, &summaries)?;
            if self.data.test.is_some() {
                let read = self.libsvm_part(part, Some(dim));
                let summaries = share(PartSummary::of(part, &read));
                first_error(&summaries)?;
                if summaries.iter().all(|s| s.rows == 0) {
                    let path = self.data.test.as_deref().unwrap_or(Path::new("data.test"));
                    return Err(format!(
                        "{}: no rows to test on (the file is empty or has only comments); \
                         remove data.test to hold out data.test_fraction of the training rows",
                        path.display()
                    ));
                }
                data.test = read?.data;
                data.ignored_test_features = summaries.iter().map(|s| s.ignored).sum();
            }
            let (data, dim) = self.with_intercept(data, dim)?;
            return Ok((data, dim, None, vec![]));
        }
        let p = crate::data::table::prepare(worker, &self.table_input())?;
        let data = WorkerData {
            train: p.train,
            test: p.test,
            ignored_test_features: 0,
            shares: Vec::new(),
        };
        let (data, dim) = self.with_intercept(data, p.map.dim)?;
        let map = toml::to_string(&p.map).map_err(|e| format!("feature map: {e}"))?;
        Ok((data, dim, Some(map), p.notes))
    }

    /// Part `part` of the training file (`test_dim: None`) or of the test file, whose features
    /// beyond the training dimension are ignored.
    pub(super) fn libsvm_part(
        &self,
        part: Part,
        test_dim: Option<u32>,
    ) -> Result<PartRows, String> {
        let d = &self.data;
        let (path, opts) = match test_dim {
            None => (
                d.train.as_ref(),
                LibsvmOptions {
                    zero_based: d.zero_based,
                    dim: d.dim,
                    ignore_beyond_dim: false,
                    max_dim: d.max_dim,
                    classes: self.classes(),
                    binary: self.loss().task() == Task::Binary,
                },
            ),
            Some(dim) => (
                d.test.as_ref(),
                LibsvmOptions {
                    zero_based: d.zero_based,
                    dim: Some(dim),
                    ignore_beyond_dim: true,
                    max_dim: d.max_dim,
                    classes: self.classes(),
                    binary: self.loss().task() == Task::Binary,
                },
            ),
        };
        let path = path.ok_or("no file to read")?;
        read_libsvm_part(path, &opts, part).map_err(|e| e.to_string())
    }

    /// This worker's training and test rows from its part of the training file, numbered
    /// after the rows of the parts before it, so that the split (hash or tail) is the whole
    /// file's for any number of workers; and the dimension, the largest of every part's.
    pub(super) fn split_libsvm(
        &self,
        part: Part,
        read: Result<PartRows, String>,
        summaries: &[PartSummary],
    ) -> Result<(WorkerData, u32), String> {
        first_error(summaries)?;
        let rows = read?.data;
        let d = &self.data;
        let dim = d
            .dim
            .unwrap_or_else(|| summaries.iter().map(|s| s.dim).max().unwrap_or(0));
        let total: u64 = summaries.iter().map(|s| s.rows).sum();
        if total == 0 {
            return Err(format!(
                "{}: no rows to train on (the file is empty or has only comments)",
                d.train
                    .as_deref()
                    .unwrap_or(std::path::Path::new("data.train"))
                    .display()
            ));
        }
        let before: u64 = summaries
            .iter()
            .filter(|s| (s.part as usize) < part.index)
            .map(|s| s.rows)
            .sum();
        let test_fraction = if d.test.is_some() {
            0.0
        } else {
            d.test_fraction
        };
        let filter = RowFilter {
            worker: 0,
            workers: 1,
            test_fraction,
            seed: self.train.seed,
            tail_from: (d.test_split == TestSplit::Tail && test_fraction > 0.0)
                .then(|| RowFilter::tail_start(total as usize, test_fraction)),
        };
        let (mut train, mut test) = rows.into_split_numbered(before as usize, &filter);
        train.dim = dim;
        test.dim = dim;
        Ok((
            WorkerData {
                train,
                test,
                ignored_test_features: 0,
                shares: Vec::new(),
            },
            dim,
        ))
    }

    /// An error naming the first label of `data` the loss cannot train or test on (a class
    /// outside `0..model.classes`), and where it is. The LibSVM and IDX readers check labels
    /// as they read them; this covers every source.
    pub(super) fn check_labels(&self, data: &WorkerData) -> Result<(), String> {
        if self.classes().is_none() {
            return Ok(()); // every finite label is one the loss reads
        }
        let loss = self.loss();
        let sides = [
            (&data.train, self.data.train.as_deref(), "training"),
            (&data.test, self.data.test.as_deref(), "test"),
        ];
        for (rows, file, side) in sides {
            if let Some((i, e)) = rows
                .labels
                .iter()
                .enumerate()
                .find_map(|(i, &l)| loss.check_label(l).err().map(|e| (i, e)))
            {
                let file = file.or(self.data.train.as_deref());
                let file = file.map_or("the generated data".into(), |f| f.display().to_string());
                return Err(format!(
                    "{file}: {side} row {} of this worker's share: {e}",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    /// [`Job::load_worker_data`] before the intercept.
    pub(super) fn load_rows(
        &self,
        worker: usize,
        workers: usize,
    ) -> Result<(WorkerData, u32), String> {
        if self.data.format.is_table() {
            return Err("a csv job's rows are prepared on timely workers: use Job::load_on".into());
        }
        if self.data.format == Format::Program {
            return Err(
                "data.format = \"program\": the rows come from the job's program, which \
                 prepares them in its dataflow"
                    .into(),
            );
        }
        let d = &self.data;
        if d.format == Format::Idx {
            return self.load_idx(worker, workers);
        }
        let mut filter = self.row_filter(worker, workers);
        // An ordered split needs the number of rows first.
        let tail = d.test_split == TestSplit::Tail && filter.test_fraction > 0.0;
        match &d.train {
            Some(_) => {
                // Without timely workers to share the parts: this worker reads every part,
                // as each worker would read its own, and combines them the same way.
                let parts: Vec<Part> = (0..workers)
                    .map(|index| Part {
                        index,
                        count: workers,
                    })
                    .collect();
                let read: Vec<_> = parts.iter().map(|&p| self.libsvm_part(p, None)).collect();
                let summaries: Vec<PartSummary> = parts
                    .iter()
                    .zip(&read)
                    .map(|(p, r)| PartSummary::of(*p, r))
                    .collect();
                let (mut data, dim) =
                    self.split_libsvm(parts[worker], read[worker].clone(), &summaries)?;
                if d.test.is_some() {
                    let read: Vec<_> = parts
                        .iter()
                        .map(|&p| self.libsvm_part(p, Some(dim)))
                        .collect();
                    let summaries: Vec<PartSummary> = parts
                        .iter()
                        .zip(&read)
                        .map(|(p, r)| PartSummary::of(*p, r))
                        .collect();
                    first_error(&summaries)?;
                    data.test = read[worker].clone()?.data;
                    data.ignored_test_features = summaries.iter().map(|s| s.ignored).sum();
                }
                Ok((data, dim))
            }
            None => {
                let mut all = d.synth.generate();
                all.dim = d.dim.unwrap_or(all.dim).max(all.dim);
                if tail {
                    filter.tail_from =
                        Some(RowFilter::tail_start(all.rows(), filter.test_fraction));
                }
                let (train, test) = all.split(&filter);
                let dim = all.dim;
                let ignored_test_features = 0;
                Ok((
                    WorkerData {
                        train,
                        test,
                        ignored_test_features,
                        shares: Vec::new(),
                    },
                    dim,
                ))
            }
        }
    }

    /// Which rows worker `worker` of `workers` keeps and holds out: `data.test_fraction` of
    /// them unless a test file is named (an ordered split's first test row is set once the
    /// rows are counted).
    pub(super) fn row_filter(&self, worker: usize, workers: usize) -> RowFilter {
        let d = &self.data;
        RowFilter {
            worker,
            workers,
            test_fraction: if d.test.is_some() {
                0.0
            } else {
                d.test_fraction
            },
            seed: self.train.seed,
            tail_from: None,
        }
    }

    /// An IDX job's rows of worker `worker` of `workers`: every worker reads the (small,
    /// compressed) files whole and keeps its rows, as with generated data.
    pub(super) fn load_idx(
        &self,
        worker: usize,
        workers: usize,
    ) -> Result<(WorkerData, u32), String> {
        let d = &self.data;
        // The images of `side` ("train" or "test"), at least one.
        let read = |images: &Option<PathBuf>, labels: &Option<PathBuf>, side: &str| {
            let (Some(images), Some(labels)) = (images, labels) else {
                return Err(format!("data.{side}, data.{side}_labels: no file to read"));
            };
            let data = crate::data::idx::read_idx(images, labels, d.max_dim, self.classes())
                .map_err(|e| e.to_string())?;
            if data.rows() == 0 {
                return Err(format!("{}: no images to {side} on", images.display()));
            }
            Ok(data)
        };
        let all = read(&d.train, &d.train_labels, "train")?;
        let mut filter = self.row_filter(worker, workers);
        if d.test_split == TestSplit::Tail && filter.test_fraction > 0.0 {
            filter.tail_from = Some(RowFilter::tail_start(all.rows(), filter.test_fraction));
        }
        let (train, mut test) = all.split(&filter);
        if let Some(path) = &d.test {
            let all_test = read(&d.test, &d.test_labels, "test")?;
            if all_test.dim != all.dim {
                return Err(format!(
                    "{}: images of {} pixels, the training images have {}",
                    path.display(),
                    all_test.dim,
                    all.dim
                ));
            }
            filter.test_fraction = 0.0;
            filter.tail_from = None;
            test = all_test.split(&filter).0;
        }
        let data = WorkerData {
            train,
            test,
            ignored_test_features: 0,
            shares: Vec::new(),
        };
        Ok((data, all.dim))
    }
}

/// What every worker needs to know of each part of a LibSVM file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(super) struct PartSummary {
    /// The part's index (summaries sort by it).
    part: u64,
    /// Its rows.
    rows: u64,
    /// One past its largest feature index (or the declared dimension).
    dim: u32,
    /// Its ignored features.
    ignored: u64,
    /// Its first error.
    error: Option<String>,
}

impl PartSummary {
    fn of(part: Part, read: &Result<PartRows, String>) -> PartSummary {
        let part = part.index as u64;
        match read {
            Ok(p) => PartSummary {
                part,
                rows: p.data.rows() as u64,
                dim: p.data.dim,
                ignored: p.ignored_features,
                error: None,
            },
            Err(e) => PartSummary {
                part,
                rows: 0,
                dim: 0,
                ignored: 0,
                error: Some(e.clone()),
            },
        }
    }
}

/// The first error in file order, which every worker reports.
pub(super) fn first_error(summaries: &[PartSummary]) -> Result<(), String> {
    match summaries.iter().find_map(|s| s.error.clone()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
