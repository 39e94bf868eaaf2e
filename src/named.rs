//! Components by name. [`Named`]: a program's own component (codec, update rule, exchange) as a
//! plan holds it, a name for people and a shared factory that builds one per worker. Plans are
//! compared and printed, factories cannot be: two are equal when they have the same name and
//! parameters and are the same factory. [`Registry`]: the one shape in which every kind of part
//! (codec, exchange, model) is found by its job-file name, the built-in ones and those a program
//! adds before it parses a job.

use std::sync::{Arc, RwLock};

/// A named factory `F` (a `dyn Fn` building the component).
pub struct Named<F: ?Sized> {
    /// The component's name.
    pub name: String,
    /// Its job-file parameters (empty for a component a program set in code).
    pub params: toml::Table,
    /// Builds the component.
    pub make: Arc<F>,
}

impl<F: ?Sized> Named<F> {
    /// `make`, under `name`.
    pub fn new(name: &str, make: Arc<F>) -> Self {
        Named {
            name: name.to_string(),
            params: toml::Table::new(),
            make,
        }
    }
}

impl<F: ?Sized> Clone for Named<F> {
    fn clone(&self) -> Self {
        Named {
            name: self.name.clone(),
            params: self.params.clone(),
            make: self.make.clone(),
        }
    }
}

impl<F: ?Sized> std::fmt::Debug for Named<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Named({})", self.name)
    }
}

impl<F: ?Sized> PartialEq for Named<F> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.params == other.params
            && Arc::ptr_eq(&self.make, &other.make)
    }
}

/// The parts of one kind by name: the built-in ones, which the kind's own code builds, and those
/// a program added with [`Registry::add`] (one line at the top of its `main`, before the job is
/// read, so that the processes `cluster` and `bench` start, which run the same executable, add
/// them too). Job files, `--help` listings and error messages see both alike.
pub struct Registry<F: ?Sized> {
    kind: &'static str,
    builtin: &'static [&'static str],
    added: RwLock<Vec<(&'static str, Arc<F>)>>,
}

impl<F: ?Sized> Registry<F> {
    /// The registry of `kind` (a word for messages: "codec"), with its built-in names.
    pub const fn new(kind: &'static str, builtin: &'static [&'static str]) -> Self {
        Registry {
            kind,
            builtin,
            added: RwLock::new(Vec::new()),
        }
    }

    /// Adds `make` under `name` and returns the name, which lives as long as the process.
    ///
    /// # Panics
    /// If `name` is empty, built in or added before (two parts under one name would make a
    /// job file mean two things).
    pub fn add(&self, name: &str, make: Arc<F>) -> &'static str {
        assert!(!name.is_empty(), "a {} needs a name", self.kind);
        let mut added = self.added.write().unwrap_or_else(|e| e.into_inner());
        let taken = self.builtin.contains(&name) || added.iter().any(|(n, _)| *n == name);
        if taken {
            drop(added);
            panic!(
                "a {} named '{name}' is already registered (names: {})",
                self.kind,
                self.names().join(", ")
            );
        }
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        added.push((name, make));
        name
    }

    /// The added part of `name` (None for a built-in or unknown name).
    pub fn added(&self, name: &str) -> Option<(&'static str, Arc<F>)> {
        let added = self.added.read().unwrap_or_else(|e| e.into_inner());
        added.iter().find(|(n, _)| *n == name).cloned()
    }

    /// Every name: the built-in ones in their order, then the added ones in theirs.
    pub fn names(&self) -> Vec<&'static str> {
        let added = self.added.read().unwrap_or_else(|e| e.into_inner());
        let added = added.iter().map(|(n, _)| *n);
        self.builtin.iter().copied().chain(added).collect()
    }

    /// The error for a name that is neither built in nor added.
    pub fn unknown(&self, name: &str) -> String {
        format!(
            "unknown {} '{name}' (expected {})",
            self.kind,
            self.names().join(", ")
        )
    }
}

/// Serde for a kind of part by its name, as job files write it: `Serialize` writes the
/// kind's `name()`, `Deserialize` parses the name with its `FromStr` (whose error, the
/// registry's, lists the names there are).
macro_rules! serde_by_name {
    ($kind:ty) => {
        impl serde::Serialize for $kind {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $kind {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = <String as serde::Deserialize>::deserialize(d)?;
                name.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_by_name;

#[cfg(test)]
mod tests {
    use super::*;

    type Make = dyn Fn() -> u32 + Send + Sync;

    #[test]
    fn added_parts_follow_the_built_in_ones_and_unknown_names_list_both() {
        static PARTS: Registry<Make> = Registry::new("part", &["one", "two"]);
        assert!(
            PARTS.added("one").is_none(),
            "built-in parts are built by their kind"
        );
        let name = PARTS.add("three", Arc::new(|| 3));
        assert_eq!(name, "three");
        let (found, make) = PARTS.added("three").unwrap();
        assert_eq!((found, make()), ("three", 3));
        assert_eq!(PARTS.names(), ["one", "two", "three"]);
        assert_eq!(
            PARTS.unknown("four"),
            "unknown part 'four' (expected one, two, three)"
        );
    }

    #[test]
    fn a_taken_name_is_refused() {
        static PARTS: Registry<Make> = Registry::new("part", &["one"]);
        PARTS.add("two", Arc::new(|| 2));
        for taken in ["one", "two"] {
            let e = std::panic::catch_unwind(|| PARTS.add(taken, Arc::new(|| 0))).unwrap_err();
            let e = e.downcast_ref::<String>().unwrap();
            assert!(
                e.contains("already registered") && e.contains("one, two"),
                "{e}"
            );
        }
        let e = std::panic::catch_unwind(|| PARTS.add("", Arc::new(|| 0))).unwrap_err();
        assert_eq!(e.downcast_ref::<String>().unwrap(), "a part needs a name");
        // The registry still works after a refused name (its lock is not poisoned).
        assert_eq!(PARTS.names(), ["one", "two"]);
    }
}
