//! The SSM scripts run for real in a sandbox, with stubs for what Bottlerocket provides
//! (`apiclient`, the admin container's `sheltie`, the host's `ctr` and ECR credential
//! provider), and the reading of SSM's invocation status.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aws_sdk_ssm::types::CommandInvocationStatus;
use joiner_core::PullProgress;

use super::script::{self, CTR, ECR_CREDENTIAL_PROVIDER};
use super::{progress_of, REASON_CHARS};

struct Sandbox {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    bin: PathBuf,
}

fn executable(path: &Path, body: &str) {
    std::fs::write(path, body).expect("stub");
    let _ = Command::new("chmod").arg("0755").arg(path).status();
}

impl Sandbox {
    /// `ctr version` fails `not_ready` times (the admin container or containerd still
    /// starting); a pull of an image with `missing` in its name fails.
    fn new(not_ready: u32) -> Sandbox {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        let calls = dir.join("calls.log");
        let calls = calls.display();
        let d = dir.display();
        // apiclient: `apply` keeps what it read; `exec [-T] admin cmd...` runs cmd here, as the
        // admin container would.
        executable(
            &bin.join("apiclient"),
            &format!(
                "#!/bin/bash\necho \"apiclient $*\" >> '{calls}'\n\
                 if [ \"$1\" = apply ] && [ $# -eq 1 ]; then cat > '{d}/applied.toml'; exit 0; fi\n\
                 [ \"$1\" = exec ] || exit 2; shift\n\
                 [ \"$1\" = -T ] && shift\n\
                 [ \"$1\" = admin ] || exit 2; shift\n\
                 exec \"$@\"\n"
            ),
        );
        // sheltie: runs the command "on the host", recording the HOME it passes.
        executable(
            &bin.join("sheltie"),
            &format!("#!/bin/bash\necho \"sheltie HOME=$HOME $*\" >> '{calls}'\nexec \"$@\"\n"),
        );
        executable(&bin.join("sleep"), "#!/bin/sh\nexit 0\n");
        executable(
            &dir.join("ctr"),
            &format!(
                "#!/bin/bash\necho \"ctr $*\" >> '{calls}'\n\
                 if [ \"${{@: -1}}\" = version ]; then\n\
                 \x20 n=$(cat '{d}/tries' 2>/dev/null || echo 0); echo $((n + 1)) > '{d}/tries'\n\
                 \x20 [ \"$n\" -ge {not_ready} ] || exit 1\n\
                 \x20 exit 0\n\
                 fi\n\
                 case \"${{@: -1}}\" in *missing*) exit 1;; esac\n"
            ),
        );
        executable(
            &dir.join("ecr-credential-provider"),
            &format!(
                "#!/bin/sh\necho \"ecr-credential-provider $(cat)\" >> '{calls}'\n\
                 echo '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{{\"123456789012.dkr.ecr.us-east-1.amazonaws.com\":{{\"username\":\"AWS\",\"password\":\"c2VjcmV0+/=\"}}}}}}'\n"
            ),
        );
        Sandbox {
            _dir: tmp,
            dir,
            bin,
        }
    }

    /// Runs `script` as SSM's agent would (a shell), with the host's paths in the sandbox.
    fn run(&self, script: &str) -> Output {
        let script = script
            .replace(CTR, &self.dir.join("ctr").display().to_string())
            .replace(
                ECR_CREDENTIAL_PROVIDER,
                &self
                    .dir
                    .join("ecr-credential-provider")
                    .display()
                    .to_string(),
            );
        Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env_remove("HOME")
            .output()
            .expect("sh runs")
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn pulls(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with("ctr ") && c.contains(" images pull "))
            .collect()
    }
}

#[test]
fn the_pull_waits_for_containerd_then_pulls_each_image_into_the_kubelets_namespace() {
    let s = Sandbox::new(2);
    let ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/app:1.2";
    let images = vec![
        "public.ecr.aws/nginx/nginx:1.27".to_string(),
        ecr.to_string(),
    ];
    let out = s.run(&script::commands(&images));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("joiner: pulled 2 of 2 images"), "{stdout}");
    // Three readiness checks: two refused, the third answered.
    let versions = s
        .calls()
        .iter()
        .filter(|c| c.starts_with("ctr ") && c.ends_with(" version"))
        .count();
    assert_eq!(versions, 3, "{:?}", s.calls());
    let pulls = s.pulls();
    assert_eq!(pulls.len(), 2, "{pulls:?}");
    for p in &pulls {
        assert!(
            p.contains("-a /run/containerd/containerd.sock -n k8s.io images pull --label io.cri-containerd.image=managed"),
            "{p}"
        );
    }
    assert!(
        pulls[0].ends_with(" public.ecr.aws/nginx/nginx:1.27"),
        "{}",
        pulls[0]
    );
    assert!(
        !pulls[0].contains("--user"),
        "public images need no credentials: {}",
        pulls[0]
    );
    // The ECR image: credentials from the host's provider, asked as the kubelet asks it.
    assert!(
        pulls[1].ends_with(&format!(" --user AWS:c2VjcmV0+/= {ecr}")),
        "{}",
        pulls[1]
    );
    let asked: Vec<String> = s
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("ecr-credential-provider "))
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains(&format!(
            "\"kind\":\"CredentialProviderRequest\",\"image\":\"{ecr}\""
        )),
        "{}",
        asked[0]
    );
    // Host commands run through sheltie with HOME set, as the kubelet runs the provider.
    assert!(s
        .calls()
        .iter()
        .any(|c| c.starts_with("sheltie HOME=/root ") && c.contains("ecr-credential-provider")));
}

#[test]
fn a_failed_pull_is_reported_the_others_go_on_and_the_command_fails() {
    let s = Sandbox::new(0);
    let images = vec![
        "registry.example.com/missing:1".to_string(),
        "registry.example.com/app:2".to_string(),
    ];
    let out = s.run(&script::commands(&images));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert_eq!(s.pulls().len(), 2, "the second image is still pulled");
    assert!(stdout.contains("joiner: pulled 1 of 2 images"), "{stdout}");
    assert!(
        stdout.contains("joiner: not pulled: registry.example.com/missing:1"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("pre-pull of registry.example.com/missing:1 failed"));
}

#[test]
fn the_pull_gives_up_when_containerd_never_comes_up() {
    let s = Sandbox::new(u32::MAX);
    let out = s.run(&script::commands(&["app:1".to_string()]));
    assert!(!out.status.success());
    assert!(s.pulls().is_empty());
    let versions = s
        .calls()
        .iter()
        .filter(|c| c.ends_with(" version") && c.starts_with("ctr "))
        .count();
    assert_eq!(versions, script::READY_TRIES as usize);
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not come up"));
}

#[test]
fn settings_are_applied_with_apiclient_exactly_as_given() {
    let s = Sandbox::new(0);
    // A line equal to the heredoc marker must not end the document early.
    let document = "[settings.kubernetes]\ncluster-name = \"prod\"\napi-server = \"https://x\"\n\n[settings.x]\nnote = \"\"\"\nJOINER_EOF\n\"\"\"\n";
    let out = s.run(&script::settings_commands(document));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let applied =
        std::fs::read_to_string(s.dir.join("applied.toml")).expect("apiclient apply read stdin");
    assert_eq!(applied, document);
    assert_eq!(s.calls(), ["apiclient apply"]);
}

#[test]
fn an_invocation_status_says_whether_the_pull_is_over() {
    use CommandInvocationStatus as S;
    for running in [S::Pending, S::InProgress, S::Delayed] {
        assert_eq!(progress_of(Some(&running), "", ""), PullProgress::Running);
    }
    assert_eq!(progress_of(None, "", ""), PullProgress::Running);
    assert_eq!(
        progress_of(Some(&S::Success), "joiner: pulled 2 of 2 images", ""),
        PullProgress::Succeeded
    );
    assert_eq!(
        progress_of(Some(&S::Failed), "joiner: pulled 1 of 2 images\njoiner: not pulled: a:1\n", "joiner: pre-pull of a:1 failed\n"),
        PullProgress::Failed(
            "SSM command Failed: joiner: pulled 1 of 2 images\njoiner: not pulled: a:1; joiner: pre-pull of a:1 failed".into()
        )
    );
    assert_eq!(
        progress_of(Some(&S::TimedOut), "", ""),
        PullProgress::Failed("SSM command TimedOut".into())
    );
    // A long output keeps its end, where the summary is.
    let long = format!("{}END", "x".repeat(5000));
    let PullProgress::Failed(why) = progress_of(Some(&S::Cancelled), &long, "") else {
        panic!("over")
    };
    assert!(why.ends_with("END"));
    assert!(why.chars().count() <= REASON_CHARS + "SSM command Cancelled: ".len());
}
