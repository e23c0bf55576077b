//! Which instance types can hibernate: the rule a `Hibernated` warm pool picks its members'
//! types by, so a member is never launched that EC2 would refuse to hibernate.
//!
//! From the EC2 user guide, "Prerequisites for EC2 instance hibernation" (Linux): a supported
//! instance family, less than 150 GiB of memory, not bare metal; the root volume an encrypted
//! EBS volume with room for the memory (the launch template sees to that). The families are
//! the guide's list; DescribeInstanceTypes' `HibernationSupported` says the same per type.

use joiner_core::InstanceType;

use crate::labels;

/// The families the EC2 user guide lists as supporting hibernation on Linux.
pub const FAMILIES: &[&str] = &[
    // General purpose.
    "m3", "m4", "m5", "m5a", "m5ad", "m5d", "m6a", "m6g", "m6gd", "m6i", "m6id", "m6idn", "m6in",
    "m7a", "m7g", "m7gd", "m7i", "m7i-flex", "t2", "t3", "t3a", "t4g",
    // Compute optimized.
    "c3", "c4", "c5", "c5d", "c6a", "c6g", "c6gd", "c6gn", "c6i", "c6id", "c6in", "c7a", "c7g",
    "c7gd", "c7gn", "c7i", "c7i-flex", // Memory optimized.
    "r3", "r4", "r5", "r5a", "r5ad", "r5d", "r6a", "r6g", "r6gd", "r6i", "r6id", "r6idn", "r6in",
    "r7a", "r7g", "r7gd", "r7i", "r7iz", // Storage optimized.
    "i3", "i3en",
];

/// Memory a hibernating Linux instance must stay under, MiB (150 GiB).
pub const MAX_MEMORY_MIB: u64 = 150 * 1024;

/// Why `instance_type` cannot hibernate, or `None` when it can.
pub fn refusal(instance_type: &InstanceType) -> Option<String> {
    let name = &instance_type.name;
    let (family, size) = name.split_once('.').unwrap_or((name.as_str(), ""));
    if !FAMILIES.contains(&family) {
        return Some(format!(
            "{name}: the {family} family does not support hibernation"
        ));
    }
    if size.starts_with("metal") {
        return Some(format!("{name}: bare metal types cannot hibernate"));
    }
    let memory = instance_type
        .labels
        .get(labels::INSTANCE_MEMORY)
        .and_then(|m| m.parse::<u64>().ok());
    match memory {
        None => Some(format!(
            "{name}: its memory is unknown, so its root volume cannot be sized for hibernation"
        )),
        Some(mib) if mib >= MAX_MEMORY_MIB => Some(format!(
            "{name}: {} GiB of memory; hibernation needs less than 150 GiB",
            mib / 1024
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog_type(name: &str) -> InstanceType {
        let catalog = crate::embedded::cached("us-east-1").expect("catalog");
        catalog
            .instance_types
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} in the catalog"))
            .clone()
    }

    #[test]
    fn the_guides_families_under_150_gib_and_not_metal_hibernate() {
        for ok in [
            "m5.large",
            "c6i.xlarge",
            "r5.4xlarge",
            "t3.medium",
            "m7i-flex.large",
        ] {
            assert_eq!(refusal(&catalog_type(ok)), None, "{ok}");
        }
        // A family the guide does not list, bare metal, and 192 GiB of memory.
        let refused = [
            ("m5zn.large", "the m5zn family does not support hibernation"),
            ("m5.metal", "bare metal types cannot hibernate"),
            (
                "m5.12xlarge",
                "192 GiB of memory; hibernation needs less than 150 GiB",
            ),
        ];
        for (name, why) in refused {
            let got = refusal(&catalog_type(name)).unwrap_or_default();
            assert!(got.starts_with(name) && got.ends_with(why), "{name}: {got}");
        }
        let mut unknown = catalog_type("m5.large");
        unknown.labels.remove(labels::INSTANCE_MEMORY);
        assert!(refusal(&unknown).is_some_and(|r| r.contains("memory is unknown")));
    }
}
