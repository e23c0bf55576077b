//! Instance operations: look-ups by ID, claim and cluster, state, and guarded termination.
//!
//! Termination is the one irreversible call joiner makes, so it never trusts its caller: it
//! describes the instances first and terminates only those carrying joiner's ownership tags for
//! this cluster (the cluster tag *and* `joiner.sh/provisioner-name`, see [`crate::tags`]); the
//! others are refused and reported, one typed reason per instance. Listing goes by the same
//! pair, so node groups and other autoscalers' instances are never seen as joiner's.

use std::collections::{BTreeMap, HashSet};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};
use joiner_core::CapacityType;
use thiserror::Error;

use crate::api_error::api_error;
use crate::discovery::tag_map;
use crate::tags;
use crate::AwsError;

/// Instances per DescribeInstances/TerminateInstances call (EC2 accepts 1000 IDs; smaller
/// batches keep one bad answer from hiding many instances).
pub const BATCH: usize = 500;

/// An instance as the controller needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// e.g. `m5.large`.
    pub instance_type: String,
    /// Zone name.
    pub zone: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
    /// Private DNS name (the node name on EKS), empty until assigned.
    pub private_dns_name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// DescribeInstances `LaunchTime`, when EC2 reported one.
    pub launch_time: Option<std::time::SystemTime>,
    /// The AMI it booted.
    pub image_id: Option<String>,
    /// Its subnet.
    pub subnet_id: Option<String>,
    /// Its security groups' IDs.
    pub security_group_ids: Vec<String>,
}

/// Why an instance was not terminated.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminateRefusal {
    /// It lacks one of joiner's ownership tags for this cluster: it is not joiner's to
    /// terminate (a managed node group's or another autoscaler's instance carries the cluster
    /// tag too).
    #[error("refusing to terminate {instance_id}: it lacks joiner's ownership tag `{missing}`")]
    NotOwned {
        /// The instance.
        instance_id: String,
        /// The missing tag, `key=value` or `key` when any value will do.
        missing: String,
    },
    /// DescribeInstances does not know it (wrong ID or long gone).
    #[error("refusing to terminate {instance_id}: no such instance")]
    NotFound {
        /// The instance.
        instance_id: String,
    },
}

/// What a terminate call did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TerminateOutcome {
    /// IDs EC2 accepted for termination (or already terminated).
    pub terminated: Vec<String>,
    /// IDs refused, with the reason.
    pub refused: Vec<TerminateRefusal>,
}

/// Instance operations scoped to one cluster.
#[derive(Debug, Clone)]
pub struct Instances {
    ec2: aws_sdk_ec2::Client,
    cluster: String,
}

impl Instances {
    /// Operations on the instances of `cluster`.
    pub fn new(ec2: aws_sdk_ec2::Client, cluster: &str) -> Self {
        Instances {
            ec2,
            cluster: cluster.to_string(),
        }
    }

    /// The instance `id`, or `None` if EC2 does not know it. Not restricted to the cluster, so
    /// callers can tell "not ours" from "gone".
    pub async fn get(&self, id: &str) -> Result<Option<Instance>, AwsError> {
        Ok(self
            .describe(vec![id_filter(&[id.to_string()])])
            .await?
            .into_iter()
            .find(|i| i.id == id))
    }

    /// joiner's instances in this cluster that are not terminated.
    pub async fn list_by_cluster(&self) -> Result<Vec<Instance>, AwsError> {
        self.describe_owned(vec![live_filter()]).await
    }

    /// joiner's live instances in this cluster launched for the NodeClaims `claims` or with the
    /// IDs `ids`, each once: filtered by EC2, in batches, never the whole fleet.
    pub async fn list_some(
        &self,
        claims: &[String],
        ids: &[String],
    ) -> Result<Vec<Instance>, AwsError> {
        let mut out: Vec<Instance> = Vec::new();
        // A filter takes at most 200 values.
        for chunk in claims.chunks(200) {
            out.extend(
                self.describe_owned(vec![
                    live_filter(),
                    Filter::builder()
                        .name(format!("tag:{}", tags::NODECLAIM))
                        .set_values(Some(chunk.to_vec()))
                        .build(),
                ])
                .await?,
            );
        }
        for chunk in ids.chunks(200) {
            out.extend(
                self.describe_owned(vec![live_filter(), id_filter(chunk)])
                    .await?,
            );
        }
        let mut seen = HashSet::new();
        out.retain(|i| seen.insert(i.id.clone()));
        Ok(out)
    }

    /// joiner's live instances in this cluster launched for NodeClaim `claim` (normally one).
    pub async fn find_by_claim(&self, claim: &str) -> Result<Vec<Instance>, AwsError> {
        self.describe_owned(vec![
            live_filter(),
            Filter::builder()
                .name(format!("tag:{}", tags::NODECLAIM))
                .values(claim)
                .build(),
        ])
        .await
    }

    /// The state of each known instance of `ids` (unknown IDs are absent from the map).
    pub async fn describe_state(
        &self,
        ids: &[String],
    ) -> Result<BTreeMap<String, String>, AwsError> {
        let mut out = BTreeMap::new();
        for chunk in ids.chunks(BATCH) {
            for i in self.describe(vec![id_filter(chunk)]).await? {
                out.insert(i.id, i.state);
            }
        }
        Ok(out)
    }

    /// Terminates those of `ids` that carry joiner's ownership tags for this cluster, in
    /// batches; the others are refused and reported. Duplicates are terminated once.
    pub async fn terminate(&self, ids: &[String]) -> Result<TerminateOutcome, AwsError> {
        let mut seen = HashSet::new();
        let ids: Vec<String> = ids.iter().filter(|i| seen.insert(*i)).cloned().collect();
        let mut outcome = TerminateOutcome::default();
        for chunk in ids.chunks(BATCH) {
            let found = self.describe(vec![id_filter(chunk)]).await?;
            let mut owned = Vec::new();
            for id in chunk {
                match found.iter().find(|i| &i.id == id) {
                    None => outcome.refused.push(TerminateRefusal::NotFound {
                        instance_id: id.clone(),
                    }),
                    Some(i) => match tags::missing_ownership_tag(&i.tags, &self.cluster) {
                        Some(missing) => {
                            tracing::warn!(instance_id = %id, cluster = %self.cluster, %missing, "refusing to terminate an instance joiner does not own");
                            outcome.refused.push(TerminateRefusal::NotOwned {
                                instance_id: id.clone(),
                                missing,
                            })
                        }
                        None => owned.push(id.clone()),
                    },
                }
            }
            if owned.is_empty() {
                continue;
            }
            let out = self
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(owned))
                .send()
                .await
                .map_err(|e| api_error("ec2:TerminateInstances", e))?;
            outcome.terminated.extend(
                out.terminating_instances()
                    .iter()
                    .filter_map(|c| c.instance_id().map(str::to_string)),
            );
        }
        outcome.terminated.sort();
        Ok(outcome)
    }

    /// DescribeInstances narrowed to joiner's ownership tags, the answer checked again with
    /// [`tags::is_owned`].
    async fn describe_owned(&self, mut filters: Vec<Filter>) -> Result<Vec<Instance>, AwsError> {
        filters.extend(tags::owned_filters(&self.cluster));
        let mut found = self.describe(filters).await?;
        found.retain(|i| tags::is_owned(&i.tags, &self.cluster));
        Ok(found)
    }

    /// DescribeInstances with filters, all pages. Filters (not InstanceIds) are used for IDs so
    /// that an unknown ID is an absent row rather than an error for the whole batch.
    async fn describe(&self, filters: Vec<Filter>) -> Result<Vec<Instance>, AwsError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .ec2
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| api_error("ec2:DescribeInstances", e))?;
            for r in page.reservations() {
                for i in r.instances() {
                    let Some(id) = i.instance_id() else { continue };
                    out.push(Instance {
                        id: id.to_string(),
                        instance_type: i
                            .instance_type()
                            .map(|t| t.as_str().to_string())
                            .unwrap_or_default(),
                        zone: i
                            .placement()
                            .and_then(|p| p.availability_zone())
                            .unwrap_or_default()
                            .to_string(),
                        state: i
                            .state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_string())
                            .unwrap_or_default(),
                        capacity_type: if i.instance_lifecycle()
                            == Some(&InstanceLifecycleType::Spot)
                        {
                            CapacityType::Spot
                        } else {
                            CapacityType::OnDemand
                        },
                        private_dns_name: i.private_dns_name().unwrap_or_default().to_string(),
                        tags: tag_map(i.tags()),
                        launch_time: i
                            .launch_time()
                            .and_then(|t| std::time::SystemTime::try_from(*t).ok()),
                        image_id: i.image_id().map(str::to_string),
                        subnet_id: i.subnet_id().map(str::to_string),
                        security_group_ids: i
                            .security_groups()
                            .iter()
                            .filter_map(|g| g.group_id().map(str::to_string))
                            .collect(),
                    });
                }
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

fn id_filter(ids: &[String]) -> Filter {
    Filter::builder()
        .name("instance-id")
        .set_values(Some(ids.to_vec()))
        .build()
}

fn live_filter() -> Filter {
    Filter::builder()
        .name("instance-state-name")
        .set_values(Some(
            ["pending", "running", "stopping", "stopped", "shutting-down"]
                .map(str::to_string)
                .to_vec(),
        ))
        .build()
}
