//! The CustomResourceDefinitions of joiner's resources, generated from the Rust types.
//!
//! The YAML in `charts/joiner/crds/` is produced from here by `joiner crds`, and a test compares
//! the two, so the schema the API server enforces can never drift from the types the controller
//! deserializes.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{NodeClaim, NodeTemplate, Provisioner};

/// Every CRD joiner installs, in a stable order (the order of the chart's files).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![NodeClaim::crd(), NodeTemplate::crd(), Provisioner::crd()]
}

/// The file name a CRD is stored under in the chart: `<plural>.<group>.yaml`, as
/// `kubectl get crd` names it.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// The schema of `spec` in the CRD of `kind`, as the API server gets it: what the
/// validation-rule tests run.
#[cfg(test)]
pub(crate) fn spec_schema(
    kind: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
    let crd = crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD of kind {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    schema.properties.as_ref().expect("properties")["spec"].clone()
}

/// The schema of `spec.<field>` in the CRD of `kind` ([`spec_schema`]).
#[cfg(test)]
pub(crate) fn spec_field(
    kind: &str,
    field: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps {
    spec_schema(kind)
        .properties
        .as_ref()
        .expect("spec properties")[field]
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    };

    #[test]
    fn every_crd_is_cluster_scoped_in_the_joiner_group_with_a_structural_schema() {
        let crds = crds();
        let names: Vec<_> = crds.iter().map(file_name).collect();
        assert_eq!(
            names,
            [
                "nodeclaims.joiner.sh.yaml",
                "nodetemplates.joiner.sh.yaml",
                "provisioners.joiner.sh.yaml"
            ]
        );
        for crd in &crds {
            assert_eq!(crd.spec.group, crate::GROUP);
            assert_eq!(crd.spec.scope, "Cluster");
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, crate::VERSION);
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            let props = schema.properties.as_ref().expect("properties");
            assert!(props.contains_key("spec"), "{:?}", crd.metadata.name);
            assert_structural(schema, crd.metadata.name.as_deref().unwrap_or_default());
        }
    }

    /// The API server rejects a CRD whose schema is not structural: every node needs a type
    /// unless it is explicitly int-or-string or preserves unknown fields.
    fn assert_structural(schema: &JSONSchemaProps, path: &str) {
        let typed = schema.type_.is_some()
            || schema.x_kubernetes_int_or_string == Some(true)
            || schema.x_kubernetes_preserve_unknown_fields == Some(true);
        assert!(typed, "{path} has no type");
        assert!(schema.ref_path.is_none(), "{path} keeps a $ref");
        for (name, child) in schema.properties.iter().flatten() {
            assert_structural(child, &format!("{path}.{name}"));
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
            assert_structural(items, &format!("{path}[]"));
        }
        if let Some(JSONSchemaPropsOrBool::Schema(extra)) = &schema.additional_properties {
            assert_structural(extra, &format!("{path}{{}}"));
        }
    }
}
