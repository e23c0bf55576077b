//! Taints and tolerations with the kube-scheduler's matching rules.

use std::fmt;

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// New pods are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node but may still use it.
    PreferNoSchedule,
    /// Running pods are evicted too.
    NoExecute,
}

impl Effect {
    /// Parses the API spelling.
    pub fn parse(s: &str) -> Option<Effect> {
        match s {
            "NoSchedule" => Some(Effect::NoSchedule),
            "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
            "NoExecute" => Some(Effect::NoExecute),
            _ => None,
        }
    }

    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// Effect.
    pub effect: Effect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates every taint.
    pub key: String,
    /// `Equal` when false, `Exists` when true.
    pub exists: bool,
    /// Value compared under `Equal`.
    pub value: String,
    /// Effect; `None` matches every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// True when this toleration covers the taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(e) = self.effect {
            if e != taint.effect {
                return false;
            }
        }
        if self.key.is_empty() {
            return self.exists;
        }
        if self.key != taint.key {
            return false;
        }
        self.exists || self.value == taint.value
    }
}

/// The first taint that blocks scheduling (NoSchedule / NoExecute) and is not tolerated.
/// PreferNoSchedule never blocks.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    first_untolerated_where(taints, tolerations, |e| e != Effect::PreferNoSchedule)
}

/// The first `PreferNoSchedule` taint not tolerated: what a pod avoids while it can.
pub fn first_untolerated_soft<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    first_untolerated_where(taints, tolerations, |e| e == Effect::PreferNoSchedule)
}

/// The first taint whose effect `effect` picks that no toleration covers.
fn first_untolerated_where<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effect: impl Fn(Effect) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| effect(t.effect))
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(k: &str, v: &str, e: Effect) -> Taint {
        Taint {
            key: k.into(),
            value: v.into(),
            effect: e,
        }
    }

    #[test]
    fn matching_rules() {
        let t = taint("gpu", "true", Effect::NoSchedule);
        let eq = Toleration {
            key: "gpu".into(),
            exists: false,
            value: "true".into(),
            effect: None,
        };
        assert!(eq.tolerates(&t));
        let wrong_value = Toleration {
            value: "false".into(),
            ..eq.clone()
        };
        assert!(!wrong_value.tolerates(&t));
        let all = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: None,
        };
        assert!(all.tolerates(&t));
        let other_effect = Toleration {
            effect: Some(Effect::NoExecute),
            ..eq
        };
        assert!(!other_effect.tolerates(&t));
    }

    #[test]
    fn prefer_no_schedule_never_blocks() {
        let ts = [
            taint("a", "", Effect::PreferNoSchedule),
            taint("b", "", Effect::NoExecute),
        ];
        assert_eq!(
            first_untolerated(&ts, &[]).map(|t| t.key.as_str()),
            Some("b")
        );
        assert_eq!(ts[1].to_string(), "b:NoExecute");
    }
}
