//! Reading a JSON object field by field, remembering what was read, so what is left can be
//! reported instead of dropped.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{KarpenterError, Note};

/// One object of the input (or a nested object of it) being read.
pub struct Fields<'a> {
    map: Option<&'a Map<String, Value>>,
    object: String,
    path: String,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Fields<'a> {
    /// Reads `value` of Karpenter object `object` (`NodePool default`) at `path` (empty for the
    /// whole object); an absent value reads as empty, a value that is not an object is an error.
    pub fn new(value: Option<&'a Value>, object: &str, path: &str) -> Result<Self, KarpenterError> {
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => {
                return Err(KarpenterError {
                    object: object.to_string(),
                    field: path.to_string(),
                    reason: "expected an object".into(),
                })
            }
        };
        Ok(Fields {
            map,
            object: object.to_string(),
            path: path.to_string(),
            read: RefCell::new(BTreeSet::new()),
        })
    }

    /// The full path of `key` here.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The object's `Kind name`.
    pub fn object(&self) -> &str {
        &self.object
    }

    /// The value at `key`, marked read (null reads as absent).
    pub fn take(&self, key: &str) -> Option<&'a Value> {
        self.read.borrow_mut().insert(key.to_string());
        self.map?.get(key).filter(|v| !v.is_null())
    }

    /// The nested object at `key`, marked read here; its own fields are tracked by the result.
    pub fn child(&self, key: &str) -> Result<Fields<'a>, KarpenterError> {
        let value = self.take(key);
        Fields::new(value, &self.object, &self.path_of(key))
    }

    /// The string at `key`, or an error naming it when it is not one.
    pub fn string(&self, key: &str) -> Result<Option<&'a str>, KarpenterError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.error(key, "expected a string")),
        }
    }

    /// The array at `key` (empty when absent), or an error naming it.
    pub fn array(&self, key: &str) -> Result<&'a [Value], KarpenterError> {
        match self.take(key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.error(key, "expected a list")),
        }
    }

    /// An error about `key`.
    pub fn error(&self, key: &str, reason: &str) -> KarpenterError {
        KarpenterError {
            object: self.object.clone(),
            field: self.path_of(key),
            reason: reason.to_string(),
        }
    }

    /// A note about `key`.
    pub fn note(&self, key: &str, message: impl Into<String>) -> Note {
        Note {
            object: self.object.clone(),
            field: self.path_of(key),
            message: message.into(),
        }
    }

    /// Notes every field that was not read: nothing is dropped silently.
    pub fn finish(&self, notes: &mut Vec<Note>) {
        let Some(map) = self.map else {
            return;
        };
        let read = self.read.borrow();
        for key in map.keys() {
            if !read.contains(key) {
                notes.push(self.note(key, "no joiner equivalent; not converted"));
            }
        }
    }
}
