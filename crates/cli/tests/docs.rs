//! The docs say what the code does: docs/reference.md is what `joiner reference` generates and
//! names every label, annotation, taint and tag key the code defines; every YAML block in the
//! docs parses (and the ones holding objects `joiner plan` reads are accepted by it); every
//! `joiner` command in the docs names a real subcommand and only flags it has.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn joiner(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run joiner")
}

/// The Markdown files users read.
fn markdown() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "iam/README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| format!("docs/{}", p.file_name().expect("name").to_string_lossy()))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Fenced blocks of `file`: (info string, body).
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match current.take() {
                Some(block) => out.push(block),
                None => current = Some((info.trim().to_string(), String::new())),
            }
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

#[test]
fn the_reference_is_what_joiner_reference_prints() {
    let out = joiner(&["reference"]);
    assert!(out.status.success());
    let generated = String::from_utf8(out.stdout).expect("utf-8");
    if std::env::var_os("JOINER_UPDATE_GOLDEN").is_some() {
        std::fs::write(root().join("docs/reference.md"), &generated).expect("write");
        return;
    }
    assert!(
        generated == read("docs/reference.md"),
        "docs/reference.md is stale: `cargo run -p joiner -- reference > docs/reference.md`"
    );
}

/// Every metric the controller registers is in the reference (a family is only printed once it
/// has a sample, so `joiner reference` must touch each one).
#[test]
fn every_metric_the_controller_registers_is_in_the_reference() {
    let reference = read("docs/reference.md");
    let names: Vec<String> = read("crates/controller/src/metrics.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("\"joiner_"))
        .filter_map(|rest| rest.split('"').next())
        .map(|name| format!("joiner_{name}"))
        .collect();
    assert!(names.len() >= 20, "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            !reference.contains(&format!("`{n}`")) && !reference.contains(&format!("`{n}_total`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "metrics missing from docs/reference.md: {missing:?}"
    );
}

#[test]
fn every_key_the_code_defines_is_in_the_reference() {
    let reference = read("docs/reference.md");
    let mut keys = BTreeSet::new();
    for file in [
        "crates/core/src/labels.rs",
        "crates/aws/src/labels.rs",
        "crates/aws/src/tags.rs",
        "crates/apis/src/drift.rs",
    ] {
        for line in read(file).lines() {
            let Some(rest) = line.trim().strip_prefix("pub const ") else {
                continue;
            };
            if let Some(value) = rest.split('"').nth(1).filter(|v| v.contains('/')) {
                keys.insert(value.to_string());
            }
        }
    }
    assert!(keys.len() >= 30, "{keys:?}");
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !reference.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/reference.md: {missing:?}"
    );
}

/// Kinds `joiner plan` reads (and the Karpenter kinds it converts).
fn planned(doc: &serde_yaml::Value) -> bool {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    api.starts_with("joiner.sh/") || api.starts_with("karpenter.") || api == "apps/v1"
}

#[test]
fn every_yaml_block_parses_and_plan_accepts_the_objects_it_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut checked = 0;
    for file in markdown() {
        for (i, (info, body)) in blocks(&read(&file)).into_iter().enumerate() {
            if info != "yaml" {
                continue;
            }
            let mut docs = Vec::new();
            for d in serde_yaml::Deserializer::from_str(&body) {
                let v =
                    <serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap_or_else(|e| {
                        panic!("{file}: YAML block {i} does not parse: {e}\n{body}")
                    });
                docs.push(v);
            }
            checked += 1;
            if docs.iter().any(planned) {
                let path = dir.path().join(format!("block-{checked}.yaml"));
                std::fs::write(&path, &body).expect("write");
                let out = joiner(&["plan", "-f", path.to_str().expect("utf-8 path")]);
                assert!(
                    out.status.success(),
                    "{file}: YAML block {i} is refused by joiner plan: {}\n{body}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    assert!(checked >= 7, "only {checked} YAML blocks");
}

/// Shell-like words of `line` (quotes grouped, brackets of usage lines dropped).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            // A comment ends the command.
            (None, '#') if word.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            (None, '[' | ']') => {}
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// `joiner ...` invocations in the docs: in shell blocks (continuations joined, split at
/// `|`, `&&`, `;`) and in inline code spans.
fn invocations() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut push_segments = |file: &str, line: &str| {
        for segment in line.split(['|', ';']).flat_map(|s| s.split("&&")) {
            let mut w = words(segment);
            if w.first().is_some_and(|x| x == "$") {
                w.remove(0);
            }
            // `cargo run -p joiner -- ARGS` is the binary too.
            if let Some(pos) = w.iter().position(|x| x == "--") {
                if w.first().is_some_and(|x| x == "cargo") && w.iter().any(|x| x == "joiner") {
                    w = std::iter::once("joiner".to_string())
                        .chain(w[pos + 1..].iter().cloned())
                        .collect();
                }
            }
            if w.first().is_some_and(|x| x == "joiner") && w.len() > 1 {
                out.push((file.to_string(), w[1..].to_vec()));
            }
        }
    };
    for file in markdown() {
        let text = read(&file);
        for (info, body) in blocks(&text) {
            if !matches!(info.as_str(), "sh" | "bash" | "console" | "shell" | "") {
                continue;
            }
            let joined = body.replace("\\\n", " ");
            for line in joined.lines() {
                push_segments(&file, line);
            }
        }
        for (i, span) in text.split('`').enumerate() {
            if i % 2 == 1
                && (span.starts_with("joiner ") || span.starts_with("cargo run -p joiner"))
            {
                push_segments(&file, span);
            }
        }
    }
    out
}

#[test]
fn every_joiner_command_in_the_docs_is_one_the_binary_accepts() {
    let found = invocations();
    assert!(found.len() >= 15, "{found:?}");
    let mut helps: std::collections::HashMap<Vec<String>, String> = Default::default();
    for (file, args) in found {
        if args == ["--version"] || args == ["--help"] {
            continue;
        }
        // The subcommand path: the words before the first flag, as far as the binary has them.
        let mut path: Vec<String> = Vec::new();
        for w in args.iter().take_while(|w| !w.starts_with('-')) {
            let mut candidate = path.clone();
            candidate.push(w.clone());
            let mut probe: Vec<&str> = candidate.iter().map(String::as_str).collect();
            probe.push("--help");
            if joiner(&probe).status.success() {
                path = candidate;
            } else {
                break;
            }
        }
        assert!(
            !path.is_empty(),
            "{file}: `joiner {}` names no subcommand",
            args.join(" ")
        );
        let help = helps.entry(path.clone()).or_insert_with(|| {
            let mut probe: Vec<&str> = path.iter().map(String::as_str).collect();
            probe.push("--help");
            String::from_utf8_lossy(&joiner(&probe).stdout).to_string()
        });
        for flag in args
            .iter()
            .filter(|w| w.starts_with('-') && w.len() > 1 && *w != "-")
        {
            let name = flag.split('=').next().unwrap_or(flag);
            // Only the option lines of the help count (`  -f, --filename <FILES>`), not prose.
            let known = help
                .lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with('-'))
                .flat_map(|l| {
                    l.split(|c: char| c.is_whitespace() || c == ',')
                        .take_while(|t| !t.starts_with('<'))
                        .filter(|t| t.starts_with('-'))
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .any(|t| t == name);
            assert!(
                known,
                "{file}: `joiner {}`: {name} is not a flag of `joiner {}`",
                args.join(" "),
                path.join(" ")
            );
        }
    }
}

/// Features joiner ships, as the docs name them (lower case), each with the command or code
/// that shows it exists: a page calling one of them missing is out of date.
const SHIPPED: &[(&str, &str)] = &[
    ("hibernat", "crates/aws/src/warm_pool.rs"),
    ("warm pool", "crates/controller/src/warm_pool/mod.rs"),
    ("interruption", "crates/controller/src/interruption/mod.rs"),
    (
        "consolidation",
        "crates/core/src/disruption/consolidation.rs",
    ),
    ("drift", "crates/apis/src/drift.rs"),
    ("disruption budget", "crates/apis/src/disruption.rs"),
    ("import-karpenter", "crates/cli/src/import.rs"),
    ("leader election", "crates/controller/src/leader.rs"),
    ("rebalance", "crates/controller/src/interruption/mod.rs"),
    ("-o wide", "crates/cli/src/output.rs"),
];

/// Words that say a feature is missing.
const MISSING: &[&str] = &[
    "not built",
    "not yet built",
    "not implemented",
    "not yet implemented",
    "unimplemented",
    "not supported yet",
    "not yet supported",
    "coming soon",
    "is planned",
    "are planned",
    "todo",
];

/// The sentences of `text` (paragraphs joined, split after `.`, `;` or `:` and at blank lines)
/// that name a shipped feature as missing.
fn calls_shipped_missing(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n") {
        let flat = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        for sentence in flat.split_inclusive(['.', ';']) {
            let lower = sentence.to_lowercase();
            if let Some((feature, _)) = SHIPPED.iter().find(|(f, _)| lower.contains(f)) {
                if let Some(word) = MISSING.iter().find(|w| lower.contains(*w)) {
                    out.push(format!("{feature} / {word}: {}", sentence.trim()));
                }
            }
        }
    }
    out
}

/// No page calls a shipped feature missing (the README once said hibernation and warm pools
/// were not built, long after they were).
#[test]
fn no_page_calls_a_shipped_feature_missing() {
    for (_, code) in SHIPPED {
        assert!(
            root().join(code).exists(),
            "{code}: the feature's code moved"
        );
    }
    // The check finds what it is for.
    assert_eq!(
        calls_shipped_missing("Warm pools work.\n\nHibernation is not built yet; members stop.")
            .len(),
        1
    );
    let mut stale = Vec::new();
    for file in markdown() {
        for s in calls_shipped_missing(&read(&file)) {
            stale.push(format!("{file}: {s}"));
        }
    }
    assert!(
        stale.is_empty(),
        "pages call shipped features missing:\n{}",
        stale.join("\n")
    );
}
