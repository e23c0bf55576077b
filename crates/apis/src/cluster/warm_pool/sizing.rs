//! How big a warm pool is, which instance types and zones its next member gets, when a member
//! is worth taking, and what the pool costs idle: pure functions of the Provisioner, its
//! catalog and its claims, so each rule is tested without a cluster.

use std::collections::BTreeMap;

use crate::WarmPool;
use joiner_core::instance_type::InstanceType;
use joiner_core::kubelet::KubeletSettings;
use joiner_core::{labels, CapacityType, Requirements, Resources, WarmState};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The first limit of `limits` that `used` plus `more` would pass, as `name (used + more >
/// limit)`; `None` when all hold.
pub fn over_limits(
    limits: &joiner_core::Limits,
    used: &Resources,
    more: &Resources,
) -> Option<String> {
    limits.all().into_iter().find_map(|(name, limit)| {
        let total = used.get(name).saturating_add(more.get(name));
        (total > limit).then(|| {
            format!(
                "{name} ({} in use + {} > {})",
                joiner_core::resources::format_amount(name, used.get(name)),
                joiner_core::resources::format_amount(name, more.get(name)),
                joiner_core::resources::format_amount(name, limit)
            )
        })
    })
}

/// `maxSize` when `size: auto` gives none.
pub const DEFAULT_MAX_SIZE: i32 = 10;
/// `maxPricePremium` when unset: a warm member may cost 25 % more than the cheapest fitting
/// new instance and still be taken.
pub const DEFAULT_PREMIUM: f64 = 0.25;
/// How many types a pool without `instanceTypes` mixes.
pub const DEFAULT_TYPES: usize = 3;
/// The window `size: auto` counts claims in.
pub const AUTO_WINDOW: SignedDuration = SignedDuration::from_secs(600);
/// How far back `size: auto` looks.
pub const AUTO_HISTORY: SignedDuration = SignedDuration::from_secs(24 * 3600);
/// gp3 storage, USD per GiB-month (us-east-1 list price): what a stopped member's root volume
/// costs. A stopped instance costs nothing else.
pub const EBS_GIB_MONTH: f64 = 0.08;
/// Hours in the month EBS prices are quoted for.
pub const HOURS_PER_MONTH: f64 = 730.0;
/// The root volume of a member whose NodeTemplate names none (the EKS AMIs' 20 GiB).
pub const DEFAULT_ROOT_GIB: f64 = 20.0;

/// The size the pool is kept at: `size` when a count, or for `auto` the most claims the
/// Provisioner opened in any [`AUTO_WINDOW`] over the last [`AUTO_HISTORY`] (read from the
/// creation times of `claims_created`, the Provisioner's claims that still exist), at most
/// `maxSize`. Unset is 0.
pub fn desired(pool: &WarmPool, claims_created: &[Timestamp], now: Timestamp) -> i32 {
    match &pool.size {
        None => 0,
        Some(IntOrString::Int(n)) => (*n).max(0),
        Some(IntOrString::String(s)) if s == "auto" => {
            let cap = pool.max_size.unwrap_or(DEFAULT_MAX_SIZE).max(0);
            let since = now - AUTO_HISTORY;
            let mut times: Vec<Timestamp> = claims_created
                .iter()
                .copied()
                .filter(|t| *t >= since && *t <= now)
                .collect();
            times.sort();
            let mut peak = 0usize;
            let mut start = 0usize;
            for end in 0..times.len() {
                while times[end].duration_since(times[start]) >= AUTO_WINDOW {
                    start += 1;
                }
                peak = peak.max(end - start + 1);
            }
            i32::try_from(peak).unwrap_or(i32::MAX).min(cap)
        }
        // Validation refuses any other string; a count written as a string is read as one.
        Some(IntOrString::String(s)) => s.parse::<i32>().map_or(0, |n| n.max(0)),
    }
}

/// The types of `catalog` a member of `pool` may be, with why each type the pool lists by name
/// may not (`refusal`: why a type cannot wait in the pool's state, as
/// [`joiner_core::CloudProvider::warm_type_refusal`] says). The launcher and `joiner plan`
/// judge types by this one rule; the reasons become `spec.warmPool.instanceTypes: ...`.
pub fn usable_types(
    pool: &WarmPool,
    catalog: &[InstanceType],
    refusal: impl Fn(&InstanceType) -> Option<String>,
) -> (Vec<InstanceType>, Option<String>) {
    let mut refused = Vec::new();
    let usable = catalog
        .iter()
        .filter(|t| match refusal(t) {
            None => true,
            Some(why) => {
                if pool.instance_types.contains(&t.name) {
                    refused.push(why);
                }
                false
            }
        })
        .cloned()
        .collect();
    let why = (!refused.is_empty())
        .then(|| format!("spec.warmPool.instanceTypes: {}", refused.join("; ")));
    (usable, why)
}

/// `maxPricePremium` as a fraction (`"25%"` is 0.25).
pub fn premium(pool: &WarmPool) -> f64 {
    pool.max_price_premium
        .as_deref()
        .and_then(|p| p.strip_suffix('%'))
        .and_then(|p| p.parse::<f64>().ok())
        .map_or(DEFAULT_PREMIUM, |p| p / 100.0)
}

/// The cheapest available on-demand price of `t` in one of `zones` (any zone when empty).
pub fn on_demand_price(t: &InstanceType, zones: &[String]) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| {
            o.available
                && o.capacity_type == CapacityType::OnDemand
                && (zones.is_empty() || zones.contains(&o.zone))
        })
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

/// The instance types the pool mixes, cheapest first: `instanceTypes` when given (those the
/// catalog has), else the [`DEFAULT_TYPES`] cheapest on-demand types the Provisioner's
/// requirements allow whose allocatable holds `largest_pod` (the largest requests of any one
/// pod on the Provisioner's nodes; `None` when it runs none yet), and that are not accelerated
/// (a GPU type is chosen only by name).
pub fn pool_types(
    pool: &WarmPool,
    requirements: &Requirements,
    catalog: &[InstanceType],
    kubelet: &KubeletSettings,
    largest_pod: Option<&Resources>,
) -> Vec<String> {
    let mut priced: Vec<(f64, &InstanceType)> = catalog
        .iter()
        .filter(|t| {
            if !pool.instance_types.is_empty() {
                return pool.instance_types.contains(&t.name);
            }
            !t.is_accelerated()
                && t.first_label_conflict(requirements).is_none()
                && largest_pod.is_none_or(|p| p.fits(&kubelet.allocatable(t)))
        })
        .filter_map(|t| on_demand_price(t, &pool.zones).map(|p| (p, t)))
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let limit = if pool.instance_types.is_empty() {
        DEFAULT_TYPES
    } else {
        usize::MAX
    };
    priced
        .into_iter()
        .take(limit)
        .map(|(_, t)| t.name.clone())
        .collect()
}

/// The type and zone of the next member: the type the pool holds fewest of (ties: the
/// cheaper, i.e. earlier in `types`), then the zone it holds fewest members in among the
/// type's available on-demand offerings in `zones` (all its zones when empty). Spreading over
/// types and zones is what keeps a shortage of one from emptying the pool. `None` when no
/// type has an available on-demand offering.
pub fn next_member(
    types: &[String],
    zones: &[String],
    catalog: &[InstanceType],
    members: &[(String, String)],
) -> Option<(String, String)> {
    let count = |f: &dyn Fn(&(String, String)) -> bool| members.iter().filter(|m| f(m)).count();
    let mut best: Option<(usize, usize, String, String)> = None;
    for (rank, name) in types.iter().enumerate() {
        let Some(t) = catalog.iter().find(|t| &t.name == name) else {
            continue;
        };
        let mut offered: Vec<&str> = t
            .offerings
            .iter()
            .filter(|o| {
                o.available
                    && o.capacity_type == CapacityType::OnDemand
                    && (zones.is_empty() || zones.contains(&o.zone))
            })
            .map(|o| o.zone.as_str())
            .collect();
        offered.sort_unstable();
        offered.dedup();
        let Some(zone) = offered
            .iter()
            .min_by_key(|z| (count(&|m| m.1 == **z), **z))
            .map(|z| z.to_string())
        else {
            continue;
        };
        let held = count(&|m| &m.0 == name);
        let better = best
            .as_ref()
            .is_none_or(|(h, r, _, _)| (held, rank) < (*h, *r));
        if better {
            best = Some((held, rank, name.clone(), zone));
        }
    }
    best.map(|(_, _, t, z)| (t, z))
}

/// The requirements of a member of type `instance_type` in `zone`: exactly that offering,
/// on-demand.
pub fn member_requirements(instance_type: &str, zone: &str) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        (labels::INSTANCE_TYPE, instance_type.to_string()),
        (labels::ZONE, zone.to_string()),
        (
            labels::CAPACITY_TYPE,
            CapacityType::OnDemand.as_str().to_string(),
        ),
    ])
}

/// What one ready member costs per hour while it waits in `state`: stopped, its root volume
/// (`root_gib` at [`EBS_GIB_MONTH`]); hibernated, its root volume grown by its memory
/// (`memory_gib`, where EC2 keeps it); running, its instance `price`.
pub fn ready_cost(state: WarmState, price: f64, root_gib: f64, memory_gib: f64) -> f64 {
    let volume = |gib: f64| gib * EBS_GIB_MONTH / HOURS_PER_MONTH;
    match state {
        WarmState::Stopped => volume(root_gib),
        WarmState::Hibernated => volume(root_gib + memory_gib),
        WarmState::Running => price,
    }
}

/// The memory of `t` in whole GiB, as a hibernated member's root volume is grown by.
pub fn memory_gib(t: &InstanceType) -> f64 {
    let gib = 1i64 << 30;
    ((t.capacity.memory + gib - 1) / gib) as f64
}

/// What a pool costs per hour while nobody uses it: its ready members (each at
/// [`ready_cost`]) and each member still warming at its instance price.
pub fn idle_cost(ready: &[f64], warming_prices: &[f64]) -> f64 {
    ready.iter().sum::<f64>() + warming_prices.iter().sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::instance_type::Offering;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pool(size: IntOrString) -> WarmPool {
        WarmPool {
            size: Some(size),
            ..WarmPool::default()
        }
    }

    #[test]
    fn a_count_is_the_size_and_auto_is_the_busiest_ten_minutes_of_the_day() {
        let now = ts("2026-12-04T12:00:00Z");
        assert_eq!(desired(&pool(IntOrString::Int(3)), &[], now), 3);
        assert_eq!(desired(&WarmPool::default(), &[], now), 0);
        let auto = pool(IntOrString::String("auto".into()));
        // 4 claims within 9 minutes at 09:00, 2 at 11:00, 6 from yesterday morning (too old).
        let mut created: Vec<Timestamp> = [
            "09:00:00", "09:03:00", "09:05:00", "09:09:59", "11:00:00", "11:02:00",
        ]
        .iter()
        .map(|t| ts(&format!("2026-12-04T{t}Z")))
        .collect();
        created.extend((0..6).map(|i| ts(&format!("2026-12-03T08:0{i}:00Z"))));
        assert_eq!(desired(&auto, &created, now), 4);
        // A claim exactly ten minutes after the first starts a new window.
        created.push(ts("2026-12-04T09:10:00Z"));
        assert_eq!(desired(&auto, &created, now), 4);
        let capped = WarmPool {
            max_size: Some(2),
            ..auto.clone()
        };
        assert_eq!(desired(&capped, &created, now), 2);
        assert_eq!(desired(&auto, &[], now), 0);
    }

    #[test]
    fn the_premium_defaults_to_a_quarter() {
        assert_eq!(premium(&WarmPool::default()), 0.25);
        let p = WarmPool {
            max_price_premium: Some("40%".into()),
            ..WarmPool::default()
        };
        assert!((premium(&p) - 0.40).abs() < 1e-9);
    }

    fn offering(zone: &str, ct: CapacityType, price: f64, available: bool) -> Offering {
        Offering {
            zone: zone.into(),
            capacity_type: ct,
            price,
            price_estimated: false,
            available,
        }
    }

    fn catalog() -> Vec<InstanceType> {
        let mk = |name: &str, cpu: i64, od: f64, zones: &[&str]| InstanceType {
            name: name.into(),
            labels: BTreeMap::from([
                (labels::ARCH.to_string(), "amd64".to_string()),
                (labels::INSTANCE_TYPE.to_string(), name.to_string()),
            ]),
            capacity: Resources::new(cpu, 8 << 30, 20 << 30, 29),
            allocatable: Resources::new(cpu, 8 << 30, 20 << 30, 29),
            offerings: zones
                .iter()
                .flat_map(|z| {
                    [
                        offering(z, CapacityType::OnDemand, od, true),
                        offering(z, CapacityType::Spot, od / 3.0, true),
                    ]
                })
                .collect(),
            provider_keys: &[],
        };
        vec![
            mk("m5.large", 2000, 0.096, &["a", "b"]),
            mk("c5.large", 2000, 0.085, &["a", "b"]),
            mk("m5.xlarge", 4000, 0.192, &["a", "b"]),
            mk("t3.small", 2000, 0.0208, &["a"]),
        ]
    }

    #[test]
    fn default_types_are_the_cheapest_that_hold_the_largest_pod() {
        let cat = catalog();
        let kubelet = KubeletSettings::default();
        let any = Requirements::default();
        let types = pool_types(&WarmPool::default(), &any, &cat, &kubelet, None);
        assert_eq!(types, ["t3.small", "c5.large", "m5.large"]);
        let big = Resources::new(3000, 1 << 30, 0, 1);
        let types = pool_types(&WarmPool::default(), &any, &cat, &kubelet, Some(&big));
        assert_eq!(types, ["m5.xlarge"]);
        let named = WarmPool {
            instance_types: vec!["m5.xlarge".into(), "m5.large".into(), "x9.huge".into()],
            ..WarmPool::default()
        };
        assert_eq!(
            pool_types(&named, &any, &cat, &kubelet, Some(&big)),
            ["m5.large", "m5.xlarge"],
            "named types are taken as given (those the catalog has), cheapest first"
        );
    }

    #[test]
    fn members_spread_over_types_then_zones() {
        let cat = catalog();
        let types = vec!["c5.large".to_string(), "m5.large".to_string()];
        let mut members: Vec<(String, String)> = Vec::new();
        let mut picked = Vec::new();
        for _ in 0..4 {
            let next = next_member(&types, &[], &cat, &members).expect("a member");
            picked.push(next.clone());
            members.push(next);
        }
        assert_eq!(
            picked,
            [
                ("c5.large".to_string(), "a".to_string()),
                ("m5.large".to_string(), "b".to_string()),
                ("c5.large".to_string(), "a".to_string()),
                ("m5.large".to_string(), "b".to_string()),
            ]
        );
        // A pool confined to zone b; a type without an on-demand offering there is skipped.
        let confined = vec!["t3.small".to_string(), "m5.large".to_string()];
        assert_eq!(
            next_member(&confined, &["b".to_string()], &cat, &[]),
            Some(("m5.large".to_string(), "b".to_string()))
        );
        assert_eq!(
            next_member(&["t3.small".to_string()], &["b".to_string()], &cat, &[]),
            None
        );
    }

    #[test]
    fn idle_cost_is_volumes_of_stopped_members_and_prices_of_warming_ones() {
        let stopped = ready_cost(WarmState::Stopped, 0.096, 20.0, 8.0);
        let cost = idle_cost(&[stopped; 3], &[0.096]);
        assert!(
            (cost - (3.0 * 20.0 * 0.08 / 730.0 + 0.096)).abs() < 1e-12,
            "{cost}"
        );
        assert_eq!(idle_cost(&[], &[]), 0.0);
        // Hibernated: the root volume holds the memory too (20 + 8 GiB); running: the price.
        let hibernated = ready_cost(WarmState::Hibernated, 0.096, 20.0, 8.0);
        assert!(
            (hibernated - 28.0 * 0.08 / 730.0).abs() < 1e-12,
            "{hibernated}"
        );
        assert_eq!(ready_cost(WarmState::Running, 0.096, 20.0, 8.0), 0.096);
    }
}
