//! A program's own component (codec, update rule) as a plan holds it: a name for people and a
//! shared factory that builds one per worker. Plans are compared and printed, factories cannot
//! be: two are equal when they have the same name and are the same factory.

use std::sync::Arc;

/// A named factory `F` (a `dyn Fn` building the component).
pub struct Named<F: ?Sized> {
    /// The component's name.
    pub name: String,
    /// Builds the component.
    pub make: Arc<F>,
}

impl<F: ?Sized> Named<F> {
    /// `make`, under `name`.
    pub fn new(name: &str, make: Arc<F>) -> Self {
        Named {
            name: name.to_string(),
            make,
        }
    }
}

impl<F: ?Sized> Clone for Named<F> {
    fn clone(&self) -> Self {
        Named::new(&self.name, self.make.clone())
    }
}

impl<F: ?Sized> std::fmt::Debug for Named<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Named({})", self.name)
    }
}

impl<F: ?Sized> PartialEq for Named<F> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.make, &other.make)
    }
}
