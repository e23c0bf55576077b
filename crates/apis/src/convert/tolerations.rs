//! Pod tolerations.

use joiner_core::{Effect, Toleration};
use k8s_openapi::api::core::v1 as k8s;

use super::FieldError;

/// Converts tolerations at path `prefix`. The operator defaults to `Equal`, an empty effect
/// matches every effect, and `tolerationSeconds` is ignored (it only delays eviction).
pub fn tolerations(list: &[k8s::Toleration], prefix: &str) -> Result<Vec<Toleration>, FieldError> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let at = |leaf: &str| format!("{prefix}[{i}].{leaf}");
            let key = t.key.clone().unwrap_or_default();
            let exists = match t.operator.as_deref().unwrap_or("Equal") {
                "Equal" => false,
                "Exists" => true,
                other => {
                    return Err(FieldError::new(
                        at("operator"),
                        format!("unknown toleration operator {other:?} (expected Equal or Exists)"),
                    ))
                }
            };
            if let Some(why) = Some(key.as_str())
                .filter(|k| !k.is_empty())
                .and_then(crate::syntax::qualified_name)
            {
                return Err(FieldError::new(at("key"), why));
            }
            if key.is_empty() && !exists {
                return Err(FieldError::new(
                    at("key"),
                    "an empty key needs operator Exists (it tolerates every taint)",
                ));
            }
            let effect = match t.effect.as_deref().unwrap_or_default() {
                "" => None,
                e => Some(Effect::parse(e).ok_or_else(|| {
                    FieldError::new(
                        at("effect"),
                        format!("unknown effect {e:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"),
                    )
                })?),
            };
            Ok(Toleration {
                key,
                exists,
                value: if exists {
                    String::new()
                } else {
                    t.value.clone().unwrap_or_default()
                },
                effect,
            })
        })
        .collect()
}
