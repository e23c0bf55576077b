//! Taints as manifests spell them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A node taint `{key, value, effect}`. Kept as strings (rather than the core enum) so that an
/// unknown effect is reported by validation with its field path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    #[schemars(regex(pattern = crate::syntax::QUALIFIED_NAME_PATTERN), length(max = 316))]
    pub key: String,
    /// Taint value; may be omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::syntax::LABEL_VALUE_PATTERN), length(max = 63))]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    #[schemars(regex(pattern = r"^(NoSchedule|PreferNoSchedule|NoExecute)$"))]
    pub effect: String,
}
