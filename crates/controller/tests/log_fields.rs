//! JSON log lines carry the event's text as `message` (flattened, one object per line): a
//! field of the same name in a `tracing` call would make a second `message` key in the line,
//! and most log pipelines keep only one of the two. No call in the workspace may name a field
//! `message`, nor one of the other keys the formatter writes itself.

use std::path::{Path, PathBuf};

/// Keys the JSON formatter writes itself.
const RESERVED: &[&str] = &["message", "level", "target", "timestamp", "span"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The field names of every `tracing::<level>!(...)` call in `text` (a field is `name =` or a
/// bare `name,` before the closing string literal).
fn fields_of_calls(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for level in ["trace!(", "debug!(", "info!(", "warn!(", "error!("] {
        let needle = format!("tracing::{level}");
        let mut from = 0;
        while let Some(at) = text[from..].find(&needle) {
            let start = from + at + needle.len();
            let Some(len) = text[start..].find(");") else {
                break;
            };
            let call = &text[start..start + len];
            let line = text[..start].lines().count();
            // Fields come before the first string literal (the message).
            let head = call.split('"').next().unwrap_or_default();
            for part in head.split(',') {
                let name = part.split('=').next().unwrap_or_default().trim();
                let name = name.trim_start_matches(['%', '?']);
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    out.push((line, name.to_string()));
                }
            }
            from = start;
        }
    }
    out
}

#[test]
fn no_tracing_call_names_a_field_the_json_formatter_writes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in ["controller", "aws", "cli", "core", "apis"] {
        rust_files(&root.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 20, "the scan found too little: {files:?}");
    let mut bad = Vec::new();
    let mut seen = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("source");
        for (line, name) in fields_of_calls(&text) {
            seen += 1;
            if RESERVED.contains(&name.as_str()) {
                bad.push(format!("{}:{line}: field `{name}`", file.display()));
            }
        }
    }
    assert!(seen > 50, "the scan found too few fields: {seen}");
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_scan_sees_a_message_field() {
    let fields = fields_of_calls(
        "tracing::info!(\n    provisioner = %p,\n    message = %c.message,\n    \"written\"\n);",
    );
    let names: Vec<&str> = fields.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["provisioner", "message"]);
}
