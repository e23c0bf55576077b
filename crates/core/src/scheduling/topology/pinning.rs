//! [`pin`](super::pin) with the classes in one order: each pod of a constrained class pinned
//! to a domain, the counts per (term, domain) kept as it goes.

use super::*;
use crate::scheduling::affinity::ScopeIndex;

/// [`pin`] with the classes taken in `order`; also gives the order it took them in.
pub(super) fn pin_in_order(
    pods: &[Pod],
    nodes: &[Node],
    classes: Vec<PodClass>,
    offer: &Offer<'_>,
    closed: &Closed,
    order: &Order,
) -> (Pinned, Vec<usize>) {
    let &Offer {
        provs,
        catalog,
        memo: _,
    } = offer;
    let pile = matches!(order, Order::Piling(_));
    let mut keys: Vec<String> = Vec::new();
    let mut key_index: foldhash::HashMap<String, usize> = foldhash::HashMap::default();
    let mut groups: Vec<Group> = Vec::new();
    let mut gid: foldhash::HashMap<Group, usize> = foldhash::HashMap::default();
    let mut intern = |key: &str, scope: Scope, nodes: Option<NodeFilter>| -> (usize, usize) {
        let k = *key_index.entry(key.to_string()).or_insert_with(|| {
            keys.push(key.to_string());
            keys.len() - 1
        });
        let g = Group {
            key: k,
            scope,
            nodes,
        };
        let id = *gid.entry(g.clone()).or_insert_with(|| {
            groups.push(g);
            groups.len() - 1
        });
        (k, id)
    };
    // Terms of each class, per key (grown as keys appear).
    let mut terms: Vec<Vec<Terms>> = Vec::with_capacity(classes.len());
    for c in &classes {
        let p = &pods[c.template];
        let mut t: Vec<Terms> = Vec::new();
        let at = |t: &mut Vec<Terms>, k: usize| -> usize {
            if t.len() <= k {
                t.resize(k + 1, Terms::default());
            }
            k
        };
        for s in p
            .topology_spread
            .iter()
            .filter(|s| s.hard && is_domain_key(&s.topology_key))
        {
            let (k, g) = intern(
                &s.topology_key,
                Scope::of_spread(p, s),
                NodeFilter::of(p, s),
            );
            let k = at(&mut t, k);
            t[k].spreads.push(Spread {
                group: g,
                max_skew: i64::from(s.max_skew.max(1)),
                min_domains: i64::from(s.min_domains.unwrap_or(1).max(1)),
            });
        }
        // Every term a pending pod still carries is in force for it; only required anti terms
        // also repel other pods.
        for a in p.affinity.iter().filter(|a| is_domain_key(&a.topology_key)) {
            let (k, g) = intern(&a.topology_key, Scope::of_term(p, a), None);
            let k = at(&mut t, k);
            if a.anti {
                t[k].anti.push(g);
                if a.weight.is_none() {
                    t[k].anti_required.push(g);
                }
            } else {
                t[k].affinity.push(g);
                if a.weight.is_none() {
                    t[k].affinity_required.push(g);
                }
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
            if is_domain_key(&a.topology_key) {
                let (_, g) = intern(&a.topology_key, Scope::of_term(p, a), None);
                running_anti.push((i, g));
            }
        }
    }
    if groups.is_empty() {
        let order = (0..classes.len()).collect();
        let pinned = Pinned {
            classes,
            refused: Vec::new(),
            holdable: BTreeSet::new(),
            leading: BTreeSet::new(),
            deferring: BTreeSet::new(),
            holdable_pods: Vec::new(),
        };
        return (pinned, order);
    }
    for t in &mut terms {
        t.resize(keys.len(), Terms::default());
    }
    let anti_groups: BTreeSet<usize> = terms
        .iter()
        .flat_map(|t| t.iter().flat_map(|k| k.anti_required.iter().copied()))
        .chain(running_anti.iter().map(|(_, g)| *g))
        .collect();
    for (ci, c) in classes.iter().enumerate() {
        let p = &pods[c.template];
        for (g, group) in groups.iter().enumerate() {
            let may_count = group
                .nodes
                .as_ref()
                .is_none_or(|f| f.may_count(&p.node_terms));
            if group.scope.matches(p) && may_count {
                terms[ci][group.key].matches.push(g);
                if anti_groups.contains(&g) {
                    terms[ci][group.key].repelled_by.push(g);
                }
            }
        }
    }
    // Counts from running pods.
    let by_name: foldhash::HashMap<&str, &Node> =
        nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut count = running_counts(pods, nodes, &keys, &groups);
    // Per spread group, the pods of the batch its spreads constrain, per domain they were
    // pinned to: a domain holding one is never full for `Fill::rising`.
    let mut constrained: Vec<BTreeSet<String>> = vec![BTreeSet::new(); groups.len()];
    // Per group of a required pod-affinity term, the domain where a pod first met it with no
    // partner (the first-pod exception): a pod the term selects goes there when it may.
    let mut started_in: Vec<Option<String>> = vec![None; groups.len()];
    let mut repel: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); groups.len()];
    for &(i, g) in &running_anti {
        let node = pods[i].node_name.as_deref().and_then(|n| by_name.get(n));
        if let Some(d) = node.and_then(|n| n.labels.get(&keys[groups[g].key])) {
            *repel[g].entry(d.clone()).or_default() += 1;
        }
    }
    // Each Provisioner's node requirements, worked out once for every key and class.
    let prov_reqs: Vec<Requirements> = provs.iter().map(|p| p.node_requirements()).collect();
    let key_domains: Vec<KeyDomains> = keys
        .iter()
        .map(|k| KeyDomains::new(k, offer, &prov_reqs, nodes))
        .collect();
    let free = free_room(nodes, pods);
    // A class whose pods may land both on nodes a filtered spread counts and on others (a
    // flexible pod under the spread of on-demand-only pods, `nodeAffinityPolicy: Honor`) is
    // placed as the passes' `Hold` says; held off or on, the requirement joins its pins
    // (`held`). It may be held only when it takes part in no rule on the key held (a
    // capacity-type spread it counts in needs it on both sides) and a Provisioner can launch
    // it that way. Held on, it still takes the room existing counted nodes have.
    let hold = closed.hold();
    let mut holdable = BTreeSet::new();
    let mut deferring = BTreeSet::new();
    let mut held: Vec<Requirements> = vec![Requirements::new(); classes.len()];
    for (ci, c) in classes.iter().enumerate() {
        let p = &pods[c.template];
        for k in 0..keys.len() {
            if terms[ci][k]
                .matches
                .iter()
                .all(|&g| groups[g].nodes.is_none())
            {
                continue;
            }
            let mut kept = Vec::new();
            for g in std::mem::take(&mut terms[ci][k].matches) {
                let Some(f) = groups[g].nodes.as_ref() else {
                    kept.push(g);
                    continue;
                };
                let in_play = |reqs: &Requirements| {
                    reqs.iter().any(|(rk, _)| {
                        key_index
                            .get(rk.as_str())
                            .is_some_and(|&i| terms[ci][i].is_constrained())
                            || groups
                                .iter()
                                .any(|g| &keys[g.key] == rk && g.scope.matches(p))
                    })
                };
                let usable = |reqs: Requirements| {
                    let both = held[ci].intersect(&reqs);
                    (!in_play(&reqs) && launchable(p, &both, provs, &prov_reqs, catalog))
                        .then_some(both)
                };
                let off = f.outside(&keys[k]).into_iter().find_map(usable);
                if off.is_some() {
                    holdable.insert((keys[k].clone(), groups[g].scope.clone(), f.clone()));
                    deferring.insert(c.origin);
                }
                match (hold, off) {
                    (Hold::Off, Some(off)) => held[ci] = off,
                    (Hold::On, Some(_)) => {
                        if let Some(on) = f.inside(&keys[k]).and_then(usable) {
                            held[ci] = on;
                        }
                        kept.push(g);
                    }
                    _ => kept.push(g),
                }
            }
            terms[ci][k].matches = kept;
        }
    }
    let leading: BTreeSet<usize> = classes
        .iter()
        .zip(&terms)
        .filter(|(_, t)| {
            t.iter().enumerate().any(|(k, t)| {
                t.spreads.iter().any(|s| {
                    let g = &groups[s.group];
                    g.nodes.as_ref().is_some_and(|f| {
                        holdable.contains(&(keys[k].clone(), g.scope.clone(), f.clone()))
                    })
                })
            })
        })
        .map(|(c, _)| c.origin)
        .collect();
    let holdable_pods: Vec<usize> = classes
        .iter()
        .filter(|c| leading.contains(&c.origin) || deferring.contains(&c.origin))
        .flat_map(|c| c.pods.iter().copied())
        .collect();
    // Held pins can keep a class off other filtered spreads' nodes too (held on on-demand,
    // the spread of spot-only pods no longer counts it): it is counted where it may land.
    for (ci, c) in classes.iter().enumerate() {
        if held[ci].is_empty() {
            continue;
        }
        let held_terms = with_terms(&pods[c.template], &held[ci]).node_terms;
        for t in terms[ci].iter_mut() {
            t.matches.retain(|&g| {
                groups[g]
                    .nodes
                    .as_ref()
                    .is_none_or(|f| f.may_count(&held_terms))
            });
        }
    }
    // Per spread group, the domains of the existing nodes it counts: a group is shared by
    // every class whose spread has its key, scope and node filter, so it is worked out once.
    let spread_groups: BTreeSet<usize> = terms
        .iter()
        .flat_map(|t| t.iter().flat_map(|k| k.spreads.iter().map(|s| s.group)))
        .collect();
    let group_node_values: HashMap<usize, BTreeSet<String>> = spread_groups
        .into_iter()
        .map(|g| {
            let group = &groups[g];
            let values = counted_node_values(&key_domains[group.key], nodes, group.nodes.as_ref());
            (g, values)
        })
        .collect();

    // Classes are decided targets first: one with affinity to other pending classes waits for
    // them, whatever their sizes, so their domains are known when it chooses. The sub-classes
    // come out in the classes' own order.
    // Per class and key: its own node terms fix the key to one value (a nodeSelector on the
    // zone), so it cannot move out of another class's way.
    let fixed: Vec<Vec<bool>> = classes
        .iter()
        .map(|c| {
            let p = &pods[c.template];
            keys.iter()
                .map(|k| {
                    !p.node_terms.is_empty()
                        && p.node_terms
                            .iter()
                            .all(|t| t.get(k).and_then(|r| r.single_value()).is_some())
                })
                .collect()
        })
        .collect();
    let group_keys: Vec<usize> = groups.iter().map(|g| g.key).collect();
    // The domains of key `k` pod `p` could be placed in (`reachable`).
    let reach_of = |p: &Pod, k: usize| {
        reachable(
            &keys[k],
            p,
            &key_domains[k],
            nodes,
            &free,
            provs,
            &prov_reqs,
        )
    };
    let identity: Vec<usize>;
    let family = match order {
        Order::Given { family, .. } => *family,
        Order::Affinity(_) | Order::Piling(_) => {
            identity = (0..classes.len()).collect();
            &identity
        }
    };
    let unusable = unusable_domains(
        &terms,
        family,
        &groups,
        |ci, k| {
            let p = &pods[classes[ci].template];
            reach_of(p, k)
                .into_iter()
                .filter(|d| terms_allow(&p.node_terms, &keys[k], d))
                .collect()
        },
        &count,
        &repel,
    );
    let order = match order {
        Order::Affinity(last) | Order::Piling(last) => {
            let (mut order, later): (Vec<usize>, Vec<usize>) =
                affinity_order(&terms, &group_keys, &fixed)
                    .into_iter()
                    .partition(|c| !last.contains(c));
            order.extend(later);
            order
        }
        Order::Given { order, .. } => order.clone(),
    };
    let mut slots: Vec<Vec<PodClass>> = vec![Vec::new(); classes.len()];
    let mut taken: Vec<Option<PodClass>> = classes.into_iter().map(Some).collect();
    let mut refused = Vec::new();
    for &ci in &order {
        let Some(mut class) = taken[ci].take() else {
            continue;
        };
        let off = &held[ci];
        class.pinned = class.pinned.intersect(off);
        // A class whose pods must all share one node goes into the domains its first pod
        // chooses; each later pod is held to them (and to the spreads' skew there).
        let join = join_of(&pods[class.template], pods, || {
            pods_of_templates(&taken, &slots, pods)
        });
        let out = &mut slots[ci];
        let t = &terms[ci];
        let takes_part = |k: usize| t[k].is_constrained() || !t[k].matches.is_empty();
        let involved: Vec<usize> = (0..keys.len()).filter(|&k| takes_part(k)).collect();
        if involved.is_empty() {
            out.push(class);
            continue;
        }
        // Held off the nodes a spread counts: its domains are those it may still use.
        let held_template;
        let p = if off.is_empty() {
            &pods[class.template]
        } else {
            held_template = with_terms(&pods[class.template], off);
            &held_template
        };
        // The domains the pod could be placed in, by its own node affinity; where it may go
        // also follows its volumes.
        let reach: Vec<Vec<String>> = (0..keys.len())
            .map(|k| {
                if !takes_part(k) {
                    return Vec::new();
                }
                reach_of(p, k).into_iter().collect()
            })
            .collect();
        let prices: Vec<BTreeMap<String, f64>> = (0..keys.len())
            .map(|k| {
                let priced = !t[k].spreads.is_empty()
                    && ![labels::ZONE, labels::CAPACITY_TYPE, labels::HOSTNAME]
                        .contains(&keys[k].as_str());
                if priced {
                    cheapest_per_value(&keys[k], p, provs, &prov_reqs, catalog)
                } else {
                    BTreeMap::new()
                }
            })
            .collect();
        // Per key, how many of the class's pods the existing (and in-flight) nodes of each
        // value could run now, less those pinned there since: a pod placed there costs
        // nothing, where a value only a Provisioner reaches buys a node (a self-affine group's
        // first pod takes the empty in-flight node's zone). Other classes' pods are not taken
        // off (a preference only).
        let mut room_left: Vec<BTreeMap<String, i64>> = (0..keys.len())
            .map(|k| {
                let mut m = BTreeMap::new();
                if !takes_part(k) {
                    return m;
                }
                let limit = class.pods.len() as i64;
                for (i, v) in &key_domains[k].nodes {
                    if could_run(p, &p.node_terms, &nodes[*i], &free[*i]) {
                        *m.entry(v.clone()).or_insert(0) +=
                            free[*i].copies_fitting(&p.requests, limit);
                    }
                }
                m
            })
            .collect();
        // Per key and spread, the domains of the existing nodes the spread counts.
        let node_counted: Vec<Vec<&BTreeSet<String>>> = (0..keys.len())
            .map(|k| {
                t[k].spreads
                    .iter()
                    .filter_map(|s| group_node_values.get(&s.group))
                    .collect()
            })
            .collect();
        // The domains left to a pod once those closed to it are taken out (per pod: a domain
        // closed to one pod of a class stays open to the others). A closed domain an existing
        // node the spread counts carries is still counted: the node is there.
        let domains_for = |(shut, gone): &(DomainSet, DomainSet)| -> Vec<Domains> {
            (0..keys.len())
                .map(|k| {
                    let is_in =
                        |set: &DomainSet, v: &String| set.contains(&(keys[k].clone(), v.clone()));
                    let all: Vec<String> = reach[k]
                        .iter()
                        .filter(|v| !is_in(shut, v))
                        .cloned()
                        .collect();
                    let reached: Vec<&String> =
                        reach[k].iter().filter(|v| !is_in(gone, v)).collect();
                    let allowed = all
                        .iter()
                        .filter(|d| terms_allow(&p.node_terms, &keys[k], d))
                        .cloned()
                        .collect();
                    let counted = node_counted[k]
                        .iter()
                        .map(|on_nodes| {
                            let mut c = (*on_nodes).clone();
                            c.extend(reached.iter().map(|v| (*v).clone()));
                            c.into_iter().collect()
                        })
                        .collect();
                    Domains {
                        shut: reach[k]
                            .iter()
                            .filter(|v| is_in(shut, v))
                            .cloned()
                            .collect(),
                        all,
                        allowed,
                        counted,
                        prices: prices[k].clone(),
                    }
                })
                .collect()
        };
        let open = domains_for(&Default::default());
        let mut by_shut: HashMap<(DomainSet, DomainSet), Vec<Domains>> = HashMap::new();
        // A key no node or Provisioner of the pod's carries: required anti-affinity holds
        // anywhere (no node shares a domain with another, as the kube-scheduler reads it), and
        // being counted there means nothing; spreads and affinity cannot hold (see `choose`).
        // A key whose domains were all closed to a pod is not such a key: the pod is refused.
        let involved: Vec<usize> = involved
            .into_iter()
            .filter(|&k| {
                !reach[k].is_empty() || !t[k].spreads.is_empty() || !t[k].affinity.is_empty()
            })
            .collect();
        // A required hostname term counts a selected pod on any node (every node has a
        // hostname), which also ends the first-pod exception of the terms decided here.
        let partner_anywhere = t.iter().any(|tk| !tk.affinity_required.is_empty())
            && p.affinity
                .iter()
                .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
                .any(|a| {
                    let scope = Scope::of_term(p, a);
                    pods.iter().any(|q| {
                        q.node_name
                            .as_deref()
                            .is_some_and(|n| by_name.contains_key(n))
                            && scope.matches(q)
                    })
                });
        let mut split: BTreeMap<Vec<Option<String>>, Vec<usize>> = BTreeMap::new();
        let mut first_choice: Option<Vec<Option<String>>> = None;
        // Per key, the values of the nodes a class affine to running pods must join.
        let node_values: Vec<Vec<&str>> = match &join {
            Join::Nodes(names) => keys
                .iter()
                .map(|key| {
                    names
                        .iter()
                        .filter_map(|n| by_name.get(n.as_str()))
                        .filter_map(|n| n.labels.get(key))
                        .map(String::as_str)
                        .collect()
                })
                .collect(),
            _ => Vec::new(),
        };
        for &pi in &class.pods {
            let shut = closed.for_pod(pi);
            let domains = if shut.0.is_empty() {
                &open
            } else {
                by_shut.entry(shut).or_insert_with_key(|s| domains_for(s))
            };
            let held: Vec<Domains>;
            let domains = match (&join, &first_choice) {
                (Join::FirstChoice, Some(first)) => {
                    held = domains
                        .iter()
                        .zip(first)
                        .map(|(d, v)| match v {
                            Some(v) => d.only(&[v.as_str()]),
                            None => d.clone(),
                        })
                        .collect();
                    &held
                }
                (Join::Nodes(_), _) => {
                    held = domains
                        .iter()
                        .zip(&node_values)
                        .map(|(d, values)| {
                            // Nodes without the key: the co-location decides (and refuses).
                            if values.is_empty() {
                                d.clone()
                            } else {
                                d.only(values)
                            }
                        })
                        .collect();
                    &held
                }
                _ => domains,
            };
            let mut choice: Vec<Option<String>> = vec![None; keys.len()];
            let mut why = None;
            // The kube-scheduler's first-pod exception holds only while no pod the terms
            // select runs (or was placed before this one) on a node carrying any of their
            // keys: one term's partner ends it for all of them.
            let started = partner_anywhere
                || t.iter()
                    .flat_map(|tk| &tk.affinity_required)
                    .any(|&g| count[g].values().any(|&n| n > 0));
            for &k in &involved {
                let fill = unusable.get(&(ci, k));
                match choose(
                    &Ask {
                        t: &t[k],
                        key: &keys[k],
                        domains: &domains[k],
                        pod: p,
                    },
                    &Counts {
                        count: &count,
                        repel: &repel,
                        groups: &groups,
                    },
                    fill.map(|f| (f, &constrained[..])),
                    started,
                    &Prefer {
                        room: &room_left[k],
                        started_in: &started_in,
                        pile,
                        constrained: &constrained,
                    },
                ) {
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
            for &k in &involved {
                let Some(d) = &choice[k] else { continue };
                if let Some(n) = room_left[k].get_mut(d) {
                    *n -= 1;
                }
                // A required term no pod met yet: this pod starts its group there.
                for &g in &t[k].affinity_required {
                    if started_in[g].is_none() && count[g].values().all(|&n| n == 0) {
                        started_in[g] = Some(d.clone());
                    }
                }
                for &g in &t[k].matches {
                    *count[g].entry(d.clone()).or_default() += 1;
                }
                for s in &t[k].spreads {
                    constrained[s.group].insert(d.clone());
                }
                for &g in &t[k].anti_required {
                    *repel[g].entry(d.clone()).or_default() += 1;
                }
            }
            if matches!(join, Join::FirstChoice) && first_choice.is_none() {
                first_choice = Some(choice.clone());
            }
            split.entry(choice).or_default().push(pi);
        }
        for (choice, members) in split {
            let mut pinned = class.pinned.clone();
            for (k, d) in choice.iter().enumerate() {
                if let Some(d) = d {
                    pinned.add(&keys[k], Requirement::single(d));
                }
            }
            out.push(PodClass {
                template: members[0],
                pods: members,
                requests: class.requests.clone(),
                pinned,
                origin: class.origin,
            });
        }
    }
    let pinned = Pinned {
        classes: slots.into_iter().flatten().collect(),
        refused,
        holdable,
        leading,
        deferring,
        holdable_pods,
    };
    (pinned, order)
}

/// Where the pods of a class must go because of their required hostname pod affinity, as far
/// as the pinning can tell (`colocation::analyze` decides the rest).
pub(super) enum Join {
    /// Nothing the pinning can use.
    Free,
    /// Every term selects the class itself and no other pod, running or pending: all its pods
    /// share one node, so they go into the domains the first pod chose.
    FirstChoice,
    /// Every term that selects running pods is met only on these existing nodes: the class
    /// goes into their domains.
    Nodes(Vec<String>),
}

/// How the pods of `p`'s class must join others ([`Join`]); `others` gives the templates of
/// the other pending classes, worked out only for a class with such a term.
pub(super) fn join_of<'a>(p: &Pod, pods: &[Pod], others: impl FnOnce() -> Vec<&'a Pod>) -> Join {
    let terms: Vec<Scope> = p
        .affinity
        .iter()
        .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
        .map(|a| Scope::of_term(p, a))
        .collect();
    if terms.is_empty() {
        return Join::Free;
    }
    let others = others();
    let mut nodes: Option<BTreeSet<String>> = None;
    for s in &terms {
        if others.iter().any(|o| s.matches(o)) {
            return Join::Free;
        }
        let running: BTreeSet<String> = pods
            .iter()
            .filter(|o| s.matches(o))
            .filter_map(|o| o.node_name.clone())
            .collect();
        if running.is_empty() {
            if !s.matches(p) {
                return Join::Free;
            }
            continue;
        }
        nodes = Some(match nodes {
            None => running,
            Some(n) => n.intersection(&running).cloned().collect(),
        });
    }
    match nodes {
        Some(n) => Join::Nodes(n.into_iter().collect()),
        None => Join::FirstChoice,
    }
}

/// The template pods of the classes other than the one being pinned: those still waiting
/// (`taken`) and the sub-classes already pinned (`slots`).
pub(super) fn pods_of_templates<'a>(
    taken: &[Option<PodClass>],
    slots: &[Vec<PodClass>],
    pods: &'a [Pod],
) -> Vec<&'a Pod> {
    taken
        .iter()
        .flatten()
        .chain(slots.iter().flatten())
        .map(|c| &pods[c.template])
        .collect()
}

/// Per group, the running pods it counts in each domain: pods its scope matches on nodes
/// carrying its key (and counted by its node filter). A trial of a large cluster counts every
/// running pod, so each node's domain per key and each filter's verdict per node are worked
/// out once, not per pod and group.
fn running_counts(
    pods: &[Pod],
    nodes: &[Node],
    keys: &[String],
    groups: &[Group],
) -> Vec<BTreeMap<String, i64>> {
    // A name given twice is the later node's, as everywhere in the pinning.
    let index: foldhash::HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    // Per key, each node's value (`None`: the node lacks the key).
    let values: Vec<Vec<Option<&str>>> = keys
        .iter()
        .map(|k| {
            nodes
                .iter()
                .map(|n| n.labels.get(k).map(String::as_str))
                .collect()
        })
        .collect();
    // Per group with a node filter, whether it counts each node.
    let counted: Vec<Option<Vec<bool>>> = groups
        .iter()
        .map(|g| {
            g.nodes
                .as_ref()
                .map(|f| nodes.iter().map(|n| f.counts_on(n)).collect())
        })
        .collect();
    let mut count: Vec<foldhash::HashMap<&str, i64>> = vec![Default::default(); groups.len()];
    let scopes = ScopeIndex::new(groups.iter().map(|g| &g.scope));
    for p in pods {
        let Some(&i) = p.node_name.as_deref().and_then(|n| index.get(n)) else {
            continue;
        };
        for g in scopes.matching(p) {
            let Some(d) = values[groups[g].key][i] else {
                continue;
            };
            if counted[g].as_ref().is_none_or(|c| c[i]) {
                *count[g].entry(d).or_default() += 1;
            }
        }
    }
    count
        .into_iter()
        .map(|c| c.into_iter().map(|(d, n)| (d.to_string(), n)).collect())
        .collect()
}
