//! Taints as manifests spell them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A node taint `{key, value, effect}`. Kept as strings (rather than the core enum) so that an
/// unknown effect is reported by validation with its field path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value; may be omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
}
