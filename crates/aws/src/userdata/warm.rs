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
//!
//! Members that wait `Running` or `Hibernated` boot once more before they are taken: the
//! pool starts them again after the warm-up (the **hold boot**), and that boot must not join
//! either. Their first boot writes [`HOLD_BOOTS`] (`1`); [`ON_BOOT_SCRIPT`], which the unit
//! runs, spends one held boot instead of joining while the count is above 0. A `Running`
//! member is then taken by a reboot (its third boot joins); a `Hibernated` one is hibernated
//! during the hold boot and taken by a start, which resumes it without a boot: the
//! [`SLEEP_HOOK`] (systemd runs it after every resume with `post`) restarts the unit, which
//! joins. Should the hibernation fail and EC2 stop the instance plainly, its next start is
//! a boot, which joins through the unit: a slower take, never a missed one. `Hibernated`
//! members also install and enable the EC2 hibernation agent (`ec2-hibinit-agent`), which
//! sets up the swap file the memory is written to.

use joiner_core::WarmState;

/// The script that joins the cluster, written on the first boot.
pub const JOIN_SCRIPT: &str = "/etc/joiner/join.sh";
/// The systemd unit that runs [`JOIN_SCRIPT`] on later boots.
pub const UNIT: &str = "joiner-join.service";
/// What the unit runs on every boot until the node has joined: spends a held boot, or joins
/// ([`JOIN_SCRIPT`]) and writes [`JOINED_MARKER`].
pub const ON_BOOT_SCRIPT: &str = "/etc/joiner/on-boot.sh";
/// Written once the node has joined, so later boots do not bootstrap again.
pub const JOINED_MARKER: &str = "/var/lib/joiner/joined";
/// How many boots after the warm-up still hold the node back (`Running` and `Hibernated`
/// members: 1, the hold boot).
pub const HOLD_BOOTS: &str = "/var/lib/joiner/hold-boots";
/// systemd's hook run around a hibernation (`pre`/`post hibernate`): after a resume it
/// starts the join ([`UNIT`]), for `Hibernated` members.
pub const SLEEP_HOOK: &str = "/usr/lib/systemd/system-sleep/joiner-join";
/// The EC2 hibernation agent's unit.
pub const HIBERNATION_AGENT: &str = "hibinit-agent.service";
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

/// The script the unit runs on every boot until joined (see the module doc).
fn on_boot_script() -> String {
    format!(
        "#!/bin/bash\n\
         # joiner: on each boot of a warm-pool member until it has joined the cluster.\n\
         set -euo pipefail\n\
         held=0\n\
         if [ -s {HOLD_BOOTS} ]; then held=$(cat {HOLD_BOOTS}); fi\n\
         if [ \"$held\" -gt 0 ]; then\n\
         \x20 echo $((held - 1)) > {HOLD_BOOTS}\n\
         \x20 echo 'joiner: hold boot of a warm-pool member; not joining the cluster'\n\
         \x20 exit 0\n\
         fi\n\
         {JOIN_SCRIPT}\n\
         mkdir -p /var/lib/joiner\n\
         touch {JOINED_MARKER}\n"
    )
}

/// The resume hook of `Hibernated` members.
fn sleep_hook() -> String {
    format!(
        "#!/bin/sh\n\
         # joiner: a hibernated warm-pool member resumed for a claim joins the cluster now.\n\
         case \"$1\" in\n\
         \x20 post) [ -e {JOINED_MARKER} ] || systemctl restart --no-block {UNIT} ;;\n\
         esac\n"
    )
}

/// The first-boot script: writes `files` (path, content), the join script and the unit,
/// enables the unit, pre-pulls `images`, powers off, and does not join. For a member waiting
/// in `state` `Running` or `Hibernated` it also holds back the next boot (and, hibernated,
/// installs the resume hook and the hibernation agent).
pub fn first_boot_script(
    join_script: &str,
    files: &[(&str, &str)],
    images: &[String],
    state: WarmState,
) -> String {
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
    write_file(&mut out, ON_BOOT_SCRIPT, &on_boot_script());
    out.push_str(&format!("chmod 0755 {JOIN_SCRIPT} {ON_BOOT_SCRIPT}\n"));
    if state.holds() {
        out.push_str(&format!(
            "mkdir -p /var/lib/joiner\necho 1 > {HOLD_BOOTS}\n"
        ));
    }
    if state == WarmState::Hibernated {
        out.push_str("mkdir -p /usr/lib/systemd/system-sleep\n");
        write_file(&mut out, SLEEP_HOOK, &sleep_hook());
        out.push_str(&format!(
            "chmod 0755 {SLEEP_HOOK}\n\
             if ! systemctl cat {HIBERNATION_AGENT} >/dev/null 2>&1; then\n\
             \x20 dnf install -y ec2-hibinit-agent || yum install -y ec2-hibinit-agent || echo 'joiner: ec2-hibinit-agent could not be installed; the member will be stopped instead of hibernated'\n\
             fi\n\
             systemctl enable --now {HIBERNATION_AGENT} || true\n"
        ));
    }
    let unit = format!(
        "[Unit]\n\
         Description=joiner: join the cluster on the first start after warm-up\n\
         Wants=network-online.target\n\
         After=network-online.target cloud-final.service\n\
         ConditionPathExists=!{JOINED_MARKER}\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart={ON_BOOT_SCRIPT}\n\
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
