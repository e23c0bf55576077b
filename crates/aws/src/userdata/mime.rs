//! MIME multipart user data: the user's own parts first, then joiner's.
//!
//! cloud-init (AL2) and nodeadm (AL2023) both read a `multipart/mixed` document and run or
//! merge its parts in order, so the user's part (a script installing an agent, a NodeConfig
//! fragment) runs before joiner's bootstrap part. The boundary is fixed ([`BOUNDARY`]) so equal
//! inputs give byte-equal user data and so the same launch-template name.
//!
//! The user's `userData` may be:
//! - empty: only joiner's part is sent;
//! - a MIME multipart document: its parts are kept, headers and bodies verbatim (line ends
//!   normalized to `\n`), and joiner's part is appended;
//! - anything else: one part, typed by its first line (`#cloud-config` → `text/cloud-config`,
//!   `#cloud-boothook` → `text/cloud-boothook`, a nodeadm `NodeConfig` →
//!   `application/node.eks.aws`, otherwise `text/x-shellscript`).

use super::UserDataError;

/// The boundary of every document joiner writes.
pub const BOUNDARY: &str = "==JOINER-MIME-BOUNDARY==";

/// The content type of a shell-script part.
pub const SHELL_SCRIPT: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// The content type of a nodeadm NodeConfig part.
pub const NODE_CONFIG: &str = "application/node.eks.aws";

/// One part of a multipart document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Header lines (`Content-Type: ...` among them), verbatim.
    pub headers: Vec<String>,
    /// The content, without the line end that precedes the next boundary.
    pub body: String,
}

impl Part {
    /// A part with a single `Content-Type` header.
    pub fn new(content_type: &str, body: impl Into<String>) -> Part {
        Part {
            headers: vec![format!("Content-Type: {content_type}")],
            body: body.into(),
        }
    }

    /// The value of the `Content-Type` header (without parameters, lower-cased);
    /// `text/plain` when the part has none, as MIME says.
    pub fn content_type(&self) -> String {
        header_value(&self.headers, "content-type")
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_else(|| "text/plain".to_string())
    }
}

/// The user's `userData` as parts (see the module doc). `node_template` names the object in
/// errors.
pub fn user_parts(node_template: &str, user_data: &str) -> Result<Vec<Part>, UserDataError> {
    let text = user_data.replace("\r\n", "\n");
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    if is_mime(&text) {
        return parse(&text).map_err(|reason| UserDataError::MalformedMime {
            node_template: node_template.to_string(),
            reason,
        });
    }
    Ok(vec![Part::new(sniff(&text), text)])
}

/// The multipart document of `parts`, in order. Fails if a part contains the boundary line.
pub fn assemble(node_template: &str, parts: &[Part]) -> Result<String, UserDataError> {
    let delimiter = format!("--{BOUNDARY}");
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for part in parts {
        if part.body.lines().any(|l| l.starts_with(&delimiter)) {
            return Err(UserDataError::MalformedMime {
                node_template: node_template.to_string(),
                reason: format!("a part contains joiner's boundary line {delimiter}"),
            });
        }
        out.push_str(&delimiter);
        out.push('\n');
        for h in &part.headers {
            out.push_str(h);
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&part.body);
        // The line end before a boundary belongs to the boundary, so bodies round-trip.
        out.push('\n');
    }
    out.push_str(&delimiter);
    out.push_str("--\n");
    Ok(out)
}

/// Whether the text starts with MIME headers rather than a script or document.
fn is_mime(text: &str) -> bool {
    let first = text.lines().next().unwrap_or_default().to_ascii_lowercase();
    first.starts_with("mime-version:") || first.starts_with("content-type:")
}

fn sniff(text: &str) -> &'static str {
    let first = text.lines().next().unwrap_or_default().trim();
    if first.starts_with("#cloud-config") {
        "text/cloud-config; charset=\"us-ascii\""
    } else if first.starts_with("#cloud-boothook") {
        "text/cloud-boothook; charset=\"us-ascii\""
    } else if text.lines().any(|l| l.trim() == "kind: NodeConfig") && text.contains("node.eks.aws/")
    {
        NODE_CONFIG
    } else {
        SHELL_SCRIPT
    }
}

/// Splits header lines (unfolding continuation lines) from the body at the first empty line.
fn split_headers(text: &str) -> (Vec<String>, &str) {
    let mut headers: Vec<String> = Vec::new();
    let mut rest = text;
    loop {
        let (line, after) = match rest.split_once('\n') {
            Some((l, a)) => (l, a),
            None => (rest, ""),
        };
        if line.is_empty() {
            return (headers, after);
        }
        match headers.last_mut() {
            Some(last) if line.starts_with([' ', '\t']) => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => headers.push(line.to_string()),
        }
        if after.is_empty() {
            return (headers, "");
        }
        rest = after;
    }
}

fn header_value<'a>(headers: &'a [String], name: &str) -> Option<&'a str> {
    headers.iter().find_map(|h| {
        let (k, v) = h.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The `boundary` parameter of a Content-Type value, quoted or not.
fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

fn parse(text: &str) -> Result<Vec<Part>, String> {
    let (headers, body) = split_headers(text);
    let content_type = header_value(&headers, "content-type").unwrap_or("text/plain");
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        // A single-part MIME entity: keep it whole, minus the document-level MIME-Version.
        let headers = headers
            .into_iter()
            .filter(|h| !h.to_ascii_lowercase().starts_with("mime-version:"))
            .collect();
        return Ok(vec![Part {
            headers,
            body: body.to_string(),
        }]);
    }
    let boundary = boundary_of(content_type)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| format!("Content-Type {content_type:?} has no boundary parameter"))?;
    let delimiter = format!("--{boundary}");
    let closing = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut closed = false;
    for line in body.split('\n') {
        let trimmed = line.trim_end();
        if trimmed == closing || trimmed == delimiter {
            if let Some(lines) = current.take() {
                parts.push(part_of(&lines.join("\n")));
            }
            if trimmed == closing {
                closed = true;
                break;
            }
            current = Some(Vec::new());
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if !closed {
        return Err(format!("no closing boundary line {closing}"));
    }
    if parts.is_empty() {
        return Err("the document has no parts".to_string());
    }
    Ok(parts)
}

fn part_of(text: &str) -> Part {
    let (headers, body) = split_headers(text);
    Part {
        headers,
        body: body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER_MIME: &str = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\n\r\npreamble\r\n--BOUNDARY\r\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\r\n\r\n#!/bin/bash\r\necho one\r\n\r\n--BOUNDARY\r\nContent-Type: text/cloud-config\r\n\r\n#cloud-config\r\npackages: [jq]\r\n--BOUNDARY--\r\n";

    #[test]
    fn user_mime_parts_are_kept_in_order() {
        let parts = user_parts("nt", USER_MIME).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].content_type(), "text/x-shellscript");
        assert_eq!(parts[0].body, "#!/bin/bash\necho one\n");
        assert_eq!(parts[1].content_type(), "text/cloud-config");
        assert_eq!(parts[1].body, "#cloud-config\npackages: [jq]");
    }

    #[test]
    fn merged_document_puts_joiner_last() {
        let mut parts = user_parts("nt", USER_MIME).unwrap();
        parts.push(Part::new(SHELL_SCRIPT, "#!/bin/bash\necho joiner\n"));
        let doc = assemble("nt", &parts).unwrap();
        let reparsed = parse(&doc).unwrap();
        assert_eq!(reparsed.len(), 3);
        assert_eq!(reparsed[0].body, "#!/bin/bash\necho one\n");
        assert_eq!(reparsed[2].body, "#!/bin/bash\necho joiner\n");
        assert!(doc.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"==JOINER-MIME-BOUNDARY==\"\n\n"));
        assert!(doc.ends_with("--==JOINER-MIME-BOUNDARY==--\n"));
    }

    #[test]
    fn plain_script_becomes_a_shell_part() {
        let parts = user_parts("nt", "#!/bin/bash\necho hi\n").unwrap();
        assert_eq!(
            parts,
            vec![Part::new(SHELL_SCRIPT, "#!/bin/bash\necho hi\n")]
        );
    }

    #[test]
    fn plain_documents_are_typed_by_their_first_line() {
        let cc = user_parts("nt", "#cloud-config\nruncmd: []\n").unwrap();
        assert_eq!(cc[0].content_type(), "text/cloud-config");
        let nc = user_parts(
            "nt",
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n",
        )
        .unwrap();
        assert_eq!(nc[0].content_type(), NODE_CONFIG);
    }

    #[test]
    fn empty_user_data_has_no_parts() {
        assert!(user_parts("nt", "").unwrap().is_empty());
        assert!(user_parts("nt", " \n\t\n").unwrap().is_empty());
    }

    #[test]
    fn folded_headers_and_unquoted_boundary() {
        let doc = "Content-Type: multipart/mixed;\n boundary=XYZ\nMIME-Version: 1.0\n\n--XYZ\nContent-Type: text/x-shellscript\n\necho a\n--XYZ--\n";
        let parts = user_parts("nt", doc).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].body, "echo a");
    }

    #[test]
    fn malformed_mime_names_the_template() {
        let err = user_parts(
            "web",
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"B\"\n\n--B\n\necho\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "NodeTemplate \"web\": spec.userData: malformed MIME multipart: no closing boundary line --B--"
        );
        let err = user_parts("web", "Content-Type: multipart/mixed\n\nx\n").unwrap_err();
        assert!(
            err.to_string().contains("has no boundary parameter"),
            "{err}"
        );
    }

    #[test]
    fn a_part_holding_the_boundary_is_refused() {
        let parts = vec![Part::new(SHELL_SCRIPT, format!("echo\n--{BOUNDARY}\n"))];
        assert!(matches!(
            assemble("nt", &parts),
            Err(UserDataError::MalformedMime { .. })
        ));
    }
}
