//! `vdifrec scans --repair`: a scan left torn by a recorder stopped mid-write, cut back to its
//! whole frames so that every reader sees a clean scan, jive5ab's `scan_check?` and DiFX's
//! `mk6gather` included (they would read a torn tail as frames).
//!
//! Only what `ScanLayout::locate` found torn is cut, and only at a file's end: a vbs chunk or
//! `file` part is truncated to its whole frames, or removed when it holds none; a Mark6 file is
//! truncated after the last whole frame of its torn block, and that block's header is given the
//! size it now has (`wb_size` = 8 + the bytes kept), or the block is cut away whole, header and
//! all, when it holds no whole frame; a Mark6 file left with no block is removed, as the
//! recorder never leaves one. The Mark6 file header's `block_size` (the scan's largest block)
//! stays as it is: no block grows. A second repair finds nothing torn and cuts nothing.
//!
//! The report says what was cut, byte for byte, and is written as JSON beside the scan
//! (`layout::repair_path`): with it the scan counts as closed, and a recorder started on its
//! disks no longer names it as left by a crash.

use super::layout::{self, Format, Mk6BlockHeader};
use super::scan::{emptied_by_repair, part_word, runs, ScanError, ScanLayout};
use super::torn::{grouped, TornKind, TornPiece};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RepairError {
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("cannot repair {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} changed while the scan was being repaired ({why}): is a recorder still writing it? Repair a scan only once nothing writes it")]
    Changed { path: PathBuf, why: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RepairError + '_ {
    move |source| RepairError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One torn piece cut away.
#[derive(Clone, Debug, Serialize)]
pub struct Cut {
    pub path: PathBuf,
    /// The chunk, block or file part (None: part of a Mark6 header, its block not known).
    pub part: Option<u64>,
    pub kind: TornKind,
    /// File byte the cut starts at, and the bytes cut (to the file's old end).
    pub offset: u64,
    pub bytes: u64,
    /// Whole frames of the part kept.
    pub frames_kept: u64,
    /// What was done to the file, in words.
    pub action: String,
    /// The torn piece as it was reported before the repair.
    pub description: String,
}

/// What a repair did, and the scan as it is after it.
#[derive(Clone, Debug, Serialize)]
pub struct RepairReport {
    pub scan: String,
    pub format: Format,
    pub disks: Vec<String>,
    /// Every torn piece cut, in part order (empty: nothing was torn).
    pub cut: Vec<Cut>,
    pub bytes_cut: u64,
    /// After the repair: bytes of whole frames, parts and the part numbers missing.
    pub bytes: u64,
    pub parts: usize,
    pub missing: Vec<u64>,
    /// Parts removed because they held no whole frame, by this repair and any before it:
    /// readers take them as having held nothing, not as missing (`scan::emptied_by_repair`).
    pub emptied: Vec<u64>,
    /// What the repair changed beyond the torn bytes (a part removed from the middle).
    pub notes: Vec<String>,
    /// Where this report was written beside the scan (`layout::repair_path`, on each disk
    /// holding part of it): a recorder started on the disks then counts the scan as closed.
    pub written: Vec<PathBuf>,
}

/// Cuts every torn piece of scan `name` on `disks` (`format`: None detects it). A scan that
/// cannot be read as it is (a duplicate, a broken Mark6 file) is refused, nothing cut.
pub fn repair(
    name: &str,
    disks: &[PathBuf],
    format: Option<Format>,
) -> Result<RepairReport, RepairError> {
    let before = ScanLayout::locate(name, disks, format)?;
    let what = part_word(before.format);
    let mut cut = Vec::new();
    for piece in &before.torn {
        let action = match before.format {
            Format::File | Format::Vbs => cut_frames(piece)?,
            Format::Mk6 => cut_mk6(piece, before.frame_size)?,
        };
        cut.push(Cut {
            path: piece.path.clone(),
            part: piece.part,
            kind: piece.kind,
            offset: piece.offset,
            bytes: piece.bytes,
            frames_kept: piece.frames,
            action,
            description: piece.description.clone(),
        });
    }
    if before.format == Format::Vbs {
        // A scan directory left empty goes with its last chunk (it still holds the summary
        // if one was written, and stays then).
        for d in &before.disks {
            let _ = std::fs::remove_dir(layout::vbs_dir(d, name));
        }
    }
    let mut notes = Vec::new();
    let after = match ScanLayout::locate(name, disks, Some(before.format)) {
        Ok(s) => Some(s),
        Err(ScanError::NotFound { .. }) if !cut.is_empty() => {
            notes.push(format!(
                "every file of scan {name} held only torn bytes: nothing of it is left"
            ));
            None
        }
        Err(e) => return Err(e.into()),
    };
    let after_missing = after.as_ref().map_or_else(Vec::new, |s| s.missing.clone());
    let emptied: Vec<u64> = after_missing
        .iter()
        .copied()
        .filter(|n| !before.missing.contains(n))
        .collect();
    let missing: Vec<u64> = after_missing
        .into_iter()
        .filter(|n| !emptied.contains(n))
        .collect();
    if !emptied.is_empty() {
        // A writer that had begun a part and written no whole frame of it when another writer's
        // later part got some: the part goes, and the report beside the scan says it held
        // nothing, so that readers see no gap there (jive5ab and DiFX never look for a part's
        // number).
        notes.push(format!(
            "{what}(s) {} held no whole frame and were removed from the middle of the scan; \
             this report, left beside the scan, says so, and readers find no gap there. Their \
             frames were never written: check counts them lost",
            runs(&emptied)
        ));
    }
    let earlier = emptied_by_repair(disks, name, before.format);
    if let Some(t) = after.as_ref().and_then(|s| s.torn.first()) {
        notes.push(format!("still torn after the repair: {}", t.description));
    }
    let mut report = RepairReport {
        scan: name.to_string(),
        format: before.format,
        disks: before
            .disks
            .iter()
            .map(|d| d.display().to_string())
            .collect(),
        bytes_cut: cut.iter().map(|c| c.bytes).sum(),
        cut,
        bytes: after.as_ref().map_or(0, |s| s.bytes()),
        parts: after.as_ref().map_or(0, |s| s.parts.len()),
        missing,
        emptied: earlier
            .iter()
            .copied()
            .chain(emptied)
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .collect(),
        notes,
        written: Vec::new(),
    };
    if let Some(scan) = &after {
        // A repair that cut nothing leaves an earlier report as it is (it says what was cut);
        // it writes one only where none is yet, to mark the scan closed.
        let reported = scan
            .disks
            .iter()
            .any(|d| layout::repair_path(d, name, scan.format).is_file());
        if !report.cut.is_empty() || !reported {
            report.written = write_report(&report, scan)?;
        }
    }
    Ok(report)
}

/// The report beside the scan on every disk holding part of it, each written whole (a
/// temporary file synced, then renamed) so that a crash leaves the old report or the new.
fn write_report(report: &RepairReport, scan: &ScanLayout) -> Result<Vec<PathBuf>, RepairError> {
    let text = serde_json::to_string_pretty(report).expect("a report serialises");
    let mut written = Vec::new();
    for d in &scan.disks {
        let path = layout::repair_path(d, &scan.name, scan.format);
        let dir = path.parent().expect("a report's directory");
        if !dir.is_dir() {
            if scan.format == Format::Vbs {
                continue; // no chunk of the scan on this disk
            }
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let tmp = path.with_extension("json.tmp");
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(io(dir))?;
        written.push(path);
    }
    Ok(written)
}

/// Opens the file of a torn piece, checking that the piece still reaches its end: a file that
/// grew since the scan was read is being written, and is left alone.
fn open_at_end(piece: &TornPiece) -> Result<File, RepairError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&piece.path)
        .map_err(io(&piece.path))?;
    let len = file.metadata().map_err(io(&piece.path))?.len();
    if len != piece.offset + piece.bytes {
        return Err(RepairError::Changed {
            path: piece.path.clone(),
            why: format!(
                "{} bytes now, {} when it was read",
                grouped(len),
                grouped(piece.offset + piece.bytes)
            ),
        });
    }
    Ok(file)
}

/// Removes a file of the scan, and makes the removal durable.
fn remove(path: &Path) -> Result<(), RepairError> {
    std::fs::remove_file(path).map_err(io(path))?;
    if let Some(dir) = path.parent() {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Truncates `file` to `len` bytes, durably.
fn truncate(file: &File, path: &Path, len: u64) -> Result<(), RepairError> {
    file.set_len(len).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

/// A vbs chunk or `file` part: truncated to its whole frames, or removed with none.
fn cut_frames(piece: &TornPiece) -> Result<String, RepairError> {
    let file = open_at_end(piece)?;
    if piece.frames == 0 {
        drop(file);
        remove(&piece.path)?;
        return Ok("removed: no whole frame in it".into());
    }
    truncate(&file, &piece.path, piece.offset)?;
    Ok(format!(
        "truncated to {} bytes ({} whole frames)",
        grouped(piece.offset),
        grouped(piece.frames)
    ))
}

/// A Mark6 file's torn end: cut off, the torn block's header set to what it keeps, and the
/// file removed if no block is left in it.
fn cut_mk6(piece: &TornPiece, frame_size: usize) -> Result<String, RepairError> {
    let file = open_at_end(piece)?;
    let path = &piece.path;
    let mut action = match piece.kind {
        TornKind::Empty if piece.offset > 0 => {
            drop(file);
            remove(path)?;
            return Ok("removed: its file header alone, no block was written".into());
        }
        TornKind::Empty | TornKind::PartialFileHeader => {
            drop(file);
            remove(path)?;
            return Ok("removed: not even its file header was written".into());
        }
        TornKind::BlockPastEnd if piece.frames > 0 => {
            let kept = piece.frames * frame_size as u64;
            let header_at = piece.offset - kept - layout::MK6_BLOCK_HEADER_BYTES as u64;
            let mut b = [0u8; layout::MK6_BLOCK_HEADER_BYTES];
            file.read_exact_at(&mut b, header_at).map_err(io(path))?;
            let old = Mk6BlockHeader::parse(&b).ok();
            if old.map(|h| h.blocknum as u64) != piece.part {
                return Err(RepairError::Changed {
                    path: path.clone(),
                    why: format!(
                        "the block header at byte {} is no longer that of block {}",
                        grouped(header_at),
                        piece.part.map_or("?".into(), |n| n.to_string())
                    ),
                });
            }
            let wb_size = layout::MK6_BLOCK_HEADER_BYTES as u64 + kept;
            // Cut first, then the header: stopped between the two, the block still runs
            // past the end, and a repair run again finishes the job.
            file.set_len(piece.offset).map_err(io(path))?;
            let header = Mk6BlockHeader {
                blocknum: old.map_or(0, |h| h.blocknum),
                wb_size: wb_size as u32,
            };
            file.write_all_at(&header.to_bytes(), header_at)
                .map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
            format!(
                "truncated to {} bytes; block {} kept with {} whole frames, its header's \
                 wb_size set to {}",
                grouped(piece.offset),
                header.blocknum,
                grouped(piece.frames),
                grouped(wb_size)
            )
        }
        TornKind::BlockPastEnd | TornKind::PartialBlockHeader | TornKind::PartialFrame => {
            truncate(&file, path, piece.offset)?;
            format!("truncated to {} bytes", grouped(piece.offset))
        }
    };
    if piece.offset <= layout::MK6_FILE_HEADER_BYTES as u64 {
        drop(file);
        remove(path)?;
        action.push_str("; no block left in the file: removed");
    }
    Ok(action)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::layout::Mk6FileHeader;
    use crate::vdif::scan::tests::{stream_of, FS};

    /// 100 frames, 2 threads.
    fn stream() -> Vec<u8> {
        stream_of(50)
    }

    fn disks(tag: &str) -> (PathBuf, Vec<PathBuf>) {
        let root =
            std::env::temp_dir().join(format!("vdifrec-repair-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let disks: Vec<PathBuf> = (0..3).map(|i| root.join(format!("m{i}"))).collect();
        for d in &disks {
            std::fs::create_dir_all(d).unwrap();
        }
        (root, disks)
    }

    #[test]
    fn vbs_tails_are_cut_to_whole_frames_and_a_frameless_chunk_goes() {
        let (root, d) = disks("vbs");
        let data = stream();
        // Chunks of 30, 30 and 40 frames; three writers stopped in them: chunk 0 kept 20
        // frames and 5 bytes, chunk 1 none (100 bytes), chunk 2 kept 33 frames and 1 byte.
        let writes = [(0, 20 * FS + 5), (30, 100), (60, 33 * FS + 1)];
        for (n, (from, len)) in writes.iter().enumerate() {
            let p = layout::vbs_chunk_path(&d[n], "s", n as u64);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &data[from * FS..from * FS + len]).unwrap();
        }
        let scan = ScanLayout::locate("s", &d, None).unwrap();
        assert_eq!(scan.torn.len(), 3);
        assert_eq!(scan.torn_bytes(), 5 + 100 + 1);
        let r = repair("s", &d, None).unwrap();
        assert_eq!(r.bytes_cut, 106);
        assert_eq!(
            r.cut.iter().map(|c| c.frames_kept).collect::<Vec<_>>(),
            [20, 0, 33]
        );
        assert!(r.cut[1].action.starts_with("removed"), "{:?}", r.cut[1]);
        // Chunk 1 held nothing: the report says so, and it is no gap.
        assert_eq!((r.missing.clone(), r.emptied.clone()), (vec![], vec![1]));
        assert_eq!(
            ScanLayout::locate("s", &d, None).unwrap().missing,
            Vec::<u64>::new()
        );
        assert!(
            r.notes[0].contains("chunk(s) 1 held no whole frame"),
            "{:?}",
            r.notes
        );
        assert_eq!(
            std::fs::metadata(layout::vbs_chunk_path(&d[0], "s", 0))
                .unwrap()
                .len(),
            (20 * FS) as u64
        );
        // The disk whose only chunk went keeps no empty scan directory.
        assert!(!layout::vbs_dir(&d[1], "s").exists());
        let again = repair("s", &d, None).unwrap();
        assert!(again.cut.is_empty() && again.notes.is_empty());
        assert_eq!(again.bytes, (53 * FS) as u64);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn mark6_blocks_are_cut_and_their_headers_rewritten() {
        let (root, d) = disks("mk6");
        let data = stream();
        let head = Mk6FileHeader::vdif((8 + 40 * FS) as u32, FS as u32).to_bytes();
        // Disk 0: block 0 (40 frames) whole, block 3 claims 20 frames and holds 7 and 9 bytes.
        // Disk 1: block 1 (40 frames), then 5 bytes of a block header. Disk 2: block 2 claims
        // 20 frames and holds 10 bytes of its first.
        let block = |n: u32, frames: usize| Mk6BlockHeader {
            blocknum: n,
            wb_size: (8 + frames * FS) as u32,
        };
        let mut f0 = head.to_vec();
        f0.extend(block(0, 40).to_bytes());
        f0.extend(&data[..40 * FS]);
        f0.extend(block(3, 20).to_bytes());
        f0.extend(&data[80 * FS..87 * FS + 9]);
        let mut f1 = head.to_vec();
        f1.extend(block(1, 40).to_bytes());
        f1.extend(&data[40 * FS..80 * FS]);
        f1.extend(&[4, 0, 0, 0, 1]);
        let mut f2 = head.to_vec();
        f2.extend(block(2, 20).to_bytes());
        f2.extend(&data[80 * FS..80 * FS + 10]);
        for (disk, bytes) in d.iter().zip([&f0, &f1, &f2]) {
            std::fs::write(layout::mk6_path(disk, "s"), bytes).unwrap();
        }
        let scan = ScanLayout::locate("s", &d, None).unwrap();
        let kinds: Vec<_> = scan
            .torn
            .iter()
            .map(|t| (t.part, t.kind, t.bytes))
            .collect();
        assert_eq!(
            kinds,
            [
                (Some(2), TornKind::BlockPastEnd, 18),
                (Some(3), TornKind::BlockPastEnd, 9),
                (None, TornKind::PartialBlockHeader, 5)
            ]
        );
        let r = repair("s", &d, None).unwrap();
        assert_eq!(r.bytes_cut, 32);
        let p0 = std::fs::read(layout::mk6_path(&d[0], "s")).unwrap();
        let at = 20 + 8 + 40 * FS;
        assert_eq!(p0.len(), at + 8 + 7 * FS);
        assert_eq!(&p0[at..at + 8], &block(3, 7).to_bytes());
        assert_eq!(&p0[at + 8..], &data[80 * FS..87 * FS]);
        assert_eq!(
            std::fs::read(layout::mk6_path(&d[1], "s")).unwrap(),
            f1[..f1.len() - 5]
        );
        // Disk 2's only block held no whole frame: its file goes, and the report beside the
        // scan says block 2 held nothing, so it is no gap.
        assert!(!layout::mk6_path(&d[2], "s").exists());
        assert_eq!((r.missing.clone(), r.emptied.clone()), (vec![], vec![2]));
        assert_eq!(r.written.len(), 2);
        assert_eq!(
            ScanLayout::locate("s", &d, None).unwrap().missing,
            Vec::<u64>::new()
        );
        assert_eq!((r.parts, r.bytes), (3, (87 * FS) as u64));
        assert!(repair("s", &d, None).unwrap().cut.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_that_grew_is_left_alone() {
        let (root, d) = disks("grew");
        let data = stream();
        let p = layout::file_path(&d[0], "s");
        std::fs::write(&p, &data[..10 * FS + 3]).unwrap();
        let scan = ScanLayout::locate("s", &d, None).unwrap();
        std::fs::write(&p, &data[..11 * FS + 3]).unwrap();
        let e = open_at_end(&scan.torn[0]).unwrap_err();
        assert!(
            e.to_string().contains("is a recorder still writing it"),
            "{e}"
        );
        let r = repair("s", &d, None).unwrap();
        assert_eq!(
            r.cut[0].action,
            "truncated to 11,616 bytes (11 whole frames)"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
