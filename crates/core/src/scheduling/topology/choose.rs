//! The domain for the next pod of a class ([`choose`]), or why there is none.

use super::*;

/// What `choose` prefers among the domains that keep every rule: where the class's pods fit
/// on existing nodes, and where a pod its terms' groups count started them.
pub(super) struct Prefer<'a> {
    /// Per value, how many more of the class's pods existing nodes there could run.
    pub(super) room: &'a BTreeMap<String, i64>,
    /// Per group, the domain a pod started it in with no partner (first-pod exception).
    pub(super) started_in: &'a [Option<String>],
    /// A free class that spreads count goes to the most populated domain none of their pods
    /// went to (`pin`'s last resort before the turns).
    pub(super) pile: bool,
    /// Per spread group, the domains a pod it constrains was pinned to.
    pub(super) constrained: &'a [BTreeSet<String>],
}

/// What [`choose`] is asked: a domain on `key` for the next pod of the class whose terms on
/// the key are `t`, among `domains`.
#[derive(Clone, Copy)]
pub(super) struct Ask<'a> {
    pub(super) t: &'a Terms,
    pub(super) key: &'a str,
    pub(super) domains: &'a Domains,
    pub(super) pod: &'a Pod,
}

/// The pinning's counts so far, per group ([`Group`]) and domain: the pods each group counts
/// (`count`) and those its anti-affinity repels (`repel`).
#[derive(Clone, Copy)]
pub(super) struct Counts<'a> {
    pub(super) count: &'a [BTreeMap<String, i64>],
    pub(super) repel: &'a [BTreeMap<String, i64>],
    pub(super) groups: &'a [Group],
}

/// The domain for the next pod of a class, or why there is none.
pub(super) fn choose(
    ask: &Ask,
    counts: &Counts,
    fill: Option<(&Fill, &[BTreeSet<String>])>,
    started: bool,
    prefer: &Prefer,
) -> Result<String, String> {
    let Ask {
        t,
        key,
        domains,
        pod,
    } = *ask;
    let Counts {
        count,
        repel,
        groups,
    } = *counts;
    let get = |m: &BTreeMap<String, i64>, d: &str| m.get(d).copied().unwrap_or(0);
    // Skew: every hard spread must accept the domain.
    let skew_ok = |d: &str| {
        t.spreads.iter().zip(&domains.counted).all(|(s, counted)| {
            let min = if (counted.len() as i64) < s.min_domains {
                0
            } else {
                counted
                    .iter()
                    .map(|x| get(&count[s.group], x))
                    .min()
                    .unwrap_or(0)
            };
            let own = i64::from(groups[s.group].scope.matches(pod));
            get(&count[s.group], d) + own - min <= s.max_skew
        })
    };
    // The least populated domain of the first spread, to name in a refusal.
    let least = || {
        let s = t.spreads.first()?;
        let counted = domains.counted.first()?;
        counted
            .iter()
            .map(|d| (get(&count[s.group], d), d))
            .min()
            .map(|(n, d)| format!("{d} holds the fewest matching pods ({n})"))
    };
    if domains.all.is_empty() && !domains.shut.is_empty() {
        // Say which domains the skew now rules out and which simply did not take the pod.
        let (over, refused): (Vec<&String>, Vec<&String>) =
            domains.shut.iter().partition(|d| !skew_ok(d));
        let join = |v: &[&String]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !refused.is_empty() {
            parts.push(format!(
                "{} did not take it (no room, a Provisioner's limit or another rule)",
                join(&refused)
            ));
        }
        if let (false, Some(s)) = (over.is_empty(), t.spreads.first()) {
            parts.push(format!(
                "{} would exceed maxSkew {} of pods {}{}",
                join(&over),
                s.max_skew,
                describe_selector(&groups[s.group].scope),
                least().map(|l| format!(" ({l})")).unwrap_or_default()
            ));
        }
        return Err(format!(
            "every {key} the pod could use was tried in an earlier pass: {}",
            parts.join("; ")
        ));
    }
    if domains.all.is_empty() {
        return Err(format!(
            "topology key {key}: no node the pod could use and no Provisioner that could \
             launch one for it carries this label"
        ));
    }
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
        // The kube-scheduler's exception for the first pod of a self-affine group holds only
        // while no pod its required terms select runs on a node with any of their keys, in a
        // domain this pod can reach or not (`started`); a preferred term taken as hard here
        // is judged on its own partners.
        let anywhere = if t.affinity_required.contains(&g) {
            started
        } else {
            count[g].values().any(|&n| n > 0)
        };
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
    cands.retain(|d| skew_ok(d));
    if cands.is_empty() {
        let s = &t.spreads[0];
        let least = least().map(|l| format!("; {l}")).unwrap_or_default();
        let tried = if domains.shut.is_empty() {
            String::new()
        } else {
            format!("; {} tried in an earlier pass", domains.shut.join(", "))
        };
        return Err(format!(
            "topology spread on {key} (maxSkew {}) of pods {}: no allowed {key} keeps the \
             skew{least}{tried}",
            s.max_skew,
            describe_selector(&groups[s.group].scope)
        ));
    }
    // A free class goes first to the domains no other class whose spread counts it may use:
    // there its pods only raise the spreads' minimum (`unusable_domains`).
    // A class affine to running pods only is free too: its fill was worked out among the
    // domains its affinity allows (`unusable_domains` gives none to a class affine to pods
    // of the batch).
    let free = t.spreads.is_empty();
    if let (true, Some((fill, constrained))) = (free, fill) {
        // Domains the spreads' pods may no longer use, with the pods placed so far counted,
        // and where none of theirs went (a pod there would put them over their maxSkew).
        let full_now = |d: &str| {
            !fill.rising.is_empty()
                && fill
                    .rising
                    .iter()
                    .all(|&(g, at)| get(&count[g], d) >= at && !constrained[g].contains(d))
        };
        // The same holds for the domains found full before the batch: none where a pod of
        // a spread counting the class went since.
        let untouched = |d: &str| {
            fill.rising
                .iter()
                .all(|&(g, _)| !constrained[g].contains(d))
        };
        let within: Vec<&String> = cands
            .iter()
            .copied()
            .filter(|d| (fill.only && fill.domains.contains(*d) && untouched(d)) || full_now(d))
            .collect();
        if !within.is_empty() {
            cands = within;
        }
    }
    let filling = |d: &str| fill.is_some_and(|(f, _)| f.domains.contains(d));
    // While spreads counting a free class have a minimum no pod of the batch can raise, each
    // of their domains holds only so many more of their pods, and a free pod takes one of
    // those places wherever it goes, until a domain is full (then it takes none there): it
    // goes where the fewest are left, so a domain fills up and the next ones cost nothing
    // (best fit; two pods free of the spread, one zone one place short of full and another
    // with two: both go to the first, leaving the second's two to the spread's pods). Never
    // onto a full domain a pod of the spread went to (it would go over its maxSkew) while
    // another is left, then by what the spreads' classes need of the domain (`Fill::need`),
    // then best fit, before the class's own evenness.
    let rising = match fill {
        Some((f, constrained)) if free && !f.rising.is_empty() => Some((f, constrained)),
        _ => None,
    };
    // Piling (`Prefer::pile`): a domain a pod of a spread counting the class went to last,
    // then the most populated.
    let piled = |d: &str| -> (bool, i64) {
        if !(prefer.pile && free) {
            return (false, 0);
        }
        let touched = t.matches.iter().any(|&g| prefer.constrained[g].contains(d));
        if touched {
            // No piling there: the ordinary keys below keep the spread pods' skew.
            return (true, 0);
        }
        let here: i64 = t.matches.iter().map(|&g| get(&count[g], d)).sum();
        (false, -here)
    };
    let places_left = |d: &str| -> (bool, usize, i64) {
        let Some((f, constrained)) = rising else {
            return (false, 0, 0);
        };
        let over = f
            .rising
            .iter()
            .any(|&(g, at)| get(&count[g], d) >= at && constrained[g].contains(d));
        let left = f
            .rising
            .iter()
            .map(|&(g, at)| at - get(&count[g], d))
            .min()
            .unwrap_or(0)
            .max(0);
        let need = f.need.get(d).copied().unwrap_or(0);
        (over, need, left)
    };
    // Fewest matching pods of the class's first spread, then not away from a pod that
    // started a group this pod counts in with no partner (`Prefer::started_in`), then (a
    // free class) piling when asked and the best fit above, then fewest in the groups the
    // class counts in, then the fill's domains, then a value whose
    // existing nodes still have room for the class's pods (`Prefer::room`), then the
    // cheapest node for the pod (priced keys only; a value no type offers is one only
    // existing nodes carry, which cost nothing more), then name.
    let score = |d: &str| -> (i64, i64) {
        let first = t.spreads.first().map_or(0, |s| get(&count[s.group], d));
        let rest: i64 = t.matches.iter().map(|&g| get(&count[g], d)).sum();
        (first, rest)
    };
    let price = |d: &str| domains.prices.get(d).copied().unwrap_or(0.0);
    let roomy = |d: &str| prefer.room.get(d).is_some_and(|&n| n > 0);
    // The groups this pod counts in that a pod started with no partner, while the starter is
    // still alone there: away from that domain, the pod would leave it apart from a pod its
    // term selects, which holds only if the kube-scheduler takes the starter first.
    let apart = |d: &str| {
        t.matches
            .iter()
            .filter(|&&g| {
                prefer.started_in[g]
                    .as_deref()
                    .is_some_and(|s| s != d && get(&count[g], s) <= 1)
            })
            .count()
    };
    cands
        .into_iter()
        .min_by(|a, b| {
            score(a)
                .0
                .cmp(&score(b).0)
                .then(apart(a).cmp(&apart(b)))
                .then(piled(a).cmp(&piled(b)))
                .then(places_left(a).cmp(&places_left(b)))
                .then(score(a).1.cmp(&score(b).1))
                .then(filling(b).cmp(&filling(a)))
                .then(roomy(b).cmp(&roomy(a)))
                .then(price(a).total_cmp(&price(b)))
                .then(a.cmp(b))
        })
        .cloned()
        .ok_or_else(|| format!("no {key} is allowed for the pod"))
}
