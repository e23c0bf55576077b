//! The Dockerfile (not built here: no Docker engine) builds the binary this workspace defines,
//! runs it as the non-root user the chart expects, and stamps the commit that
//! `joiner --version` prints.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Instructions of the Dockerfile, continuation lines joined.
fn instructions() -> Vec<(String, String)> {
    let text = read("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                let (op, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((op.to_uppercase(), args.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// The `[[bin]]` name and the package name of crates/cli.
fn cargo_names() -> (String, String) {
    let manifest = read("crates/cli/Cargo.toml");
    let value = |section: &str| {
        let start = manifest.find(section).expect(section);
        manifest[start..]
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
            .expect("name")
    };
    (value("[package]"), value("[[bin]]"))
}

#[test]
fn the_image_builds_the_workspace_binary_and_runs_it_as_non_root() {
    let (package, bin) = cargo_names();
    let ins = instructions();
    let run_build = ins
        .iter()
        .find(|(op, args)| op == "RUN" && args.contains("cargo build"))
        .map(|(_, a)| a.clone())
        .expect("a RUN cargo build");
    for want in [
        format!("-p {package} "),
        format!("--bin {bin} "),
        "--locked".to_string(),
        "--release".to_string(),
        "musl".to_string(),
    ] {
        assert!(
            run_build.contains(&want) || ins.iter().any(|(_, a)| a.contains(&want)),
            "{want:?} not in {run_build}"
        );
    }
    assert!(
        run_build.contains(&format!("/release/{bin}")),
        "{run_build}"
    );

    let froms: Vec<&String> = ins
        .iter()
        .filter(|(op, _)| op == "FROM")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    assert!(
        froms[1].starts_with("gcr.io/distroless/static"),
        "{}",
        froms[1]
    );
    // Each base image is pinned by digest (a tag alone moves), the tag kept for readers.
    for from in &froms {
        let image = from.split_whitespace().next().expect("image");
        let (tagged, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{image} is not pinned by digest"));
        assert!(
            tagged.contains(':'),
            "{image}: keep the tag beside the digest"
        );
        assert!(
            digest.len() == 64
                && digest
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{image}: not a sha256 digest"
        );
    }
    let rust_image = froms[0].split_whitespace().next().expect("image");
    let rust_version = rust_image
        .trim_start_matches("rust:")
        .split('-')
        .next()
        .expect("version");
    let workspace = read("Cargo.toml");
    let msrv = workspace
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("rust-version");
    let parse =
        |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().expect("number")).collect() };
    assert!(
        parse(rust_version) >= parse(&msrv),
        "{rust_version} < {msrv}"
    );

    // The runtime stage: the copied binary is the entrypoint, run as the chart's user.
    let last_from = ins.iter().rposition(|(op, _)| op == "FROM").expect("FROM");
    let runtime = &ins[last_from..];
    let copy = runtime
        .iter()
        .find(|(op, _)| op == "COPY")
        .map(|(_, a)| a.clone())
        .expect("COPY");
    let target = copy.split_whitespace().last().expect("destination");
    assert!(target.ends_with(&format!("/{bin}")), "{copy}");
    let entrypoint = runtime
        .iter()
        .find(|(op, _)| op == "ENTRYPOINT")
        .map(|(_, a)| a.clone())
        .expect("ENTRYPOINT");
    assert_eq!(entrypoint, format!("[\"{target}\"]"));
    let user = runtime
        .iter()
        .find(|(op, _)| op == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    let uid = user.split(':').next().expect("uid");
    assert_ne!(uid, "0");
    assert_ne!(uid, "root");
    let deployment = read("charts/joiner/templates/deployment.yaml");
    assert!(
        deployment.contains(&format!("runAsUser: {uid}")),
        "chart runs as another user"
    );

    // The commit reaches the build as the variable build.rs reads.
    assert!(ins
        .iter()
        .any(|(op, a)| op == "ARG" && a.starts_with("JOINER_COMMIT")));
    assert!(ins
        .iter()
        .any(|(op, a)| op == "ENV" && a.starts_with("JOINER_COMMIT=$JOINER_COMMIT")));
    assert!(read("crates/cli/build.rs").contains("\"JOINER_COMMIT\""));
    // The context leaves out what the build must not see.
    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("--version")
        .output()
        .expect("run joiner");
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        version.starts_with(&format!("joiner {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output();
    match head {
        Ok(h) if h.status.success() && std::env::var_os("JOINER_COMMIT").is_none() => {
            let commit = String::from_utf8_lossy(&h.stdout).trim().to_string();
            assert!(
                version.contains(&format!("(commit {commit})")),
                "{version} is not {commit}"
            );
        }
        // Not a git checkout: the build says so rather than inventing one.
        _ => assert!(version.contains("(commit "), "{version}"),
    }
}

/// The workspace's `rust-version` is the toolchain the image builds with, and no newer than the
/// toolchain running these tests (cargo refuses an older one): the declared minimum is one
/// the project actually builds with, not a guess.
#[test]
fn rust_version_is_the_toolchain_the_image_and_the_tests_build_with() {
    let manifest = read("Cargo.toml");
    let declared = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("rust-version in Cargo.toml");
    let builder = instructions()
        .into_iter()
        .find(|(op, args)| op == "FROM" && args.starts_with("rust:"))
        .map(|(_, args)| args)
        .expect("a rust builder stage");
    let image = builder
        .trim_start_matches("rust:")
        .split(['-', ' ', '@'])
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        image, declared,
        "the image builds with rust {image}, Cargo.toml says {declared}"
    );
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .expect("rustc runs");
    let running = String::from_utf8_lossy(&rustc.stdout);
    let version = running.split_whitespace().nth(1).unwrap_or_default();
    let minor = |v: &str| -> (u32, u32) {
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    assert!(
        minor(version) >= minor(&declared),
        "rustc {version} is older than rust-version {declared}"
    );
}
