//! Label requirements with Kubernetes node-affinity semantics.
//!
//! One representation serves pods (nodeSelector, node-affinity terms), Provisioners and node
//! claims, so compatibility and narrowing are a single intersection. A requirement is a set of
//! allowed values (possibly the complement of a listed set, possibly bounded as an integer) plus
//! whether a node *without* the label satisfies it (true for NotIn and DoesNotExist).

use std::collections::BTreeMap;
use std::fmt;

use crate::error::RequirementError;
use crate::labels;

/// Node-selector operators as the Kubernetes API spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label is one of the values.
    In,
    /// The label is absent or none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than the value.
    Gt,
    /// The label is an integer less than the value.
    Lt,
}

impl Operator {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }

    /// Parses the API spelling; unknown operators are an error naming the spelling.
    pub fn parse(s: &str) -> Result<Operator, RequirementError> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            other => return Err(RequirementError::UnknownOperator(other.to_string())),
        })
    }
}

/// A requirement's listed values: sorted, without duplicates. A vector rather than a set, since
/// most hold one or two values and a set's node has room for eleven.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ValueSet(Vec<String>);

impl ValueSet {
    fn contains(&self, value: &str) -> bool {
        self.0.binary_search_by(|v| v.as_str().cmp(value)).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn union(&self, other: &ValueSet) -> ValueSet {
        self.0.iter().chain(&other.0).cloned().collect()
    }

    /// The values of `self` not in `other`.
    fn without(&self, other: &ValueSet) -> ValueSet {
        ValueSet(
            self.0
                .iter()
                .filter(|v| !other.contains(v))
                .cloned()
                .collect(),
        )
    }

    /// The values in both.
    fn common(&self, other: &ValueSet) -> ValueSet {
        ValueSet(
            self.0
                .iter()
                .filter(|v| other.contains(v))
                .cloned()
                .collect(),
        )
    }
}

impl FromIterator<String> for ValueSet {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        let mut values: Vec<String> = iter.into_iter().collect();
        values.sort_unstable();
        values.dedup();
        values.shrink_to_fit();
        ValueSet(values)
    }
}

/// The constraint on one label key.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    complement: bool,
    values: ValueSet,
    gte: Option<i64>,
    lte: Option<i64>,
    absent_ok: bool,
}

impl Requirement {
    /// Builds a requirement from an operator and its values, validating the value count.
    pub fn new<S: AsRef<str>>(op: Operator, values: &[S]) -> Result<Self, RequirementError> {
        let set: ValueSet = values.iter().map(|v| v.as_ref().to_string()).collect();
        let r = match op {
            Operator::In | Operator::NotIn if set.is_empty() => {
                return Err(RequirementError::MissingValues(op));
            }
            Operator::Exists | Operator::DoesNotExist if !set.is_empty() => {
                return Err(RequirementError::UnexpectedValues(op));
            }
            Operator::Gt | Operator::Lt => {
                if set.len() != 1 {
                    return Err(RequirementError::BoundNeedsOneValue(op));
                }
                let raw = set.0.first().map(String::as_str).unwrap_or_default();
                let n: i64 = raw
                    .parse()
                    .map_err(|_| RequirementError::BoundNotInteger(op, raw.to_string()))?;
                let (gte, lte) = if op == Operator::Gt {
                    (Some(n.saturating_add(1)), None)
                } else {
                    (None, Some(n.saturating_sub(1)))
                };
                Requirement {
                    complement: true,
                    values: ValueSet::default(),
                    gte,
                    lte,
                    absent_ok: false,
                }
            }
            Operator::In => Requirement {
                complement: false,
                values: set,
                gte: None,
                lte: None,
                absent_ok: false,
            },
            Operator::NotIn => Requirement {
                complement: true,
                values: set,
                gte: None,
                lte: None,
                absent_ok: true,
            },
            Operator::Exists => Requirement::any(),
            Operator::DoesNotExist => Requirement {
                complement: false,
                values: ValueSet::default(),
                gte: None,
                lte: None,
                absent_ok: true,
            },
        };
        Ok(r)
    }

    /// `In [value]`.
    pub fn single(value: &str) -> Self {
        let values = ValueSet(vec![value.to_string()]);
        Requirement {
            complement: false,
            values,
            gte: None,
            lte: None,
            absent_ok: false,
        }
    }

    /// `In [values...]`; an empty list allows nothing.
    pub fn one_of<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            gte: None,
            lte: None,
            absent_ok: false,
        }
    }

    /// `Exists`.
    pub fn any() -> Self {
        Requirement {
            complement: true,
            values: ValueSet::default(),
            gte: None,
            lte: None,
            absent_ok: false,
        }
    }

    /// True when a node carrying the label with this value satisfies the requirement.
    pub fn allows(&self, value: &str) -> bool {
        if self.gte.is_some() || self.lte.is_some() {
            let Ok(n) = value.parse::<i64>() else {
                return false;
            };
            if self.gte.is_some_and(|g| n < g) || self.lte.is_some_and(|l| n > l) {
                return false;
            }
        }
        self.values.contains(value) != self.complement
    }

    /// True when a node without the label satisfies the requirement.
    pub fn allows_absent(&self) -> bool {
        self.absent_ok
    }

    /// True when some label value satisfies the requirement.
    pub fn allows_some_value(&self) -> bool {
        if let (Some(g), Some(l)) = (self.gte, self.lte) {
            if g > l {
                return false;
            }
        }
        self.complement || !self.values.is_empty()
    }

    /// True when neither a value nor absence satisfies it: nothing can ever match.
    pub fn is_unsatisfiable(&self) -> bool {
        !self.allows_some_value() && !self.absent_ok
    }

    /// The explicit values of an `In` requirement, if it is one.
    pub fn in_values(&self) -> Option<&[String]> {
        (!self.complement).then_some(self.values.0.as_slice())
    }

    /// The values when a node must carry exactly one of them: a finite, non-empty set.
    pub fn single_value(&self) -> Option<&str> {
        if !self.complement && self.values.len() == 1 && !self.absent_ok {
            self.values.0.first().map(String::as_str)
        } else {
            None
        }
    }

    /// What a node must have for this requirement not to hold (`In` ↔ `NotIn`, `Exists` ↔
    /// `DoesNotExist`), to keep a pod off the nodes a selector picks. `None` for a bound
    /// (`Gt`, `Lt`), whose negation is two ranges no one requirement states.
    pub fn negation(&self) -> Option<Requirement> {
        if self.gte.is_some() || self.lte.is_some() {
            return None;
        }
        Some(Requirement {
            complement: !self.complement,
            values: self.values.clone(),
            gte: None,
            lte: None,
            absent_ok: !self.absent_ok,
        })
    }

    /// Both requirements at once.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let gte = match (self.gte, other.gte) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let lte = match (self.lte, other.lte) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values)),
            (true, false) => (false, other.values.without(&self.values)),
            (false, true) => (false, self.values.without(&other.values)),
            (false, false) => (false, self.values.common(&other.values)),
        };
        let mut r = Requirement {
            complement,
            values,
            gte,
            lte,
            absent_ok: self.absent_ok && other.absent_ok,
        };
        if !r.complement && (r.gte.is_some() || r.lte.is_some()) {
            let (g, l) = (r.gte, r.lte);
            r.values.0.retain(|v| {
                v.parse::<i64>()
                    .is_ok_and(|n| g.is_none_or(|g| n >= g) && l.is_none_or(|l| n <= l))
            });
        }
        r
    }

    /// True when some node (with some value, or without the label) satisfies both.
    pub fn compatible(&self, other: &Requirement) -> bool {
        !self.intersect(other).is_unsatisfiable()
    }

    /// The requirement as node-selector expressions on its key (ANDed, as Kubernetes ANDs the
    /// expressions of one term), for writing it into an object such as a NodeClaim. Nothing
    /// (an empty list) means no constraint. A set of values that a node may also lack (which
    /// no single expression says) is written as `In` those values, the narrower reading: it
    /// never admits a node the requirement refuses. An unsatisfiable requirement is `In []`,
    /// which the API refuses rather than reading as no constraint.
    pub fn to_expressions(&self) -> Vec<(Operator, Vec<String>)> {
        let values: Vec<String> = self.values.0.clone();
        if !self.complement {
            return if values.is_empty() && self.absent_ok {
                vec![(Operator::DoesNotExist, Vec::new())]
            } else {
                vec![(Operator::In, values)]
            };
        }
        let mut out = Vec::new();
        if !values.is_empty() {
            out.push((Operator::NotIn, values));
        }
        if let Some(g) = self.gte {
            out.push((Operator::Gt, vec![g.saturating_sub(1).to_string()]));
        }
        if let Some(l) = self.lte {
            out.push((Operator::Lt, vec![l.saturating_add(1).to_string()]));
        }
        let bounded = self.gte.is_some() || self.lte.is_some();
        if !self.absent_ok && !bounded {
            out.push((Operator::Exists, Vec::new()));
        }
        out
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &ValueSet| v.0.join(" ");
        if self.complement {
            match (self.gte, self.lte) {
                (Some(g), None) => write!(f, "Gt {}", g.saturating_sub(1))?,
                (None, Some(l)) => write!(f, "Lt {}", l.saturating_add(1))?,
                (Some(g), Some(l)) => {
                    write!(f, "Gt {} Lt {}", g.saturating_sub(1), l.saturating_add(1))?
                }
                (None, None) if self.values.is_empty() && self.absent_ok => {}
                (None, None) if self.values.is_empty() => write!(f, "Exists")?,
                (None, None) => {}
            }
            if !self.values.is_empty() {
                if self.gte.is_some() || self.lte.is_some() {
                    write!(f, " ")?;
                }
                write!(f, "NotIn [{}]", list(&self.values))?;
            }
            Ok(())
        } else if self.values.is_empty() && self.absent_ok {
            write!(f, "DoesNotExist")
        } else if self.values.is_empty() {
            // What two disagreeing `In` sets leave: nothing matches.
            write!(f, "In []")
        } else {
            write!(f, "In [{}]", list(&self.values))
        }
    }
}

impl fmt::Debug for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Requirements on several keys, all of which must hold. Keys are normalized GA names.
///
/// Kept as a vector sorted by key rather than a map: a pod's selectors and node terms hold one
/// to three keys, and a map's node (room for eleven entries) made each of them a kilobyte, in
/// every pod the controller keeps and every snapshot it takes.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirements {
    by_key: Vec<(String, Requirement)>,
}

impl Requirements {
    /// No constraint at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a requirement, intersecting with what the key already has.
    pub fn add(&mut self, key: &str, req: Requirement) {
        let key = labels::normalize(key);
        match self.position(key) {
            Ok(i) => {
                let cur = &mut self.by_key[i].1;
                *cur = cur.intersect(&req);
            }
            Err(i) => self.by_key.insert(i, (key.to_string(), req)),
        }
    }

    /// Parses and adds `key op values`.
    pub fn add_parsed<S: AsRef<str>>(
        &mut self,
        key: &str,
        op: &str,
        values: &[S],
    ) -> Result<(), RequirementError> {
        if key.is_empty() {
            return Err(RequirementError::EmptyKey);
        }
        let op = Operator::parse(op)?;
        self.add(key, Requirement::new(op, values)?);
        Ok(())
    }

    /// The requirement on one key.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.find(labels::normalize(key))
    }

    /// Where `key` (already normalized) is, or would be inserted.
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.by_key.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    fn find(&self, key: &str) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.by_key[i].1)
    }

    /// All constraints, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.by_key.iter().map(|(k, r)| (k, r))
    }

    /// True when no key is constrained.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Number of constrained keys.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Both sets of requirements at once.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        for (k, r) in &other.by_key {
            out.add(k, r.clone());
        }
        out
    }

    /// The first key on which the two cannot both hold.
    pub fn conflict<'a>(&self, other: &'a Requirements) -> Option<&'a str> {
        for (k, r) in &other.by_key {
            if let Some(mine) = self.find(k) {
                if !mine.compatible(r) {
                    return Some(k.as_str());
                }
            }
        }
        None
    }

    /// True when a node with exactly these labels satisfies every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.first_unmatched_label(labels).is_none()
    }

    /// The first key a node with these labels fails.
    pub fn first_unmatched_label(&self, labels: &BTreeMap<String, String>) -> Option<&str> {
        self.by_key
            .iter()
            .find(|(k, r)| match labels.get(k.as_str()) {
                Some(v) => !r.allows(v),
                None => !r.allows_absent(),
            })
            .map(|(k, _)| k.as_str())
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, r) in &self.by_key {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{self}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_read_back_to_the_same_requirement() {
        let cases: Vec<Requirement> = vec![
            Requirement::new(Operator::In, &["a", "b"]).expect("in"),
            Requirement::new(Operator::NotIn, &["a"]).expect("notin"),
            Requirement::any(),
            Requirement::new(Operator::DoesNotExist, &[] as &[&str]).expect("dne"),
            Requirement::new(Operator::Gt, &["4"]).expect("gt"),
            Requirement::new(Operator::Gt, &["4"])
                .expect("gt")
                .intersect(&Requirement::new(Operator::Lt, &["9"]).expect("lt")),
            Requirement::new(Operator::NotIn, &["a"])
                .expect("notin")
                .intersect(&Requirement::any()),
        ];
        for r in cases {
            // Start from "anything, or absent" (NotIn a value no case uses).
            let mut back = Requirement::new(Operator::NotIn, &["-"]).expect("anything");
            let mut absent_ok = true;
            let exprs = r.to_expressions();
            assert!(!exprs.is_empty(), "{r}");
            for (op, values) in &exprs {
                let e = Requirement::new(*op, values).expect("valid expression");
                absent_ok &= e.allows_absent();
                back = back.intersect(&e);
            }
            for v in ["a", "b", "c", "3", "5", "10"] {
                assert_eq!(back.allows(v), r.allows(v), "{r} on {v}: {exprs:?}");
            }
            assert_eq!(absent_ok, r.allows_absent(), "{r}: {exprs:?}");
        }
    }

    fn req(op: &str, v: &[&str]) -> Requirement {
        Requirement::new(Operator::parse(op).unwrap(), v).unwrap()
    }

    #[test]
    fn a_negation_holds_exactly_where_the_requirement_does_not() {
        for r in [
            req("In", &["a", "b"]),
            req("NotIn", &["a"]),
            req("Exists", &[]),
            req("DoesNotExist", &[]),
        ] {
            let n = r.negation().expect("negatable");
            for v in ["a", "b", "c"] {
                assert_ne!(n.allows(v), r.allows(v), "{r} on {v}");
            }
            assert_ne!(n.allows_absent(), r.allows_absent(), "{r} when absent");
        }
        assert!(req("Gt", &["4"]).negation().is_none());
        assert!(req("Lt", &["4"]).negation().is_none());
    }

    #[test]
    fn operators_match_kubernetes() {
        assert!(req("In", &["a", "b"]).allows("a"));
        assert!(!req("In", &["a"]).allows_absent());
        assert!(req("NotIn", &["a"]).allows_absent());
        assert!(!req("NotIn", &["a"]).allows("a"));
        assert!(req("Exists", &[]).allows("x"));
        assert!(!req("Exists", &[]).allows_absent());
        assert!(req("DoesNotExist", &[]).allows_absent());
        assert!(!req("DoesNotExist", &[]).allows("x"));
        assert!(req("Gt", &["4"]).allows("5"));
        assert!(!req("Gt", &["4"]).allows("4"));
        assert!(!req("Gt", &["4"]).allows("abc"));
        assert!(req("Lt", &["4"]).allows("3"));
    }

    #[test]
    fn intersections() {
        let a = req("In", &["a", "b", "c"]).intersect(&req("NotIn", &["b"]));
        assert_eq!(a.to_string(), "In [a c]");
        let b = req("In", &["2", "8", "64"]).intersect(&req("Gt", &["4"]));
        assert_eq!(b.to_string(), "In [64 8]");
        let c = req("Gt", &["4"]).intersect(&req("Lt", &["3"]));
        assert!(c.is_unsatisfiable());
        let d = req("NotIn", &["a"]).intersect(&req("DoesNotExist", &[]));
        assert!(!d.is_unsatisfiable(), "both admit absence");
        assert!(!req("In", &["a"]).compatible(&req("DoesNotExist", &[])));
        assert!(req("NotIn", &["a"]).compatible(&req("NotIn", &["b"])));
    }

    #[test]
    fn validation_errors() {
        assert!(Requirement::new::<&str>(Operator::In, &[]).is_err());
        assert!(Requirement::new(Operator::Exists, &["x"]).is_err());
        assert!(Requirement::new(Operator::Gt, &["x"]).is_err());
        assert!(Requirement::new(Operator::Gt, &["1", "2"]).is_err());
        assert!(Operator::parse("Equals").is_err());
    }

    #[test]
    fn keys_are_normalized_and_label_matching() {
        let mut r = Requirements::new();
        r.add_parsed("failure-domain.beta.kubernetes.io/zone", "In", &["z1"])
            .unwrap();
        assert!(r.get(labels::ZONE).is_some());
        let mut node = BTreeMap::new();
        node.insert(labels::ZONE.to_string(), "z1".to_string());
        assert!(r.matches_labels(&node));
        r.add_parsed("team", "NotIn", &["x"]).unwrap();
        assert!(r.matches_labels(&node), "absent label satisfies NotIn");
        r.add_parsed("rack", "In", &["r1"]).unwrap();
        assert_eq!(r.first_unmatched_label(&node), Some("rack"));
    }
}
