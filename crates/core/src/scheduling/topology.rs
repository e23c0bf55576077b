//! Zone and capacity-type constraints: topology spread, pod affinity and anti-affinity on
//! `topology.kubernetes.io/zone` and `karpenter.sh/capacity-type`.
//!
//! These domains are few, so they are decided up front, pod by pod, with counts per (term,
//! domain): each pod of a constrained class goes to the allowed domain with the fewest matching
//! pods (water-filling against what already runs there, which is what the kube-scheduler's skew
//! rule accepts), to a domain holding its affinity partners, and away from domains holding pods
//! its anti-affinity (or theirs) rejects. Pods with the same choice form a sub-class pinned to
//! that domain by a requirement (`zone In [z]`), which the packer and the existing-node pass
//! honor like any node selector. Spot or on-demand among several allowed capacity types is still
//! the offering's choice, unless a spread pins it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::instance_type::InstanceType;
use crate::labels;
use crate::pod::{Node, Pod};
use crate::provisioner::Provisioner;
use crate::requirements::{Requirement, Requirements};

use super::affinity::Scope;
use super::classes::PodClass;
use super::node_rules::describe_selector;

/// Topology keys decided here.
pub const KEYS: [&str; 2] = [labels::ZONE, labels::CAPACITY_TYPE];

/// The classes after pinning, and the pods no domain admits.
pub struct Pinned {
    /// Classes, constrained ones split by domain and pinned.
    pub classes: Vec<PodClass>,
    /// Pods (snapshot indices) that no domain admits, with the reason.
    pub refused: Vec<(usize, String)>,
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Group {
    key: &'static str,
    scope: Scope,
}

#[derive(Clone)]
struct Spread {
    group: usize,
    max_skew: i64,
    min_domains: i64,
}

/// A class's terms on one topology key.
#[derive(Default, Clone)]
struct Terms {
    spreads: Vec<Spread>,
    affinity: Vec<usize>,
    anti: Vec<usize>,
    /// The required ones among `anti`: they repel other pods.
    anti_required: Vec<usize>,
    /// Groups whose scope matches the class (its pods count there).
    matches: Vec<usize>,
    /// Anti groups whose repellers reject the class.
    repelled_by: Vec<usize>,
}

impl Terms {
    fn is_constrained(&self) -> bool {
        !self.spreads.is_empty() || !self.affinity.is_empty() || !self.anti.is_empty()
    }
}

/// The domains a topology key can take for new and existing nodes: the zones (or capacity
/// types) some provisioner allows and some offering (or existing node) has.
pub fn base_domains(
    key: &str,
    provs: &[&Provisioner],
    catalog: &[InstanceType],
    nodes: &[Node],
) -> BTreeSet<String> {
    let mut offered: BTreeSet<String> = BTreeSet::new();
    for t in catalog {
        for o in t.offerings.iter().filter(|o| o.available) {
            offered.insert(if key == labels::ZONE {
                o.zone.clone()
            } else {
                o.capacity_type.as_str().to_string()
            });
        }
    }
    let mut out = BTreeSet::new();
    for p in provs {
        let reqs = p.node_requirements();
        for d in &offered {
            if reqs.get(key).is_none_or(|r| r.allows(d)) {
                out.insert(d.clone());
            }
        }
    }
    for n in nodes {
        if let Some(v) = n.labels.get(key) {
            out.insert(v.clone());
        }
    }
    out
}

/// True when some of the node terms allow the domain value.
fn terms_allow(terms: &[Requirements], key: &str, value: &str) -> bool {
    terms.is_empty()
        || terms
            .iter()
            .any(|t| t.get(key).is_none_or(|r| r.allows(value)))
}

/// Splits the classes that take part in zone or capacity-type terms into pinned sub-classes.
pub fn pin(
    pods: &[Pod],
    nodes: &[Node],
    classes: Vec<PodClass>,
    provs: &[&Provisioner],
    catalog: &[InstanceType],
) -> Pinned {
    let mut groups: Vec<Group> = Vec::new();
    let mut gid: HashMap<Group, usize> = HashMap::new();
    let mut intern = |g: Group| -> usize {
        *gid.entry(g.clone()).or_insert_with(|| {
            groups.push(g);
            groups.len() - 1
        })
    };
    let is_key = |k: &str| KEYS.contains(&k);
    // Terms of each class, per key.
    let mut terms: Vec<[Terms; 2]> = Vec::with_capacity(classes.len());
    for c in &classes {
        let p = &pods[c.template];
        let mut t: [Terms; 2] = Default::default();
        for s in p
            .topology_spread
            .iter()
            .filter(|s| s.hard && is_key(&s.topology_key))
        {
            let ki = key_index(&s.topology_key);
            let g = intern(Group {
                key: KEYS[ki],
                scope: Scope::of_spread(p, s),
            });
            t[ki].spreads.push(Spread {
                group: g,
                max_skew: i64::from(s.max_skew.max(1)),
                min_domains: i64::from(s.min_domains.unwrap_or(1).max(1)),
            });
        }
        // Every term a pending pod still carries is in force for it; only required anti terms
        // also repel other pods.
        for a in p.affinity.iter().filter(|a| is_key(&a.topology_key)) {
            let ki = key_index(&a.topology_key);
            let g = intern(Group {
                key: KEYS[ki],
                scope: Scope::of_term(p, a),
            });
            if a.anti {
                t[ki].anti.push(g);
                if a.weight.is_none() {
                    t[ki].anti_required.push(g);
                }
            } else {
                t[ki].affinity.push(g);
            }
        }
        terms.push(t);
    }
    // Anti-affinity of running pods.
    let mut running_anti: Vec<(usize, usize)> = Vec::new(); // (pod, group)
    for (i, p) in pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.node_name.is_some())
    {
        for a in p.affinity.iter().filter(|a| a.anti && a.weight.is_none()) {
            if is_key(&a.topology_key) {
                let g = intern(Group {
                    key: KEYS[key_index(&a.topology_key)],
                    scope: Scope::of_term(p, a),
                });
                running_anti.push((i, g));
            }
        }
    }
    if groups.is_empty() {
        return Pinned {
            classes,
            refused: Vec::new(),
        };
    }
    let anti_groups: BTreeSet<usize> = terms
        .iter()
        .flat_map(|t| t.iter().flat_map(|k| k.anti_required.iter().copied()))
        .chain(running_anti.iter().map(|(_, g)| *g))
        .collect();
    for (ci, c) in classes.iter().enumerate() {
        let p = &pods[c.template];
        for (g, group) in groups.iter().enumerate() {
            if group.scope.matches(p) {
                let ki = key_index(group.key);
                terms[ci][ki].matches.push(g);
                if anti_groups.contains(&g) {
                    terms[ci][ki].repelled_by.push(g);
                }
            }
        }
    }
    // Counts from running pods.
    let by_name: HashMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut count: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); groups.len()];
    let mut repel: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); groups.len()];
    for p in pods {
        let Some(node) = p.node_name.as_deref().and_then(|n| by_name.get(n)) else {
            continue;
        };
        for (g, group) in groups.iter().enumerate() {
            if let Some(d) = node.labels.get(group.key) {
                if group.scope.matches(p) {
                    *count[g].entry(d.clone()).or_default() += 1;
                }
            }
        }
    }
    for &(i, g) in &running_anti {
        let node = pods[i].node_name.as_deref().and_then(|n| by_name.get(n));
        if let Some(d) = node.and_then(|n| n.labels.get(groups[g].key)) {
            *repel[g].entry(d.clone()).or_default() += 1;
        }
    }
    let base: [BTreeSet<String>; 2] = KEYS.map(|k| base_domains(k, provs, catalog, nodes));

    let mut out = Vec::with_capacity(classes.len());
    let mut refused = Vec::new();
    for (ci, class) in classes.into_iter().enumerate() {
        let t = &terms[ci];
        let takes_part = |k: usize| t[k].is_constrained() || !t[k].matches.is_empty();
        if !takes_part(0) && !takes_part(1) {
            out.push(class);
            continue;
        }
        let p = &pods[class.template];
        // Spread domains follow the pod's own node affinity (the kube-scheduler's
        // nodeAffinityPolicy Honor); where the pod may go also follows its volumes' zones.
        let domains: [Domains; 2] = [0, 1].map(|k| {
            let all: Vec<String> = base[k]
                .iter()
                .filter(|d| terms_allow(p.spread_node_terms(), KEYS[k], d))
                .cloned()
                .collect();
            let allowed = all
                .iter()
                .filter(|d| terms_allow(&p.node_terms, KEYS[k], d))
                .cloned()
                .collect();
            Domains { all, allowed }
        });
        let mut split: BTreeMap<[Option<String>; 2], Vec<usize>> = BTreeMap::new();
        for &pi in &class.pods {
            let mut choice: [Option<String>; 2] = [None, None];
            let mut why = None;
            for k in 0..2 {
                if !takes_part(k) {
                    continue;
                }
                match choose(&t[k], &domains[k], &count, &repel, &groups, p) {
                    Ok(d) => choice[k] = Some(d),
                    Err(e) => {
                        why = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = why {
                refused.push((pi, e));
                continue;
            }
            for k in 0..2 {
                let Some(d) = &choice[k] else { continue };
                for &g in &t[k].matches {
                    *count[g].entry(d.clone()).or_default() += 1;
                }
                for &g in &t[k].anti_required {
                    *repel[g].entry(d.clone()).or_default() += 1;
                }
            }
            split.entry(choice).or_default().push(pi);
        }
        for (choice, members) in split {
            let mut pinned = Requirements::new();
            for (k, d) in choice.iter().enumerate() {
                if let Some(d) = d {
                    pinned.add(KEYS[k], Requirement::single(d));
                }
            }
            out.push(PodClass {
                template: members[0],
                pods: members,
                requests: class.requests.clone(),
                pinned,
            });
        }
    }
    Pinned {
        classes: out,
        refused,
    }
}

fn key_index(key: &str) -> usize {
    usize::from(key != labels::ZONE)
}

/// A key's domains for one class: those its spreads count (the pod's own node affinity
/// allows them), and those it may be placed in (its volumes allow them too).
struct Domains {
    all: Vec<String>,
    allowed: Vec<String>,
}

/// The domain for the next pod of a class, or why there is none.
fn choose(
    t: &Terms,
    domains: &Domains,
    count: &[BTreeMap<String, i64>],
    repel: &[BTreeMap<String, i64>],
    groups: &[Group],
    pod: &Pod,
) -> Result<String, String> {
    let get = |m: &BTreeMap<String, i64>, d: &str| m.get(d).copied().unwrap_or(0);
    let key = groups
        .get(
            t.spreads
                .first()
                .map(|s| s.group)
                .or(t.affinity.first().copied())
                .or(t.anti.first().copied())
                .or(t.matches.first().copied())
                .unwrap_or(0),
        )
        .map_or(labels::ZONE, |g| g.key);
    if domains.allowed.is_empty() {
        return Err(format!("no {key} is allowed for the pod"));
    }
    let mut cands: Vec<&String> = domains.allowed.iter().collect();
    for &g in &t.anti {
        cands.retain(|d| get(&count[g], d) == 0);
        if cands.is_empty() {
            return Err(format!(
                "pod anti-affinity on {key}: every {key} already runs pods {}",
                describe_selector(&groups[g].scope)
            ));
        }
    }
    for &g in &t.repelled_by {
        cands.retain(|d| get(&repel[g], d) == 0);
        if cands.is_empty() {
            return Err(format!(
                "every {key} runs pods whose anti-affinity rejects it ({})",
                describe_selector(&groups[g].scope)
            ));
        }
    }
    for &g in &t.affinity {
        let with: Vec<&String> = cands
            .iter()
            .copied()
            .filter(|d| get(&count[g], d) > 0)
            .collect();
        let anywhere = domains.all.iter().any(|d| get(&count[g], d) > 0);
        if !with.is_empty() {
            cands = with;
        } else if anywhere || !groups[g].scope.matches(pod) {
            return Err(format!(
                "pod affinity on {key}: no allowed {key} runs pods {}",
                describe_selector(&groups[g].scope)
            ));
        }
        // Else the first pod of a self-affine group bootstraps into any allowed domain.
    }
    // Skew: every hard spread must accept the domain.
    let skew_ok = |d: &str| {
        t.spreads.iter().all(|s| {
            let min = if (domains.all.len() as i64) < s.min_domains {
                0
            } else {
                domains
                    .all
                    .iter()
                    .map(|x| get(&count[s.group], x))
                    .min()
                    .unwrap_or(0)
            };
            let own = i64::from(groups[s.group].scope.matches(pod));
            get(&count[s.group], d) + own - min <= s.max_skew
        })
    };
    cands.retain(|d| skew_ok(d));
    if cands.is_empty() {
        let s = &t.spreads[0];
        return Err(format!(
            "topology spread on {key} (maxSkew {}) of pods {}: no allowed {key} keeps the skew",
            s.max_skew,
            describe_selector(&groups[s.group].scope)
        ));
    }
    // Fewest matching pods first (the spreads, then any group the class counts in), then name.
    let score = |d: &str| -> (i64, i64) {
        let first = t.spreads.first().map_or(0, |s| get(&count[s.group], d));
        let rest: i64 = t.matches.iter().map(|&g| get(&count[g], d)).sum();
        (first, rest)
    };
    cands
        .into_iter()
        .min_by(|a, b| score(a).cmp(&score(b)).then(a.cmp(b)))
        .cloned()
        .ok_or_else(|| format!("no {key} is allowed for the pod"))
}

/// How many pending pods carry a term the simulation does not model: a topology key other than
/// zone, hostname and capacity type. Callers warn about them rather than let a plan look exact.
pub fn unsupported_terms(pods: &[Pod]) -> usize {
    let known = |k: &str| KEYS.contains(&k) || k == labels::HOSTNAME;
    pods.iter()
        .filter(|p| p.node_name.is_none() && !p.is_daemon())
        .filter(|p| {
            p.topology_spread.iter().any(|s| !known(&s.topology_key))
                || p.affinity.iter().any(|a| !known(&a.topology_key))
        })
        .count()
}
