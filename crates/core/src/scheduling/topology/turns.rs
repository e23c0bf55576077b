//! Classes that take turns: the pods of classes one spread counts, dealt round when each needs
//! the others' pods placed between its own.

use super::*;

/// True when `p` has a hard spread over a key the pinning decides.
pub(super) fn has_domain_spread(p: &Pod) -> bool {
    p.topology_spread
        .iter()
        .any(|s| s.hard && is_domain_key(&s.topology_key))
}

/// The most pods [`in_turns`] splits into classes of one pod: pinning takes time per class.
pub(super) const TURNS_MAX_PODS: usize = 256;

/// The order [`pin_in_order`] takes the classes in.
pub(super) enum Order<'a> {
    /// `affinity_order`, with these classes (indices) taken after all others.
    Affinity(BTreeSet<usize>),
    /// As `Affinity`, free classes piling up (`Prefer::pile`).
    Piling(BTreeSet<usize>),
    /// This order of every class index; `family` gives each class the class it was split
    /// from ([`Turns`]), so that its siblings are not taken for other classes.
    Given {
        order: Vec<usize>,
        family: &'a [usize],
    },
}

/// Classes split for [`in_turns`].
pub(super) struct Turns {
    /// The classes: those taking turns split into one pod each, the others as they were.
    pub(super) singles: Vec<PodClass>,
    /// Per class of `singles`, the index of the class it came from.
    pub(super) family: Vec<usize>,
    /// The orders to try, of indices into `singles`.
    pub(super) orders: Vec<Vec<usize>>,
}

/// The classes with a spread over a domain key taking their pods in turns: each split into
/// classes of one pod, dealt round in `order` (the first run's order of the classes) where
/// the first of them came, or else where the last came, the other classes keeping their
/// places (a free class between them may have to come before the later ones, or after the
/// earlier ones). Pods of two classes that one spread counts may each need the other's pods
/// placed between their own: two pods that must share z-a with a db and two with only the
/// spread, over z-a and z-b with maxSkew 1, are all placed only when the others fill z-b
/// between them. None when fewer than two classes take turns or they hold more than
/// [`TURNS_MAX_PODS`] pods; a class whose pods must share a node (required hostname pod
/// affinity) is not split.
pub(super) fn in_turns(pods: &[Pod], classes: &[PodClass], order: &[usize]) -> Option<Turns> {
    let takes_turns = |c: &PodClass| {
        let p = &pods[c.template];
        has_domain_spread(p)
            && !p
                .affinity
                .iter()
                .any(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
    };
    let turning: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&ci| takes_turns(&classes[ci]))
        .collect();
    let split_pods: usize = turning.iter().map(|&ci| classes[ci].pods.len()).sum();
    if turning.len() < 2 || split_pods > TURNS_MAX_PODS {
        return None;
    }
    let mut singles: Vec<PodClass> = Vec::with_capacity(classes.len() + split_pods);
    let mut family = Vec::with_capacity(classes.len() + split_pods);
    // Per class of `classes`, the indices of its classes in `singles`.
    let mut index: Vec<Vec<usize>> = Vec::with_capacity(classes.len());
    for (ci, c) in classes.iter().enumerate() {
        let start = singles.len();
        if takes_turns(c) {
            singles.extend(c.pods.iter().map(|&p| PodClass {
                pods: vec![p],
                template: p,
                ..c.clone()
            }));
        } else {
            singles.push(c.clone());
        }
        family.resize(singles.len(), ci);
        index.push((start..singles.len()).collect());
    }
    let rounds = turning.iter().map(|&ci| index[ci].len()).max().unwrap_or(0);
    let mut dealt: Vec<usize> = Vec::with_capacity(split_pods);
    for r in 0..rounds {
        dealt.extend(turning.iter().filter_map(|&cj| index[cj].get(r).copied()));
    }
    // Dealt where the turning class at `at` (its rank among them) came.
    let deal_at = |at: usize| -> Vec<usize> {
        let mut given = Vec::with_capacity(singles.len());
        let mut seen = 0;
        for &ci in order {
            if !takes_turns(&classes[ci]) {
                given.extend(index[ci].iter().copied());
                continue;
            }
            if seen == at {
                given.extend(dealt.iter().copied());
            }
            seen += 1;
        }
        given
    };
    let mut orders = vec![deal_at(0)];
    let at_last = deal_at(turning.len() - 1);
    if at_last != orders[0] {
        orders.push(at_last);
    }
    Some(Turns {
        singles,
        family,
        orders,
    })
}

/// The sub-classes pinned from [`in_turns`]'s classes, joined again per class of origin
/// (`class_of`: pod to class) and pinned requirements, in the order they came.
pub(super) fn rejoin(classes: Vec<PodClass>, class_of: &HashMap<usize, usize>) -> Vec<PodClass> {
    let mut at: HashMap<(usize, Requirements), usize> = HashMap::new();
    let mut out: Vec<PodClass> = Vec::with_capacity(classes.len());
    for c in classes {
        let Some(&parent) = c.pods.first().and_then(|p| class_of.get(p)) else {
            out.push(c);
            continue;
        };
        match at.get(&(parent, c.pinned.clone())) {
            Some(&i) => out[i].pods.extend(c.pods),
            None => {
                at.insert((parent, c.pinned.clone()), out.len());
                out.push(c);
            }
        }
    }
    for c in &mut out {
        c.pods.sort_unstable();
        if let Some(&first) = c.pods.first() {
            c.template = first;
        }
    }
    out
}
