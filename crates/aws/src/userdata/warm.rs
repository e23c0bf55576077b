//! Warm-pool user data: boot once without joining, join on every later boot until joined.
//!
//! A warm-pool instance is launched, left to initialize (AMI boot, the user's own parts, image
//! pre-pulls), then stopped; when the pool hands it out it is started again and must join
//! (DESIGN, Warm pool). Joining during warm-up is the known failure of ASG warm pools on EKS:
//! the node registers, goes NotReady when stopped, and pods get scheduled onto it.
//!
//! Mechanism chosen: **the first boot never joins**. joiner's part runs once per instance
//! (cloud-init's per-instance scripts), and instead of bootstrapping it installs
//! [`JOIN_SCRIPT`] and the systemd unit [`UNIT`], enabled for `multi-user.target`, ordered
//! after `cloud-final.service` and conditioned on [`JOINED_MARKER`] being absent. Every later
//! boot runs the unit, which joins and writes the marker, so the node joins on the first start
//! after warm-up and never bootstraps twice.
//!
//! Why not an instance tag read from the metadata service (`tags/instance/...`) saying
//! "warming": EC2 refuses to launch an instance with metadata-service tag access enabled when
//! any tag key contains `/`, and every joiner instance carries `kubernetes.io/cluster/<name>`
//! and `joiner.sh/provisioner-name`. Asking the EC2 API instead would need the AWS CLI on the
//! AMI and `ec2:DescribeTags` for the node role. The boot-count rule needs neither; its one
//! assumption is that the warm-pool reconciler does not reboot an instance while it warms
//! (it only launches and stops it).
//!
//! AL2023 note: nodeadm's own units read `imds://user-data` on every boot, so warm-pool AL2023
//! user data carries no `application/node.eks.aws` part from joiner (it would join on the
//! first boot); the NodeConfig is written to [`NODE_CONFIG_FILE`] and the join runs
//! `nodeadm init --config-source file://...`. On warm boots nodeadm's units find no cluster
//! settings and fail harmlessly. The user's own NodeConfig parts are not merged in this mode.

/// The script that joins the cluster, written on the first boot.
pub const JOIN_SCRIPT: &str = "/etc/joiner/join.sh";
/// The systemd unit that runs [`JOIN_SCRIPT`] on later boots.
pub const UNIT: &str = "joiner-join.service";
/// Written once the node has joined, so later boots do not bootstrap again.
pub const JOINED_MARKER: &str = "/var/lib/joiner/joined";
/// Where AL2023 warm-pool user data keeps joiner's NodeConfig.
pub const NODE_CONFIG_FILE: &str = "/etc/joiner/nodeconfig.yaml";

/// The last command of the warm-up: the instance powers itself off (EC2 stops an EBS-backed
/// instance that shuts down, the default shutdown behavior), so the pool sees a member ready as
/// soon as its initialization is over. `--no-block` queues the shutdown and lets cloud-init
/// finish. The warm-pool reconciler stops a member that is still running after its warm-up
/// deadline, so a script that never gets here does not leave a member running.
pub const POWER_OFF: &str = "systemctl --no-block poweroff";

/// The heredoc terminator; no generated file contains this line.
const EOF_MARK: &str = "JOINER_EOF";

/// The kubelet's ECR credential provider on the EKS AMIs (AL2 and AL2023): the pre-pull asks
/// it for registry credentials, as the kubelet would, through the instance role.
pub const ECR_CREDENTIAL_PROVIDER: &str =
    "/etc/eks/image-credential-provider/ecr-credential-provider";

/// The pre-pull section: starts containerd and pulls each image into the `k8s.io` namespace
/// the kubelet uses, ECR images with credentials from [`ECR_CREDENTIAL_PROVIDER`]. A failed
/// pull is logged and skipped (the node pulls it when a pod needs it); the warm-up goes on.
fn pre_pull(images: &[String]) -> String {
    if images.is_empty() {
        return String::new();
    }
    let list: Vec<String> = images.iter().map(|i| super::shell_quote(i)).collect();
    let function = r#"joiner_pull() {
  local image="$1" registry="${1%%/*}" creds user pass
  if [[ "$registry" == *.dkr.ecr.*.amazonaws.com* ]] && [ -x PROVIDER ]; then
    creds=$(printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"%s"}' "$image" | PROVIDER) || creds=''
    user=$(printf '%s' "$creds" | sed -n 's/.*"username":"\([^"]*\)".*/\1/p')
    pass=$(printf '%s' "$creds" | sed -n 's/.*"password":"\([^"]*\)".*/\1/p')
    ctr -n k8s.io images pull --user "$user:$pass" "$image"
  else
    ctr -n k8s.io images pull "$image"
  fi
}
systemctl start containerd || true
"#
    .replace("PROVIDER", ECR_CREDENTIAL_PROVIDER);
    format!(
        "{function}for image in {}; do\n  joiner_pull \"$image\" || echo \"joiner: pre-pull of $image failed; pods pull it when they start\"\ndone\n",
        list.join(" ")
    )
}

/// The first-boot script: writes `files` (path, content), the join script and the unit,
/// enables the unit, pre-pulls `images`, powers off, and does not join.
pub fn first_boot_script(join_script: &str, files: &[(&str, &str)], images: &[String]) -> String {
    let mut out = String::from(
        "#!/bin/bash\n\
         # joiner warm-pool instance: this first boot prepares the node and does not join the\n\
         # cluster; joiner-join.service joins it on the next start, when the pool hands it out.\n\
         set -euo pipefail\n\
         mkdir -p /etc/joiner\n",
    );
    for (path, content) in files {
        write_file(&mut out, path, content);
    }
    write_file(&mut out, JOIN_SCRIPT, join_script);
    out.push_str(&format!("chmod 0755 {JOIN_SCRIPT}\n"));
    let unit = format!(
        "[Unit]\n\
         Description=joiner: join the cluster on the first start after warm-up\n\
         Wants=network-online.target\n\
         After=network-online.target cloud-final.service\n\
         ConditionPathExists=!{JOINED_MARKER}\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart={JOIN_SCRIPT}\n\
         ExecStartPost=/bin/sh -c 'mkdir -p /var/lib/joiner && touch {JOINED_MARKER}'\n\
         RemainAfterExit=yes\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    );
    write_file(&mut out, &format!("/etc/systemd/system/{UNIT}"), &unit);
    out.push_str(&format!(
        "systemctl daemon-reload\nsystemctl enable {UNIT}\n{}echo 'joiner: warm-pool boot, not joining the cluster until the next start'\n{POWER_OFF}\n",
        pre_pull(images)
    ));
    out
}

fn write_file(out: &mut String, path: &str, content: &str) {
    out.push_str(&format!("cat > {path} <<'{EOF_MARK}'\n"));
    out.push_str(content);
    if !content.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(EOF_MARK);
    out.push('\n');
}
