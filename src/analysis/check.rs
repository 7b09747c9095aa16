//! `vdifrec check`: one pass over a VDIF file, in constant memory, at disk speed.
//!
//! It does the work of DiFX's checkVDIF, printVDIFgaps and countVDIFPackets at once: frames,
//! threads, per-thread per-second counts, gaps, out-of-order and duplicate frames,
//! invalid-flagged frames, and corrupt stretches (a bad header or size mid-file: the scan
//! resynchronises on the next header that is followed by another one, and counts the bytes
//! it skipped). The counting is the live recorder's own (`accounting`).

use crate::options::ArgError;
use crate::record::accounting::{
    Accounting, Fate, Gap, GapPolicy, SecondRow, ThreadTotals, Totals,
};
use crate::record::classify::StreamFormat;
use crate::vdif::header::Header;
use crate::vdif::header::{check_fps, frame_size_from};
use crate::vdif::layout::Format;
use crate::vdif::scan::{part_word, PartGap, ScanError, ScanLayout};
use crate::vdif::time::VdifTime;
use crate::vdif::torn::TornPiece;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Bytes read at a time.
const CHUNK: usize = 8 << 20;
/// Corrupt stretches listed in the report (all are counted).
const MAX_LISTED: usize = 1000;

#[derive(Debug, Error)]
pub enum CheckError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no VDIF frame found in the first {scanned} bytes")]
    NoFrame { path: PathBuf, scanned: usize },
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    #[error(transparent)]
    Scan(#[from] ScanError),
}

/// What a check may be told, as a user gives it (`vdifrec.check`, `vdifrec check`); the
/// defaults (learn both from the file) are written here once.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckOptions {
    /// Frames per second per thread, if known (else learned from the frame numbers).
    pub fps: Option<i64>,
    /// Frame size, if known (else taken from the first header).
    pub frame_size: Option<i64>,
}

impl CheckOptions {
    /// The rate and frame size, checked by the format's own rules.
    fn checked(&self) -> Result<(Option<u32>, Option<usize>), ArgError> {
        let fps = self
            .fps
            .map(|f| check_fps(f).map_err(|why| ArgError::new("fps", why)))
            .transpose()?;
        let frame_size = match self.frame_size {
            Some(fs) => Some(frame_size_from(fs).map_err(|why| ArgError::new("frame_size", why))?),
            None => None,
        };
        Ok((fps, frame_size))
    }
}

/// A stretch of bytes that is not a frame of the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Corrupt {
    /// Byte offset in the file where the stretch starts.
    pub offset: u64,
    pub bytes: u64,
    /// Why the first frame of the stretch was rejected.
    pub reason: &'static str,
}

/// Odd but readable header contents, counted over the file.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HeaderWarnings {
    /// EDV 0 frames whose unused words 4-7 are not zero.
    pub edv0_nonzero_words: u64,
    /// Frames whose station id differs from the first frame's.
    pub station_changes: u64,
    /// What is wrong with the first frame's header, if anything (the scan goes on regardless).
    pub first_header_problem: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub path: String,
    pub file_bytes: u64,
    pub format: StreamFormat,
    pub station_id: u32,
    /// The station as operators write it: the two-character code where printable (`Kv`).
    pub station: String,
    /// Frames of the stream found (good frames).
    pub frames: u64,
    pub threads: Vec<u32>,
    pub frames_per_second: u32,
    /// "given" or "learned" (highest frame number + 1).
    pub frames_per_second_source: &'static str,
    pub first_frame_time: Option<String>,
    pub last_frame_time: Option<String>,
    pub totals: Totals,
    pub per_thread: Vec<ThreadTotals>,
    pub seconds: Vec<SecondRow>,
    pub gaps: Vec<Gap>,
    pub gaps_not_listed: u64,
    pub corrupt: Vec<Corrupt>,
    pub corrupt_bytes: u64,
    pub corrupt_stretches: u64,
    /// Bytes after the last whole frame.
    pub trailing_bytes: u64,
    pub header_warnings: HeaderWarnings,
    /// Nothing lost, out of order, duplicated, invalid, corrupt or odd (and, for a scan, no
    /// part missing and nothing torn).
    pub clean: bool,
    /// For a scan: its layout and the parts missing (absent for a file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanNote>,
}

/// What a check of a scan adds: where its parts are and which are missing. Offsets in the
/// report (`corrupt`) count bytes of frames in the scan's stream, parts concatenated.
#[derive(Clone, Debug, Serialize)]
pub struct ScanNote {
    pub name: String,
    pub format: Format,
    pub disks: Vec<String>,
    /// Parts found (vbs chunks, mk6 blocks).
    pub parts: usize,
    /// What a part is called in this format: "chunk", "block" or "file".
    pub part_word: &'static str,
    pub missing: Vec<u64>,
    /// The missing parts as runs, with the frames on either side.
    pub gaps: Vec<PartGap>,
    /// What a writer stopped mid-write left at files' ends (never read: the check counts the
    /// whole frames before them), and their bytes.
    pub torn: Vec<TornPiece>,
    pub torn_bytes: u64,
}

/// Checks a file.
pub fn check_file(path: impl AsRef<Path>, opts: &CheckOptions) -> Result<CheckReport, CheckError> {
    let path = path.as_ref();
    // Options first: a bad one is reported even when the file is bad too.
    opts.checked()?;
    let io = |source| CheckError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let file_bytes = file.metadata().map_err(io)?.len();
    advise_sequential(&file);
    check_stream(&mut file, path, file_bytes, opts)
}

/// Checks a scan over its parts in order, as one stream: a missing part shows as the frames
/// it held counted lost (between the frames on either side), and is named in `scan`; so is a
/// torn piece, read to its last whole frame (frames never written after it, before the next
/// part, count as lost too). Either leaves the scan not clean.
pub fn check_scan(scan: &ScanLayout, opts: &CheckOptions) -> Result<CheckReport, CheckError> {
    let (fps, _) = opts.checked()?;
    let gaps = scan.gaps()?;
    let label = PathBuf::from(scan.label());
    let mut report = if scan.bytes() == 0 {
        // No whole frame (a recorder killed as it began the scan): a report of nothing, naming
        // what is torn, rather than an error: the scan is there and every tool reads it.
        let format = StreamFormat {
            frame_size: scan.frame_size,
            legacy: false,
            edv: None,
            version: 0,
            nchan: 0,
            bits: 0,
            complex: false,
        };
        let mut empty = Scanner::new(format, fps, None).report(&label, 0, 0, opts);
        empty.clean = false;
        empty
    } else {
        check_stream(&mut scan.reader(), &label, scan.bytes(), opts)?
    };
    report.clean &= gaps.is_empty() && scan.torn.is_empty();
    report.scan = Some(ScanNote {
        name: scan.name.clone(),
        format: scan.format,
        disks: scan.disks.iter().map(|d| d.display().to_string()).collect(),
        parts: scan.parts.len(),
        part_word: part_word(scan.format),
        missing: scan.missing.clone(),
        gaps,
        torn: scan.torn.clone(),
        torn_bytes: scan.torn_bytes(),
    });
    Ok(report)
}

/// Checks the bytes `source` gives (`file_bytes` of them), named `path` in the report.
fn check_stream(
    source: &mut dyn Read,
    path: &Path,
    file_bytes: u64,
    opts: &CheckOptions,
) -> Result<CheckReport, CheckError> {
    let (fps, frame_size) = opts.checked()?;
    let io = |source| CheckError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = source;
    let mut buf = vec![0u8; CHUNK];
    let mut filled = read_some(file, &mut buf, 0).map_err(io)?;

    // The stream's layout: from the first position where a frame is followed by another.
    let (format, start, problem) =
        find_format(&buf[..filled], frame_size).ok_or_else(|| CheckError::NoFrame {
            path: path.to_path_buf(),
            scanned: filled,
        })?;
    let fs = format.frame_size;
    if buf.len() < 2 * fs + 32 {
        buf.resize(2 * fs + 32, 0);
    }
    let mut scan = Scanner::new(format, fps, problem);
    if start > 0 {
        scan.skip(0, start as u64, "no frame at the start of the file");
    }
    let mut pos = start; // position in buf
    let mut base = 0u64; // file offset of buf[0]
    let mut eof = filled < buf.len();
    loop {
        // Keep at least two frames (and a header) ahead in the buffer, or reach the end.
        if !eof && filled - pos < 2 * fs + 32 {
            buf.copy_within(pos..filled, 0);
            base += pos as u64;
            filled -= pos;
            pos = 0;
            let got = read_some(file, &mut buf, filled).map_err(io)?;
            eof = filled + got < buf.len();
            filled += got;
        }
        let rest = &buf[pos..filled];
        if rest.len() < fs {
            break;
        }
        match scan.format.classify(&rest[..fs]) {
            Ok(h) => {
                scan.frame(&h, &rest[..fs]);
                pos += fs;
            }
            Err(kind) => {
                // Resynchronise: the next offset where a frame starts and is followed by
                // another (or by the end of the file).
                let at_end = eof;
                let next = (1..rest.len())
                    .find(|&k| scan.frame_starts_at(&rest[k..], at_end))
                    .unwrap_or(rest.len());
                let skip = if next == rest.len() && !eof {
                    // Nothing here: keep the last frame's worth for the next read.
                    rest.len().saturating_sub(2 * fs + 32).max(1)
                } else {
                    next
                };
                scan.skip(base + pos as u64, skip as u64, kind.name());
                pos += skip;
            }
        }
    }
    let trailing = (filled - pos) as u64;
    scan.close_corrupt();
    scan.acc.finish();
    Ok(scan.report(path, file_bytes, trailing, opts))
}

struct Scanner {
    format: StreamFormat,
    acc: Accounting,
    frames: u64,
    corrupt: Vec<Corrupt>,
    corrupt_bytes: u64,
    corrupt_stretches: u64,
    open_corrupt: Option<Corrupt>,
    warnings: HeaderWarnings,
    station: Option<u32>,
}

impl Scanner {
    fn new(format: StreamFormat, fps: Option<u32>, problem: Option<String>) -> Scanner {
        Scanner {
            format,
            acc: Accounting::new(fps, GapPolicy::CountAsLoss),
            frames: 0,
            corrupt: Vec::new(),
            corrupt_bytes: 0,
            corrupt_stretches: 0,
            open_corrupt: None,
            warnings: HeaderWarnings {
                first_header_problem: problem,
                ..Default::default()
            },
            station: None,
        }
    }

    fn frame(&mut self, h: &Header, bytes: &[u8]) {
        self.close_corrupt();
        self.frames += 1;
        if h.edv() == Some(0) && bytes[16..32].iter().any(|b| *b != 0) {
            self.warnings.edv0_nonzero_words += 1;
        }
        match self.station {
            None => self.station = Some(h.station_id()),
            Some(s) if s != h.station_id() => self.warnings.station_changes += 1,
            _ => {}
        }
        self.acc.frame(h, Fate::Buffered);
    }

    fn frame_starts_at(&self, bytes: &[u8], at_end: bool) -> bool {
        let fs = self.format.frame_size;
        if bytes.len() < fs || self.format.classify(&bytes[..fs]).is_err() {
            return false;
        }
        let after = &bytes[fs..];
        if after.len() >= self.format.header_size() {
            Header::parse_unchecked(after).is_ok_and(|h| self.format.check_header(&h).is_ok())
        } else {
            at_end
        }
    }

    fn skip(&mut self, offset: u64, bytes: u64, reason: &'static str) {
        self.corrupt_bytes += bytes;
        match self.open_corrupt.as_mut() {
            Some(c) if c.offset + c.bytes == offset => c.bytes += bytes,
            _ => {
                self.close_corrupt();
                self.open_corrupt = Some(Corrupt {
                    offset,
                    bytes,
                    reason,
                });
            }
        }
    }

    fn close_corrupt(&mut self) {
        if let Some(c) = self.open_corrupt.take() {
            self.corrupt_stretches += 1;
            if self.corrupt.len() < MAX_LISTED {
                self.corrupt.push(c);
            }
        }
    }

    fn report(
        mut self,
        path: &Path,
        file_bytes: u64,
        trailing: u64,
        opts: &CheckOptions,
    ) -> CheckReport {
        let fps = self.acc.frames_per_second();
        let per_thread = self.acc.thread_totals();
        let time = |p: Option<(i64, u32)>| {
            p.map(|(s, f)| {
                VdifTime {
                    unix_seconds: s,
                    fraction: if fps > 0 { f as f64 / fps as f64 } else { 0.0 },
                }
                .iso()
            })
        };
        let first = per_thread.iter().filter_map(|t| t.first).min();
        let last = per_thread.iter().filter_map(|t| t.last).max();
        let totals = self.acc.totals();
        let (gaps, gaps_not_listed) = {
            let (g, more) = self.acc.gaps();
            (g.to_vec(), more)
        };
        let seconds = self.acc.take_rows();
        let c = &totals.counts;
        let clean = c.lost == 0
            && c.out_of_order == 0
            && c.duplicates == 0
            && c.invalid == 0
            && totals.out_of_window == 0
            && totals.time_jumps == 0
            && self.corrupt_bytes == 0
            && trailing == 0
            && self.warnings == HeaderWarnings::default();
        CheckReport {
            path: path.display().to_string(),
            file_bytes,
            format: self.format,
            station_id: self.station.unwrap_or(0),
            station: crate::vdif::header::station_name_of(self.station.unwrap_or(0)),
            frames: self.frames,
            threads: per_thread.iter().map(|t| t.thread).collect(),
            frames_per_second: fps,
            frames_per_second_source: if opts.fps.is_some() {
                "given"
            } else {
                "learned"
            },
            first_frame_time: time(first),
            last_frame_time: time(last),
            totals,
            per_thread,
            seconds,
            gaps,
            gaps_not_listed,
            corrupt: std::mem::take(&mut self.corrupt),
            corrupt_bytes: self.corrupt_bytes,
            corrupt_stretches: self.corrupt_stretches,
            trailing_bytes: trailing,
            header_warnings: self.warnings,
            clean,
            scan: None,
        }
    }
}

/// Finds the stream's layout: the first offset holding a header whose frame is followed by
/// another header of the same layout (or that exactly fills the data). A header that fails
/// validation is still taken (check reports on broken files); its problem is returned.
fn find_format(
    data: &[u8],
    frame_size: Option<usize>,
) -> Option<(StreamFormat, usize, Option<String>)> {
    for start in 0..data.len().saturating_sub(16) {
        let Ok(h) = Header::parse_unchecked(&data[start..]) else {
            continue;
        };
        let fs = h.frame_size();
        if frame_size.is_some_and(|want| want != fs) || fs <= h.header_size() {
            continue;
        }
        if data.len() < start + fs {
            continue;
        }
        let format = StreamFormat::of(&h);
        if format.check_header(&h).is_err() {
            continue; // an EDV 1/3/4 header without its sync word
        }
        let after = &data[start + fs..];
        let confirmed = if after.len() >= format.header_size() {
            Header::parse_unchecked(after).is_ok_and(|n| format.check_header(&n).is_ok())
        } else {
            after.is_empty()
        };
        if confirmed {
            return Some((format, start, h.validate().err().map(|e| e.to_string())));
        }
    }
    None
}

fn read_some(file: &mut dyn Read, buf: &mut [u8], from: usize) -> std::io::Result<usize> {
    let mut n = 0;
    while from + n < buf.len() {
        match file.read(&mut buf[from + n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn advise_sequential(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a hint on an open descriptor; failure only means no read-ahead tuning.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::generate::{write_frames, SignalSpec};
    use std::io::Write;

    fn spec() -> SignalSpec {
        SignalSpec {
            frame_size: 32 + 1024,
            fps: 50,
            nchan: 2,
            bits: 2,
            threads: 2,
            ref_epoch: Some(40),
            start_second: Some(1000),
            ..Default::default()
        }
    }

    fn frames(spec: &SignalSpec, sets: u64) -> Vec<Vec<u8>> {
        let mut bytes = Vec::new();
        write_frames(spec, sets, &mut bytes, "memory").unwrap();
        bytes.chunks(spec.frame_size).map(|c| c.to_vec()).collect()
    }

    fn check_bytes(frames: &[Vec<u8>], extra: impl FnOnce(&mut Vec<u8>)) -> CheckReport {
        let dir = std::env::temp_dir().join(format!("vdifrec-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:?}.vdif", std::thread::current().id()));
        let mut data: Vec<u8> = frames.concat();
        extra(&mut data);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let r = check_file(&path, &CheckOptions::default()).unwrap();
        std::fs::remove_file(&path).unwrap();
        r
    }

    #[test]
    fn clean_file_is_clean() {
        let s = spec();
        let r = check_bytes(&frames(&s, 200), |_| {});
        assert!(r.clean, "{r:?}");
        assert_eq!(r.frames, 400);
        assert_eq!(r.threads, vec![0, 1]);
        assert_eq!(r.frames_per_second, 50);
        assert_eq!(r.seconds.len(), 4);
        assert!(r.seconds.iter().all(|s| s.counts.received == 100));
    }

    #[test]
    fn injected_faults_are_counted_exactly() {
        let s = spec();
        let mut f = frames(&s, 200);
        // Thread 0 of frame sets 60..=64 dropped (5 frames), a duplicate, a swap.
        let dup = f[101].clone();
        f.insert(150, dup);
        f.swap(300, 302); // same thread, one frame set apart
        for k in (60..65).rev() {
            f.remove(2 * k);
        }
        let r = check_bytes(&f, |data| {
            // Garbage in the middle: 333 bytes after the 100th frame.
            let at = 100 * s.frame_size;
            let junk: Vec<u8> = (0..333u32).map(|i| (i * 7) as u8).collect();
            data.splice(at..at, junk);
            data.extend_from_slice(&[1, 2, 3]);
        });
        assert!(!r.clean);
        assert_eq!(r.totals.counts.lost, 5);
        assert_eq!(r.totals.counts.duplicates, 1);
        assert_eq!(r.totals.counts.out_of_order, 1);
        assert_eq!(r.corrupt_bytes, 333);
        assert_eq!(r.corrupt_stretches, 1);
        assert_eq!(r.corrupt[0].offset, 100 * s.frame_size as u64);
        assert_eq!(r.trailing_bytes, 3);
        assert_eq!(r.gaps.len(), 1);
        assert_eq!(r.gaps[0].missing, 5);
        assert_eq!(r.gaps[0].thread, 0);
        assert_eq!(r.frames, 400 - 5 + 1);
    }
}
