//! `joiner import-karpenter`: Karpenter manifests (v1alpha5 Provisioner + v1alpha1
//! AWSNodeTemplate, v1beta1 and v1 NodePool + EC2NodeClass) written out as joiner's
//! Provisioners and NodeTemplates, through the same conversion `joiner plan` applies to them
//! (`joiner_apis::karpenter`). What has no equivalent, or changes meaning, is printed as a note
//! per field on standard error; the YAML goes to standard output.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::error::CliError;
use crate::manifest::{karpenter_objects, ManifestError};

/// Arguments of `joiner import-karpenter`.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// Karpenter manifest file or folder (repeatable); other kinds are skipped with a note.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

/// Converts and returns the YAML; notes are printed on standard error.
pub fn run(args: &ImportArgs) -> Result<String, CliError> {
    let (objects, skipped) = karpenter_objects(&args.files)?;
    for s in &skipped {
        eprintln!("note: {s}");
    }
    if objects.is_empty() {
        return Err(CliError::Usage(
            "no Karpenter Provisioner, AWSNodeTemplate, NodePool or EC2NodeClass in the input"
                .into(),
        ));
    }
    let converted = joiner_apis::karpenter::convert(&objects).map_err(|e| {
        CliError::Manifest(ManifestError::Converted {
            object: e.object,
            field: e.field,
            reason: e.reason,
        })
    })?;
    for note in &converted.notes {
        eprintln!("note: {note}");
    }
    let mut out = String::new();
    let templates = converted.node_templates.iter().map(serde_yaml::to_string);
    let provisioners = converted.provisioners.iter().map(serde_yaml::to_string);
    for (i, doc) in templates.chain(provisioners).enumerate() {
        let doc = doc.map_err(|e| CliError::Usage(format!("cannot write YAML: {e}")))?;
        if i > 0 {
            out.push_str("---\n");
        }
        let _ = write!(out, "{doc}");
    }
    Ok(out)
}
