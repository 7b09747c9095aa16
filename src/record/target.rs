//! Where a recording goes, checked before anything starts: a recorder that cannot write its
//! output should say so when it is started, not after the first second has been received.
//! A single file or a directory (`config::Target`), and the disks of scans alike.

use crate::record::config::Target;
use std::path::PathBuf;
use thiserror::Error;

/// Why the output cannot be written. Each names the option the user gave (`path`,
/// `directory` or `disks`) and says how to put it right.
#[derive(Debug, Error)]
pub enum TargetError {
    #[error("path: {0} exists already; vdifrec never overwrites a recording: remove it or choose another path")]
    OutputExists(PathBuf),
    #[error("{name}: directory {dir} does not exist: create it first (mkdir -p {dir})")]
    NoDirectory { name: &'static str, dir: PathBuf },
    #[error("directory: {0} is a file, not a directory")]
    NotADirectory(PathBuf),
    #[error("{name}: cannot write in {path}: {source}")]
    NotWritable {
        name: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The output can be written: a file that does not exist yet in a directory we may write, or
/// a directory we may write.
pub fn check_target(t: &Target) -> Result<(), TargetError> {
    // Errors name the option the user gave: `path` (one file) or `directory`.
    let (name, dir) = match t {
        Target::File(p) => {
            if p.exists() {
                return Err(TargetError::OutputExists(p.clone()));
            }
            ("path", t.dir())
        }
        Target::Dir { dir, .. } => {
            if dir.exists() && !dir.is_dir() {
                return Err(TargetError::NotADirectory(dir.clone()));
            }
            ("directory", t.dir())
        }
    };
    if !dir.is_dir() {
        return Err(TargetError::NoDirectory { name, dir });
    }
    // Creating (and removing) a file proves we may write there.
    let probe = dir.join(format!(".vdifrec-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|source| TargetError::NotWritable {
        name,
        path: dir.clone(),
        source,
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
