//! Node-selector requirements as manifests spell them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `{key, operator, values}`: the Kubernetes NodeSelectorRequirement shape, used by Provisioner
/// and NodeClaim requirements. The operator stays a string here so that a typo is reported by
/// validation with the field path rather than as an opaque parse failure.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// Label key.
    #[schemars(regex(pattern = crate::syntax::QUALIFIED_NAME_PATTERN), length(max = 316))]
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt or Lt.
    #[schemars(regex(pattern = r"^(In|NotIn|Exists|DoesNotExist|Gt|Lt)$"))]
    pub operator: String,
    /// Values; In/NotIn need at least one, Gt/Lt exactly one integer, Exists/DoesNotExist none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::spec_rules::MAX_REQUIREMENT_VALUES), inner(length(max = 63)))]
    pub values: Vec<String>,
}
