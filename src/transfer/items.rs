//! What a push sends: a plain file, or a scan found on the recording disks (`vbs`, `mk6`, or
//! rotated `file` parts), shipped as one file or as a `vbs` directory of chunk files. Each
//! destination file is a list of byte ranges of source files, read in place (a Mark6 scan's
//! block headers are left out: what arrives is frames, as a gathered scan is). A scan's torn
//! pieces (`vdif::torn`) are left out too: what arrives is its whole frames, the offer's sizes
//! are theirs (so the receiver's checksums and read-back cover exactly them), and the item's
//! notes say what stayed behind.

use super::names::name_problem;
use super::wire::{FileEntry, Offer, Shape, SourceStamp};
use super::TransferError;
use crate::options::ArgError;
use crate::vdif::layout;
use crate::vdif::scan::{part_word, ScanLayout};
use crate::vdif::torn::{grouped, TornKind, TornPiece};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes `offset..offset + len` of a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
}

/// One destination file, as the source ranges it is made of, in order.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub extents: Vec<Extent>,
}

/// One transfer: what the receiver is offered and where each of its files comes from.
#[derive(Clone, Debug)]
pub struct Item {
    /// How messages name it: the file's path, or `scan (vbs on /m0, /m1)`.
    pub label: String,
    pub offer: Offer,
    pub sources: Vec<SourceFile>,
    /// What the item leaves out of its source (a scan's torn pieces), for the push's report.
    pub notes: Vec<String>,
}

fn stamp(path: &Path) -> Result<SourceStamp, TransferError> {
    let m = std::fs::metadata(path).map_err(TransferError::io(path))?;
    // The same file named another way (relative, through a link) is the same source.
    let path = std::fs::canonicalize(path).map_err(TransferError::io(path))?;
    Ok(SourceStamp {
        path: path.display().to_string(),
        size: m.len(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
    })
}

fn stamps<'a>(paths: impl Iterator<Item = &'a Path>) -> Result<Vec<SourceStamp>, TransferError> {
    let mut seen = std::collections::BTreeSet::new();
    paths
        .filter(|p| seen.insert(p.to_path_buf()))
        .map(stamp)
        .collect()
}

impl Item {
    /// A plain file, to land at `<dir>/<its name>`.
    pub fn file(path: &Path, block_size: u64) -> Result<Item, TransferError> {
        let meta = std::fs::metadata(path).map_err(TransferError::io(path))?;
        if !meta.is_file() {
            return Err(ArgError::new(
                "sources",
                format!(
                    "{} is not a file (to send a scan, name the disks it is on: disks=/--disk)",
                    path.display()
                ),
            )
            .into());
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if let Some(why) = name_problem(&name) {
            return Err(ArgError::new(
                "sources",
                format!(
                    "{}: the receiver would refuse its name: {why}; rename or link it",
                    path.display()
                ),
            )
            .into());
        }
        Ok(Item {
            label: path.display().to_string(),
            offer: Offer {
                name,
                shape: Shape::File,
                files: vec![FileEntry {
                    name: String::new(),
                    size: meta.len(),
                }],
                block_size,
                sources: vec![stamp(path)?],
            },
            sources: vec![SourceFile {
                extents: vec![Extent {
                    path: path.to_path_buf(),
                    offset: 0,
                    len: meta.len(),
                }],
            }],
            notes: Vec::new(),
        })
    }

    /// Scan `name` found on `disks`, complete (a scan with a missing part is refused, naming
    /// it), as one file of its whole frames in order or as a `vbs` directory of one chunk per
    /// part holding any; its torn pieces left out and named in the notes.
    pub fn scan(
        name: &str,
        disks: &[PathBuf],
        shape: Shape,
        block_size: u64,
    ) -> Result<Item, TransferError> {
        let scan = ScanLayout::locate(name, disks, None)?;
        scan.require_complete()?;
        let extent = |p: &crate::vdif::scan::Part| Extent {
            path: p.path.clone(),
            offset: p.offset,
            len: p.bytes,
        };
        let (files, sources) = match shape {
            Shape::File => (
                vec![FileEntry {
                    name: String::new(),
                    size: scan.bytes(),
                }],
                vec![SourceFile {
                    extents: scan.parts.iter().map(extent).collect(),
                }],
            ),
            Shape::Vbs => scan
                .parts
                .iter()
                .map(|p| {
                    let chunk = layout::vbs_chunk_path(Path::new(""), name, p.number);
                    (
                        FileEntry {
                            name: chunk
                                .display()
                                .to_string()
                                .rsplit('/')
                                .next()
                                .unwrap_or_default()
                                .to_string(),
                            size: p.bytes,
                        },
                        SourceFile {
                            extents: vec![extent(p)],
                        },
                    )
                })
                .unzip(),
        };
        let what = part_word(scan.format);
        let notes = scan.torn.iter().map(|t| left_out(t, what)).collect();
        Ok(Item {
            label: scan.label(),
            offer: Offer {
                name: name.to_string(),
                shape,
                files,
                block_size,
                sources: stamps(scan.parts.iter().map(|p| p.path.as_path()))?,
            },
            sources,
            notes,
        })
    }

    /// Whether every source is as it was when the item was made (a push refuses to finish a
    /// copy of a file that changed under it).
    pub fn unchanged(&self) -> Result<(), TransferError> {
        for s in &self.offer.sources {
            let now = stamp(Path::new(&s.path))?;
            if now != *s {
                return Err(TransferError::Failed(format!(
                    "{} changed while it was being sent (size {} -> {}, modified again): the copy \
                     at the receiver is not of one version of it; push it again once it is final",
                    s.path, s.size, now.size
                )));
            }
        }
        Ok(())
    }
}

/// A torn piece as a push's note: `left out 5,568 torn bytes at byte 32,254,528 of
/// /d1/s/s.00000013 (chunk 13; its 3,922 whole frames are sent)`.
fn left_out(t: &TornPiece, what: &str) -> String {
    let part = t.part.map_or(String::new(), |n| format!("{what} {n}; "));
    let frames = match t.frames {
        0 => "no whole frame in it".to_string(),
        n => format!("its {} whole frames are sent", grouped(n)),
    };
    match (t.kind, t.bytes) {
        (TornKind::Empty, _) => format!("left out {}: empty", t.place(what)),
        (_, 0) => format!(
            "left out nothing of {}: its header claims more than the file holds ({frames})",
            t.place(what)
        ),
        _ => format!(
            "left out {} torn bytes at byte {} of {} ({part}{frames})",
            grouped(t.bytes),
            grouped(t.offset),
            t.path.display()
        ),
    }
}

/// Reads ranges of an item's destination files from their sources, keeping the last few
/// files open (a vbs scan has thousands of chunk files; descriptors are not unlimited).
#[derive(Default)]
pub struct SourceReader {
    open: HashMap<PathBuf, File>,
}

const OPEN_FILES: usize = 32;

impl SourceReader {
    /// Fills `buf` with bytes `offset..offset + buf.len()` of destination file `source`.
    pub fn read(
        &mut self,
        source: &SourceFile,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), TransferError> {
        let mut at = 0u64; // where the current extent starts in the destination file
        let mut filled = 0usize;
        let want_end = offset + buf.len() as u64;
        for e in &source.extents {
            let (start, end) = (at, at + e.len);
            at = end;
            if end <= offset + filled as u64 || filled == buf.len() {
                continue;
            }
            let from = offset + filled as u64 - start;
            let n = (end.min(want_end) - (start + from)) as usize;
            if !self.open.contains_key(&e.path) {
                if self.open.len() >= OPEN_FILES {
                    // Parts are read mostly in order: any file but the one needed will do.
                    self.open.clear();
                }
                let f = File::open(&e.path).map_err(TransferError::io(&e.path))?;
                self.open.insert(e.path.clone(), f);
            }
            let f = &self.open[&e.path];
            f.read_exact_at(&mut buf[filled..filled + n], e.offset + from)
                .map_err(TransferError::io(&e.path))?;
            // Shipping hundreds of TB must not push a recorder's working set out of the cache.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(f),
                    (e.offset + from) as i64,
                    n as i64,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
            filled += n;
        }
        if filled != buf.len() {
            return Err(TransferError::Failed(format!(
                "bytes {offset}..{want_end} lie beyond the sources' end: a source was cut short while sending"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_across_extents() {
        let dir = std::env::temp_dir().join(format!("vdifrec-items-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"0123456789").unwrap();
        std::fs::write(&b, b"abcdefghij").unwrap();
        // Destination = a[2..6] + b[0..10] + a[8..10] = "2345abcdefghij89"
        let src = SourceFile {
            extents: vec![
                Extent {
                    path: a.clone(),
                    offset: 2,
                    len: 4,
                },
                Extent {
                    path: b.clone(),
                    offset: 0,
                    len: 10,
                },
                Extent {
                    path: a.clone(),
                    offset: 8,
                    len: 2,
                },
            ],
        };
        let mut r = SourceReader::default();
        for (off, len) in [(0u64, 16usize), (3, 5), (13, 3), (14, 2), (4, 10)] {
            let mut buf = vec![0u8; len];
            r.read(&src, off, &mut buf).unwrap();
            assert_eq!(
                &buf[..],
                &b"2345abcdefghij89"[off as usize..off as usize + len]
            );
        }
        let mut buf = vec![0u8; 4];
        assert!(r.read(&src, 14, &mut buf).is_err());
        let item = Item::file(&a, 4096).unwrap();
        assert_eq!(item.offer.name, "a");
        assert_eq!(item.offer.files[0].size, 10);
        item.unchanged().unwrap();
        std::fs::write(&a, b"01234567890").unwrap();
        assert!(item.unchanged().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
