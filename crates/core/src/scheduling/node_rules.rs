//! Per-node rules — hostname anti-affinity, hostname topology spread and host ports — as counts.
//!
//! Every distinct term becomes one rule; a class has a role in a rule (it *counts* because it
//! matches the term's selector or binds the port, and/or it is *constrained* because it carries
//! the term). A node keeps, per rule it touches, how many pods count, how many are constrained
//! and how many take part at all. Whether `k` more pods of a class may join is then a few integer
//! comparisons, never a scan of the pods already there: 5,000 mutually anti-affine pods are one
//! rule with a cap of one pod per node, not 12.5 million pairs.

use crate::labels;
use crate::pod::Pod;

use super::affinity::Scope;
use super::classes::PodClass;
use super::ports::PortKey;

/// How a rule limits the pods on one node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// Once a constrained pod is on the node, at most `limit` counted pods may be (hostname
    /// spread with `maxSkew`, host ports with 1).
    Budget {
        /// Counted pods allowed.
        limit: i64,
    },
    /// A constrained pod (the one with the anti-affinity term) and a counted pod (one its
    /// selector matches) are never together, unless they are the same single pod.
    Exclusive,
}

/// A class's (or running pod's) part in one rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Role {
    /// Counts toward the rule (matches the selector, binds the port).
    pub counts: bool,
    /// Carries the rule.
    pub constrained: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    counted: i64,
    constrained: i64,
    involved: i64,
}

/// What one node holds, per rule it touches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    entries: Vec<(usize, Counts)>,
}

impl NodeState {
    fn get(&self, rule: usize) -> Counts {
        self.entries
            .iter()
            .find(|(r, _)| *r == rule)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    fn bump(&mut self, rule: usize, role: Role, k: i64) {
        let i = match self.entries.iter().position(|(r, _)| *r == rule) {
            Some(i) => i,
            None => {
                self.entries.push((rule, Counts::default()));
                self.entries.len() - 1
            }
        };
        let c = &mut self.entries[i].1;
        if role.counts {
            c.counted += k;
        }
        if role.constrained {
            c.constrained += k;
        }
        c.involved += k;
    }
}

/// The rule set of one scheduling pass.
#[derive(Clone, Debug, Default)]
pub struct NodeRules {
    kinds: Vec<RuleKind>,
    descriptions: Vec<String>,
    of_class: Vec<Vec<(usize, Role)>>,
    scopes: Vec<Option<Scope>>,
    repeller_terms: Vec<Option<Scope>>,
    ports: Vec<Option<(PortKey, bool)>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum RuleId {
    Spread(Scope, i64),
    Anti(Scope),
    Port(PortKey),
}

impl NodeRules {
    /// Builds the rules from the hard per-node terms of the classes' effective pods and of the
    /// running pods (whose anti-affinity repels newcomers).
    pub fn build(pods: &[Pod], templates: &[Pod], classes: &[PodClass]) -> NodeRules {
        debug_assert_eq!(templates.len(), classes.len());
        let mut ids: foldhash::HashMap<RuleId, usize> = foldhash::HashMap::default();
        let mut rules = NodeRules {
            of_class: vec![Vec::new(); classes.len()],
            ..NodeRules::default()
        };
        let mut intern = |rules: &mut NodeRules, id: RuleId| -> usize {
            if let Some(&i) = ids.get(&id) {
                return i;
            }
            let i = rules.kinds.len();
            let (kind, desc, scope, repel, port) = match &id {
                RuleId::Spread(s, l) => (
                    RuleKind::Budget { limit: *l },
                    format!(
                        "topology spread on {} (maxSkew {l}) of pods {}",
                        labels::HOSTNAME,
                        describe_selector(s)
                    ),
                    Some(s.clone()),
                    None,
                    None,
                ),
                RuleId::Anti(s) => (
                    RuleKind::Exclusive,
                    format!(
                        "pod anti-affinity on {} to pods {}",
                        labels::HOSTNAME,
                        describe_selector(s)
                    ),
                    Some(s.clone()),
                    Some(s.clone()),
                    None,
                ),
                RuleId::Port(k) => (
                    RuleKind::Budget { limit: 1 },
                    format!("host port {}", k.describe()),
                    None,
                    None,
                    Some((k.clone(), true)),
                ),
            };
            rules.kinds.push(kind);
            rules.descriptions.push(desc);
            rules.scopes.push(scope);
            rules.repeller_terms.push(repel);
            rules.ports.push(port);
            ids.insert(id, i);
            i
        };
        // Rules carried by pending classes.
        let mut carried: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
        for (ci, p) in templates.iter().enumerate() {
            for s in &p.topology_spread {
                if s.hard && s.topology_key == labels::HOSTNAME {
                    let r = intern(
                        &mut rules,
                        RuleId::Spread(Scope::of_spread(p, s), i64::from(s.max_skew.max(1))),
                    );
                    carried[ci].push(r);
                }
            }
            // A pending pod is held to every term it still carries (preferences not relaxed
            // are in force).
            for a in &p.affinity {
                if a.anti && a.topology_key == labels::HOSTNAME {
                    let r = intern(&mut rules, RuleId::Anti(Scope::of_term(p, a)));
                    carried[ci].push(r);
                }
            }
            for hp in &p.host_ports {
                let r = intern(&mut rules, RuleId::Port(PortKey::of(hp)));
                carried[ci].push(r);
            }
        }
        // Anti-affinity of running pods repels pending ones.
        for p in pods.iter().filter(|p| p.node_name.is_some()) {
            for a in &p.affinity {
                if a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME {
                    intern(&mut rules, RuleId::Anti(Scope::of_term(p, a)));
                }
            }
        }
        for (ci, p) in templates.iter().enumerate() {
            for r in 0..rules.kinds.len() {
                let role = rules.role_of(r, p, carried[ci].contains(&r));
                if role.counts || role.constrained {
                    rules.of_class[ci].push((r, role));
                }
            }
        }
        rules
    }

    /// The role a pod with these properties has in rule `r`; `carries` says whether the pod
    /// itself carries the rule's term.
    fn role_of(&self, r: usize, p: &Pod, carries: bool) -> Role {
        if let Some((key, _)) = &self.ports[r] {
            let keys: Vec<PortKey> = p.host_ports.iter().map(PortKey::of).collect();
            let exact = keys.iter().any(|k| k == key);
            // A wildcard binding's rule also counts the specific addresses on its port; those
            // do not clash with each other, so they count without being constrained.
            let counts = exact || (key.ip.is_none() && keys.iter().any(|k| k.clashes(key)));
            return Role {
                counts,
                constrained: exact,
            };
        }
        let counts = self.scopes[r].as_ref().is_some_and(|s| s.matches(p));
        let constrained = carries
            || self.repeller_terms[r].as_ref().is_some_and(|s| {
                p.affinity.iter().any(|a| {
                    a.anti
                        && a.weight.is_none()
                        && a.topology_key == labels::HOSTNAME
                        && Scope::of_term(p, a) == *s
                })
            });
        Role {
            counts,
            constrained,
        }
    }

    /// True when no rule exists (the common case: nothing to count).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// True when class `c` takes part in some rule.
    pub fn touches(&self, c: usize) -> bool {
        !self.of_class[c].is_empty()
    }

    /// The state of a node from the pods running on it.
    pub fn running_state<'p>(&self, running: impl Iterator<Item = &'p Pod>) -> NodeState {
        let mut st = NodeState::default();
        if self.is_empty() {
            return st;
        }
        for p in running {
            for r in 0..self.kinds.len() {
                let role = self.role_of(r, p, false);
                if role.counts || role.constrained {
                    st.bump(r, role, 1);
                }
            }
        }
        st
    }

    /// How many more pods of class `c` a node in state `st` may take.
    pub fn cap(&self, c: usize, st: &NodeState) -> i64 {
        let mut cap = i64::MAX;
        for &(r, role) in &self.of_class[c] {
            cap = cap.min(self.rule_cap(r, role, st.get(r)));
            if cap == 0 {
                break;
            }
        }
        cap
    }

    /// The first rule that keeps class `c` off a node in state `st`, described for people.
    pub fn blocking(&self, c: usize, st: &NodeState) -> Option<&str> {
        self.of_class[c]
            .iter()
            .find(|&&(r, role)| self.rule_cap(r, role, st.get(r)) == 0)
            .map(|&(r, _)| self.descriptions[r].as_str())
    }

    fn rule_cap(&self, r: usize, role: Role, c: Counts) -> i64 {
        match self.kinds[r] {
            RuleKind::Budget { limit } => {
                if !role.constrained && c.constrained == 0 {
                    i64::MAX
                } else if role.counts {
                    (limit - c.counted).max(0)
                } else if c.counted <= limit {
                    i64::MAX
                } else {
                    0
                }
            }
            RuleKind::Exclusive => match (role.constrained, role.counts) {
                (true, true) => (1 - c.involved).max(0),
                (true, false) => {
                    if c.counted == 0 {
                        i64::MAX
                    } else {
                        0
                    }
                }
                (false, true) => {
                    if c.constrained == 0 {
                        i64::MAX
                    } else {
                        0
                    }
                }
                (false, false) => i64::MAX,
            },
        }
    }

    /// The rules class `c` takes part in, described for people.
    pub fn describe_class(&self, c: usize) -> Vec<String> {
        self.of_class[c]
            .iter()
            .map(|&(r, role)| {
                let part = match (role.constrained, role.counts) {
                    (true, true) => "carries and is counted by",
                    (true, false) => "carries",
                    _ => "is counted by",
                };
                format!("{part} {}", self.descriptions[r])
            })
            .collect()
    }

    /// Records `k` pods of class `c` on a node.
    pub fn add(&self, c: usize, k: i64, st: &mut NodeState) {
        for &(r, role) in &self.of_class[c] {
            st.bump(r, role, k);
        }
    }
}

/// `app In [web]`, or `(any)` for an empty selector.
pub fn describe_selector(s: &Scope) -> String {
    if s.selector.is_empty() {
        "(any)".to_string()
    } else {
        s.selector.to_string()
    }
}
