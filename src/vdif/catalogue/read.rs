//! Reading one directory: the names in it and what each is, from the directory entries alone
//! (no `stat`; links are no scan's), and the chunks of one vbs scan directory.

use crate::vdif::layout;
use std::fs::{DirEntry, File};
use std::io::Read;
use std::path::Path;

use super::names::Kind;

/// What an entry is; None for a link (a scan is what lies on the disk itself: a link could
/// lead anywhere on the host, and a command from the control port must never read there) or a
/// name that went away while it was read.
pub fn entry_kind(entry: &DirEntry) -> Option<Kind> {
    let t = entry.file_type().ok()?;
    if t.is_symlink() {
        return None;
    }
    Some(if t.is_dir() { Kind::Dir } else { Kind::File })
}

/// What `path` is now (None: nothing there, or a link), as `entry_kind` would read it.
pub fn path_kind(path: &Path) -> Option<Kind> {
    let m = std::fs::symlink_metadata(path).ok()?;
    if m.file_type().is_symlink() {
        return None;
    }
    Some(if m.is_dir() { Kind::Dir } else { Kind::File })
}

/// The names in one directory with what each is, packed into one buffer (a season's disk is
/// 20,000 names: a few large allocations rather than 20,000 small ones, which the threads
/// reading disks side by side would leave scattered over the allocator's arenas).
#[derive(Debug, Default)]
pub struct Names {
    text: String,
    /// (start in `text`, length, what it is), in the order read.
    entries: Vec<(u32, u32, Kind)>,
}

impl Names {
    pub fn push(&mut self, name: &str, kind: Kind) {
        self.entries
            .push((self.text.len() as u32, name.len() as u32, kind));
        self.text.push_str(name);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, Kind)> + '_ {
        self.entries
            .iter()
            .map(|&(at, len, kind)| (&self.text[at as usize..(at + len) as usize], kind))
    }
}

/// The names in `dir` with what each is; names that are not UTF-8 are no scan's.
pub fn names(dir: &Path) -> std::io::Result<Names> {
    let mut out = Names::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(text) = name.to_str() else {
            continue;
        };
        if let Some(kind) = entry_kind(&entry) {
            out.push(text, kind);
        }
    }
    Ok(out)
}

/// One vbs scan directory as read: the numbers of its chunk files (in order; a chunk's path
/// is `layout::vbs_chunk_path`), and whether the recorder's summary or a repair's report lies
/// in it. Eight bytes a chunk, so that a listing of a season holds little.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VbsDir {
    pub chunks: Vec<u64>,
    pub summary: bool,
    pub repair: bool,
}

/// Reads `<disk>/<scan>/`: None where it is not a directory (any more).
pub fn vbs_dir(disk: &Path, scan: &str) -> std::io::Result<Option<VbsDir>> {
    let mut chunks = Vec::new();
    Ok(
        vbs_dir_into(disk, scan, &mut chunks)?.map(|(summary, repair)| VbsDir {
            chunks,
            summary,
            repair,
        }),
    )
}

/// `vbs_dir`, its chunk numbers (in order) appended to `chunks`: whether the summary and a
/// repair's report lie in it, or None where it is not a directory (any more).
pub fn vbs_dir_into(
    disk: &Path,
    scan: &str,
    chunks: &mut Vec<u64>,
) -> std::io::Result<Option<(bool, bool)>> {
    let dir = layout::vbs_dir(disk, scan);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        // A directory this user may not read (ext4's `lost+found`) holds no scan of theirs.
        Err(e) if is_gone(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let summary = format!("{scan}.summary.json");
    let repair = format!("{scan}.repair.json");
    let (mut has_summary, mut has_repair) = (false, false);
    let from = chunks.len();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if entry_kind(&entry) != Some(Kind::File) {
            continue;
        }
        if let Some(n) = layout::vbs_chunk_number(name, scan) {
            chunks.push(n);
        } else if name == summary {
            has_summary = true;
        } else if name == repair {
            has_repair = true;
        }
    }
    chunks[from..].sort_unstable();
    Ok(Some((has_summary, has_repair)))
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
