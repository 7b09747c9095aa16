//! One chunk of a scan onto one disk, in the scan's format. A chunk is a numbered run of the
//! scan's frames, taken from the ring where they lie (`ranges` of ring sequence numbers: one
//! range unless frames outside the window were skipped). vbs chunks become files of their
//! own; `file` and `mk6` chunks are appended to the scan's file on that disk (a Mark6 block
//! with its header). A chunk that fails leaves nothing behind: its partial file is removed or
//! the scan's file is cut back to where the chunk began, so it can be written again elsewhere.
//!
//! When a chunk is on disk, should the recorder be killed or the station lose power (see
//! `durable`): a vbs chunk once its file is synced (`fdatasync`) and its name is in its synced
//! directory, before the writer reports it done; a `file` or `mk6` chunk once its file is
//! synced, which happens after the chunk that brings `SYNC_BYTES` since the last sync, or the
//! first chunk `SYNC_EVERY` or more after it, and when the file closes. Until then its frames
//! were written and written back (`sync_file_range`), which survives the recorder being killed
//! but not a power loss: the file's size, and so the frames, may not be on the disk yet.
//!
//! Nothing a crash leaves at any instant reads as frames that were not written: no file is
//! ever made longer than what was written to it (preallocation keeps the size, and `finish`
//! never extends), so a file the recorder was killed writing ends in part of a frame (or a
//! Mark6 block whose size runs past the end of the file), which readers leave out; after a
//! power loss, what came after a file's last sync may be missing or read as zeros. A Mark6
//! file header names the block size planned when it is first written, which no block of the
//! scan exceeds, and is rewritten in place (its first 20 bytes) at close with the largest.

use crate::record::classify::swapped_header;
use crate::record::diskio::{self, Budget};
use crate::record::ring::Ring;
use crate::record::scan::disks::{ClosedScanFile, Disk, OpenScanFile, ScanOnDisk};
use crate::record::scan::durable::DurableChunk;
use crate::record::scan::window::FramePoint;
use crate::vdif::catalogue;
use crate::vdif::header::Header;
use crate::vdif::layout::{self, Format, Mk6BlockHeader, Mk6FileHeader};
use crate::vdif::time::utc_unix;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A `file` or `mk6` file is synced by the chunk that brings this many bytes since its last
/// sync: the vbs chunk, so that a disk syncs as often for its bytes as in vbs, where each
/// chunk is synced. At the reference rate over three disks (about 340 MB/s each) that is
/// about once a second per disk, which the disks carry as they carry vbs.
pub const SYNC_BYTES: u64 = super::DEFAULT_VBS_CHUNK;
/// ... or by the first chunk this long after it: a slow stream's file is not left unsynced
/// for minutes, and costs its disk at most a sync a second.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// A numbered run of the scan's frames waiting in the ring.
#[derive(Clone)]
pub struct ChunkJob {
    /// The scan (or data stream) it belongs to.
    pub out: std::sync::Arc<ScanOut>,
    /// The ring its frames are in, and which stream's that is.
    pub ring: std::sync::Arc<Ring>,
    /// That stream's shared state (its latency stamps).
    pub stream: std::sync::Arc<crate::record::shared::Shared>,
    pub input: usize,
    pub number: u64,
    /// (first ring sequence number, frames), in order.
    pub ranges: Vec<(u64, u64)>,
    pub frames: u64,
    /// The VDIF time of its last frame (the gate read its header).
    pub last: FramePoint,
}

impl ChunkJob {
    /// The chunk as `durable` counts it once it is on disk.
    pub fn durable(&self) -> DurableChunk {
        DurableChunk {
            name: self.out.name.clone(),
            number: self.number,
            frames: self.frames,
            bytes: self.frames * self.out.frame_size as u64,
            last: self.last,
        }
    }

    pub fn first_seq(&self) -> u64 {
        self.ranges[0].0
    }
}

/// What every chunk of a scan (or of one data stream of a split scan) shares.
#[derive(Clone, Debug)]
pub struct ScanOut {
    /// The name on disk: the scan's, or `<scan>_ds<key>` for a data stream.
    pub name: String,
    /// The scan's name (its part of each disk's state).
    pub scan: String,
    pub format: Format,
    pub frame_size: usize,
    pub direct: bool,
    /// Frames per chunk (vbs) or block (mk6).
    pub chunk_frames: u64,
    /// A `file` scan rotated by size: chunks per file (None: one file).
    pub file_chunks: Option<u64>,
    /// The stream's headers are big-endian (as the gate reads them).
    pub big_endian: bool,
}

impl ScanOut {
    /// The file part that chunk `number` goes to (0 unless a `file` scan rotates). Chunks are
    /// numbered in order, so each part holds a run of whole chunks and never more bytes than
    /// the size asked for (a short chunk only makes its part smaller).
    pub fn file_part(&self, number: u64) -> u64 {
        self.file_chunks.map_or(0, |n| number / n)
    }
}

/// A chunk that reached its disk.
pub struct Written {
    /// The file it went to, and that file's size now (vbs: the chunk file, closed).
    pub path: PathBuf,
    pub file_bytes: u64,
    /// Bytes of format headers it added (a Mark6 block header, and the file header for a
    /// disk's first block).
    pub header_bytes: u64,
    /// What to tell the operator about how it was written (once per scan is enough).
    pub note: Option<String>,
    /// Chunks of the scan made durable by this write: this one (vbs), or every chunk of its
    /// file written since the file's last sync, when this write synced it (`file`, `mk6`;
    /// also those of a rotated part it closed).
    pub durable: Vec<DurableChunk>,
}

/// Why a chunk did not reach its disk.
pub struct Failed {
    pub why: String,
    /// Chunks of the scan made durable on the way nonetheless (a rotated part it closed).
    pub durable: Vec<DurableChunk>,
    /// The last disk of the set filled during the chunk: the whole frames that fitted, kept
    /// as a shorter chunk (on disk and synced).
    pub kept: Option<Box<Kept>>,
}

/// The part of a chunk kept on the last disk when it filled.
pub struct Kept {
    pub path: PathBuf,
    pub frames: u64,
    /// The chunk as `durable` counts it: its first `frames` frames.
    pub durable: DurableChunk,
}

/// The header and VDIF time of frame `seq` of `ring` (published, not yet released); None for
/// a header that does not parse (the capture accepted only frames with a valid one).
pub fn frame_at(ring: &Ring, seq: u64, big_endian: bool) -> Option<(Header, FramePoint)> {
    // SAFETY: `seq` is published and not yet released (the gate releases it later).
    let bytes = unsafe { ring.frames(seq, 1) };
    let parsed = if big_endian {
        Header::parse_unchecked(&swapped_header(bytes))
    } else {
        Header::parse_unchecked(bytes)
    };
    let h = parsed.ok()?;
    let point = (utc_unix(h.ref_epoch(), h.seconds()), h.frame_nr());
    Some((h, point))
}

/// The ring sequence number of frame `k` of `job` (counted over its ranges).
fn seq_of(job: &ChunkJob, mut k: u64) -> Option<u64> {
    for &(seq, n) in &job.ranges {
        if k < n {
            return Some(seq + k);
        }
        k -= n;
    }
    None
}

/// Whether `e` says the disk is full (as opposed to failing).
fn is_full(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
    )
}

/// Writes `job` to `disk`; the caller holds the disk (no other writer uses it meanwhile).
/// `last_disk`: no other disk is left in the set, so that a vbs chunk the disk cannot hold
/// whole is kept as far as it fitted, in whole frames, rather than written again elsewhere.
pub fn write_chunk(
    out: &ScanOut,
    ring: &Ring,
    disk: &Disk,
    job: &ChunkJob,
    last_disk: bool,
) -> Result<Written, Failed> {
    match out.format {
        Format::Vbs => write_vbs(out, ring, disk, job, last_disk),
        Format::File | Format::Mk6 => append(out, ring, disk, job),
    }
}

fn fail(path: &std::path::Path, what: &str, e: impl std::fmt::Display) -> Failed {
    Failed {
        why: format!("{what} {}: {e}", path.display()),
        durable: Vec::new(),
        kept: None,
    }
}

/// The chunk's frames as slices of the ring (contiguous through its mirror).
fn pieces<'a>(ring: &'a Ring, job: &ChunkJob) -> Vec<&'a [u8]> {
    job.ranges
        .iter()
        // SAFETY: the gate hands out only published frames, and releases them after this
        // chunk is reported done.
        .map(|&(seq, n)| unsafe { ring.frames(seq, n) })
        .collect()
}

/// A chunk that is one range starting on an aligned run goes to the disk with O_DIRECT straight
/// from the ring, whole runs direct and the rest buffered; any other chunk is written buffered.
/// `allowed`: the file system takes O_DIRECT (cleared if it turns out not to).
fn write_frames(
    file: &std::fs::File,
    allowed: &mut bool,
    ring: &Ring,
    job: &ChunkJob,
    offset: u64,
    budget: Budget,
) -> Result<(), (u64, std::io::Error)> {
    let fs = ring.frame_size() as u64;
    let run = ring.run();
    let aligned = job.ranges.len() == 1 && job.first_seq() % run == 0 && offset % 4096 == 0;
    let whole = if aligned && *allowed {
        job.frames / run * run
    } else {
        0
    };
    if whole > 0 {
        diskio::set_direct(file, true).map_err(|e| (0, e))?;
        let mut direct = true;
        // SAFETY: as in `pieces`.
        let data = unsafe { ring.frames(job.first_seq(), whole) };
        let r = diskio::write_all_at(file, &mut direct, data, offset, budget);
        *allowed = direct;
        r?;
    }
    if *allowed {
        diskio::set_direct(file, false).map_err(|e| (whole * fs, e))?;
    }
    if whole == job.frames {
        return Ok(());
    }
    let rest = ChunkJob {
        out: job.out.clone(),
        ring: job.ring.clone(),
        stream: job.stream.clone(),
        input: job.input,
        number: job.number,
        ranges: if whole > 0 {
            vec![(job.first_seq() + whole, job.frames - whole)]
        } else {
            job.ranges.clone()
        },
        frames: job.frames - whole,
        last: job.last,
    };
    let b = Budget {
        used: budget.used + whole * fs,
        ..budget
    };
    diskio::write_pieces_at(file, &pieces(ring, &rest), offset + whole * fs, b)
        .map_err(|(n, e)| (whole * fs + n, e))
}

fn write_vbs(
    out: &ScanOut,
    ring: &Ring,
    disk: &Disk,
    job: &ChunkJob,
    last_disk: bool,
) -> Result<Written, Failed> {
    let dir = layout::vbs_dir(&disk.path, &out.name);
    std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, "cannot create", e))?;
    catalogue::made(&disk.path, &out.name);
    let path = layout::vbs_chunk_path(&disk.path, &out.name, job.number);
    let bytes = job.frames * out.frame_size as u64;
    let mut state = disk.state.lock().unwrap();
    let budget = Budget {
        fault: disk.fault,
        used: state.used,
    };
    let (file, mut direct, note) =
        diskio::create_new(&path, out.direct).map_err(|e| fail(&path, "cannot create", e))?;
    // The file is opened O_DIRECT where allowed; write_frames decides per chunk.
    diskio::set_direct(&file, false).map_err(|e| fail(&path, "cannot set up", e))?;
    diskio::preallocate(&file, 0, bytes);
    // The chunk is durable once its frames and size are synced and its name is in the scan's
    // directory on the disk, and the directory's name in the disk (once per data stream).
    let dir_known = state.with_scan(&out.scan, |s, _| s.vbs_dirs_synced.contains(&out.name));
    let sync_dirs = || {
        diskio::sync_dir(&dir)?;
        if dir_known {
            return Ok(());
        }
        diskio::sync_dir(&disk.path)
    };
    // Only a write the disk refused for space leaves a part worth keeping: after a failed
    // sync nothing written is known to be on the disk.
    let written = write_frames(&file, &mut direct, ring, job, 0, budget);
    let refused_for_space = matches!(&written, Err((_, e)) if is_full(e));
    let result = written
        .and_then(|()| diskio::finish(&file, bytes).map_err(|e| (bytes, e)))
        .and_then(|()| sync_dirs().map_err(|e| (bytes, e)));
    if let Err((n, e)) = result {
        state.used += n;
        let fs = out.frame_size as u64;
        let frames = n.min(bytes) / fs;
        if last_disk && refused_for_space && frames > 0 {
            // No disk is left to take the chunk again: what fitted stays, cut at its last
            // whole frame, and is made durable as a shorter chunk.
            let keep = frames * fs;
            let cut = file.set_len(keep).is_ok();
            if cut && file.sync_data().is_ok() && sync_dirs().is_ok() {
                let last = seq_of(job, frames - 1)
                    .and_then(|seq| frame_at(ring, seq, out.big_endian))
                    .map_or(job.last, |(_, point)| point);
                state.with_scan(&out.scan, |s, used| {
                    if !dir_known {
                        s.vbs_dirs_synced.push(out.name.clone());
                    }
                    *used += keep;
                    s.frame_bytes += keep;
                    s.chunks += 1;
                });
                let mut f = fail(&path, "writing", e);
                f.kept = Some(Box::new(Kept {
                    path,
                    frames,
                    durable: DurableChunk {
                        frames,
                        bytes: keep,
                        last,
                        ..job.durable()
                    },
                }));
                return Err(f);
            }
        }
        drop(file);
        // Nothing half-written stays: the chunk is written again on another disk.
        let _ = std::fs::remove_file(&path);
        return Err(fail(&path, "writing", e));
    }
    state.with_scan(&out.scan, |s, used| {
        if !dir_known {
            s.vbs_dirs_synced.push(out.name.clone());
        }
        *used += bytes;
        s.frame_bytes += bytes;
        s.chunks += 1;
    });
    Ok(Written {
        path,
        file_bytes: bytes,
        header_bytes: 0,
        note: Some(note),
        durable: vec![job.durable()],
    })
}

/// `file` and `mk6`: the chunk goes at the end of the scan's file on this disk, opened (with
/// the Mark6 file header) by the disk's first chunk; the file is synced when it is due.
fn append(out: &ScanOut, ring: &Ring, disk: &Disk, job: &ChunkJob) -> Result<Written, Failed> {
    let mut state = disk.state.lock().unwrap();
    state.with_scan(&out.scan, |scan, used| {
        append_to_scan(out, ring, disk, scan, used, job)
    })
}

fn append_to_scan(
    out: &ScanOut,
    ring: &Ring,
    disk: &Disk,
    state: &mut ScanOnDisk,
    used: &mut u64,
    job: &ChunkJob,
) -> Result<Written, Failed> {
    // The first chunk of a rotated file scan's next part closes the part before it, which
    // makes that part's chunks durable whatever becomes of this one.
    let mut durable = Vec::new();
    let part = out.file_part(job.number);
    if let Some(k) = state
        .open
        .iter()
        .position(|o| o.scan == out.name && o.part != part)
    {
        let done = state.open.remove(k);
        let mut closed = close_file(done, out.format, out.frame_size, 0);
        durable.append(&mut closed.durable);
        state.closed.push(closed);
    }
    match append_to_file(out, ring, disk, state, used, job) {
        Ok(mut w) => {
            durable.append(&mut w.durable);
            w.durable = durable;
            Ok(w)
        }
        Err(mut f) => {
            f.durable = durable;
            Err(f)
        }
    }
}

/// Appends the chunk to the scan's file on the disk, opening it first if it is not open.
fn append_to_file(
    out: &ScanOut,
    ring: &Ring,
    disk: &Disk,
    state: &mut ScanOnDisk,
    used: &mut u64,
    job: &ChunkJob,
) -> Result<Written, Failed> {
    let fs = out.frame_size as u64;
    let bytes = job.frames * fs;
    let mut note = None;
    let mut header_bytes = 0u64;
    let part = out.file_part(job.number);
    let mut durable = Vec::new();
    if !state.open.iter().any(|o| o.scan == out.name) {
        let (path, direct) = match out.format {
            Format::Mk6 => (layout::mk6_path(&disk.path, &out.name), false),
            _ => (
                layout::file_part_path(&disk.path, &out.name, part),
                out.direct,
            ),
        };
        let (file, direct, n) =
            diskio::create_new(&path, direct).map_err(|e| fail(&path, "cannot create", e))?;
        if let Some(file_name) = path.file_name().and_then(|n| n.to_str()) {
            catalogue::made(&disk.path, file_name);
        }
        note = Some(n);
        let mut open = OpenScanFile::new(out.name.clone(), file, path, direct, part);
        if out.format == Format::Mk6 {
            // The block planned, which no block of the scan exceeds: a reader of a file the
            // recorder never closed sizes its buffers right.
            let block = (out.chunk_frames * fs + layout::MK6_BLOCK_HEADER_BYTES as u64) as u32;
            let header = Mk6FileHeader::vdif(block, out.frame_size as u32).to_bytes();
            let budget = Budget {
                fault: disk.fault,
                used: *used,
            };
            if let Err((_, e)) = diskio::write_pieces_at(&open.file, &[&header], 0, budget) {
                let _ = std::fs::remove_file(&open.path);
                return Err(fail(&open.path, "writing", e));
            }
            open.end = header.len() as u64;
            header_bytes += open.end;
            *used += open.end;
        }
        state.open.push(open);
    }
    let used_before = *used;
    let k = state
        .open
        .iter()
        .position(|o| o.scan == out.name)
        .expect("opened above");
    let open = &mut state.open[k];
    let start = open.end;
    let block_header = match out.format {
        Format::Mk6 => layout::MK6_BLOCK_HEADER_BYTES as u64,
        _ => 0,
    };
    let end = start + block_header + bytes;
    let budget = Budget {
        fault: disk.fault,
        used: used_before,
    };
    let result = if out.format == Format::Mk6 {
        let wb_size = bytes + block_header;
        // The block's header goes before its frames: a block cut short by a crash names a
        // size that runs past the end of the file, and readers leave it out.
        let header = Mk6BlockHeader {
            blocknum: job.number as u32,
            wb_size: wb_size as u32,
        }
        .to_bytes();
        let mut all: Vec<&[u8]> = vec![&header];
        all.extend(pieces(ring, job));
        header_bytes += header.len() as u64;
        let r = diskio::write_pieces_at(&open.file, &all, start, budget).and_then(|()| {
            diskio::write_back(&open.file, start, wb_size).map_err(|e| (wb_size, e))
        });
        if r.is_ok() {
            open.largest_block = open.largest_block.max(wb_size);
        }
        r
    } else {
        diskio::preallocate(&open.file, start, bytes);
        // Buffered parts are flushed now, so a failing disk shows while the frames are still
        // in the ring (O_DIRECT parts are on the disk already).
        write_frames(&open.file, &mut open.direct, ring, job, start, budget)
            .and_then(|()| diskio::write_back(&open.file, start, bytes).map_err(|e| (bytes, e)))
    };
    let result = result.and_then(|()| {
        open.unsynced.push(job.durable());
        if end - open.synced_to < SYNC_BYTES && open.synced_at.elapsed() < SYNC_EVERY {
            return Ok(());
        }
        durable = make_durable(open, end).map_err(|e| (end - start, e))?;
        Ok(())
    });
    if let Err((n, e)) = result {
        // Cut the file back to where this chunk began: it stays valid up to there.
        // SAFETY: truncating our own file.
        unsafe {
            libc::ftruncate(
                std::os::fd::AsRawFd::as_raw_fd(&open.file),
                start as libc::off_t,
            )
        };
        // The chunks written to the file before this one are claimed by its next sync (at
        // close: their frames were written back without error), unless a sync failed.
        let path = open.path.clone();
        let first_chunk_on_disk = open.frame_bytes == 0;
        *used += n;
        if first_chunk_on_disk {
            // A disk that got no block has no file.
            state.open.remove(k);
            let _ = std::fs::remove_file(&path);
        }
        return Err(fail(&path, "writing", e));
    }
    let open = &mut state.open[k];
    open.end = end;
    open.frame_bytes += bytes;
    let (path, file_bytes) = (open.path.clone(), open.end);
    *used += block_header + bytes;
    state.frame_bytes += bytes;
    Ok(Written {
        path,
        file_bytes,
        header_bytes,
        note,
        durable,
    })
}

/// Syncs the file (its frames, its size `end`) and, the first time, its name in the disk's
/// directory; returns the chunks that made durable. After a failed sync none of the file's
/// chunks is ever claimed: the kernel reports a write-back error once, so a later sync that
/// succeeds says nothing of the pages that failed.
fn make_durable(open: &mut OpenScanFile, end: u64) -> std::io::Result<Vec<DurableChunk>> {
    let synced = diskio::sync(&open.file).and_then(|()| {
        if open.entry_synced {
            return Ok(());
        }
        diskio::sync_dir(open.path.parent().unwrap_or(Path::new(".")))
    });
    if let Err(e) = synced {
        open.unsynced.clear();
        return Err(e);
    }
    open.entry_synced = true;
    open.synced_to = end;
    open.synced_at = Instant::now();
    Ok(std::mem::take(&mut open.unsynced))
}

/// Closes one file of the scan: trimmed, the Mark6 header's block size set, synced; its
/// chunks are then durable.
/// `block_size`: the scan's largest Mark6 block, header included (the same in every file).
fn close_file(
    mut open: OpenScanFile,
    format: Format,
    frame_size: usize,
    block_size: u64,
) -> ClosedScanFile {
    let mut result = Ok(());
    if format == Format::Mk6 {
        // In place, within the first sector: a crash while it is written leaves the planned
        // size or this one, both at least the largest block.
        let header = Mk6FileHeader::vdif(block_size as u32, frame_size as u32).to_bytes();
        let mut direct = false;
        result = diskio::write_all_at(&open.file, &mut direct, &header, 0, Budget::none())
            .map_err(|(_, e)| format!("writing the header of {}: {e}", open.path.display()));
    }
    let end = open.end;
    let result = result.and_then(|()| {
        // Past the end only the preallocation goes: the file is never made longer.
        diskio::trim(&open.file, end);
        make_durable(&mut open, end)
            .map_err(|e| format!("fdatasync of {} failed: {e}", open.path.display()))
    });
    let (durable, error) = match result {
        Ok(d) => (d, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    ClosedScanFile {
        path: open.path,
        bytes: end,
        error,
        durable,
    }
}

/// Closes the scan's open files on a disk (one, or one per data stream with a split) and
/// collects those closed before (rotated parts). Returns (path, size) of each file, the chunks
/// the closing made durable, and the first failure.
pub fn close_scan_files(
    scan: &mut ScanOnDisk,
    format: Format,
    frame_size: usize,
    block_size: u64,
) -> ClosedFiles {
    let mut all: Vec<ClosedScanFile> = scan.closed.drain(..).collect();
    let open: Vec<OpenScanFile> = scan.open.drain(..).collect();
    all.extend(
        open.into_iter()
            .map(|o| close_file(o, format, frame_size, block_size)),
    );
    let error = all.iter().find_map(|c| c.error.clone());
    // A rotated part's chunks were claimed when its successor's first chunk closed it.
    let durable = all
        .iter_mut()
        .flat_map(|c| std::mem::take(&mut c.durable))
        .collect();
    let files = all.into_iter().map(|c| (c.path, c.bytes)).collect();
    ClosedFiles {
        files,
        durable,
        error,
    }
}

/// The scan's files on one disk once closed.
pub struct ClosedFiles {
    pub files: Vec<(PathBuf, u64)>,
    pub durable: Vec<DurableChunk>,
    pub error: Option<String>,
}
