//! Amazon Linux 2: a shell script calling the AMI's `bootstrap.sh`.
//!
//! `--use-max-pods false` stops bootstrap.sh from looking the type up in its own
//! `eni-max-pods.txt` (where new types are missing); joiner's `--max-pods` in
//! `--kubelet-extra-args` is the value used. The script is a MIME part after the user's parts.

use super::{kubelet, mime, shell_quote, warm, NodeBootstrap, UserDataError};

/// The MIME document: the user's parts, then joiner's script ([`script`], or the warm-pool
/// first-boot script around it).
pub fn render(
    node_template: &str,
    user_data: &str,
    b: &NodeBootstrap,
) -> Result<String, UserDataError> {
    let mut parts = mime::user_parts(node_template, user_data)?;
    let join = script(b);
    let body = if let Some(state) = b.warm_pool {
        warm::first_boot_script(&join, &[], &b.pre_pull_images, state)
    } else {
        join
    };
    parts.push(mime::Part::new(mime::SHELL_SCRIPT, body));
    mime::assemble(node_template, &parts)
}

/// The bootstrap script proper: one `bootstrap.sh` call.
pub fn script(b: &NodeBootstrap) -> String {
    let c = &b.cluster;
    let mut args: Vec<String> = vec![
        shell_quote(&c.name),
        format!("--apiserver-endpoint {}", shell_quote(&c.endpoint)),
        format!("--b64-cluster-ca {}", shell_quote(&c.ca_bundle)),
    ];
    // bootstrap.sh takes one DNS address; the kubelet's first clusterDNS entry.
    if let Some(dns) = b.cluster_dns().first() {
        args.push(format!("--dns-cluster-ip {}", shell_quote(dns)));
    }
    if let Some(rt) = &b.container_runtime {
        args.push(format!("--container-runtime {}", shell_quote(rt)));
    }
    args.push("--use-max-pods false".to_string());
    args.push(format!(
        "--kubelet-extra-args {}",
        shell_quote(&kubelet::flags(b).join(" "))
    ));
    format!(
        "#!/bin/bash\nset -ex\n{} \\\n  {}\n",
        shell_quote(&b.al2_bootstrap_script),
        args.join(" \\\n  ")
    )
}
