//! DescribeInstanceTypes → the capacity, allocatable and labels of each instance type.
//!
//! The live catalog must describe a type exactly as the embedded one does (same label keys,
//! same allocatable model), so the simulation cannot tell which catalog it is planning on
//! except by the prices and zones. Types whose answer lacks what the allocatable model needs
//! (vCPUs, memory, an architecture joiner launches, network limits) are skipped with a debug
//! log and counted, never guessed.

use std::collections::BTreeMap;

use crate::labels;
use aws_sdk_ec2::types::{
    ArchitectureType, EphemeralNvmeSupport, Filter, InstanceTypeHypervisor, InstanceTypeInfo,
    UsageClassType,
};
use joiner_core::{InstanceType, Resources};

use crate::allocatable::{eni_limited_max_pods, node_resources, Arch, NodeShape};
use crate::api_error::api_error;
use crate::error::AwsError;

/// Extended resource of AWS EFA interfaces.
pub const EFA: &str = "vpc.amazonaws.com/efa";
/// Extended resource of Neuron cores (one Neuron device has several).
pub const NEURON_CORE: &str = "aws.amazon.com/neuroncore";

/// One instance type as the live catalog keeps it between refreshes: everything but the
/// offerings, which depend on the zones and prices fetched separately.
#[derive(Clone, Debug)]
pub struct LiveType {
    /// The type with empty `offerings`.
    pub info: InstanceType,
    /// EC2 sells it on demand (`SupportedUsageClasses` has `on-demand`).
    pub on_demand: bool,
    /// EC2 sells it as spot.
    pub spot: bool,
}

/// The instance types of one region, and how many answers had to be skipped.
#[derive(Clone, Debug, Default)]
pub struct TypesPage {
    /// Usable types, sorted by name.
    pub types: Vec<LiveType>,
    /// Types left out because their description lacked a field the model needs.
    pub skipped: usize,
    /// DescribeInstanceTypes pages read (tests check pagination with it).
    pub pages: usize,
}

/// Lists every hvm instance type of the region with an x86_64 or arm64 processor, all pages.
/// `page_size` is the API's MaxResults (5–100; `None` lets EC2 choose).
pub async fn describe_instance_types(
    ec2: &aws_sdk_ec2::Client,
    region: &str,
    page_size: Option<i32>,
) -> Result<TypesPage, AwsError> {
    let mut request = ec2
        .describe_instance_types()
        .filters(
            Filter::builder()
                .name("supported-virtualization-type")
                .values("hvm")
                .build(),
        )
        .filters(
            Filter::builder()
                .name("processor-info.supported-architecture")
                .values("x86_64")
                .values("arm64")
                .build(),
        );
    if let Some(n) = page_size {
        request = request.max_results(n);
    }
    let mut pages = request.into_paginator().send();
    let mut out = TypesPage::default();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| api_error("ec2:DescribeInstanceTypes", e))?;
        out.pages += 1;
        for info in page.instance_types() {
            match convert(info, region) {
                Some(t) => out.types.push(t),
                None => out.skipped += 1,
            }
        }
    }
    out.types.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    out.types.dedup_by(|a, b| a.info.name == b.info.name);
    Ok(out)
}

/// Family, category, generation and size from a type name, as Karpenter derives them:
/// `m6i.large` → (`m6i`, `m`, `6`, `large`); `u-3tb1.56xlarge` → (`u-3tb1`, `u`, `1`, ...);
/// `c7i-flex.large` → (`c7i-flex`, `c`, `7`, `large`). Parts that cannot be found are empty.
pub fn name_parts(name: &str) -> (&str, &str, &str, &str) {
    let (family, size) = name.split_once('.').unwrap_or((name, ""));
    let letters = family
        .find(|c: char| !c.is_ascii_lowercase())
        .unwrap_or(family.len());
    let category = &family[..letters];
    let rest = &family[letters..];
    let generation = if rest.starts_with('-') {
        // u-3tb1: the generation is the trailing number.
        let end = rest.len();
        let start = rest
            .rfind(|c: char| !c.is_ascii_digit())
            .map_or(0, |i| i + 1);
        &rest[start..end]
    } else {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        &rest[..end]
    };
    (family, category, generation, size)
}

/// Converts one DescribeInstanceTypes entry, or `None` (logged at debug) when a field the
/// allocatable model needs is missing or out of range.
pub fn convert(info: &InstanceTypeInfo, region: &str) -> Option<LiveType> {
    let name = info.instance_type()?.as_str().to_string();
    let skip = |why: &str| {
        tracing::debug!(instance_type = %name, "skipping instance type: {why}");
    };
    let Some(arch) = arch_of(info) else {
        skip("no x86_64 or arm64 architecture");
        return None;
    };
    let Some(vcpus) = info
        .v_cpu_info()
        .and_then(|v| v.default_v_cpus())
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
    else {
        skip("no default vCPUs");
        return None;
    };
    let Some(memory_mib) = info
        .memory_info()
        .and_then(|m| m.size_in_mib())
        .and_then(|m| u64::try_from(m).ok())
        .filter(|m| *m > 0)
    else {
        skip("no memory size");
        return None;
    };
    let Some(max_pods) = max_pods(info) else {
        skip("no ENI or IPv4-per-ENI limits");
        return None;
    };

    let mut res = node_resources(&NodeShape::new(vcpus, memory_mib, arch, max_pods));
    let mut text: BTreeMap<&'static str, String> = BTreeMap::new();
    let (family, category, generation, size) = name_parts(&name);
    for (k, v) in [
        (labels::INSTANCE_FAMILY, family),
        (labels::INSTANCE_CATEGORY, category),
        (labels::INSTANCE_GENERATION, generation),
        (labels::INSTANCE_SIZE, size),
    ] {
        text.insert(k, v.to_string());
    }
    text.insert(labels::INSTANCE_TYPE, name.clone());
    text.insert(labels::REGION, region.to_string());
    text.insert(labels::ARCH, arch.as_str().to_string());
    text.insert(labels::OS, "linux".to_string());
    text.insert(labels::INSTANCE_CPU, vcpus.to_string());
    text.insert(labels::INSTANCE_MEMORY, memory_mib.to_string());
    if let Some(m) = info.processor_info().and_then(|p| p.manufacturer()) {
        text.insert(labels::INSTANCE_CPU_MANUFACTURER, m.to_ascii_lowercase());
    }
    // Metal types have no hypervisor; the label is then absent, as in the embedded table.
    match info.hypervisor() {
        Some(InstanceTypeHypervisor::Nitro) => {
            text.insert(labels::INSTANCE_HYPERVISOR, "nitro".to_string());
        }
        Some(InstanceTypeHypervisor::Xen) => {
            text.insert(labels::INSTANCE_HYPERVISOR, "xen".to_string());
        }
        _ => {}
    }
    if let Some(mbps) = network_bandwidth_mbps(info) {
        text.insert(labels::INSTANCE_NETWORK_BANDWIDTH, mbps.to_string());
    }
    if let Some(mbps) = info
        .ebs_info()
        .and_then(|e| e.ebs_optimized_info())
        .and_then(|e| e.maximum_bandwidth_in_mbps())
        .filter(|m| *m > 0)
    {
        text.insert(labels::INSTANCE_EBS_BANDWIDTH, mbps.to_string());
    }
    if let Some(storage) = info.instance_storage_info() {
        let nvme = matches!(
            storage.nvme_support(),
            Some(EphemeralNvmeSupport::Required | EphemeralNvmeSupport::Supported)
        );
        if let Some(gb) = storage.total_size_in_gb().filter(|g| *g > 0 && nvme) {
            text.insert(labels::INSTANCE_LOCAL_NVME, gb.to_string());
        }
    }
    accelerators(info, &mut text, &mut res.capacity, &mut res.allocatable);
    if let Some(n) = crate::embedded::pod_eni(&name).filter(|n| *n > 0) {
        res.capacity.set(crate::embedded::POD_ENI, n);
        res.allocatable.set(crate::embedded::POD_ENI, n);
    }

    let usage = info.supported_usage_classes();
    Some(LiveType {
        info: InstanceType {
            name,
            labels: text
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            capacity: res.capacity,
            allocatable: res.allocatable,
            offerings: Vec::new(),
            provider_keys: crate::labels::INSTANCE_LABEL_KEYS,
        },
        on_demand: usage.contains(&UsageClassType::OnDemand),
        spot: usage.contains(&UsageClassType::Spot),
    })
}

fn arch_of(info: &InstanceTypeInfo) -> Option<Arch> {
    let archs = info.processor_info()?.supported_architectures();
    // A type listing both (none today) is taken as x86_64, the more common AMI.
    if archs.contains(&ArchitectureType::X8664) {
        Some(Arch::Amd64)
    } else if archs.contains(&ArchitectureType::Arm64) {
        Some(Arch::Arm64)
    } else {
        None
    }
}

/// ENI-limited max pods from the default network card's interface count (the VPC CNI only
/// uses that card) and the IPv4 addresses per interface.
fn max_pods(info: &InstanceTypeInfo) -> Option<u32> {
    let net = info.network_info()?;
    let default_card = net.default_network_card_index().unwrap_or(0);
    let enis = net
        .network_cards()
        .iter()
        .find(|c| c.network_card_index() == Some(default_card))
        .and_then(|c| c.maximum_network_interfaces())
        .or(net.maximum_network_interfaces())?;
    let ips = net.ipv4_addresses_per_interface()?;
    let enis = u32::try_from(enis).ok().filter(|e| *e > 0)?;
    let ips = u32::try_from(ips).ok().filter(|i| *i > 0)?;
    Some(eni_limited_max_pods(enis, ips))
}

/// Baseline bandwidth of all network cards in Mbit/s, the unit of the embedded table.
fn network_bandwidth_mbps(info: &InstanceTypeInfo) -> Option<u64> {
    let cards = info.network_info()?.network_cards();
    let gbps: f64 = cards
        .iter()
        .filter_map(|c| c.baseline_bandwidth_in_gbps())
        .filter(|g| g.is_finite() && *g > 0.0)
        .sum();
    // `as` saturates; bandwidths are far below u64::MAX.
    (gbps > 0.0).then(|| (gbps * 1000.0).round() as u64)
}

/// GPU labels and resources (NVIDIA, AMD), Neuron devices and cores, EFA interfaces.
fn accelerators(
    info: &InstanceTypeInfo,
    text: &mut BTreeMap<&'static str, String>,
    capacity: &mut Resources,
    allocatable: &mut Resources,
) {
    let mut set = |name: &str, count: i64| {
        if count > 0 {
            capacity.set(name, count);
            allocatable.set(name, count);
        }
    };
    if let Some(gpu) = info.gpu_info().and_then(|g| g.gpus().first()) {
        let count = i64::from(gpu.count().unwrap_or(0).max(0));
        let manufacturer = gpu.manufacturer().unwrap_or_default().to_ascii_lowercase();
        if let Some(name) = gpu.name() {
            text.insert(labels::INSTANCE_GPU_NAME, name.to_ascii_lowercase());
        }
        if !manufacturer.is_empty() {
            text.insert(labels::INSTANCE_GPU_MANUFACTURER, manufacturer.clone());
        }
        if count > 0 {
            text.insert(labels::INSTANCE_GPU_COUNT, count.to_string());
        }
        if let Some(mib) = gpu
            .memory_info()
            .and_then(|m| m.size_in_mib())
            .filter(|m| *m > 0)
        {
            text.insert(labels::INSTANCE_GPU_MEMORY, mib.to_string());
        }
        match manufacturer.as_str() {
            "nvidia" => set(joiner_core::resources::NVIDIA_GPU, count),
            "amd" => set(joiner_core::resources::AMD_GPU, count),
            _ => {}
        }
    }
    if let Some(neuron) = info.neuron_info() {
        let devices: i64 = neuron
            .neuron_devices()
            .iter()
            .map(|d| i64::from(d.count().unwrap_or(0).max(0)))
            .sum();
        let cores: i64 = neuron
            .neuron_devices()
            .iter()
            .map(|d| {
                i64::from(d.count().unwrap_or(0).max(0))
                    * i64::from(d.core_info().and_then(|c| c.count()).unwrap_or(0).max(0))
            })
            .sum();
        set(joiner_core::resources::NEURON, devices);
        set(NEURON_CORE, cores);
    }
    if let Some(efa) = info
        .network_info()
        .and_then(|n| n.efa_info())
        .and_then(|e| e.maximum_efa_interfaces())
    {
        set(EFA, i64::from(efa.max(0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        MemoryInfo, NetworkCardInfo, NetworkInfo, ProcessorInfo, VCpuInfo, VirtualizationType,
    };

    #[test]
    fn name_parts_follow_karpenter() {
        assert_eq!(name_parts("m6i.large"), ("m6i", "m", "6", "large"));
        assert_eq!(
            name_parts("u-3tb1.56xlarge"),
            ("u-3tb1", "u", "1", "56xlarge")
        );
        assert_eq!(
            name_parts("u7in-16tb.224xlarge"),
            ("u7in-16tb", "u", "7", "224xlarge")
        );
        assert_eq!(
            name_parts("c7i-flex.large"),
            ("c7i-flex", "c", "7", "large")
        );
        assert_eq!(
            name_parts("p6-b200.48xlarge"),
            ("p6-b200", "p", "6", "48xlarge")
        );
        assert_eq!(name_parts("weird"), ("weird", "weird", "", ""));
    }

    #[test]
    fn name_parts_agree_with_the_embedded_table() {
        let catalog = crate::embedded::cached("us-east-1").expect("embedded region");
        for t in &catalog.instance_types {
            let (family, category, generation, size) = name_parts(&t.name);
            let label = |k: &str| t.labels.get(k).map(String::as_str).unwrap_or_default();
            assert_eq!(family, label(labels::INSTANCE_FAMILY), "{}", t.name);
            assert_eq!(category, label(labels::INSTANCE_CATEGORY), "{}", t.name);
            assert_eq!(generation, label(labels::INSTANCE_GENERATION), "{}", t.name);
            assert_eq!(size, label(labels::INSTANCE_SIZE), "{}", t.name);
        }
    }

    fn m5_large() -> InstanceTypeInfo {
        InstanceTypeInfo::builder()
            .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
            .supported_virtualization_types(VirtualizationType::Hvm)
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .manufacturer("Intel")
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(2).build())
            .memory_info(MemoryInfo::builder().size_in_mib(8192).build())
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .default_network_card_index(0)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(3)
                            .baseline_bandwidth_in_gbps(0.75)
                            .build(),
                    )
                    .build(),
            )
            .build()
    }

    #[test]
    fn m5_large_matches_the_embedded_type() {
        let live = convert(&m5_large(), "us-east-1").expect("convertible");
        let embedded = crate::embedded::cached("us-east-1").expect("embedded region");
        let e = embedded
            .instance_types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large embedded");
        assert_eq!(live.info.allocatable, e.allocatable);
        assert_eq!(live.info.capacity, e.capacity);
        for key in [
            labels::INSTANCE_FAMILY,
            labels::INSTANCE_CATEGORY,
            labels::INSTANCE_GENERATION,
            labels::INSTANCE_SIZE,
            labels::INSTANCE_CPU,
            labels::INSTANCE_MEMORY,
            labels::INSTANCE_CPU_MANUFACTURER,
            labels::INSTANCE_HYPERVISOR,
            labels::INSTANCE_NETWORK_BANDWIDTH,
            labels::ARCH,
            labels::OS,
            labels::REGION,
            labels::INSTANCE_TYPE,
        ] {
            assert_eq!(live.info.labels.get(key), e.labels.get(key), "{key}");
        }
        assert!(live.on_demand && live.spot);
    }

    #[test]
    fn missing_fields_skip_the_type() {
        let mut info = m5_large();
        info.memory_info = None;
        assert!(convert(&info, "us-east-1").is_none());
        let mut info = m5_large();
        info.network_info = None;
        assert!(convert(&info, "us-east-1").is_none());
        let mut info = m5_large();
        info.processor_info = Some(
            ProcessorInfo::builder()
                .supported_architectures(ArchitectureType::I386)
                .build(),
        );
        assert!(convert(&info, "us-east-1").is_none());
    }
}
