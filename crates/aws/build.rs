//! Turns the embedded catalog tables in `data/` into static Rust tables in `OUT_DIR`.
//!
//! Parsing 15,000 CSV lines every time `joiner plan` starts would cost more than the plan
//! itself, so the tables are checked and converted once, at compile time. Any malformed cell
//! fails the build with the file, line and column, because a silently skipped row would show up
//! much later as a missing instance type.

use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

const TYPES_FILE: &str = "data/karpenter-instance-types-allocatable-al2023.csv";
const PRICES_FILE: &str = "data/ec2-ondemand-prices-us-east-1.csv";
const OFFERINGS_FILE: &str = "data/ec2-instance-type-offerings.csv";
/// The only region of the price table; the others borrow it.
const PRICE_REGION: &str = "us-east-1";

/// Extended-resource columns of the allocatable table and the Kubernetes resource they name.
const EXTENDED_COLUMNS: &[(&str, &str)] = &[
    ("allocatable_pod_eni", "vpc.amazonaws.com/pod-eni"),
    ("allocatable_efa", "vpc.amazonaws.com/efa"),
    ("allocatable_nvidia_gpu", "nvidia.com/gpu"),
    ("allocatable_amd_gpu", "amd.com/gpu"),
    ("allocatable_neuron", "aws.amazon.com/neuron"),
    ("allocatable_neuroncore", "aws.amazon.com/neuroncore"),
];

/// GPU resource columns and the manufacturer label value they imply.
const GPU_MANUFACTURER_COLUMNS: &[(&str, &str)] = &[
    ("allocatable_nvidia_gpu", "nvidia"),
    ("allocatable_amd_gpu", "amd"),
];

fn main() {
    if let Err(msg) = run() {
        eprintln!("joiner-aws build script: {msg}");
        std::process::exit(1);
    }
}

/// A CSV table split into a header and rows, with the line number of each row for messages.
struct Table {
    file: &'static str,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    fn read(dir: &Path, file: &'static str) -> Result<Table, String> {
        let path = dir.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
            .filter(|(_, l)| !l.is_empty());
        let (_, head) = lines.next().ok_or_else(|| format!("{file} is empty"))?;
        let header: Vec<String> = head.split(',').map(str::to_string).collect();
        let mut rows = Vec::new();
        for (n, line) in lines {
            if line.contains('"') {
                return Err(format!(
                    "{file}:{n}: quoted field found; the build script only splits on commas"
                ));
            }
            let cells: Vec<String> = line.split(',').map(str::to_string).collect();
            if cells.len() != header.len() {
                return Err(format!(
                    "{file}:{n}: {} cells, the header has {}",
                    cells.len(),
                    header.len()
                ));
            }
            rows.push((n, cells));
        }
        Ok(Table { file, header, rows })
    }

    fn column(&self, name: &str) -> Result<usize, String> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{}: missing column `{name}`", self.file))
    }
}

/// One instance type's facts, already validated.
struct TypeFacts {
    name: String,
    text: BTreeMap<&'static str, String>,
    arch: &'static str,
    vcpus: u32,
    memory_mib: u64,
    max_pods: u32,
    extended: Vec<(&'static str, i64)>,
    gpu_manufacturer: String,
    price: Option<f64>,
}

/// Label columns copied verbatim (empty means "no label").
const TEXT_COLUMNS: &[&str] = &[
    "instance_family",
    "instance_category",
    "instance_generation",
    "instance_size",
    "os",
    "instance_cpu_manufacturer",
    "instance_hypervisor",
    "instance_network_bandwidth",
    "instance_ebs_bandwidth",
    "instance_local_nvme",
    "instance_gpu_name",
    "instance_gpu_count",
    "instance_gpu_memory",
];

/// Label columns that must be integers when present, so `Gt`/`Lt` requirements work.
const NUMERIC_TEXT_COLUMNS: &[&str] = &[
    "instance_generation",
    "instance_network_bandwidth",
    "instance_ebs_bandwidth",
    "instance_local_nvme",
    "instance_gpu_count",
    "instance_gpu_memory",
];

fn parse_int<T: std::str::FromStr>(
    file: &str,
    line: usize,
    column: &str,
    cell: &str,
) -> Result<T, String> {
    cell.parse::<T>().map_err(|_| {
        format!("{file}:{line}: column `{column}` should be a non-negative integer, got `{cell}`")
    })
}

fn read_types(dir: &Path) -> Result<Vec<TypeFacts>, String> {
    let t = Table::read(dir, TYPES_FILE)?;
    let name_c = t.column("instance_type")?;
    let arch_c = t.column("arch")?;
    let cpu_c = t.column("instance_cpu")?;
    let mem_c = t.column("instance_memory")?;
    let pods_c = t.column("allocatable_pods")?;
    let text_cs = TEXT_COLUMNS
        .iter()
        .map(|c| t.column(c).map(|i| (*c, i)))
        .collect::<Result<Vec<_>, _>>()?;
    let ext_cs = EXTENDED_COLUMNS
        .iter()
        .map(|(c, r)| t.column(c).map(|i| (*c, *r, i)))
        .collect::<Result<Vec<_>, _>>()?;

    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(t.rows.len());
    for (n, row) in &t.rows {
        let name = row[name_c].clone();
        if name.is_empty() || !seen.insert(name.clone()) {
            return Err(format!(
                "{}:{n}: empty or duplicate instance type `{name}`",
                t.file
            ));
        }
        let arch = match row[arch_c].as_str() {
            "amd64" => "Amd64",
            "arm64" => "Arm64",
            other => {
                return Err(format!(
                    "{}:{n}: arch must be amd64 or arm64, got `{other}`",
                    t.file
                ))
            }
        };
        let mut text = BTreeMap::new();
        for (c, i) in &text_cs {
            let cell = row[*i].clone();
            if !cell.is_empty() && NUMERIC_TEXT_COLUMNS.contains(c) {
                parse_int::<u64>(t.file, *n, c, &cell)?;
            }
            text.insert(*c, cell);
        }
        let mut extended = Vec::new();
        for (c, r, i) in &ext_cs {
            if !row[*i].is_empty() {
                let v: i64 = parse_int(t.file, *n, c, &row[*i])?;
                if v > 0 {
                    extended.push((*r, v));
                }
            }
        }
        let gpu_manufacturer = GPU_MANUFACTURER_COLUMNS
            .iter()
            .find(|(c, _)| extended.iter().any(|(r, _)| ext_name(c) == Some(*r)))
            .map(|(_, m)| m.to_string())
            .unwrap_or_default();
        out.push(TypeFacts {
            vcpus: parse_int(t.file, *n, "instance_cpu", &row[cpu_c])?,
            memory_mib: parse_int(t.file, *n, "instance_memory", &row[mem_c])?,
            max_pods: parse_int(t.file, *n, "allocatable_pods", &row[pods_c])?,
            name,
            text,
            arch,
            extended,
            gpu_manufacturer,
            price: None,
        });
    }
    fill_gpu_manufacturers(&mut out);
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn ext_name(column: &str) -> Option<&'static str> {
    EXTENDED_COLUMNS
        .iter()
        .find(|(c, _)| *c == column)
        .map(|(_, r)| *r)
}

/// Types such as g6f (fractional L4) name a GPU but expose no GPU resource. Their manufacturer
/// is taken from other rows with the same GPU name that do, so the label comes from the data
/// rather than from a hand-kept list.
fn fill_gpu_manufacturers(types: &mut [TypeFacts]) {
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for t in types.iter() {
        let gpu = t.text.get("instance_gpu_name").cloned().unwrap_or_default();
        if !gpu.is_empty() && !t.gpu_manufacturer.is_empty() {
            by_name.insert(gpu, t.gpu_manufacturer.clone());
        }
    }
    for t in types.iter_mut() {
        if t.gpu_manufacturer.is_empty() {
            if let Some(gpu) = t.text.get("instance_gpu_name") {
                if let Some(m) = by_name.get(gpu) {
                    t.gpu_manufacturer = m.clone();
                }
            }
        }
    }
}

fn read_prices(dir: &Path, types: &mut [TypeFacts]) -> Result<(), String> {
    let t = Table::read(dir, PRICES_FILE)?;
    let region_c = t.column("region")?;
    let name_c = t.column("instance_type")?;
    let price_c = t.column("usd_per_hour")?;
    for (n, row) in &t.rows {
        if row[region_c] != PRICE_REGION {
            return Err(format!(
                "{}:{n}: only {PRICE_REGION} rows belong in this table, got `{}`",
                t.file, row[region_c]
            ));
        }
        let price: f64 = row[price_c]
            .parse()
            .map_err(|_| format!("{}:{n}: price `{}` is not a number", t.file, row[price_c]))?;
        if !price.is_finite() || price < 0.0 {
            return Err(format!("{}:{n}: price `{price}` is out of range", t.file));
        }
        // Zero means "no price" upstream as well; such types get no offerings.
        if price == 0.0 {
            continue;
        }
        if let Ok(i) = types.binary_search_by(|f| f.name.as_str().cmp(&row[name_c])) {
            if types[i].price.replace(price).is_some() {
                return Err(format!(
                    "{}:{n}: duplicate price for `{}`",
                    t.file, row[name_c]
                ));
            }
        }
    }
    Ok(())
}

/// region → type index → zones. Types missing from the allocatable table are skipped.
type Offered = BTreeMap<String, BTreeMap<usize, BTreeSet<String>>>;

fn read_offerings(dir: &Path, types: &[TypeFacts]) -> Result<Offered, String> {
    let t = Table::read(dir, OFFERINGS_FILE)?;
    let region_c = t.column("region")?;
    let zone_c = t.column("zone")?;
    let name_c = t.column("instance_type")?;
    let mut out: Offered = BTreeMap::new();
    for (n, row) in &t.rows {
        let (region, zone) = (&row[region_c], &row[zone_c]);
        if region.is_empty() || zone.len() <= region.len() || !zone.starts_with(region.as_str()) {
            return Err(format!(
                "{}:{n}: zone `{zone}` does not belong to region `{region}`",
                t.file
            ));
        }
        let zones = out.entry(region.clone()).or_default();
        if let Ok(i) = types.binary_search_by(|f| f.name.as_str().cmp(&row[name_c])) {
            zones.entry(i).or_default().insert(zone.clone());
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no offerings", t.file));
    }
    Ok(out)
}

fn render(types: &[TypeFacts], offered: &Offered) -> Result<String, String> {
    if types.len() > usize::from(u16::MAX) {
        return Err(format!("{} types do not fit a u16 index", types.len()));
    }
    let mut s = String::with_capacity(1 << 20);
    let w = |s: &mut String, args: std::fmt::Arguments<'_>| {
        // Writing to a String cannot fail.
        let _ = s.write_fmt(args);
    };
    w(
        &mut s,
        format_args!("// @generated by crates/aws/build.rs; do not edit.\n"),
    );
    w(
        &mut s,
        format_args!("pub(crate) static PRICE_REGION: &str = {PRICE_REGION:?};\n"),
    );
    w(
        &mut s,
        format_args!(
            "pub(crate) const REGION_COUNT: usize = {};\n\
             pub(crate) static REGIONS: [&str; REGION_COUNT] = [",
            offered.len()
        ),
    );
    for r in offered.keys() {
        w(&mut s, format_args!("{r:?}, "));
    }
    w(&mut s, format_args!("];\n"));
    w(
        &mut s,
        format_args!("pub(crate) static TYPES: &[TypeFacts] = &[\n"),
    );
    for t in types {
        let txt = |c: &str| t.text.get(c).cloned().unwrap_or_default();
        w(
            &mut s,
            format_args!(
                "TypeFacts {{ name: {:?}, family: {:?}, category: {:?}, generation: {:?}, \
                 size: {:?}, arch: Arch::{}, os: {:?}, vcpus: {}, memory_mib: {}, \
                 cpu_manufacturer: {:?}, hypervisor: {:?}, network_bandwidth: {:?}, \
                 ebs_bandwidth: {:?}, local_nvme: {:?}, gpu_name: {:?}, gpu_count: {:?}, \
                 gpu_memory: {:?}, gpu_manufacturer: {:?}, max_pods: {}, extended: &[",
                t.name,
                txt("instance_family"),
                txt("instance_category"),
                txt("instance_generation"),
                txt("instance_size"),
                t.arch,
                txt("os"),
                t.vcpus,
                t.memory_mib,
                txt("instance_cpu_manufacturer"),
                txt("instance_hypervisor"),
                txt("instance_network_bandwidth"),
                txt("instance_ebs_bandwidth"),
                txt("instance_local_nvme"),
                txt("instance_gpu_name"),
                txt("instance_gpu_count"),
                txt("instance_gpu_memory"),
                t.gpu_manufacturer,
                t.max_pods,
            ),
        );
        for (r, v) in &t.extended {
            w(&mut s, format_args!("({r:?}, {v}), "));
        }
        match t.price {
            Some(p) => w(&mut s, format_args!("], price: Some({p:?}) }},\n")),
            None => w(&mut s, format_args!("], price: None }},\n")),
        }
    }
    w(&mut s, format_args!("];\n"));
    w(
        &mut s,
        format_args!("pub(crate) static OFFERINGS: [RegionOfferings; REGION_COUNT] = [\n"),
    );
    for (region, by_type) in offered {
        w(
            &mut s,
            format_args!("RegionOfferings {{ region: {region:?}, types: &[\n"),
        );
        for (i, zones) in by_type {
            w(&mut s, format_args!("({i}, &["));
            for z in zones {
                w(&mut s, format_args!("{z:?}, "));
            }
            w(&mut s, format_args!("]),\n"));
        }
        w(&mut s, format_args!("] }},\n"));
    }
    w(&mut s, format_args!("];\n"));
    Ok(s)
}

fn run() -> Result<(), String> {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(
        env::var("CARGO_MANIFEST_DIR").map_err(|e| format!("CARGO_MANIFEST_DIR: {e}"))?,
    );
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?);
    let mut types = read_types(&dir)?;
    read_prices(&dir, &mut types)?;
    let offered = read_offerings(&dir, &types)?;
    let code = render(&types, &offered)?;
    let target = out.join("embedded_catalog.rs");
    fs::write(&target, code).map_err(|e| format!("cannot write {}: {e}", target.display()))
}
