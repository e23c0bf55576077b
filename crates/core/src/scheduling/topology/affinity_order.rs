//! The order in which classes choose their domains under pod (anti-)affinity and spreads.

use super::*;

/// The order in which classes choose their domains: each after the other classes its pod
/// affinity terms select (their pods count in a group it needs) and after the classes whose
/// required anti-affinity selects it — unless its own node terms fix it to one domain of that
/// key (`fixed`, per class and key), when the anti-affine class waits for it instead —, each
/// class with a spread after the classes it counts that are free on the key or narrowed by
/// (anti-)affinity; among the classes ready, those a spread counts whose node terms fix them
/// to one domain of its key go first, then class order; a cycle is broken in class order.
pub(super) fn affinity_order(
    terms: &[Vec<Terms>],
    group_keys: &[usize],
    fixed: &[Vec<bool>],
) -> Vec<usize> {
    let n = terms.len();
    let groups = group_keys.len();
    let mut counted_in: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for (ci, t) in terms.iter().enumerate() {
        for g in t.iter().flat_map(|k| k.matches.iter()) {
            counted_in[*g].push(ci);
        }
    }
    let mut waits_for: Vec<BTreeSet<usize>> = terms
        .iter()
        .enumerate()
        .map(|(ci, t)| {
            t.iter()
                .flat_map(|k| k.affinity.iter())
                .flat_map(|&g| counted_in[g].iter().copied())
                .filter(|&cj| cj != ci)
                .collect()
        })
        .collect();
    // A class whose pods another class's required anti-affinity rejects waits for that
    // class: the rejecting pods pick their domains first and the rejected ones then avoid
    // them (`repelled_by`), rather than spreading first into every domain the rejecting
    // pods could have used.
    // A rejected class its node terms pin to one domain cannot avoid anything: it goes first
    // and the rejecting class, which may still choose, avoids it (as the kube-scheduler ends
    // when the pinned pods arrive first; otherwise the pinned ones would stay pending).
    for (ci, t) in terms.iter().enumerate() {
        for &g in t.iter().flat_map(|k| k.anti_required.iter()) {
            for &cj in counted_in[g].iter().filter(|&&cj| cj != ci) {
                if fixed[cj][group_keys[g]] && !fixed[ci][group_keys[g]] {
                    waits_for[ci].insert(cj);
                } else {
                    waits_for[cj].insert(ci);
                }
            }
        }
    }
    let mut held_first = vec![false; n];
    // A class with a spread waits for the classes its spread counts that have no rule on
    // that key: they may go anywhere, and placed first (fewest matching pods first) they fill
    // the emptiest domains, which only widens where the spread's pods may go. It also waits
    // for those its spread counts whose (anti-)affinity narrows their domains when its own
    // does not: the narrower class takes its domain first, the free one fills around it.
    for (ci, t) in terms.iter().enumerate() {
        for (k, kt) in t.iter().enumerate() {
            for s in &kt.spreads {
                for &cj in counted_in[s.group].iter().filter(|&&cj| cj != ci) {
                    let other = &terms[cj][k];
                    // Unconstrained on the key, or narrowed by (anti-)affinity there while this
                    // class is not: the other class has fewer domains, so it goes first.
                    let narrower = other.is_constrained()
                        && (!other.affinity.is_empty() || !other.anti.is_empty())
                        && kt.affinity.is_empty()
                        && kt.anti.is_empty();
                    // Held to one domain by its own node terms (an on-demand-only class under
                    // a capacity-type spread): it cannot move, so it goes before the classes
                    // that can, which fill the other domains around it. A preference among
                    // the classes ready, not a wait: it adds no cycle, and no edge per pair.
                    if fixed[cj][k] && !fixed[ci][k] {
                        held_first[cj] = true;
                    }
                    if (!other.is_constrained() || narrower) && !waits_for[cj].contains(&ci) {
                        waits_for[ci].insert(cj);
                    }
                }
            }
        }
    }
    // Ready classes go held ones first, then by index.
    let rank = |c: usize| (!held_first[c], c);
    if waits_for.iter().all(BTreeSet::is_empty) {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&c| rank(c));
        return order;
    }
    // Kahn's order, held classes then the lowest class first among the ready ones.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut left: Vec<usize> = waits_for.iter().map(BTreeSet::len).collect();
    for (c, w) in waits_for.iter().enumerate() {
        for &d in w {
            dependents[d].push(c);
        }
    }
    let mut ready: BTreeSet<(bool, usize)> = (0..n).filter(|&c| left[c] == 0).map(rank).collect();
    let mut done = vec![false; n];
    let mut first_left = 0;
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        let c = match ready.pop_first() {
            Some((_, c)) => c,
            None => {
                // A cycle: the first class left goes.
                while done[first_left] {
                    first_left += 1;
                }
                first_left
            }
        };
        if done[c] {
            continue;
        }
        done[c] = true;
        order.push(c);
        for &d in &dependents[c] {
            left[d] = left[d].saturating_sub(1);
            if left[d] == 0 && !done[d] {
                ready.insert(rank(d));
            }
        }
    }
    order
}
