//! What the Provisioners' warm pools would do for a plan: which new nodes a ready member would
//! serve (started instead of launched), and what each pool costs idle.
//!
//! The members are the input's warm-pool NodeClaims in phase `Warm` (from `kubectl get
//! nodeclaims -o yaml`) when it has any for the Provisioner; otherwise a full pool as the
//! controller would build it from `spec.warmPool` (its size, its types and zones spread as
//! [`joiner_apis::cluster::warm_pool::sizing::next_member`] does). New nodes are matched in plan
//! order, each to the cheapest unused member the launch path would take for it
//! ([`joiner_apis::cluster::warm_pool::serves`]).

use std::collections::BTreeMap;

use joiner_apis::cluster::warm_pool::sizing;
use joiner_apis::cluster::warm_pool::{serves, Candidate};
use joiner_apis::node_claim::WARM;
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_core::kubelet::KubeletSettings;
use joiner_core::scheduling::Plan;
use joiner_core::{InstanceType, WarmState};
use k8s_openapi::jiff::Timestamp;

/// One Provisioner's pool as the plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolView {
    /// The Provisioner.
    pub provisioner: String,
    /// Ready members: (instance type, zone, on-demand $/h).
    pub members: Vec<(String, String, f64)>,
    /// True when the members are the pool `spec.warmPool` describes, not claims of the input.
    pub from_spec: bool,
    /// What the ready members cost per hour while idle (their root volumes), USD.
    pub idle_cost_per_hour: f64,
    /// Why the pool is not what its spec asks, when it is not (size `auto` offline, a family
    /// without warm-up).
    pub note: Option<String>,
}

/// The pools, and the member each served new node would start (`type in zone`), by node name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overlay {
    /// Every Provisioner with a warm pool.
    pub pools: Vec<PoolView>,
    /// New node name to the member that would serve it.
    pub served: BTreeMap<String, String>,
}

fn root_gib(nt: Option<&NodeTemplate>) -> f64 {
    nt.and_then(NodeTemplate::ephemeral_volume_bytes)
        .map_or(sizing::DEFAULT_ROOT_GIB, |b| {
            b as f64 / f64::from(1u32 << 30)
        })
}

/// The pools of `provisioners` and the new nodes of `plan` they would serve.
pub fn overlay(
    plan: &Plan,
    provisioners: &[Provisioner],
    node_templates: &[NodeTemplate],
    claims: &[NodeClaim],
    catalog: &[InstanceType],
) -> Overlay {
    let mut out = Overlay::default();
    for prov in provisioners {
        let Some(pool) = prov.spec.warm_pool.as_ref() else {
            continue;
        };
        let nt = prov
            .spec
            .provider_ref
            .as_ref()
            .and_then(|r| node_templates.iter().find(|t| t.name() == r.name));
        let price = |t: &str, zone: &str| {
            catalog
                .iter()
                .find(|c| c.name == t)
                .and_then(|c| sizing::on_demand_price(c, &[zone.to_string()]))
        };
        let listed: Vec<(String, String, f64)> = claims
            .iter()
            .filter(|c| c.warm_pool() == Some(prov.name()) && c.warm_phase() == Some(WARM))
            .filter_map(|c| {
                let s = c.status.as_ref()?;
                let (t, z) = (s.instance_type.clone()?, s.zone.clone()?);
                let p = price(&t, &z).or(s.price_per_hour)?;
                Some((t, z, p))
            })
            .collect();
        let mut note = joiner_apis::cluster::warm_pool::unsupported(prov, nt);
        let (members, from_spec) = if !listed.is_empty() {
            (listed, false)
        } else if note.is_some() {
            (Vec::new(), true)
        } else {
            let size = sizing::desired(pool, &[], Timestamp::now());
            if matches!(&pool.size, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) if s == "auto")
            {
                note = Some(
                    "size auto follows the claims of the last day, which a plan does not have: \
                     no members assumed (pass the pool's NodeClaims to see them)"
                        .into(),
                );
            }
            // A hibernated pool mixes only types that can hibernate (the launcher's rule); the
            // note names the listed types left out.
            let (usable, refused) = sizing::usable_types(pool, catalog, |t| {
                (pool.warm_state() == WarmState::Hibernated)
                    .then(|| joiner_aws::hibernation::refusal(t))
                    .flatten()
            });
            if note.is_none() {
                note = refused;
            }
            let types = match prov.to_core() {
                Ok(core) => sizing::pool_types(
                    pool,
                    &core.requirements,
                    &usable,
                    &KubeletSettings::default(),
                    None,
                ),
                Err(e) => {
                    note = Some(e.to_string());
                    Vec::new()
                }
            };
            let mut held: Vec<(String, String)> = Vec::new();
            for _ in 0..size {
                let Some(next) = sizing::next_member(&types, &pool.zones, catalog, &held) else {
                    break;
                };
                held.push(next);
            }
            let members = held
                .into_iter()
                .filter_map(|(t, z)| price(&t, &z).map(|p| (t, z, p)))
                .collect();
            (members, true)
        };
        let premium = sizing::premium(pool);
        let mut used = vec![false; members.len()];
        for node in plan
            .new_nodes
            .iter()
            .filter(|n| n.provisioner == prov.name())
        {
            let options = node.priced_options();
            let cheapest = options.first().map(|(_, p)| *p);
            let zones = node.zones();
            let best = members
                .iter()
                .enumerate()
                .filter(|(i, _)| !used[*i])
                .filter(|(_, (t, z, p))| {
                    serves(
                        &node.requirements,
                        &zones,
                        cheapest,
                        premium,
                        &Candidate {
                            instance_type: t,
                            zone: z,
                            price: *p,
                        },
                    )
                })
                .min_by(|a, b| a.1 .2.total_cmp(&b.1 .2));
            if let Some((i, (t, z, _))) = best {
                used[i] = true;
                out.served.insert(node.name.clone(), format!("{t} in {z}"));
            }
        }
        let ready: Vec<f64> = members
            .iter()
            .map(|(t, _, price)| {
                let memory = catalog
                    .iter()
                    .find(|c| c.name == *t)
                    .map_or(0.0, sizing::memory_gib);
                sizing::ready_cost(pool.warm_state(), *price, root_gib(nt), memory)
            })
            .collect();
        let idle = sizing::idle_cost(&ready, &[]);
        out.pools.push(PoolView {
            provisioner: prov.name().to_string(),
            members,
            from_spec,
            idle_cost_per_hour: idle,
            note,
        });
    }
    out
}
