//! Which files a list of paths names.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::ManifestError;

/// The path that stands for standard input, as in `kubectl apply -f -`.
pub(crate) const STDIN: &str = "-";

/// The text of `path`, or of standard input for [`STDIN`], without a UTF-8 byte-order mark
/// (editors on Windows write one; kubectl accepts it).
pub(crate) fn read(path: &Path) -> Result<String, ManifestError> {
    use std::io::Read as _;
    let read_err = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let text = if path.as_os_str() == STDIN {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(read_err)?;
        text
    } else {
        fs::read_to_string(path).map_err(read_err)?
    };
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// The files to read, in order (`-` is standard input): each path as given, a folder as every `*.yaml`/`*.yml` file
/// below it sorted by path (so a plan never depends on directory order). A file named twice
/// (directly and through its folder) is read once. Symbolic links to folders are not followed,
/// so a link cycle cannot loop.
pub(crate) fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for p in paths {
        if p.as_os_str() == STDIN {
            if seen.insert(p.clone()) {
                out.push(p.clone());
            }
            continue;
        }
        let meta = fs::metadata(p).map_err(|source| ManifestError::Read {
            path: p.clone(),
            source,
        })?;
        let mut found = Vec::new();
        if meta.is_dir() {
            walk(p, &mut found)?;
            found.sort();
        } else {
            found.push(p.clone());
        }
        for f in found {
            let key = fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
            if seen.insert(key) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let read_err = |source| ManifestError::Read {
        path: dir.to_path_buf(),
        source,
    };
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        if file_type.is_dir() {
            walk(&path, out)?;
        } else if is_yaml(&path) && path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}
