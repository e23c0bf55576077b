//! The warm-pool user data run for real, in a sandbox: a temporary folder stands for `/`
//! (the script's absolute paths are moved under it), and stubs stand for `systemctl`, `nodeadm`
//! and `/etc/eks/bootstrap.sh`, recording each call. Boot 1 (warm-up) runs the first-boot
//! script as cloud-init would; boots 2 and 3 run what systemd would run for the installed unit
//! (its `ConditionPathExists`, `ExecStart`); a resume from hibernation runs the sleep hook as
//! systemd does. The node must neither bootstrap nor start kubelet while warming (nor on the
//! hold boot of a `Running` or `Hibernated` member), join exactly once when it is taken (the
//! start, the reboot or the resume), and never again. (No metadata-service stub is needed: the mechanism reads no instance tag;
//! see `warm`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use joiner_apis::AmiFamily;
use joiner_core::WarmState;

use super::tests::bootstrap;
use super::{mime, render, warm};

/// Paths the scripts write or call, moved under the sandbox root.
const MOVED: &[&str] = &[
    "/etc/joiner",
    "/etc/systemd/system",
    "/var/lib/joiner",
    "/etc/eks",
    "/usr/lib/systemd/system-sleep",
];

struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    calls: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        let bin = dir.path().join("bin");
        let calls = dir.path().join("calls.log");
        // What the AMI has: systemd's unit folder and (AL2) the bootstrap script.
        std::fs::create_dir_all(root.join("etc/eks")).expect("mkdir");
        std::fs::create_dir_all(root.join("etc/systemd/system")).expect("mkdir");
        std::fs::create_dir_all(&bin).expect("mkdir");
        let stub = |path: &Path, name: &str| {
            // Records its name and arguments; nodeadm also checks that the NodeConfig it is
            // given exists (a join without cluster settings would fail on a real node).
            let body = format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\ncase \"$*\" in *file://*) f=\"${{*##*file://}}\"; f=\"${{f%\\'}}\"; test -s \"$f\" || {{ echo \"no NodeConfig at $f\" >&2; exit 3; }};; esac\n",
                calls.display()
            );
            std::fs::write(path, body).expect("stub");
            let _ = Command::new("chmod").arg("0755").arg(path).status();
        };
        stub(&bin.join("systemctl"), "systemctl");
        stub(&bin.join("nodeadm"), "nodeadm");
        stub(&root.join("etc/eks/bootstrap.sh"), "bootstrap.sh");
        stub(&bin.join("ctr"), "ctr");
        // The kubelet's ECR credential provider: records the request it read, answers as the
        // real one does (credentials per registry).
        let provider = root.join("etc/eks/image-credential-provider/ecr-credential-provider");
        std::fs::create_dir_all(provider.parent().expect("parent")).expect("mkdir");
        std::fs::write(
            &provider,
            format!(
                "#!/bin/sh
echo \"ecr-credential-provider $(cat)\" >> '{}'
echo '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{{\"123456789012.dkr.ecr.us-east-1.amazonaws.com\":{{\"username\":\"AWS\",\"password\":\"c2VjcmV0+/=\"}}}}}}'
",
                calls.display()
            ),
        )
        .expect("provider stub");
        let _ = Command::new("chmod").arg("0755").arg(&provider).status();
        Sandbox {
            _dir: dir,
            root,
            bin,
            calls,
        }
    }

    /// `text` with the moved paths under the root.
    fn moved(&self, text: &str) -> String {
        let mut out = text.to_string();
        for p in MOVED {
            out = out.replace(p, &format!("{}{p}", self.root.display()));
        }
        out
    }

    fn run(&self, script: &str) {
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "script failed: {}\n{}\n{script}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// One boot after warm-up, as systemd runs an enabled oneshot unit.
    fn boot(&self) {
        let unit_path = self.root.join("etc/systemd/system").join(warm::UNIT);
        let unit = std::fs::read_to_string(&unit_path).expect("the unit was installed");
        let value = |key: &str| {
            unit.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{key} in {unit}"))
                .to_string()
        };
        let condition = value("ConditionPathExists");
        let must_be_absent = condition.strip_prefix('!').expect("a negated condition");
        assert!(self
            .calls()
            .iter()
            .any(|c| c == &format!("systemctl enable {}", warm::UNIT)));
        if Path::new(must_be_absent).exists() {
            return;
        }
        self.run(&value("ExecStart"));
        if let Some(post) = unit.lines().find_map(|l| l.strip_prefix("ExecStartPost=")) {
            self.run(post);
        }
    }

    /// A resume from hibernation: systemd runs the sleep hooks with `post hibernate`; a
    /// restart of the unit the hook asks for runs the unit.
    fn resume(&self) {
        let hook = self.root.join(warm::SLEEP_HOOK.trim_start_matches('/'));
        let before = self.calls().len();
        self.run(&format!("sh '{}' post hibernate", hook.display()));
        let restart = format!("systemctl restart --no-block {}", warm::UNIT);
        if self.calls()[before..].contains(&restart) {
            // The restarted unit: its condition, then its commands, as on a boot.
            self.boot();
        }
    }
}

/// The first-boot script of `family`'s warm user data for a member waiting in `state`.
fn first_boot(family: AmiFamily, state: WarmState) -> String {
    let mut b = bootstrap();
    b.warm_pool = Some(state);
    let doc = render(family, "nt", None, &b).expect("renders").decoded;
    let parts = mime::user_parts("nt", &doc).expect("parts");
    parts.last().expect("a part").body.clone()
}

fn joins(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| {
            c.starts_with("bootstrap.sh")
                || c.starts_with("nodeadm init")
                || (c.starts_with("systemctl") && c.contains("kubelet"))
        })
        .collect()
}

#[test]
fn a_warm_instance_does_not_join_while_warming_and_joins_once_when_claimed() {
    let mut b = bootstrap();
    b.warm_pool = Some(joiner_core::WarmState::Stopped);
    b.pre_pull_images = vec![
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/shop/app:1.2".to_string(),
        "public.ecr.aws/nginx/nginx:1.27".to_string(),
    ];
    for family in [AmiFamily::Al2, AmiFamily::Al2023] {
        let doc = render(family, "nt", None, &b).expect("renders").decoded;
        let parts = mime::user_parts("nt", &doc).expect("parts");
        // The only part cloud-init runs is joiner's script; AL2023 gets no NodeConfig part
        // nodeadm's own units would join with.
        assert!(!doc.contains(mime::NODE_CONFIG), "{family:?}");
        let script = &parts.last().expect("a part").body;
        let sandbox = Sandbox::new();

        // Boot 1: warm-up.
        sandbox.run(&sandbox.moved(script));
        let warm_calls = sandbox.calls();
        assert!(
            joins(&warm_calls).is_empty(),
            "{family:?} joined while warming: {warm_calls:?}"
        );
        assert!(
            warm_calls.contains(&format!("systemctl enable {}", warm::UNIT)),
            "{warm_calls:?}"
        );
        assert!(
            !warm_calls
                .iter()
                .any(|c| c.starts_with("systemctl") && c.contains("kubelet")),
            "{warm_calls:?}"
        );
        // The images are pulled while warming, ECR ones with the credential provider's
        // answer, into the namespace the kubelet uses.
        assert!(warm_calls.contains(&"systemctl start containerd".to_string()));
        assert!(
            warm_calls.contains(&"ctr -n k8s.io images pull --user AWS:c2VjcmV0+/= 123456789012.dkr.ecr.us-east-1.amazonaws.com/shop/app:1.2".to_string()),
            "{warm_calls:?}"
        );
        assert!(
            warm_calls
                .contains(&"ctr -n k8s.io images pull public.ecr.aws/nginx/nginx:1.27".to_string()),
            "{warm_calls:?}"
        );
        assert!(
            warm_calls
                .iter()
                .any(|c| c.starts_with("ecr-credential-provider ")
                    && c.contains(
                        "\"image\":\"123456789012.dkr.ecr.us-east-1.amazonaws.com/shop/app:1.2\""
                    )),
            "{warm_calls:?}"
        );
        // The warm-up ends by powering off, after the unit is enabled.
        assert_eq!(
            warm_calls.last().map(String::as_str),
            Some(warm::POWER_OFF),
            "{warm_calls:?}"
        );

        // Boot 2: started for a claim. It joins, once.
        sandbox.boot();
        let claimed = sandbox.calls();
        let joined = joins(&claimed);
        assert_eq!(joined.len(), 1, "{family:?}: {claimed:?}");
        match family {
            AmiFamily::Al2 => {
                assert!(joined[0].starts_with("bootstrap.sh prod "), "{joined:?}");
                assert!(joined[0].contains("--max-pods=29"), "{joined:?}");
            }
            _ => assert!(
                joined[0].starts_with("nodeadm init --config-source file://"),
                "{joined:?}"
            ),
        }
        assert!(sandbox.root.join("var/lib/joiner/joined").exists());

        // Boot 3 (stopped again, restarted): never bootstraps twice.
        sandbox.boot();
        assert_eq!(joins(&sandbox.calls()).len(), 1, "{family:?} joined twice");
        // Only the warm-up pulled and powered off: a claimed node keeps running.
        let pulls = sandbox
            .calls()
            .iter()
            .filter(|c| c.starts_with("ctr "))
            .count();
        assert_eq!(pulls, 2, "{family:?}");
        let power_offs = sandbox
            .calls()
            .iter()
            .filter(|c| *c == warm::POWER_OFF)
            .count();
        assert_eq!(power_offs, 1, "{family:?}");
    }
}

#[test]
fn a_running_member_holds_its_hold_boot_and_joins_on_the_reboot_of_its_take() {
    for family in [AmiFamily::Al2, AmiFamily::Al2023] {
        let sandbox = Sandbox::new();
        // Boot 1: warm-up, then power off (the pool's sign that the warm-up is over).
        sandbox.run(&sandbox.moved(&first_boot(family, WarmState::Running)));
        assert!(joins(&sandbox.calls()).is_empty(), "{family:?}");
        assert_eq!(
            sandbox.calls().last().map(String::as_str),
            Some(warm::POWER_OFF)
        );
        // No hibernation agent, no resume hook for a running member.
        assert!(
            !sandbox.calls().iter().any(|c| c.contains("hibinit")),
            "{family:?}"
        );
        assert!(!sandbox
            .root
            .join(warm::SLEEP_HOOK.trim_start_matches('/'))
            .exists());
        // Boot 2: the pool's hold start. The member runs, not joined.
        sandbox.boot();
        assert!(
            joins(&sandbox.calls()).is_empty(),
            "{family:?} joined on its hold boot: {:?}",
            sandbox.calls()
        );
        assert!(!sandbox.root.join("var/lib/joiner/joined").exists());
        // Boot 3: the reboot of a take. It joins, once; boot 4 does not join again.
        sandbox.boot();
        assert_eq!(
            joins(&sandbox.calls()).len(),
            1,
            "{family:?}: {:?}",
            sandbox.calls()
        );
        assert!(sandbox.root.join("var/lib/joiner/joined").exists());
        sandbox.boot();
        assert_eq!(joins(&sandbox.calls()).len(), 1, "{family:?} joined twice");
    }
}

#[test]
fn a_hibernated_member_joins_when_resumed_or_on_the_boot_after_a_failed_hibernation() {
    for family in [AmiFamily::Al2, AmiFamily::Al2023] {
        let script = first_boot(family, WarmState::Hibernated);
        // Resumed from hibernation for a take.
        let sandbox = Sandbox::new();
        sandbox.run(&sandbox.moved(&script));
        let warm_calls = sandbox.calls();
        assert!(joins(&warm_calls).is_empty(), "{family:?}: {warm_calls:?}");
        // The hibernation agent (present on the AMI here: `systemctl cat` answers) is enabled.
        assert!(
            warm_calls.contains(&format!(
                "systemctl enable --now {}",
                warm::HIBERNATION_AGENT
            )),
            "{warm_calls:?}"
        );
        sandbox.boot();
        assert!(
            joins(&sandbox.calls()).is_empty(),
            "{family:?} joined on its hold boot"
        );
        sandbox.resume();
        assert_eq!(
            joins(&sandbox.calls()).len(),
            1,
            "{family:?}: {:?}",
            sandbox.calls()
        );
        // A later resume or boot never joins again.
        sandbox.resume();
        sandbox.boot();
        assert_eq!(joins(&sandbox.calls()).len(), 1, "{family:?} joined twice");

        // EC2 could not hibernate it and stopped it plainly: the start is a boot, which joins.
        let fallback = Sandbox::new();
        fallback.run(&fallback.moved(&script));
        fallback.boot();
        assert!(joins(&fallback.calls()).is_empty());
        fallback.boot();
        assert_eq!(
            joins(&fallback.calls()).len(),
            1,
            "{family:?}: {:?}",
            fallback.calls()
        );
    }
}
