//! The CloudFormation templates pass cfn-lint (which scripts/test installs), and cfn-lint
//! reads the controller policy: a misspelt action in it is reported. Before the policy was
//! native YAML it was a JSON string inside `Fn::Sub`, which cfn-lint cannot look into.

use std::path::{Path, PathBuf};
use std::process::Command;

fn template(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../iam")
        .join(name)
}

/// cfn-lint's exit code and report for `path`. Run through the Python that has it (as the
/// moto server is: `JOINER_PYTHON`, else `python3`), so the script's place on PATH does not
/// matter.
fn lint(path: &Path) -> (i32, String) {
    let python = std::env::var("JOINER_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let out = Command::new(python)
        .args([
            "-c",
            "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())",
        ])
        .arg(path)
        .output()
        .expect("python3 runs cfn-lint (scripts/test installs it)");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), report)
}

#[test]
fn the_templates_lint_clean() {
    for name in ["joiner.yaml", "interruption-queue.yaml"] {
        let (code, report) = lint(&template(name));
        assert_eq!(code, 0, "cfn-lint iam/{name}:\n{report}");
    }
}

#[test]
fn cfn_lint_reads_the_controller_policys_actions() {
    let text = std::fs::read_to_string(template("joiner.yaml")).expect("iam/joiner.yaml");
    let good = "\"ec2:TerminateInstances\"";
    assert_eq!(
        text.matches(good).count(),
        1,
        "the action is in the policy once"
    );
    let misspelt = text.replace(good, "\"ec2:TerminateInstance\"");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("joiner.yaml");
    std::fs::write(&path, misspelt).expect("write");
    let (code, report) = lint(&path);
    assert_ne!(code, 0, "a misspelt action passed cfn-lint:\n{report}");
    assert!(report.contains("terminateinstance"), "{report}");
}
