//! One chunk of a scan onto one disk, in the scan's format. A chunk is a numbered run of the
//! scan's frames, taken from the ring where they lie (`ranges` of ring sequence numbers: one
//! range unless frames outside the window were skipped). vbs chunks become files of their
//! own; `file` and `mk6` chunks are appended to the scan's file on that disk (a Mark6 block
//! with its header). A chunk that fails leaves nothing behind: its partial file is removed or
//! the scan's file is cut back to where the chunk began, so it can be written again elsewhere.

use crate::record::diskio::{self, Budget};
use crate::record::ring::Ring;
use crate::record::scan::disks::{ClosedScanFile, Disk, OpenScanFile};
use crate::vdif::layout::{self, Format, Mk6BlockHeader, Mk6FileHeader};
use std::path::PathBuf;

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
}

impl ChunkJob {
    pub fn first_seq(&self) -> u64 {
        self.ranges[0].0
    }
}

/// What every chunk of a scan (or of one data stream of a split scan) shares.
#[derive(Clone, Debug)]
pub struct ScanOut {
    /// The name on disk: the scan's, or `<scan>_ds<key>` for a data stream.
    pub name: String,
    pub format: Format,
    pub frame_size: usize,
    pub direct: bool,
    /// Frames per chunk (vbs) or block (mk6).
    pub chunk_frames: u64,
    /// A `file` scan rotated by size: chunks per file (None: one file).
    pub file_chunks: Option<u64>,
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
}

/// Why a chunk did not reach its disk.
pub struct Failed {
    pub why: String,
}

/// Writes `job` to `disk`; the caller holds the disk (no other writer uses it meanwhile).
pub fn write_chunk(
    out: &ScanOut,
    ring: &Ring,
    disk: &Disk,
    job: &ChunkJob,
) -> Result<Written, Failed> {
    match out.format {
        Format::Vbs => write_vbs(out, ring, disk, job),
        Format::File | Format::Mk6 => append(out, ring, disk, job),
    }
}

fn fail(path: &std::path::Path, what: &str, e: impl std::fmt::Display) -> Failed {
    Failed {
        why: format!("{what} {}: {e}", path.display()),
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
    };
    let b = Budget {
        used: budget.used + whole * fs,
        ..budget
    };
    diskio::write_pieces_at(file, &pieces(ring, &rest), offset + whole * fs, b)
        .map_err(|(n, e)| (whole * fs + n, e))
}

fn write_vbs(out: &ScanOut, ring: &Ring, disk: &Disk, job: &ChunkJob) -> Result<Written, Failed> {
    let dir = layout::vbs_dir(&disk.path, &out.name);
    std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, "cannot create", e))?;
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
    let result = write_frames(&file, &mut direct, ring, job, 0, budget)
        .map_err(|(n, e)| (n, e.to_string()))
        .and_then(|()| diskio::finish(&file, bytes).map_err(|e| (bytes, e.to_string())));
    if let Err((n, e)) = result {
        state.used += n;
        drop(file);
        // Nothing half-written stays: the chunk is written again on another disk.
        let _ = std::fs::remove_file(&path);
        return Err(fail(&path, "writing", e));
    }
    state.used += bytes;
    state.scan_frame_bytes += bytes;
    state.scan_chunks += 1;
    Ok(Written {
        path,
        file_bytes: bytes,
        header_bytes: 0,
        note: Some(note),
    })
}

/// `file` and `mk6`: the chunk goes at the end of the scan's file on this disk, opened (with
/// the Mark6 file header) by the disk's first chunk.
fn append(out: &ScanOut, ring: &Ring, disk: &Disk, job: &ChunkJob) -> Result<Written, Failed> {
    let fs = out.frame_size as u64;
    let bytes = job.frames * fs;
    let mut state = disk.state.lock().unwrap();
    let mut note = None;
    let mut header_bytes = 0u64;
    let part = out.file_part(job.number);
    // The first chunk of a rotated file scan's next part closes the part before it.
    if let Some(k) = state
        .open
        .iter()
        .position(|o| o.scan == out.name && o.part != part)
    {
        let done = state.open.remove(k);
        let closed = close_file(done, out.format, out.frame_size, 0);
        state.closed.push(closed);
    }
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
        note = Some(n);
        let mut open = OpenScanFile {
            scan: out.name.clone(),
            file,
            path,
            end: 0,
            frame_bytes: 0,
            direct,
            largest_block: 0,
            part,
        };
        if out.format == Format::Mk6 {
            let block = (out.chunk_frames * fs + layout::MK6_BLOCK_HEADER_BYTES as u64) as u32;
            let header = Mk6FileHeader::vdif(block, out.frame_size as u32).to_bytes();
            let budget = Budget {
                fault: disk.fault,
                used: state.used,
            };
            if let Err((_, e)) = diskio::write_pieces_at(&open.file, &[&header], 0, budget) {
                let _ = std::fs::remove_file(&open.path);
                return Err(fail(&open.path, "writing", e));
            }
            open.end = header.len() as u64;
            header_bytes += open.end;
            state.used += open.end;
        }
        state.open.push(open);
    }
    let used = state.used;
    let k = state
        .open
        .iter()
        .position(|o| o.scan == out.name)
        .expect("opened above");
    let open = &mut state.open[k];
    let start = open.end;
    let budget = Budget {
        fault: disk.fault,
        used,
    };
    let result = if out.format == Format::Mk6 {
        let wb_size = bytes + layout::MK6_BLOCK_HEADER_BYTES as u64;
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
    if let Err((n, e)) = result {
        // Cut the file back to where this chunk began: it stays valid up to there.
        // SAFETY: truncating our own file.
        unsafe {
            libc::ftruncate(
                std::os::fd::AsRawFd::as_raw_fd(&open.file),
                start as libc::off_t,
            )
        };
        let path = open.path.clone();
        let first_chunk_on_disk = open.frame_bytes == 0;
        state.used += n;
        if first_chunk_on_disk {
            // A disk that got no block has no file.
            state.open.remove(k);
            let _ = std::fs::remove_file(&path);
        }
        return Err(fail(&path, "writing", e));
    }
    let block_header = match out.format {
        Format::Mk6 => layout::MK6_BLOCK_HEADER_BYTES as u64,
        _ => 0,
    };
    let open = &mut state.open[k];
    open.end = start + block_header + bytes;
    open.frame_bytes += bytes;
    let (path, file_bytes) = (open.path.clone(), open.end);
    state.used += block_header + bytes;
    state.scan_frame_bytes += bytes;
    Ok(Written {
        path,
        file_bytes,
        header_bytes,
        note,
    })
}

/// Closes one file of the scan: trimmed, the Mark6 header's block size set, synced.
/// `block_size`: the scan's largest Mark6 block, header included (the same in every file).
fn close_file(
    open: OpenScanFile,
    format: Format,
    frame_size: usize,
    block_size: u64,
) -> ClosedScanFile {
    let mut result = Ok(());
    if format == Format::Mk6 {
        let header = Mk6FileHeader::vdif(block_size as u32, frame_size as u32).to_bytes();
        let mut direct = false;
        result = diskio::write_all_at(&open.file, &mut direct, &header, 0, Budget::none())
            .map_err(|(_, e)| format!("writing the header of {}: {e}", open.path.display()));
    }
    let result = result.and_then(|()| {
        diskio::finish(&open.file, open.end)
            .map_err(|e| format!("fdatasync of {} failed: {e}", open.path.display()))
    });
    ClosedScanFile {
        path: open.path,
        bytes: open.end,
        error: result.err(),
    }
}

/// Closes the scan's open files on a disk (one, or one per data stream with a split) and
/// collects those closed before (rotated parts). Returns (path, size) of each file, and the
/// first failure.
pub fn close_scan_files(
    disk: &Disk,
    format: Format,
    frame_size: usize,
    block_size: u64,
) -> (Vec<(PathBuf, u64)>, Option<String>) {
    let mut state = disk.state.lock().unwrap();
    let mut all: Vec<ClosedScanFile> = state.closed.drain(..).collect();
    let open: Vec<OpenScanFile> = state.open.drain(..).collect();
    all.extend(
        open.into_iter()
            .map(|o| close_file(o, format, frame_size, block_size)),
    );
    let error = all.iter().find_map(|c| c.error.clone());
    let closed = all.into_iter().map(|c| (c.path, c.bytes)).collect();
    (closed, error)
}
