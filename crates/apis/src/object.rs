//! Naming an API object in messages.

use std::fmt;

/// Kind and name of the object an error is about, printed as `Provisioner "gpu"` so a person
/// can find it with `kubectl get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind (Provisioner, NodeTemplate, NodeClaim).
    pub kind: &'static str,
    /// metadata.name; empty when the manifest has none.
    pub name: String,
}

impl ObjectRef {
    /// A reference from a kind and a name.
    pub fn new(kind: &'static str, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.kind, self.name)
    }
}
