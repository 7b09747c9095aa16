//! Reading one directory: the names in it and what each is, from the directory entries alone
//! (no `stat` but for links), and the chunks of one vbs scan directory.

use crate::vdif::layout;
use std::fs::{DirEntry, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::names::Kind;

/// What an entry is, following a link to what it names; None for a link to nothing or a name
/// that went away while it was read.
pub fn entry_kind(entry: &DirEntry) -> Option<Kind> {
    let t = entry.file_type().ok()?;
    if t.is_dir() {
        return Some(Kind::Dir);
    }
    if t.is_symlink() {
        let m = std::fs::metadata(entry.path()).ok()?;
        return Some(if m.is_dir() { Kind::Dir } else { Kind::File });
    }
    Some(Kind::File)
}

/// What `path` is now (None: nothing there), as `entry_kind` would read it.
pub fn path_kind(path: &Path) -> Option<Kind> {
    let m = std::fs::metadata(path).ok()?;
    Some(if m.is_dir() { Kind::Dir } else { Kind::File })
}

/// The names in `dir` with what each is; names that are not UTF-8 are no scan's.
pub fn names(dir: &Path) -> std::io::Result<Vec<(String, Kind)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if let Some(kind) = entry_kind(&entry) {
            out.push((name, kind));
        }
    }
    Ok(out)
}

/// One vbs scan directory as read: its chunk files by number, and whether the recorder's
/// summary or a repair's report lies in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VbsDir {
    pub chunks: Vec<(u64, PathBuf)>,
    pub summary: bool,
    pub repair: bool,
}

/// Reads `<disk>/<scan>/`: None where it is not a directory (any more).
pub fn vbs_dir(disk: &Path, scan: &str) -> std::io::Result<Option<VbsDir>> {
    let dir = layout::vbs_dir(disk, scan);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if is_gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let summary = format!("{scan}.summary.json");
    let repair = format!("{scan}.repair.json");
    let mut found = VbsDir::default();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if entry_kind(&entry) != Some(Kind::File) {
            continue;
        }
        if let Some(n) = layout::vbs_chunk_number(&name, scan) {
            found.chunks.push((n, entry.path()));
        } else if name == summary {
            found.summary = true;
        } else if name == repair {
            found.repair = true;
        }
    }
    found.chunks.sort();
    Ok(Some(found))
}

/// A directory that is not there, or is no directory: nothing of the scan in it.
pub fn is_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// Whether `path` starts with the Mark6 sync word (how a listing tells a Mark6 file from a
/// single-file scan: Mark6 names them `<exp>_<station>_<scan>.vdif` too).
pub fn has_mk6_sync(path: &Path) -> bool {
    let mut b = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok_and(|_| u32::from_le_bytes(b) == layout::MK6_SYNC)
}
