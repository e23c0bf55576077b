//! Bottlerocket: TOML settings, no MIME (Bottlerocket reads one TOML document).
//!
//! joiner writes `[settings.kubernetes]`: `cluster-name`, `api-server`, `cluster-certificate`,
//! `max-pods`, `node-labels` (a table), `node-taints` (`"key" = ["value:Effect"]`),
//! `cluster-dns-ip` and the Provisioner's kubelet settings. The user's TOML is then merged over
//! it, table by table, and **the user's keys win**, except the three joiner must own to
//! join the right cluster: `settings.kubernetes.cluster-name`, `api-server` and
//! `cluster-certificate`. (A user `max-pods` therefore overrides the ENI value; that is the
//! user's explicit choice.) The document is written by a small emitter with keys sorted, so
//! equal inputs give byte-equal TOML.
//!
//! Warm pools: Bottlerocket runs no user scripts and reads its user data only on its first
//! boot (`early-boot-config` leaves a marker; later settings come only through its API). The
//! warm-up document is the same without any `settings.kubernetes` (the kubelet has no cluster
//! to join), with the control host container enabled (SSM's agent runs there) and, with
//! `prePullImages`, the admin container too: the way in for the pull that SSM sends
//! (`crate::warm_commands`). When a member is taken, the real document ([`taken_member`]) is
//! applied through SSM with `apiclient apply`.

use toml::{Table, Value};

use super::{kubelet, NodeBootstrap, UserDataError};

/// Keys under `settings.kubernetes` that joiner always sets, whatever the user wrote.
pub const OWNED_KEYS: &[&str] = &["cluster-name", "api-server", "cluster-certificate"];

/// The TOML user data.
pub fn render(
    node_template: &str,
    user_data: &str,
    b: &NodeBootstrap,
) -> Result<String, UserDataError> {
    let user: Table = if user_data.trim().is_empty() {
        Table::new()
    } else {
        toml::from_str(user_data).map_err(|e| UserDataError::BottlerocketToml {
            node_template: node_template.to_string(),
            reason: e.to_string().trim().to_string(),
        })?
    };
    let mut doc = joiner_settings(b);
    merge(&mut doc, user);
    if b.warm_pool.is_some() {
        // Warm-up: no cluster settings at all (the user's included), so the kubelet has no
        // API server to register with; the real document is applied through SSM when the
        // member is started for a claim ([`taken_member`]).
        if let Some(settings) = doc.get_mut("settings").and_then(Value::as_table_mut) {
            settings.remove("kubernetes");
            // A take applies the node settings through SSM, whose agent runs in the control
            // container; a pull also reaches the host's containerd through the admin container.
            let containers = table_at(settings, "host-containers");
            table_at(containers, "control").insert("enabled".into(), Value::Boolean(true));
            if !b.pre_pull_images.is_empty() {
                table_at(containers, "admin").insert("enabled".into(), Value::Boolean(true));
            }
        }
        let mut out = String::new();
        emit_table(&doc, &mut Vec::new(), &mut out);
        return Ok(out);
    }
    let owned = owned_settings(b);
    let k8s = kubernetes_table(&mut doc).ok_or_else(|| UserDataError::BottlerocketToml {
        node_template: node_template.to_string(),
        reason: "settings and settings.kubernetes must be tables".to_string(),
    })?;
    for (k, v) in owned {
        k8s.insert(k, v);
    }
    let mut out = String::new();
    emit_table(&doc, &mut Vec::new(), &mut out);
    Ok(out)
}

/// The settings a warm-pool member taken for a claim is given (through `apiclient apply`):
/// `document`, the member's own rendered TOML, with `settings.host-containers.admin.enabled`
/// set to `false` unless the document sets it, and the control container kept enabled. A
/// member that pulled images ran the admin container during its warm-up, and Bottlerocket
/// keeps settings across boots, so the container would otherwise stay enabled on the node.
/// The control container runs the SSM agent that applies these very settings: switching it
/// off in the same transaction would cut the command off before it reports.
pub fn taken_member(node_template: &str, document: &str) -> Result<String, UserDataError> {
    let mut doc: Table = toml::from_str(document).map_err(|e| UserDataError::BottlerocketToml {
        node_template: node_template.to_string(),
        reason: e.to_string().trim().to_string(),
    })?;
    let settings = table_at(&mut doc, "settings");
    let containers = table_at(settings, "host-containers");
    table_at(containers, "admin")
        .entry("enabled")
        .or_insert(Value::Boolean(false));
    table_at(containers, "control").insert("enabled".into(), Value::Boolean(true));
    let mut out = String::new();
    emit_table(&doc, &mut Vec::new(), &mut out);
    Ok(out)
}

/// The table at `key` of `table`, made (or made a table) if it is not one.
fn table_at<'a>(table: &'a mut Table, key: &str) -> &'a mut Table {
    let entry = table
        .entry(key.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    if !entry.is_table() {
        *entry = Value::Table(Table::new());
    }
    match entry {
        Value::Table(t) => t,
        _ => unreachable!("made a table above"),
    }
}

fn owned_settings(b: &NodeBootstrap) -> Table {
    let c = &b.cluster;
    let mut t = Table::new();
    t.insert("cluster-name".into(), Value::String(c.name.clone()));
    t.insert("api-server".into(), Value::String(c.endpoint.clone()));
    t.insert(
        "cluster-certificate".into(),
        Value::String(c.ca_bundle.clone()),
    );
    t
}

fn joiner_settings(b: &NodeBootstrap) -> Table {
    let k = &b.kubelet;
    let mut k8s = owned_settings(b);
    k8s.insert("max-pods".into(), Value::Integer(i64::from(b.max_pods)));
    if !b.labels.is_empty() {
        k8s.insert("node-labels".into(), string_table(&b.labels));
    }
    if !b.taints.is_empty() {
        let mut taints = Table::new();
        for t in &b.taints {
            let entry = format!("{}:{}", t.value.as_deref().unwrap_or_default(), t.effect);
            if let Value::Array(list) = taints
                .entry(t.key.clone())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                list.push(Value::String(entry));
            }
        }
        k8s.insert("node-taints".into(), Value::Table(taints));
    }
    let dns = b.cluster_dns();
    match dns.as_slice() {
        [] => {}
        [one] => {
            k8s.insert("cluster-dns-ip".into(), Value::String(one.clone()));
        }
        many => {
            k8s.insert(
                "cluster-dns-ip".into(),
                Value::Array(many.iter().cloned().map(Value::String).collect()),
            );
        }
    }
    if let Some(n) = k.pods_per_core {
        k8s.insert("pods-per-core".into(), Value::Integer(i64::from(n)));
    }
    for (key, map) in [
        ("system-reserved", kubelet::quantities(&k.system_reserved)),
        ("kube-reserved", kubelet::quantities(&k.kube_reserved)),
        ("eviction-hard", k.eviction_hard.clone()),
        ("eviction-soft", k.eviction_soft.clone()),
        (
            "eviction-soft-grace-period",
            k.eviction_soft_grace_period.clone(),
        ),
    ] {
        if !map.is_empty() {
            k8s.insert(key.into(), string_table(&map));
        }
    }
    for (key, n) in [
        (
            "eviction-max-pod-grace-period",
            k.eviction_max_pod_grace_period,
        ),
        (
            "image-gc-high-threshold-percent",
            k.image_gc_high_threshold_percent,
        ),
        (
            "image-gc-low-threshold-percent",
            k.image_gc_low_threshold_percent,
        ),
    ] {
        if let Some(n) = n {
            k8s.insert(key.into(), Value::Integer(i64::from(n)));
        }
    }
    if let Some(q) = k.cpu_cfs_quota {
        k8s.insert("cpu-cfs-quota-enforced".into(), Value::Boolean(q));
    }
    let mut settings = Table::new();
    settings.insert("kubernetes".into(), Value::Table(k8s));
    let mut doc = Table::new();
    doc.insert("settings".into(), Value::Table(settings));
    doc
}

fn string_table(map: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn kubernetes_table(doc: &mut Table) -> Option<&mut Table> {
    doc.get_mut("settings")?
        .as_table_mut()?
        .get_mut("kubernetes")?
        .as_table_mut()
}

/// Merges `over` into `base`: tables recursively, any other value replaced.
fn merge(base: &mut Table, over: Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Writes `table` at `path`: plain keys first, then one `[header]` per sub-table that holds
/// plain keys (or is empty), recursively; arrays of tables are written as inline tables.
fn emit_table(table: &Table, path: &mut Vec<String>, out: &mut String) {
    let plain: Vec<(&String, &Value)> = table.iter().filter(|(_, v)| !v.is_table()).collect();
    if !path.is_empty() && (!plain.is_empty() || table.is_empty()) {
        let header: Vec<String> = path.iter().map(|k| key(k)).collect();
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[{}]\n", header.join(".")));
    }
    for (k, v) in plain {
        out.push_str(&format!("{} = {}\n", key(k), value(v)));
    }
    for (k, v) in table {
        if let Value::Table(sub) = v {
            path.push(k.clone());
            emit_table(sub, path, out);
            path.pop();
        }
    }
}

fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        k.to_string()
    } else {
        string(k)
    }
}

fn value(v: &Value) -> String {
    match v {
        Value::String(s) => string(s),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => "nan".to_string(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.to_string(),
        Value::Float(f) => {
            let s = f.to_string();
            if s.contains(['.', 'e', 'E']) {
                s
            } else {
                format!("{s}.0")
            }
        }
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Table(t) => {
            let items: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{} = {}", key(k), value(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

/// A TOML basic string.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emitted_toml_parses_back_to_the_same_table() {
        let text = r#"
top = 1
[a]
s = "q\"uo\\te\nline"
f = 1.0
arr = [1, 2]
inl = [{ x = 1, "y.z" = "w" }]
[a.b.c]
t = true
[empty]
"#;
        let table: Table = toml::from_str(text).unwrap();
        let mut out = String::new();
        emit_table(&table, &mut Vec::new(), &mut out);
        let back: Table = toml::from_str(&out).unwrap();
        assert_eq!(back, table, "{out}");
    }
}
