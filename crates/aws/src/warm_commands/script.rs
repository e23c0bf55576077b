//! The shell scripts SSM runs on Bottlerocket warm-pool members: the pull of the pool's
//! `prePullImages` while a member warms ([`commands`]), and the node settings of a member taken
//! for a claim ([`settings_commands`]).
//!
//! Bottlerocket runs no user scripts, so the pull is sent with SSM Run Command
//! (`AWS-RunShellScript`), which runs in the control host container. From there the script
//! reaches the host through the admin container, enabled by the warm-up settings: `apiclient
//! exec admin` runs a command in it, and its `sheltie` runs a command in the host's
//! namespaces. The host has the kubelet's containerd (`/run/containerd/containerd.sock`), its
//! `ctr` and the kubelet's ECR credential provider. So each image is pulled into the `k8s.io`
//! namespace the kubelet uses, labelled as the CRI labels its own pulls, with ECR credentials
//! from the instance role as the kubelet would get them. This is the method AWS documents for
//! caching images on Bottlerocket data volumes, without an image of joiner's own.
//!
//! The script first waits (up to [`READY_TRIES`] × 5 s) for the admin container and containerd,
//! which start after the SSM agent. A failed pull is reported and the others go on; the
//! script then exits non-zero, so the command's status says some image is missing.

use crate::userdata::shell_quote;

/// The kubelet's containerd socket on Bottlerocket's host.
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// `ctr` on Bottlerocket's host.
pub const CTR: &str = "/usr/bin/ctr";
/// The kubelet's ECR credential provider on Bottlerocket's host (aws-k8s variants).
pub const ECR_CREDENTIAL_PROVIDER: &str =
    "/usr/libexec/kubernetes/kubelet/plugins/ecr-credential-provider";
/// How many times the script checks, 5 s apart, that the admin container and containerd run.
pub const READY_TRIES: u32 = 60;

/// The heredoc terminator; no line of the inner script is this.
const EOF_MARK: &str = "JOINER_EOF";

/// The body run in the admin container (bash), with the images as its arguments.
fn in_admin() -> String {
    r#"set -u
host() { HOME=/root sheltie "$@"; }
pulled=0
failed=""
for image in "$@"; do
  auth=""
  case "${image%%/*}" in
    *.dkr.ecr.*.amazonaws.com*)
      creds=$(printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"%s"}' "$image" | host PROVIDER) || creds=""
      user=$(printf '%s' "$creds" | sed -n 's/.*"username":"\([^"]*\)".*/\1/p')
      pass=$(printf '%s' "$creds" | sed -n 's/.*"password":"\([^"]*\)".*/\1/p')
      if [ -n "$user" ]; then auth="$user:$pass"; fi
      ;;
  esac
  if host CTR -a SOCKET -n k8s.io images pull --label io.cri-containerd.image=managed ${auth:+--user "$auth"} "$image"; then
    pulled=$((pulled + 1))
  else
    echo "joiner: pre-pull of $image failed; pods pull it when they start" >&2
    failed="$failed $image"
  fi
done
echo "joiner: pulled $pulled of $# images"
if [ -n "$failed" ]; then
  echo "joiner: not pulled:$failed"
  exit 1
fi
"#
    .replace("PROVIDER", ECR_CREDENTIAL_PROVIDER)
    .replace("CTR", CTR)
    .replace("SOCKET", CONTAINERD_SOCKET)
}

/// The script SSM runs in the control container: wait for the admin container and
/// containerd, then pull `images` (already validated image references, quoted here).
pub fn commands(images: &[String]) -> String {
    let list: Vec<String> = images.iter().map(|i| shell_quote(i)).collect();
    format!(
        "# joiner: pulls the warm pool's prePullImages into this Bottlerocket member through the\n\
         # admin container (its sheltie runs the host's ctr and ECR credential provider).\n\
         pull=$(cat <<'{EOF_MARK}'\n\
         {body}{EOF_MARK}\n\
         )\n\
         tries=0\n\
         until apiclient exec -T admin sheltie {CTR} -a {CONTAINERD_SOCKET} version >/dev/null 2>&1; do\n\
         \x20 tries=$((tries + 1))\n\
         \x20 if [ \"$tries\" -ge {READY_TRIES} ]; then\n\
         \x20   echo 'joiner: the admin container or containerd did not come up; nothing pulled' >&2\n\
         \x20   exit 1\n\
         \x20 fi\n\
         \x20 sleep 5\n\
         done\n\
         apiclient exec -T admin bash -c \"$pull\" joiner-pull {}\n",
        list.join(" "),
        body = in_admin(),
    )
}

/// The script SSM runs in the control container of a member just started for a claim: applies
/// `document` (the node's settings TOML, as its user data would give them) with `apiclient
/// apply`, in one transaction. Bottlerocket reads user data only on its first boot, the
/// warm-up, so this is how the member learns its cluster; the kubelet starts and joins once
/// the settings are committed. Applying the same settings again changes nothing.
pub fn settings_commands(document: &str) -> String {
    let mut mark = EOF_MARK.to_string();
    while document.lines().any(|l| l == mark) {
        mark.push('X');
    }
    let body = if document.ends_with('\n') {
        document.to_string()
    } else {
        format!("{document}\n")
    };
    format!(
        "# joiner: the node settings of this Bottlerocket warm-pool member, taken for a NodeClaim\n\
         apiclient apply <<'{mark}'\n\
         {body}{mark}\n"
    )
}
