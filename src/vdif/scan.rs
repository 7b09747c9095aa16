//! Scans read back from the disks they were recorded on, in any of the layouts of
//! `vdif::layout` (`file`, FlexBuff `vbs`, Mark6 `mk6`): which scans a set of disks holds,
//! and one scan as its parts (chunks, blocks) in stream order.
//!
//! A part is a byte range of whole frames in one file. Parts are numbered 0, 1, … across the
//! scan; a number absent between 0 and the highest present is a gap, reported with the VDIF
//! times of the frames on either side, never read as data.
//!
//! What a recorder stopped mid-write leaves at the end of a file (part of a frame, a Mark6
//! block cut short, part of a Mark6 header, an empty chunk) is a torn piece (`vdif::torn`):
//! the part is read to its last whole frame, and the piece is reported in `ScanLayout::torn`
//! with its file, byte, size and the VDIF time it leaves out. A part left with no whole frame
//! is present (its number is no gap) but holds nothing to read. A torn piece in the middle of
//! the scan (several writers, each stopped in its own chunk) is read like a missing part:
//! the next part's frames follow at once, and the frames never written between are absent, a
//! gap in VDIF time that `check` counts as lost and the torn piece names. Unlike a missing
//! part it does not stop `open_scan`: nothing more is to be found on another disk.
//!
//! What is wrong with a scan anywhere but at a file's end (a duplicate number, a Mark6 block
//! inside its file that is not whole frames, frames that change size, a broken Mark6 header)
//! is an error that names the file.

use super::catalogue::{self, Holding};
use super::file::{FileError, VdifFile};
use super::frames::FrameStore;
use super::header::{Header, HeaderError};
use super::layout::{self, Format, LayoutError, Mk6BlockHeader, Mk6FileHeader};
pub use super::stamp::Stamp;
use super::torn::{summary_line, whole_frames, TornKind, TornPiece};
use memmap2::Mmap;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Bytes read to parse a VDIF header (the longest, non-legacy, is 32).
const HEADER_BYTES: usize = 32;

#[derive(Debug, Error)]
pub enum ScanError {
    // The messages of a bad argument start with its name (`disks: …`), as `ArgError`'s do.
    #[error("disks: none given; name the directories (mount points) the scan was recorded on")]
    NoDisks,
    #[error("disks: {0} is not a directory; give the directories (mount points) the scan was recorded on")]
    NotADirectory(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no scan {name}{} on {disks}: looked for <disk>/{name}.vdif (file), <disk>/{name}/{name}.NNNNNNNN (vbs) and <disk>/{name} (mk6); check the name (`vdifrec scans` lists them) and give every disk the scan was recorded on", .format.map_or(String::new(), |f| format!(" in format {}", f.name())))]
    NotFound {
        name: String,
        format: Option<Format>,
        disks: String,
    },
    #[error("name: {pattern:?} is not a shell-style pattern ({reason}); use * for any text, ? for one character and [abc] for one of a set, and quote the pattern so the shell passes it on")]
    Pattern { pattern: String, reason: String },
    #[error("format: scan {name} is on these disks in more than one format ({formats}); say which to read")]
    Ambiguous { name: String, formats: String },
    #[error("{what} {number} of scan {name} is in two files, {first} and {second}: remove the one that does not belong")]
    Duplicate {
        name: String,
        what: &'static str,
        number: u64,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("{path}: {what} {number} holds {bytes} bytes from byte {offset}, not whole frames of {frame_size} bytes: the {what} is cut short or not VDIF")]
    NotWholeFrames {
        path: PathBuf,
        what: &'static str,
        number: u64,
        offset: u64,
        bytes: u64,
        frame_size: usize,
    },
    #[error(
        "{path}: {what} {number} does not start with a VDIF header at byte {offset}: {source}"
    )]
    NotVdif {
        path: PathBuf,
        what: &'static str,
        number: u64,
        offset: u64,
        source: HeaderError,
    },
    #[error("{path}: {what} {number} holds {found}-byte frames, the scan {expected}-byte frames")]
    FrameSize {
        path: PathBuf,
        what: &'static str,
        number: u64,
        found: usize,
        expected: usize,
    },
    #[error("{path}: bad Mark6 file header: {source}")]
    Mk6Header { path: PathBuf, source: LayoutError },
    #[error("{path}: Mark6 packet_format {0} is not VDIF (0)", .format)]
    Mk6NotVdif { path: PathBuf, format: i32 },
    #[error("{path}: bad Mark6 block header at byte {offset}: {source}")]
    Mk6Block {
        path: PathBuf,
        offset: u64,
        source: LayoutError,
    },
    #[error("{message}")]
    Gaps { message: String, missing: Vec<u64> },
    #[error("{label} holds no whole frame, nothing to read: torn {torn}; a recorder stopped as it began the scan (`vdifrec scans --repair` removes it)")]
    NoWholeFrame { label: String, torn: String },
    #[error(transparent)]
    File(#[from] FileError),
}

impl ScanError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ScanError + '_ {
        move |source| ScanError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A run of whole frames in one file: chunk or block `number` of the scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub number: u64,
    pub path: PathBuf,
    /// Where the frames start in the file.
    pub offset: u64,
    pub bytes: u64,
}

/// Parts `first..=last` are missing; `after` is the last frame before them, `before` the
/// first frame after them (None at the start of the scan).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartGap {
    pub first: u64,
    pub last: u64,
    pub after: Option<Stamp>,
    pub before: Option<Stamp>,
    /// The gap in words, as messages and reports print it.
    pub description: String,
}

/// The parts a repair of scan `name` removed because they held no whole frame (torn as their
/// writer began them), from the reports it left beside the scan on any of `disks`.
pub fn emptied_by_repair(disks: &[PathBuf], name: &str, format: Format) -> BTreeSet<u64> {
    disks
        .iter()
        .flat_map(|d| emptied_numbers(&layout::repair_path(d, name, format)))
        .collect()
}

/// `emptied_by_repair`, from the reports the catalogue found.
fn emptied_in(held: &[Holding], name: &str, format: Format) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for path in held.iter().filter_map(|h| h.repair(name, format)) {
        out.extend(emptied_numbers(&path));
    }
    out
}

/// The part numbers a repair's report at `path` lists as emptied.
fn emptied_numbers(path: &Path) -> Vec<u64> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    v.get("emptied")
        .and_then(|x| x.as_array())
        .map(|a| a.iter().filter_map(|n| n.as_u64()).collect())
        .unwrap_or_default()
}

/// How many chunks, blocks or files the recorder wrote for scan (or data stream) `name`, from
/// the JSON summary it left beside the scan on any disk; None where there is none.
fn recorded_parts(held: &[Holding], name: &str, format: Format) -> Option<u64> {
    for path in held.iter().filter_map(|h| h.summary(name, format)) {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if format == Format::File {
            // A file scan's parts are its files (a split scan lists every data stream's).
            let files = v.get("files").and_then(|x| x.as_array())?;
            let own = files
                .iter()
                .filter_map(|f| f.get("path")?.as_str())
                .filter(|p| {
                    Path::new(p)
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| layout::file_part_number(n, name))
                        .is_some()
                })
                .count();
            return Some(own as u64);
        }
        let streams = v.get("data_streams").and_then(|x| x.as_array());
        let own = streams.and_then(|a| {
            a.iter()
                .find(|x| x.get("name").and_then(|n| n.as_str()) == Some(name))
                .and_then(|x| x.get("chunks")?.as_u64())
        });
        if let Some(n) = own {
            return Some(n);
        }
        if v.get("name").and_then(|n| n.as_str()) == Some(name) {
            if let Some(n) = v.get("chunks").and_then(|c| c.as_u64()) {
                return Some(n);
            }
        }
    }
    None
}

/// One scan as found on the disks: its parts in number order and the numbers missing.
#[derive(Clone, Debug)]
pub struct ScanLayout {
    pub name: String,
    pub format: Format,
    /// Disks that hold a part, in the order given.
    pub disks: Vec<PathBuf>,
    /// Parts by number (ascending, no duplicates).
    pub parts: Vec<Part>,
    /// Numbers absent between 0 and the highest present.
    pub missing: Vec<u64>,
    /// What a writer stopped mid-write left at the ends of files, never read as data; by
    /// part number (pieces whose part is not known last).
    pub torn: Vec<TornPiece>,
    pub frame_size: usize,
    /// The recorder's summary or a repair's report lies beside it (`ScanSummary::closed`).
    pub closed: bool,
}

/// What `vdifrec scans` lists of one scan.
#[derive(Clone, Debug, Serialize)]
pub struct ScanSummary {
    pub name: String,
    pub format: Format,
    pub disks: Vec<String>,
    /// Bytes of whole frames over all parts.
    pub bytes: u64,
    /// Parts holding whole frames (vbs chunks, mk6 blocks; 1 for a file).
    pub chunks: usize,
    pub missing: Vec<u64>,
    /// Bytes of the torn pieces: on disk, not whole frames, never read.
    pub torn_bytes: u64,
    pub torn: Vec<TornPiece>,
    pub frame_size: usize,
    /// The first frame of the first part and the last frame of the last part.
    pub first: Option<Stamp>,
    pub last: Option<Stamp>,
    /// The recorder closed the scan (its summary lies beside it) or `scans --repair` cut it
    /// back to whole frames (its report does): false for a scan a recorder never finished (a
    /// crash) or that another program wrote.
    pub closed: bool,
    /// Why the scan cannot be read as it is (the other fields then say what was found).
    pub error: Option<String>,
}

/// Whether scan `name` was closed: the recorder's summary or a repair's report beside it on
/// any disk.
fn is_closed(held: &[Holding], name: &str, format: Format) -> bool {
    held.iter()
        .any(|h| h.summary(name, format).is_some() || h.repair(name, format).is_some())
}

/// The word for a part of each format, as messages use it.
pub fn part_word(format: Format) -> &'static str {
    match format {
        Format::File => "file",
        Format::Vbs => "chunk",
        Format::Mk6 => "block",
    }
}

/// Numbers as runs: `3, 7-9`.
pub fn runs(numbers: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let mut j = i;
        while j + 1 < numbers.len() && numbers[j + 1] == numbers[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            numbers[i].to_string()
        } else {
            format!("{}-{}", numbers[i], numbers[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn disk_error(e: catalogue::DiskError) -> ScanError {
    ScanError::Io {
        path: e.path,
        source: e.source,
    }
}

fn disk_list(disks: &[PathBuf]) -> String {
    disks
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The disks, each a directory, each once: a disk named twice (`/m0` and a glob `/m*`) would
/// otherwise show every part on it twice. The first spelling of each is kept.
fn distinct_disks(disks: &[PathBuf]) -> Result<Vec<PathBuf>, ScanError> {
    if disks.is_empty() {
        return Err(ScanError::NoDisks);
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for d in disks {
        if !d.is_dir() {
            return Err(ScanError::NotADirectory(d.clone()));
        }
        if seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())) {
            out.push(d.clone());
        }
    }
    Ok(out)
}

/// A part as found on disk, before it is read as whole frames: `part.bytes` is what the file
/// holds of it.
struct Found {
    part: Part,
    /// A Mark6 block: where its header lies, and the bytes of frames the header claims.
    block: Option<(u64, u64)>,
}

/// A torn piece whose VDIF times and description `locate` adds once the parts are known.
fn torn_piece(
    path: &Path,
    part: Option<u64>,
    kind: TornKind,
    offset: u64,
    bytes: u64,
    frames: u64,
) -> TornPiece {
    TornPiece {
        path: path.to_path_buf(),
        part,
        kind,
        offset,
        bytes,
        frames,
        after: None,
        before: None,
        description: String::new(),
    }
}

/// What one Mark6 file holds.
struct Mk6File {
    blocks: Vec<Found>,
    /// What lies after the last block header that is whole (part of a block header), or the
    /// whole file when even its file header is cut short.
    torn: Option<TornPiece>,
    /// The frame size its header gives (None: the header is torn).
    frame_size: Option<usize>,
}

/// The blocks of one Mark6 file (number = blocknum, the payload's range as far as the file
/// holds it), and the frame size its header gives.
fn mk6_file(path: &Path) -> Result<Mk6File, ScanError> {
    let file = File::open(path).map_err(ScanError::io(path))?;
    let len = file.metadata().map_err(ScanError::io(path))?.len();
    let mut head = [0u8; layout::MK6_FILE_HEADER_BYTES];
    let got = read_up_to(&file, 0, &mut head).map_err(ScanError::io(path))?;
    let sync = layout::MK6_SYNC.to_le_bytes();
    let n = got.min(sync.len());
    if got < layout::MK6_FILE_HEADER_BYTES && head[..n] == sync[..n] {
        // Created, and stopped before its header was written whole: nothing of the scan in it.
        let kind = match got {
            0 => TornKind::Empty,
            _ => TornKind::PartialFileHeader,
        };
        return Ok(Mk6File {
            blocks: Vec::new(),
            torn: Some(torn_piece(path, None, kind, 0, len, 0)),
            frame_size: None,
        });
    }
    let header = Mk6FileHeader::parse(&head[..got]).map_err(|source| ScanError::Mk6Header {
        path: path.to_path_buf(),
        source,
    })?;
    if header.packet_format != layout::MK6_PACKET_FORMAT_VDIF {
        return Err(ScanError::Mk6NotVdif {
            path: path.to_path_buf(),
            format: header.packet_format,
        });
    }
    let mut blocks = Vec::new();
    let mut torn = None;
    let mut at = layout::MK6_FILE_HEADER_BYTES as u64;
    const BLOCK_HEADER: u64 = layout::MK6_BLOCK_HEADER_BYTES as u64;
    while at < len {
        let left = len - at;
        if left < BLOCK_HEADER {
            // A block header is written in one piece: part of one is where a writer stopped.
            torn = Some(torn_piece(
                path,
                None,
                TornKind::PartialBlockHeader,
                at,
                left,
                0,
            ));
            break;
        }
        let mut b = [0u8; layout::MK6_BLOCK_HEADER_BYTES];
        file.read_exact_at(&mut b, at)
            .map_err(ScanError::io(path))?;
        let block = Mk6BlockHeader::parse(&b).map_err(|source| ScanError::Mk6Block {
            path: path.to_path_buf(),
            offset: at,
            source,
        })?;
        // A block running past the file's end can only be its last: `locate` reads the
        // frames the file does hold.
        let claimed = block.payload() as u64;
        blocks.push(Found {
            part: Part {
                number: block.blocknum as u64,
                path: path.to_path_buf(),
                offset: at + BLOCK_HEADER,
                bytes: claimed.min(left - BLOCK_HEADER),
            },
            block: Some((at, claimed)),
        });
        at += block.wb_size as u64;
    }
    if blocks.is_empty() && torn.is_none() {
        // The file header alone: created, and stopped before the first block. Nothing torn
        // (no byte of data), but the file is where the scan was begun, as an empty chunk is.
        torn = Some(torn_piece(
            path,
            None,
            TornKind::Empty,
            layout::MK6_FILE_HEADER_BYTES as u64,
            0,
            0,
        ));
    }
    Ok(Mk6File {
        blocks,
        torn,
        frame_size: Some(header.packet_size as usize),
    })
}

/// Reads into `buf` from `offset` until it is full or the file ends; the bytes read.
fn read_up_to(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The file last read, kept open for the headers of the next parts in it (a Mark6 file's
/// blocks): one open file whatever the scan's size, so that a scan of thousands of chunks reads
/// under the common limit of 1,024 open files.
#[derive(Default)]
struct Heads {
    open: Option<(PathBuf, File)>,
}

impl Heads {
    /// The header of the frame at `offset` of `path`.
    fn header(
        &mut self,
        path: &Path,
        offset: u64,
    ) -> Result<Result<Header, HeaderError>, ScanError> {
        let file = match &self.open {
            Some((p, f)) if p == path => f,
            _ => {
                let f = File::open(path).map_err(ScanError::io(path))?;
                &self.open.insert((path.to_path_buf(), f)).1
            }
        };
        let mut b = [0u8; HEADER_BYTES];
        let n = read_up_to(file, offset, &mut b).map_err(ScanError::io(path))?;
        Ok(Header::parse_unchecked(&b[..n]))
    }
}

impl ScanLayout {
    /// Finds scan `name` on `disks`, in `format` or in the one format it is found in. Only the
    /// disks the catalogue says hold something of that name are read, and of them only what is
    /// the scan's.
    pub fn locate(
        name: &str,
        disks: &[PathBuf],
        format: Option<Format>,
    ) -> Result<ScanLayout, ScanError> {
        let disks = distinct_disks(disks)?;
        let held = catalogue::holdings(name, &disks).map_err(disk_error)?;
        Self::locate_in(name, &held, format)
    }

    /// `locate`, from what the disks were found to hold of the name.
    fn locate_in(
        name: &str,
        held: &[Holding],
        format: Option<Format>,
    ) -> Result<ScanLayout, ScanError> {
        let disks: Vec<PathBuf> = held.iter().map(|h| h.disk.clone()).collect();
        let disks = &disks;
        let mut present: BTreeSet<&'static str> = BTreeSet::new();
        let mut formats = Vec::new();
        for h in held {
            for f in h.formats() {
                if present.insert(f.name()) {
                    formats.push(f);
                }
            }
        }
        let format = match (format, formats.as_slice()) {
            (Some(f), found) if found.contains(&f) => f,
            (None, [f]) => *f,
            (None, [_, _, ..]) => {
                return Err(ScanError::Ambiguous {
                    name: name.into(),
                    formats: present.into_iter().collect::<Vec<_>>().join(", "),
                })
            }
            _ => {
                return Err(ScanError::NotFound {
                    name: name.into(),
                    format,
                    disks: disk_list(disks),
                })
            }
        };
        let mut found: Vec<Found> = Vec::new();
        let mut torn: Vec<(TornPiece, Option<u64>)> = Vec::new();
        let mut frame_size_of_mk6: Vec<(PathBuf, usize)> = Vec::new();
        for h in held {
            match format {
                Format::File | Format::Vbs => {
                    let parts: Vec<(u64, PathBuf)> = match format {
                        Format::File => h.file_parts.clone(),
                        _ => match &h.vbs {
                            Some(v) => v
                                .chunks
                                .iter()
                                .map(|&n| (n, layout::vbs_chunk_path(&h.disk, name, n)))
                                .collect(),
                            None => continue,
                        },
                    };
                    for (number, path) in parts {
                        let bytes = path.metadata().map_err(ScanError::io(&path))?.len();
                        found.push(Found {
                            part: Part {
                                number,
                                path,
                                offset: 0,
                                bytes,
                            },
                            block: None,
                        });
                    }
                }
                Format::Mk6 => {
                    if let Some(p) = &h.mk6 {
                        let file = mk6_file(p)?;
                        if let Some(fs) = file.frame_size {
                            frame_size_of_mk6.push((p.clone(), fs));
                        }
                        found.extend(file.blocks);
                        torn.extend(file.torn.map(|t| (t, None)));
                    }
                }
            }
        }
        let what = part_word(format);
        // Stable: within a file, parts keep their order, so a duplicate names the earlier first.
        found.sort_by_key(|f| f.part.number);
        if let Some(w) = found
            .windows(2)
            .find(|w| w[0].part.number == w[1].part.number)
        {
            return Err(ScanError::Duplicate {
                name: name.into(),
                what,
                number: w[0].part.number,
                first: w[0].part.path.clone(),
                second: w[1].part.path.clone(),
            });
        }
        // A part left with no whole frame by a torn write is there all the same: no gap.
        let mut missing = Vec::new();
        let mut expect = 0;
        for f in &found {
            missing.extend(expect..f.part.number);
            expect = f.part.number + 1;
        }
        // Parts after the last one found are missing too when the recorder's summary beside
        // the scan says it wrote more (a disk not given that held the last chunks).
        if let Some(n) = recorded_parts(held, name, format) {
            missing.extend(expect..n);
        }
        // Parts `scans --repair` removed because they held no whole frame are known to have
        // held nothing: no gap, and nothing to look for on another disk.
        let emptied = emptied_in(held, name, format);
        missing.retain(|n| !emptied.contains(n));
        let mut heads = Heads::default();
        let frame_size = match first_frame_size(&mut heads, &found)? {
            Some(fs) => fs,
            // No part holds a whole frame (a Mark6 scan whose files hold no block yet, or
            // only torn ones): nothing to read, but found.
            None => frame_size_of_mk6.first().map_or(0, |(_, fs)| *fs),
        };
        for (path, fs) in &frame_size_of_mk6 {
            if !found.is_empty() && *fs != frame_size {
                return Err(ScanError::FrameSize {
                    path: path.clone(),
                    what: "Mark6 file header (packet_size) of",
                    number: 0,
                    found: *fs,
                    expected: frame_size,
                });
            }
        }
        let mut parts = Vec::new();
        for Found { part: p, block } in found {
            let (whole, rest) = whole_frames(p.bytes, frame_size);
            let frames = whole / frame_size.max(1) as u64;
            let tear = |kind, offset, bytes| {
                torn_piece(&p.path, Some(p.number), kind, offset, bytes, frames)
            };
            let piece = match block {
                Some((header_at, claimed)) => {
                    // The header's size is the writer's intent: frames, or it is broken.
                    if frame_size == 0 || claimed % frame_size as u64 != 0 {
                        return Err(ScanError::NotWholeFrames {
                            path: p.path.clone(),
                            what,
                            number: p.number,
                            offset: p.offset,
                            bytes: claimed,
                            frame_size,
                        });
                    }
                    if claimed == p.bytes {
                        None
                    } else if whole > 0 {
                        let t = tear(TornKind::BlockPastEnd, p.offset + whole, rest);
                        Some((t, Some(claimed + layout::MK6_BLOCK_HEADER_BYTES as u64)))
                    } else {
                        // Nothing of it to keep: torn from its header on.
                        let header = layout::MK6_BLOCK_HEADER_BYTES as u64;
                        let t = tear(TornKind::BlockPastEnd, header_at, header + p.bytes);
                        Some((t, Some(claimed + header)))
                    }
                }
                None if p.bytes == 0 => Some((tear(TornKind::Empty, 0, 0), None)),
                None if rest > 0 => {
                    Some((tear(TornKind::PartialFrame, p.offset + whole, rest), None))
                }
                None => None,
            };
            torn.extend(piece);
            if whole == 0 {
                continue;
            }
            let found = part_header(&mut heads, &p, what)?.frame_size();
            if found != frame_size {
                return Err(ScanError::FrameSize {
                    path: p.path.clone(),
                    what,
                    number: p.number,
                    found,
                    expected: frame_size,
                });
            }
            parts.push(Part { bytes: whole, ..p });
        }
        torn.sort_by(|a, b| {
            let key = |t: &TornPiece| (t.part.is_none(), t.part, t.path.clone());
            key(&a.0).cmp(&key(&b.0))
        });
        let mut pieces = Vec::new();
        for (mut t, claimed) in torn {
            if let Some(n) = t.part {
                // The frames on either side: of the same part where it kept any.
                let prev = parts.iter().rev().find(|p| p.number <= n);
                let next = parts.iter().find(|p| p.number > n);
                t.after = prev
                    .map(|p| last_header(&mut heads, p, frame_size, what).map(|h| Stamp::of(&h)))
                    .transpose()?;
                t.before = next
                    .map(|p| part_header(&mut heads, p, what).map(|h| Stamp::of(&h)))
                    .transpose()?;
            }
            t.describe(what, claimed);
            pieces.push(t);
        }
        let holding: BTreeSet<&Path> = parts
            .iter()
            .map(|p| p.path.as_path())
            .chain(pieces.iter().map(|t| t.path.as_path()))
            .filter_map(|path| disks.iter().find(|d| path.starts_with(d)))
            .map(|d| d.as_path())
            .collect();
        Ok(ScanLayout {
            name: name.into(),
            format,
            disks: disks
                .iter()
                .filter(|d| holding.contains(d.as_path()))
                .cloned()
                .collect(),
            parts,
            missing,
            torn: pieces,
            frame_size,
            closed: is_closed(held, name, format),
        })
    }

    /// Bytes of the torn pieces (never read).
    pub fn torn_bytes(&self) -> u64 {
        self.torn.iter().map(|t| t.bytes).sum()
    }

    /// Bytes of frames over all parts.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }

    /// How the scan is named in messages: `kvn_scan1 (vbs on /m0, /m1)`.
    pub fn label(&self) -> String {
        format!(
            "{} ({} on {})",
            self.name,
            self.format.name(),
            disk_list(&self.disks)
        )
    }

    /// The first frame of part `p` (None: no part).
    fn first_stamp(&self, heads: &mut Heads, p: Option<&Part>) -> Result<Option<Stamp>, ScanError> {
        p.map(|p| part_header(heads, p, part_word(self.format)).map(|h| Stamp::of(&h)))
            .transpose()
    }

    /// The last frame of part `p` (None: no part).
    fn last_stamp(&self, heads: &mut Heads, p: Option<&Part>) -> Result<Option<Stamp>, ScanError> {
        p.map(|p| {
            last_header(heads, p, self.frame_size, part_word(self.format)).map(|h| Stamp::of(&h))
        })
        .transpose()
    }

    /// The first frame of the first part and the last frame of the last part.
    pub fn ends(&self) -> Result<(Option<Stamp>, Option<Stamp>), ScanError> {
        let mut heads = Heads::default();
        Ok((
            self.first_stamp(&mut heads, self.parts.first())?,
            self.last_stamp(&mut heads, self.parts.last())?,
        ))
    }

    /// The missing parts as runs, with the frames on either side.
    pub fn gaps(&self) -> Result<Vec<PartGap>, ScanError> {
        let what = part_word(self.format);
        let mut heads = Heads::default();
        let mut gaps = Vec::new();
        let mut i = 0;
        while i < self.missing.len() {
            let mut j = i;
            while j + 1 < self.missing.len() && self.missing[j + 1] == self.missing[j] + 1 {
                j += 1;
            }
            let (first, last) = (self.missing[i], self.missing[j]);
            let prev = self.parts.iter().rev().find(|p| p.number < first);
            let next = self.parts.iter().find(|p| p.number > last);
            let after = self.last_stamp(&mut heads, prev)?;
            let before = self.first_stamp(&mut heads, next)?;
            let numbers = if first == last {
                format!("{what} {first}")
            } else {
                format!("{what}s {first}-{last}")
            };
            let description = match (&after, &before) {
                (Some(a), Some(b)) => format!(
                    "{numbers} missing: no frames after {} until {}",
                    a.describe(),
                    b.describe()
                ),
                (None, Some(b)) => format!(
                    "{numbers} missing: no frames before {} (the start of the scan)",
                    b.describe()
                ),
                _ => format!("{numbers} missing"),
            };
            gaps.push(PartGap {
                first,
                last,
                after,
                before,
                description,
            });
            i = j + 1;
        }
        Ok(gaps)
    }

    /// An error naming every missing part and the time it leaves out, if any is missing.
    pub fn require_complete(&self) -> Result<(), ScanError> {
        if self.missing.is_empty() {
            return Ok(());
        }
        let gaps = self.gaps()?;
        let what = part_word(self.format);
        let message = format!(
            "scan {} lacks {what}(s) {} of 0-{}: {}; look for them on more disks (disks=/--disk: \
             every disk the scan was recorded on), or take what exists with `vdifrec gather \
             --allow-gaps` (`vdifrec check` reports the frames lost)",
            self.label(),
            runs(&self.missing),
            // The scan's last part: the last found, or one missing after it (a summary says
            // how many were written).
            self.parts
                .iter()
                .map(|p| p.number)
                .chain(self.missing.iter().copied())
                .max()
                .unwrap_or(0),
            gaps.iter()
                .map(|g| g.description.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        );
        Err(ScanError::Gaps {
            message,
            missing: self.missing.clone(),
        })
    }

    /// Maps every part, in number order (missing parts are simply absent: check
    /// `require_complete` first where a gap must not pass unnoticed).
    pub fn map(&self) -> Result<FrameStore, ScanError> {
        let mut store = FrameStore::new(self.frame_size.max(1));
        let mut maps: HashMap<&Path, usize> = HashMap::new();
        for p in &self.parts {
            let m = match maps.get(p.path.as_path()) {
                Some(&m) => m,
                None => {
                    let file = File::open(&p.path).map_err(ScanError::io(&p.path))?;
                    // SAFETY: read-only; a file truncated by another process while mapped
                    // would fault, the documented risk of reading by mmap.
                    let map = unsafe { Mmap::map(&file) }.map_err(ScanError::io(&p.path))?;
                    let m = store.add_map(&p.path, map);
                    maps.insert(&p.path, m);
                    m
                }
            };
            store.add_part(
                m,
                p.offset as usize,
                (p.bytes / self.frame_size as u64) as usize,
            );
        }
        Ok(store)
    }

    /// The scan's frames as one byte stream, part after part (a gap is simply skipped).
    pub fn reader(&self) -> PartsReader {
        PartsReader {
            parts: self.parts.clone(),
            next: 0,
            current: None,
        }
    }

    /// What `vdifrec scans` lists.
    pub fn summary(&self) -> Result<ScanSummary, ScanError> {
        let (first, last) = self.ends()?;
        Ok(ScanSummary {
            name: self.name.clone(),
            format: self.format,
            disks: self.disks.iter().map(|d| d.display().to_string()).collect(),
            bytes: self.bytes(),
            chunks: self.parts.len(),
            missing: self.missing.clone(),
            torn_bytes: self.torn_bytes(),
            torn: self.torn.clone(),
            frame_size: self.frame_size,
            first,
            last,
            closed: self.closed,
            error: None,
        })
    }
}

/// The scan's frame size: that of the first part, in number order, holding a whole frame by
/// its own header (a part torn before its first frame ended may come first). None: no part
/// does.
fn first_frame_size(heads: &mut Heads, found: &[Found]) -> Result<Option<usize>, ScanError> {
    for f in found {
        let Ok(h) = heads.header(&f.part.path, f.part.offset)? else {
            continue;
        };
        let fs = h.frame_size();
        if fs > h.header_size() && fs as u64 <= f.part.bytes {
            return Ok(Some(fs));
        }
    }
    Ok(None)
}

fn part_header(heads: &mut Heads, p: &Part, what: &'static str) -> Result<Header, ScanError> {
    heads
        .header(&p.path, p.offset)?
        .map_err(|source| ScanError::NotVdif {
            path: p.path.clone(),
            what,
            number: p.number,
            offset: p.offset,
            source,
        })
}

fn last_header(
    heads: &mut Heads,
    p: &Part,
    frame_size: usize,
    what: &'static str,
) -> Result<Header, ScanError> {
    let offset = p.offset + p.bytes - frame_size as u64;
    heads
        .header(&p.path, offset)?
        .map_err(|source| ScanError::NotVdif {
            path: p.path.clone(),
            what,
            number: p.number,
            offset,
            source,
        })
}

/// Opens scan `name` for reading samples, refusing one with a gap (the error names the
/// missing parts, the time they leave out and what to do); read to the last whole frame of
/// each part, with the torn pieces left out.
pub fn open_scan(
    name: &str,
    disks: &[PathBuf],
    format: Option<Format>,
    sample_rate: Option<f64>,
) -> Result<(VdifFile, Vec<TornPiece>), ScanError> {
    let (scan, frames) = scan_frames(name, disks, format)?;
    let file = VdifFile::from_frames(PathBuf::from(scan.label()), frames, sample_rate)?;
    Ok((file, scan.torn))
}

/// Scan `name`'s whole frames in stream order, mapped, as `open_scan` reads them: a scan with
/// a gap, or with no whole frame, is refused (the error says why and what to do).
pub fn scan_frames(
    name: &str,
    disks: &[PathBuf],
    format: Option<Format>,
) -> Result<(ScanLayout, FrameStore), ScanError> {
    let scan = ScanLayout::locate(name, disks, format)?;
    scan.require_complete()?;
    if scan.bytes() == 0 {
        return Err(ScanError::NoWholeFrame {
            label: scan.label(),
            torn: summary_line(&scan.torn, part_word(scan.format)),
        });
    }
    let frames = scan.map()?;
    Ok((scan, frames))
}

/// Every scan on `disks`, by name then format. A scan that cannot be read as it is is listed
/// with its `error`; only a disk that cannot be read fails the listing.
pub fn find_scans(disks: &[PathBuf]) -> Result<Vec<ScanSummary>, ScanError> {
    find_scans_matching(disks, None, None, false)
}

/// `find_scans` of the scans whose names match the shell-style `pattern` (`r1*`, `*_ds?`,
/// `[ab]*`), in `format` where given: each disk is read once, side by side, and only the matching scans' files are
/// opened. With `progress`, a listing that takes more than a second says how far it is on
/// standard error when that is a terminal.
pub fn find_scans_matching(
    disks: &[PathBuf],
    pattern: Option<&str>,
    format: Option<Format>,
    progress: bool,
) -> Result<Vec<ScanSummary>, ScanError> {
    let disks = distinct_disks(disks)?;
    let pattern = compile_pattern(pattern)?;
    let meter = Progress::new(progress);
    let mut found = listed(&disks, &meter)?;
    found.scans.retain(|(name, f)| {
        pattern.as_ref().is_none_or(|p| p.matches(name)) && format.is_none_or(|w| w == *f)
    });
    Ok(summarise_all(&found, &meter))
}

/// A page of the names on a set of disks (`scan_names`).
#[derive(Clone, Debug, Serialize)]
pub struct NamePage {
    /// Names matching, in all.
    pub total: usize,
    pub offset: usize,
    pub names: Vec<String>,
}

/// The names at the top of `disks` as the catalogue holds them (`catalogue::names`), those
/// matching the shell-style `pattern`, `limit` of them from the `offset`-th: for pages and
/// commands that go through a season of scans a page at a time, and for `scan_set=` with a
/// pattern. No disk is walked.
pub fn scan_names(
    disks: &[PathBuf],
    pattern: Option<&str>,
    offset: usize,
    limit: Option<usize>,
) -> Result<NamePage, ScanError> {
    let disks = distinct_disks(disks)?;
    let pattern = compile_pattern(pattern)?;
    let mut names = catalogue::names(&disks).map_err(disk_error)?;
    if let Some(p) = &pattern {
        names.retain(|n| p.matches(n));
    }
    let total = names.len();
    Ok(NamePage {
        total,
        offset,
        names: names
            .into_iter()
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .collect(),
    })
}

fn compile_pattern(pattern: Option<&str>) -> Result<Option<glob::Pattern>, ScanError> {
    pattern
        .map(|p| {
            glob::Pattern::new(p).map_err(|e| ScanError::Pattern {
                pattern: p.to_string(),
                reason: e.msg.to_string(),
            })
        })
        .transpose()
}

/// The scans on `disks` that were never closed (`ScanSummary::closed`), newest first, listed
/// as `find_scans` lists them; only those are read, and only the newest `most` of them (the
/// names of the others come second), so that disks of many scans are looked at in about the
/// time of a directory listing.
pub fn find_unclosed_scans(
    disks: &[PathBuf],
    most: usize,
) -> Result<(Vec<ScanSummary>, Vec<String>), ScanError> {
    let disks = distinct_disks(disks)?;
    let meter = Progress::new(false);
    let mut found = listed(&disks, &meter)?;
    let mut unclosed: Vec<(std::time::SystemTime, String, Format)> = found
        .scans
        .iter()
        .filter_map(|(name, format)| {
            let held = found.held(name);
            (!is_closed(&held, name, *format))
                .then(|| (last_modified(&held, name, *format), name.clone(), *format))
        })
        .collect();
    unclosed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let rest = unclosed.split_off(most.min(unclosed.len()));
    found.scans = unclosed.into_iter().map(|(_, n, f)| (n, f)).collect();
    Ok((
        summarise_all(&found, &meter),
        rest.into_iter().map(|(_, name, _)| name).collect(),
    ))
}

/// What a listing read of the disks, and the scans it found there (by name then format).
struct Listing {
    disks: Vec<catalogue::DiskListing>,
    scans: Vec<(String, Format)>,
}

impl Listing {
    /// What the disks hold of scan `name`: only the disks that hold something of it.
    fn held(&self, name: &str) -> Vec<Holding> {
        self.disks
            .iter()
            .map(|l| l.holding(name))
            .filter(|h| !h.is_empty())
            .collect()
    }
}

/// Every scan on `disks` (each disk read once, side by side), by name then format.
fn listed(disks: &[PathBuf], meter: &Progress) -> Result<Listing, ScanError> {
    let listings = std::thread::scope(|s| {
        let walk = s.spawn(|| catalogue::list(disks));
        while !walk.is_finished() {
            meter.stage(&format!("reading {} disks", disks.len()));
            std::thread::sleep(Duration::from_millis(5));
        }
        walk.join().expect("the disks' reader does not panic")
    })
    .map_err(disk_error)?;
    let names: BTreeSet<(String, &'static str)> = listings
        .iter()
        .flat_map(|l| l.scans().map(|(n, f)| (n, f.name())))
        .collect();
    Ok(Listing {
        disks: listings,
        scans: names
            .into_iter()
            .map(|(name, format)| (name, Format::parse(format).expect("a format name")))
            .collect(),
    })
}

/// When scan `name` last changed on any disk (its file, or its vbs directory).
fn last_modified(held: &[Holding], name: &str, format: Format) -> std::time::SystemTime {
    held.iter()
        .filter_map(|h| match format {
            Format::File => h.file_parts.first().map(|(_, p)| p.clone()),
            Format::Vbs => h.vbs.as_ref().map(|_| layout::vbs_dir(&h.disk, name)),
            Format::Mk6 => h.mk6.clone(),
        })
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Every scan of `found` summarised, in order, several read at once (a listing spends its
/// time waiting on the disks, one scan's files after another's).
fn summarise_all(found: &Listing, meter: &Progress) -> Vec<ScanSummary> {
    let total = found.scans.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8)
        .min(total.max(1));
    let mut out: Vec<(usize, ScanSummary)> = std::thread::scope(|s| {
        let jobs: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((name, format)) = found.scans.get(i) else {
                            break;
                        };
                        mine.push((i, summarise(name, *format, &found.held(name))));
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    mine
                })
            })
            .collect();
        while !jobs.iter().all(|j| j.is_finished()) {
            meter.count("read", done.load(Ordering::Relaxed), total, "scans");
            std::thread::sleep(Duration::from_millis(5));
        }
        jobs.into_iter()
            .flat_map(|j| j.join().expect("a scan reader does not panic"))
            .collect()
    });
    meter.finish();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, s)| s).collect()
}

/// One scan as `find_scans` lists it: read, or what was found and why it cannot be read.
fn summarise(name: &str, format: Format, held: &[Holding]) -> ScanSummary {
    let summary = ScanLayout::locate_in(name, held, Some(format)).and_then(|s| s.summary());
    summary.unwrap_or_else(|e| ScanSummary {
        name: name.to_string(),
        format,
        disks: held
            .iter()
            .filter(|h| h.formats().contains(&format))
            .map(|h| h.disk.display().to_string())
            .collect(),
        bytes: 0,
        chunks: 0,
        missing: Vec::new(),
        torn_bytes: 0,
        torn: Vec::new(),
        frame_size: 0,
        first: None,
        last: None,
        closed: is_closed(held, name, format),
        error: Some(e.to_string()),
    })
}

/// How far a long listing is, on a terminal: nothing in the first second, then a line that is
/// rewritten in place, cleared at the end.
struct Progress {
    on: bool,
    start: Instant,
    shown: std::sync::atomic::AtomicBool,
    last: std::sync::Mutex<Option<Instant>>,
}

impl Progress {
    fn new(wanted: bool) -> Progress {
        Progress {
            on: wanted && std::io::stderr().is_terminal(),
            start: Instant::now(),
            shown: std::sync::atomic::AtomicBool::new(false),
            last: std::sync::Mutex::new(None),
        }
    }

    fn show(&self, text: &str) {
        if !self.on || self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        // Five times a second at most: a terminal has no use for more.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < Duration::from_millis(200)) {
            return;
        }
        *last = Some(Instant::now());
        self.shown.store(true, Ordering::Relaxed);
        eprint!("\r\x1b[Kscans: {text}");
    }

    fn stage(&self, text: &str) {
        self.show(&format!("{text}…"));
    }

    fn count(&self, verb: &str, done: usize, total: usize, what: &str) {
        self.show(&format!("{verb} {done} of {total} {what}"));
    }

    fn finish(&self) {
        if self.shown.load(Ordering::Relaxed) {
            eprint!("\r\x1b[K");
        }
    }
}

/// The bytes of a scan's parts one after another, read (not mapped): for one pass at disk
/// speed (check, gather).
pub struct PartsReader {
    parts: Vec<Part>,
    next: usize,
    /// The part being read and the bytes of it left.
    current: Option<(File, u64, PathBuf)>,
}

impl PartsReader {
    /// The part the next byte comes from.
    pub fn path(&self) -> Option<&Path> {
        self.current.as_ref().map(|(_, _, p)| p.as_path())
    }
}

impl Read for PartsReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some((file, left, path)) = self.current.as_mut() {
                if *left > 0 {
                    let want = buf.len().min(*left as usize);
                    let n = file.read(&mut buf[..want]).map_err(|e| in_file(path, e))?;
                    if n == 0 {
                        return Err(in_file(
                            path,
                            std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                "file shorter than when the scan was listed",
                            ),
                        ));
                    }
                    *left -= n as u64;
                    return Ok(n);
                }
            }
            let Some(p) = self.parts.get(self.next) else {
                return Ok(0);
            };
            self.next += 1;
            let mut file = File::open(&p.path).map_err(|e| in_file(&p.path, e))?;
            file.seek(SeekFrom::Start(p.offset))
                .map_err(|e| in_file(&p.path, e))?;
            self.current = Some((file, p.bytes, p.path.clone()));
        }
    }
}

fn in_file(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sources::generate::{write_frames, SignalSpec};
    use std::io::Write;

    pub(crate) const FS: usize = 32 + 1024;

    /// 200 frame sets of 2 threads (400 frames), 50 frame sets a second.
    fn stream() -> Vec<u8> {
        stream_of(200)
    }

    /// `frame_sets` frame sets of 2 threads of FS-byte frames, 50 a second from second 1000 of
    /// epoch 53: the scans these tests and `vdif::repair`'s lay out.
    pub(crate) fn stream_of(frame_sets: u64) -> Vec<u8> {
        let spec = SignalSpec {
            frame_size: FS,
            fps: 50,
            nchan: 2,
            bits: 2,
            threads: 2,
            ref_epoch: Some(53),
            start_second: Some(1000),
            ..Default::default()
        };
        let mut bytes = Vec::new();
        write_frames(&spec, frame_sets, &mut bytes, "memory").unwrap();
        bytes
    }

    struct Disks {
        root: PathBuf,
        disks: Vec<PathBuf>,
    }

    impl Disks {
        fn new(tag: &str) -> Disks {
            let root = std::env::temp_dir().join(format!(
                "vdifrec-scan-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&root);
            let disks: Vec<PathBuf> = (0..3).map(|i| root.join(format!("m{i}"))).collect();
            for d in &disks {
                std::fs::create_dir_all(d).unwrap();
            }
            Disks { root, disks }
        }
    }

    impl Drop for Disks {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// Chunk sizes in frames, varying, summing to 400.
    const CHUNKS: [usize; 6] = [37, 100, 64, 99, 50, 50];

    fn write_vbs(d: &Disks, data: &[u8]) {
        let mut at = 0;
        for (n, frames) in CHUNKS.iter().enumerate() {
            let disk = &d.disks[(n * 2) % 3];
            let p = layout::vbs_chunk_path(disk, "s1", n as u64);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &data[at..at + frames * FS]).unwrap();
            at += frames * FS;
        }
    }

    /// Blocks of the sizes in CHUNKS, block n on disk (n + 1) % 3 ... in a shuffled order.
    fn write_mk6(d: &Disks, data: &[u8]) -> Vec<PathBuf> {
        let disk_of = [1, 0, 2, 0, 1, 0];
        let mut files: Vec<Vec<u8>> = vec![Vec::new(); 3];
        for f in files.iter_mut() {
            f.extend(Mk6FileHeader::vdif((8 + 100 * FS) as u32, FS as u32).to_bytes());
        }
        let mut at = 0;
        for (n, frames) in CHUNKS.iter().enumerate() {
            let f = &mut files[disk_of[n]];
            let h = Mk6BlockHeader {
                blocknum: n as u32,
                wb_size: (8 + frames * FS) as u32,
            };
            f.extend(h.to_bytes());
            f.extend(&data[at..at + frames * FS]);
            at += frames * FS;
        }
        let mut paths = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let p = layout::mk6_path(&d.disks[i], "s1");
            std::fs::write(&p, f).unwrap();
            paths.push(p);
        }
        paths
    }

    fn gathered(s: &ScanLayout) -> Vec<u8> {
        let mut out = Vec::new();
        s.reader().read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn vbs_chunks_read_back_in_order() {
        let d = Disks::new("vbs");
        let data = stream();
        write_vbs(&d, &data);
        // Not the scan's: a summary, a stray file, a chunk number of 7 digits.
        let dir = layout::vbs_dir(&d.disks[0], "s1");
        std::fs::write(layout::summary_path(&d.disks[0], "s1", Format::Vbs), "{}").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        std::fs::write(dir.join("s1.0000001"), "x").unwrap();
        // A disk named twice counts once.
        let mut twice = d.disks.clone();
        twice.push(d.root.join("m1/../m0"));
        let s = ScanLayout::locate("s1", &twice, None).unwrap();
        assert_eq!(s.disks, d.disks);
        assert_eq!(s.format, Format::Vbs);
        assert_eq!(s.parts.len(), 6);
        assert_eq!(s.missing, Vec::<u64>::new());
        assert_eq!(s.bytes(), data.len() as u64);
        assert_eq!(gathered(&s), data);
        let store = s.map().unwrap();
        assert_eq!(store.n_frames(), 400);
        assert_eq!(store.frame(137), &data[137 * FS..138 * FS]);
        let (first, last) = s.ends().unwrap();
        let (first, last) = (first.unwrap(), last.unwrap());
        assert_eq!((first.seconds, first.frame, first.thread), (1000, 0, 0));
        assert_eq!((last.seconds, last.frame, last.thread), (1003, 49, 1));
        let (f, torn) = open_scan("s1", &d.disks, None, None).unwrap();
        assert!(torn.is_empty());
        assert_eq!(f.info().n_frames, 400);
        assert_eq!(f.info().thread_ids, vec![0, 1]);
        assert_eq!(f.info().frame_rate, 50.0);
    }

    #[test]
    fn mk6_blocks_read_back_in_order() {
        let d = Disks::new("mk6");
        let data = stream();
        write_mk6(&d, &data);
        let s = ScanLayout::locate("s1", &d.disks, None).unwrap();
        assert_eq!(s.format, Format::Mk6);
        let numbers: Vec<u64> = s.parts.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5]);
        assert_eq!(s.parts[1].offset, 20 + 8);
        assert_eq!(gathered(&s), data);
        let listed = find_scans(&d.disks).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].chunks, 6);
        assert_eq!(listed[0].bytes, data.len() as u64);
        assert_eq!(listed[0].error, None);
    }

    #[test]
    fn a_missing_chunk_is_a_gap_with_its_times() {
        let d = Disks::new("gap");
        let data = stream();
        write_vbs(&d, &data);
        // Chunk 2 holds frames 137..201: after frame 136 (second 1001, set 18, thread 0).
        std::fs::remove_file(layout::vbs_chunk_path(&d.disks[1], "s1", 2)).unwrap();
        let s = ScanLayout::locate("s1", &d.disks, None).unwrap();
        assert_eq!(s.missing, vec![2]);
        let gaps = s.gaps().unwrap();
        assert_eq!(gaps.len(), 1);
        let (a, b) = (
            gaps[0].after.clone().unwrap(),
            gaps[0].before.clone().unwrap(),
        );
        assert_eq!((a.seconds, a.frame, a.thread), (1001, 18, 0));
        assert_eq!((b.seconds, b.frame, b.thread), (1002, 0, 1));
        let Err(e) = open_scan("s1", &d.disks, None, None) else {
            panic!("a scan with a gap opened");
        };
        let msg = e.to_string();
        assert!(matches!(e, ScanError::Gaps { ref missing, .. } if missing == &[2]));
        assert!(msg.contains("chunk 2 missing"), "{msg}");
        assert!(msg.contains("second 1001 frame 18"), "{msg}");
        assert!(msg.contains("more disks"), "{msg}");
        let mut rest = data[..137 * FS].to_vec();
        rest.extend(&data[201 * FS..]);
        assert_eq!(gathered(&s), rest);
    }

    /// The stamp of frame `k` of `stream()`: (second, frame, thread).
    fn at(k: u64) -> (u32, u32, u32) {
        (
            1000 + (k / 2 / 50) as u32,
            (k / 2 % 50) as u32,
            (k % 2) as u32,
        )
    }

    fn stamp(s: &Option<Stamp>) -> Option<(u32, u32, u32)> {
        s.as_ref().map(|s| (s.seconds, s.frame, s.thread))
    }

    #[test]
    fn torn_vbs_chunks_are_read_to_their_last_whole_frame() {
        let d = Disks::new("tornvbs");
        let data = stream();
        write_vbs(&d, &data);
        // Three writers stopped in chunks 3, 4 and 5 (frames 201.., 300.., 350..): chunk 3
        // with 60 whole frames and 100 bytes, chunk 4 created and empty, chunk 5 with 7 and 1.
        let chunk = |n: u64| layout::vbs_chunk_path(&d.disks[(n as usize * 2) % 3], "s1", n);
        std::fs::write(chunk(3), &data[201 * FS..261 * FS + 100]).unwrap();
        std::fs::write(chunk(4), b"").unwrap();
        std::fs::write(chunk(5), &data[350 * FS..357 * FS + 1]).unwrap();
        let s = ScanLayout::locate("s1", &d.disks, None).unwrap();
        let numbers: Vec<u64> = s.parts.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 5]);
        assert_eq!(s.missing, Vec::<u64>::new());
        let torn: Vec<_> = s
            .torn
            .iter()
            .map(|t| (t.part, t.kind, t.offset, t.bytes, t.frames))
            .collect();
        assert_eq!(
            torn,
            [
                (Some(3), TornKind::PartialFrame, 60 * FS as u64, 100, 60),
                (Some(4), TornKind::Empty, 0, 0, 0),
                (Some(5), TornKind::PartialFrame, 7 * FS as u64, 1, 7),
            ]
        );
        assert_eq!(s.torn_bytes(), 101);
        // The time each leaves out: from the last whole frame before it to the next part's.
        assert_eq!(stamp(&s.torn[0].after), Some(at(260)));
        assert_eq!(stamp(&s.torn[0].before), Some(at(350)));
        assert_eq!(stamp(&s.torn[1].after), Some(at(260)));
        assert_eq!(stamp(&s.torn[2].after), Some(at(356)));
        assert_eq!(s.torn[2].before, None);
        let text = &s.torn[0].description;
        assert!(
            text.starts_with(&format!(
                "chunk 3 of {}: 100 bytes from byte 63,360 are part of a frame, after 60 whole \
                 frames",
                chunk(3).display()
            )),
            "{text}"
        );
        assert!(
            text.contains("no frames after VDIF epoch 53 second 1002 frame 30 thread 0 (")
                && text.contains("until VDIF epoch 53 second 1003 frame 25 thread 0 ("),
            "{text}"
        );
        assert!(s.torn[1]
            .description
            .contains("is empty: created, nothing written"));
        assert!(s.torn[2]
            .description
            .contains("the scan ends with VDIF epoch 53 second 1003 frame 28 thread 0"));
        let mut want = data[..261 * FS].to_vec();
        want.extend(&data[350 * FS..357 * FS]);
        assert_eq!(gathered(&s), want);
        assert_eq!(s.map().unwrap().n_frames(), 268);
        let (f, torn) = open_scan("s1", &d.disks, None, None).unwrap();
        assert_eq!((f.info().n_frames, torn.len()), (268, 3));
        let listed = &find_scans(&d.disks).unwrap()[0];
        assert_eq!(
            (listed.chunks, listed.bytes, listed.torn_bytes),
            (5, 268 * FS as u64, 101)
        );
        assert_eq!(stamp(&listed.last), Some(at(356)));
        assert_eq!(listed.error, None);
    }

    #[test]
    fn torn_files_and_mark6_blocks_are_read_to_their_last_whole_frame() {
        let d = Disks::new("tornfile");
        let data = stream();
        std::fs::write(layout::file_path(&d.disks[1], "f"), &data[..100 * FS + 7]).unwrap();
        let s = ScanLayout::locate("f", &d.disks, None).unwrap();
        assert_eq!((s.bytes(), s.torn_bytes()), (100 * FS as u64, 7));
        assert_eq!(s.torn[0].kind, TornKind::PartialFrame);
        assert_eq!(s.torn[0].part, Some(0));

        let d = Disks::new("tornmk6");
        let paths = write_mk6(&d, &data);
        // Disk 2 holds block 2 alone (frames 137..201): its last 10 bytes cut. Disk 1 (blocks
        // 0 and 4) ends with 3 bytes of a block header.
        let len = std::fs::metadata(&paths[2]).unwrap().len();
        std::fs::File::options()
            .write(true)
            .open(&paths[2])
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let end1 = std::fs::metadata(&paths[1]).unwrap().len();
        std::fs::File::options()
            .append(true)
            .open(&paths[1])
            .unwrap()
            .write_all(&[5, 0, 0])
            .unwrap();
        let s = ScanLayout::locate("s1", &d.disks, None).unwrap();
        let torn: Vec<_> = s
            .torn
            .iter()
            .map(|t| (t.path.clone(), t.part, t.kind, t.offset, t.bytes, t.frames))
            .collect();
        assert_eq!(
            torn,
            [
                (
                    paths[2].clone(),
                    Some(2),
                    TornKind::BlockPastEnd,
                    (20 + 8 + 63 * FS) as u64,
                    FS as u64 - 10,
                    63
                ),
                (
                    paths[1].clone(),
                    None,
                    TornKind::PartialBlockHeader,
                    end1,
                    3,
                    0
                ),
            ]
        );
        assert!(s.torn[0]
            .description
            .contains("its header claims 67,592 bytes"));
        assert_eq!(stamp(&s.torn[0].before), Some(at(201)));
        let mut want = data[..200 * FS].to_vec();
        want.extend(&data[201 * FS..]);
        assert_eq!(gathered(&s), want);
        // Cut to 5 bytes of its frames, block 2 holds no whole frame: torn from its header on,
        // present (no gap), nothing read.
        std::fs::File::options()
            .write(true)
            .open(&paths[2])
            .unwrap()
            .set_len(20 + 8 + 5)
            .unwrap();
        let s = ScanLayout::locate("s1", &d.disks, None).unwrap();
        assert_eq!(
            (s.torn[0].offset, s.torn[0].bytes, s.torn[0].frames),
            (20, 13, 0)
        );
        assert_eq!(s.missing, Vec::<u64>::new());
        assert_eq!(s.parts.len(), 5);
        // An empty Mark6 file beside them (created, nothing written) is torn, not broken.
        let d3 = d.root.join("m3");
        std::fs::create_dir_all(&d3).unwrap();
        std::fs::write(layout::mk6_path(&d3, "s1"), b"").unwrap();
        let mut four = d.disks.clone();
        four.push(d3.clone());
        let s = ScanLayout::locate("s1", &four, Some(Format::Mk6)).unwrap();
        assert_eq!(s.torn.last().unwrap().kind, TornKind::Empty);
        assert!(s.disks.contains(&d3));
    }

    #[test]
    fn broken_layouts_are_named_errors() {
        let d = Disks::new("bad");
        let data = stream();
        write_vbs(&d, &data);
        // Frames of another size in chunk 4: a broken chunk, whatever its end.
        let other = SignalSpec {
            frame_size: 32 + 512,
            fps: 100,
            nchan: 2,
            bits: 2,
            ..Default::default()
        };
        let mut small = Vec::new();
        write_frames(&other, 10, &mut small, "memory").unwrap();
        let p = layout::vbs_chunk_path(&d.disks[2], "s1", 4);
        std::fs::write(&p, &small).unwrap();
        let e = ScanLayout::locate("s1", &d.disks, None).unwrap_err();
        assert!(
            matches!(
                e,
                ScanError::FrameSize {
                    number: 4,
                    found: 544,
                    ..
                }
            ),
            "{e}"
        );
        // The same chunk on two disks.
        std::fs::write(&p, &data[..FS]).unwrap();
        let twin = layout::vbs_chunk_path(&d.disks[0], "s1", 4);
        std::fs::write(&twin, &data[..FS]).unwrap();
        let e = ScanLayout::locate("s1", &d.disks, None).unwrap_err();
        assert!(matches!(e, ScanError::Duplicate { number: 4, .. }), "{e}");

        let d = Disks::new("badmk6");
        let paths = write_mk6(&d, &data);
        // A block inside its file (block 1, first on disk 0) that is not whole frames: no
        // writer stopped there, the file is broken.
        let mut bytes = std::fs::read(&paths[0]).unwrap();
        let payload = 100 * FS;
        bytes.drain(20 + 8 + payload - 10..20 + 8 + payload);
        bytes[24..28].copy_from_slice(&((8 + payload - 10) as i32).to_le_bytes());
        std::fs::write(&paths[0], &bytes).unwrap();
        let e = ScanLayout::locate("s1", &d.disks, None).unwrap_err();
        assert!(
            matches!(e, ScanError::NotWholeFrames { number: 1, .. }),
            "{e}"
        );
        assert!(e.to_string().contains(&paths[0].display().to_string()));
        // A bad sync word.
        let mut bytes = std::fs::read(&paths[0]).unwrap();
        bytes[0] = 0;
        std::fs::write(&paths[0], bytes).unwrap();
        let e = ScanLayout::locate("s1", &d.disks, Some(Format::Mk6)).unwrap_err();
        assert!(
            matches!(
                e,
                ScanError::Mk6Header {
                    source: LayoutError::Sync(_),
                    ..
                }
            ),
            "{e}"
        );
        // Listing names the broken scan rather than failing.
        let listed = find_scans(&d.disks).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].error.as_deref().unwrap().contains("sync word"));
        // Nothing by that name.
        let e = ScanLayout::locate("s2", &d.disks, None).unwrap_err();
        assert!(matches!(e, ScanError::NotFound { .. }), "{e}");
        assert_eq!(runs(&[1, 3, 4, 5, 9]), "1, 3-5, 9");
    }
}
