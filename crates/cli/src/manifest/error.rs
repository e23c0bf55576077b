//! Errors of the manifest loader.
//!
//! A person fixing a manifest needs to know which file, which document in it, which object and
//! which field; every variant carries what is known of those, and the messages read like
//! `web.yaml: document 2 (Deployment default/web): spec.template.spec.containers[0].resources.requests.cpu: invalid quantity "abc"`.

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Where in the input a document sits: file, document number (1-based) and, inside a `List`,
/// the item number (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// Document number in the file, from 1.
    pub document: usize,
    /// Item number inside a `List` document, from 1.
    pub item: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.path.display(), self.document)?;
        if let Some(item) = self.item {
            write!(f, ", item {item}")?;
        }
        Ok(())
    }
}

/// Why the manifests could not be loaded.
#[derive(Debug, Error)]
pub enum ManifestError {
    /// A file or folder that cannot be read (missing, unreadable, not UTF-8).
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Input that holds no Kubernetes object at all: an empty file, `/dev/null`, a folder
    /// without YAML. A plan of nothing would look like "nothing to do".
    #[error("no Kubernetes objects found in {}", list_paths(paths))]
    Empty {
        /// The paths given.
        paths: Vec<PathBuf>,
    },
    /// Text that is not YAML.
    #[error("{}: document {document}: malformed YAML at line {line}, column {column}: {message}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Document number, from 1.
        document: usize,
        /// Line in the file, from 1.
        line: usize,
        /// Column, from 1.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A document that is not a Kubernetes object (no mapping, no kind).
    #[error("{location}: {reason}")]
    NotAnObject {
        /// Where.
        location: Location,
        /// What is wrong.
        reason: String,
    },
    /// A Karpenter object that cannot be converted.
    #[error("{object}: {field}: {reason}")]
    Converted {
        /// `Kind name`.
        object: String,
        /// The field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An object with a field that is wrong or unsupported.
    #[error("{location} ({object}): {field}: {reason}")]
    Invalid {
        /// Where.
        location: Location,
        /// `Kind namespace/name` or `Kind name`.
        object: String,
        /// Field path inside the object.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// A problem with one field, before it is placed in a file and document (shared with the
/// controller through `joiner_apis::convert`).
pub(crate) use joiner_apis::convert::FieldError;

fn list_paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}
