//! Domains a class may not use although its own terms allow them: where other classes'
//! spreads count and it would push them over their skew.

use super::*;

/// Per (class, key) where the spreads of other classes count the class: the domains where
/// one of those spreads counts and none of its classes may go, kept out by its
/// (anti-)affinity to running pods (`reach(class, key)`: the domains a class's node terms
/// reach, those its spreads count under the default `nodeAffinityPolicy: Honor`). There the
/// class's pods raise that spread's minimum, which its own pods cannot, and hurt none of
/// those classes: a class free on the key (no rule of its own there) goes there first, a
/// class with a spread of its own prefers them when its domains score alike (pods free of a
/// zone must fill the zone the pods affine to a db elsewhere are kept out of, or those stay
/// pending). When the class may reach none of them either and no class the group counts may
/// go there, no pod of the batch raises the minimum there, so the domains a group already
/// counts that minimum plus its largest maxSkew in, and those none of its classes reach, are
/// ones none of its classes may use: the class goes there. Where no domain is such, the
/// domains the spreads' classes need least, as a preference among domains that score alike
/// only ([`Fill::only`] false): each class weighs 1/n on each of the n domains it may use,
/// summed over the spreads counting the class, and those weighing least are preferred when
/// others weigh more (a free pod in z-a, the one zone a class affine to a db there may use,
/// would leave it over the skew; in z-b or z-c, which a free spread class shares with z-a,
/// it would not). Not for a class that other classes' pod affinity selects on the key (where
/// it goes, they follow), nor where a class's affinity selects pending pods (it may come to
/// use any domain). Classes of one `family` (split from one class to take turns) count as
/// one.
pub(super) fn unusable_domains(
    terms: &[Vec<Terms>],
    family: &[usize],
    groups: &[Group],
    reach: impl Fn(usize, usize) -> BTreeSet<String>,
    count: &[BTreeMap<String, i64>],
    repel: &[BTreeMap<String, i64>],
) -> HashMap<(usize, usize), Fill> {
    // Per spread group, the families of the classes it constrains; per family, its first
    // class, whose terms all its classes share.
    let mut spread_classes: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    // Per group, the families of the classes it counts (spread or not).
    let mut counted_families: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let mut pending_in = vec![false; groups.len()];
    let mut affinity_groups = BTreeSet::new();
    for (ci, t) in terms.iter().enumerate() {
        first_of.entry(family[ci]).or_insert(ci);
        for kt in t {
            kt.spreads.iter().for_each(|s| {
                spread_classes
                    .entry(s.group)
                    .or_default()
                    .insert(family[ci]);
            });
            kt.matches.iter().for_each(|&g| {
                pending_in[g] = true;
                counted_families.entry(g).or_default().insert(family[ci]);
            });
            affinity_groups.extend(kt.affinity.iter().copied());
        }
    }
    // The spread groups a class counts in that other classes' spreads constrain.
    let counted_by_others = |ci: usize, kt: &Terms| -> Vec<usize> {
        kt.matches
            .iter()
            .copied()
            .filter(|g| {
                spread_classes
                    .get(g)
                    .is_some_and(|c| c.iter().any(|&f| f != family[ci]))
            })
            .collect()
    };
    let wanted: BTreeSet<usize> = terms
        .iter()
        .enumerate()
        .flat_map(|(ci, t)| t.iter().flat_map(move |kt| counted_by_others(ci, kt)))
        .collect();
    if wanted.is_empty() {
        return HashMap::new();
    }
    let get = |m: &BTreeMap<String, i64>, d: &str| m.get(d).copied().unwrap_or(0);
    // Per family and key: (domains it may go to, domains its spreads count but it may not go
    // to); `None`: unknown (affinity to pending pods).
    type Sides = Option<(BTreeSet<String>, BTreeSet<String>)>;
    let mut sides: HashMap<(usize, usize), Sides> = HashMap::new();
    let side_of = |cj: usize, k: usize| -> Sides {
        let kt = &terms[cj][k];
        if kt.affinity.iter().any(|&a| pending_in[a]) {
            return None;
        }
        let (go, out): (BTreeSet<String>, BTreeSet<String>) =
            reach(cj, k).into_iter().partition(|d| {
                kt.anti.iter().all(|&a| get(&count[a], d) == 0)
                    && kt.repelled_by.iter().all(|&a| get(&repel[a], d) == 0)
                    // Its affinity selects running pods only (else unknown, above), and not
                    // the class itself: their domains, no first-pod start.
                    && kt.affinity.iter().all(|&a| get(&count[a], d) > 0)
            });
        Some((go, out))
    };
    // Per wanted group: per domain, how many of its families may go there and how many are
    // kept out, and how much they need it (1/n from each that may go to n domains); and how
    // many are unknown.
    struct Tally {
        go: BTreeMap<String, usize>,
        out: BTreeMap<String, usize>,
        need: BTreeMap<String, f64>,
        unknown: usize,
    }
    let mut tallies: HashMap<usize, Tally> = HashMap::new();
    for &g in &wanted {
        let k = groups[g].key;
        let mut tally = Tally {
            go: BTreeMap::new(),
            out: BTreeMap::new(),
            need: BTreeMap::new(),
            unknown: 0,
        };
        for &f in &spread_classes[&g] {
            let side = sides
                .entry((f, k))
                .or_insert_with(|| side_of(first_of[&f], k));
            match side {
                None => tally.unknown += 1,
                Some((go, out)) => {
                    let share = 1.0 / go.len().max(1) as f64;
                    for d in go.iter() {
                        *tally.go.entry(d.clone()).or_default() += 1;
                        *tally.need.entry(d.clone()).or_default() += share;
                    }
                    for d in out.iter() {
                        *tally.out.entry(d.clone()).or_default() += 1;
                        tally.need.entry(d.clone()).or_default();
                    }
                }
            }
        }
        tallies.insert(g, tally);
    }
    // Per group, the domains some class it counts may go to; None when one is unknown.
    let reached: std::cell::RefCell<HashMap<usize, Option<BTreeSet<String>>>> = Default::default();
    let reached_by_any = |g: usize| -> Option<BTreeSet<String>> {
        if let Some(r) = reached.borrow().get(&g) {
            return r.clone();
        }
        let mut all = Some(BTreeSet::new());
        let k = groups[g].key;
        for f in counted_families.get(&g).into_iter().flatten() {
            // The spread classes' sides are known from the tallies.
            let side = match sides.get(&(*f, k)) {
                Some(side) => side.clone(),
                None => side_of(first_of[f], k),
            };
            match (side, all.as_mut()) {
                (Some((go, _)), Some(a)) => a.extend(go),
                _ => all = None,
            }
        }
        reached.borrow_mut().insert(g, all.clone());
        all
    };
    // The domains none of the groups `gs` (which count class `ci` on key `k`) lets its other
    // families go to and some keeps out, else those they need least; None: no preference.
    let fill_for = |ci: usize, k: usize, gs: &[usize]| -> Option<Fill> {
        let f = family[ci];
        // The family's own part of each tally is taken out.
        let own = sides.get(&(f, k)).cloned().flatten();
        let own_in = |g: usize| spread_classes[&g].contains(&f);
        let own_go =
            |g: usize, d: &String| own_in(g) && own.as_ref().is_some_and(|(go, _)| go.contains(d));
        let mut strict: BTreeSet<String> = BTreeSet::new();
        for &g in gs {
            let tally = &tallies[&g];
            let own_unknown = own_in(g) && sides.get(&(f, k)).is_some_and(Option::is_none);
            if tally.unknown > usize::from(own_unknown) {
                return None;
            }
            let own_out =
                |d: &String| own_in(g) && own.as_ref().is_some_and(|(_, o)| o.contains(d));
            let others = |m: &BTreeMap<String, usize>, d: &String, mine: bool| {
                m.get(d).copied().unwrap_or(0) > usize::from(mine)
            };
            strict.extend(
                tally
                    .out
                    .keys()
                    .filter(|d| {
                        others(&tally.out, d, own_out(d)) && !others(&tally.go, d, own_go(g, d))
                    })
                    .cloned(),
            );
        }
        // ... and none of the spreads' classes may go there.
        strict.retain(|d| {
            gs.iter()
                .all(|&g| tallies[&g].go.get(d).copied().unwrap_or(0) <= usize::from(own_go(g, d)))
        });
        // Where the class itself may go (a class with no spread is in no tally).
        let mine = match &own {
            Some((go, _)) => go.clone(),
            None => side_of(ci, k).map(|(go, _)| go).unwrap_or_default(),
        };
        if strict.iter().any(|d| mine.contains(d)) {
            return Some(Fill {
                domains: strict,
                only: true,
                rising: Vec::new(),
                need: BTreeMap::new(),
            });
        }
        // None of them it may reach either. Where no class a group counts may go to one of
        // them, no pod of the batch raises the group's minimum there, so the domains where
        // the group already counts that minimum plus the largest maxSkew of its spreads are
        // ones none of its classes may use while it stays; pods there, or in domains the
        // group's classes cannot reach, hurt none of them (a pod kept out of z-a with the
        // spread's classes, z-a empty and z-c at 1, goes to z-c and leaves z-b, the one zone
        // left to them, alone).
        let mut full: Option<BTreeSet<String>> = None;
        // Per group, the count from which one of its domains is full: the batch's own pods
        // fill domains too, so `choose` asks again before each pod.
        let mut rising = Vec::new();
        for &g in gs {
            let tally = &tallies[&g];
            let Some(anyone) = reached_by_any(g) else {
                full = Some(BTreeSet::new());
                rising.clear();
                break;
            };
            let stuck = strict
                .iter()
                .filter(|d| tally.out.contains_key(*d) && !anyone.contains(*d))
                .map(|d| get(&count[g], d))
                .min();
            let skew = spread_classes[&g]
                .iter()
                .flat_map(|f| terms[first_of[f]][k].spreads.iter())
                .filter(|s| s.group == g)
                .map(|s| s.max_skew)
                .max();
            let (Some(stuck), Some(skew)) = (stuck, skew) else {
                full = Some(BTreeSet::new());
                rising.clear();
                break;
            };
            rising.push((g, stuck + skew));
            let theirs = |d: &String| tally.go.contains_key(d) || tally.out.contains_key(d);
            let here: BTreeSet<String> = mine
                .iter()
                .filter(|d| !theirs(d) || get(&count[g], d) >= stuck + skew)
                .cloned()
                .collect();
            full = Some(match full {
                None => here,
                Some(f) => f.intersection(&here).cloned().collect(),
            });
        }
        if let Some(full) = full.filter(|f| !f.is_empty()) {
            return Some(Fill {
                domains: full,
                only: true,
                rising,
                need: BTreeMap::new(),
            });
        }
        // Else what the other families need, summed over the groups: a domain the class may
        // use that a group's classes cannot reach weighs nothing there.
        const SAME: f64 = 1e-9;
        let own_share = own
            .as_ref()
            .map_or(0.0, |(go, _)| 1.0 / go.len().max(1) as f64);
        let mut need: BTreeMap<&String, f64> = mine.iter().map(|d| (d, 0.0)).collect();
        for &g in gs {
            for (d, n) in &tallies[&g].need {
                let theirs = if own_go(g, d) { n - own_share } else { *n };
                *need.entry(d).or_default() += theirs;
            }
        }
        // Among the domains the class may use.
        if !mine.is_empty() {
            need.retain(|d, _| mine.contains(*d));
        }
        let least = need.values().copied().fold(f64::INFINITY, f64::min);
        let most = need.values().copied().fold(f64::NEG_INFINITY, f64::max);
        let domains = if least + SAME < most {
            need.iter()
                .filter(|&(_, &n)| n <= least + SAME)
                .map(|(d, _)| (*d).clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        // Each domain's rank by need (alike needs share one), for the best fit in `choose`.
        let mut levels: Vec<f64> = need.values().copied().collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup_by(|b, a| *b <= *a + SAME);
        let need = need
            .into_iter()
            .map(|(d, n)| {
                let rank = levels.iter().take_while(|&&l| l + SAME < n).count();
                (d.clone(), rank)
            })
            .collect();
        (!domains.is_empty() || !rising.is_empty()).then_some(Fill {
            domains,
            only: false,
            rising,
            need,
        })
    };
    // Worked out once per family and key.
    let mut by_family: HashMap<(usize, usize), Option<Fill>> = HashMap::new();
    let mut result = HashMap::new();
    for (ci, t) in terms.iter().enumerate() {
        for (k, kt) in t.iter().enumerate() {
            let fill = by_family
                .entry((family[ci], k))
                .or_insert_with(|| {
                    let gs = counted_by_others(ci, kt);
                    // Nor for a class affine to pods of the batch: where they go is not known.
                    if gs.is_empty()
                        || kt.matches.iter().any(|g| affinity_groups.contains(g))
                        || kt.affinity.iter().any(|&a| pending_in[a])
                    {
                        return None;
                    }
                    fill_for(ci, k, &gs)
                })
                .clone();
            if let Some(fill) = fill {
                result.insert((ci, k), fill);
            }
        }
    }
    result
}

/// Where [`unusable_domains`] sends a class's pods on a key.
#[derive(Clone)]
pub(super) struct Fill {
    /// The domains preferred.
    pub(super) domains: BTreeSet<String>,
    /// A free class goes only there while it may (no spread class may use them); else they
    /// only win among domains that score alike.
    pub(super) only: bool,
    /// Per spread group counting the class whose minimum no pod of the batch can raise, the
    /// count at which one of its domains is full (that minimum plus the largest maxSkew):
    /// a domain every such group counts full is one none of their classes may use while the
    /// batch lasts, and a free pod goes there first. Empty when some group has no such
    /// minimum.
    pub(super) rising: Vec<(usize, i64)>,
    /// Per domain the class may use, its rank by what the spreads' classes need of it (0:
    /// least); empty when `only`.
    pub(super) need: BTreeMap<String, usize>,
}
