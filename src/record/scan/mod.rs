//! Scans: a recorder that runs for hours receives and counts all the time, and writes only
//! during scans. The `gate` follows the ring: frames whose VDIF time lies in a scan's window
//! are cut into numbered chunks (`chunk`), which the scan's `writers` put on whichever of the
//! `disks` is ready next, in the scan's format (file, vbs or mk6, see `vdif::layout`); frames
//! outside scans are released unwritten. Each scan has its own accounting and `summary`, and
//! says how much of it is known to be on disk should the recorder die now (`durable`).
//! Before a scan starts, `disks` also checks that they can be written (and are disks of their
//! own), finds the scan a name none of them holds yet and says whether they have room for it;
//! its `plan` decides how many writers the scan's rate needs and says so. A recorder started
//! on disks that hold a scan no recorder closed (a crash) names it first (`unclosed`).

pub mod chunk;
pub mod disks;
pub mod durable;
pub mod gate;
pub mod plan;
pub mod summary;
pub mod unclosed;
pub mod window;
pub mod writers;

use crate::record::diskio::Fault;
use crate::vdif::layout::Format;
use crate::vdif::time::VdifTime;
use std::path::PathBuf;

pub use summary::{DiskSummary, ScanSummary};

/// Default chunk (vbs) and block (mk6) sizes, as jive5ab and a Mark6 use; `file` writes in
/// pieces of the middle size. All are rounded to whole aligned runs of frames.
pub const DEFAULT_VBS_CHUNK: u64 = 256 << 20;
pub const DEFAULT_MK6_BLOCK: u64 = 8 << 20;
pub const DEFAULT_FILE_PIECE: u64 = 32 << 20;

/// How a scan is split into data streams, each written as a scan of its own named
/// `<scan>_ds<key>` (jive5ab's data streams).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// One data stream per VDIF thread; key: the thread number.
    Thread,
    /// One per station; key: the two-character code where printable, else the number.
    Station,
    /// One per sender (address and port); key: its index in order of first arrival.
    Sender,
}

impl Split {
    pub const NAMES: &'static str = "thread, station or sender";

    pub fn parse(s: &str) -> Option<Split> {
        match s {
            "thread" => Some(Split::Thread),
            "station" => Some(Split::Station),
            "sender" => Some(Split::Sender),
            _ => None,
        }
    }

    /// The frame's data stream: (id, key as it appears in the name). A key holds letters and
    /// digits only, never a `.` or `:`. `sender`: the frame's sender index (its ring tag).
    pub fn key(self, h: &crate::vdif::Header, sender: u16) -> (u32, String) {
        match self {
            Split::Sender => (sender as u32, sender.to_string()),
            Split::Thread => (h.thread_id(), h.thread_id().to_string()),
            Split::Station => {
                let name = h.station_name();
                let key = if name.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    name
                } else {
                    h.station_id().to_string()
                };
                (h.station_id(), key)
            }
        }
    }
}

/// How scans are written, checked (from `RecorderOptions`).
#[derive(Clone, Debug)]
pub struct ScanSetup {
    pub disks: Vec<PathBuf>,
    pub format: Format,
    /// Chunk (vbs) or block (mk6) size asked for; None: the format's default.
    pub chunk_bytes: Option<u64>,
    /// `file` scans: start a new file after this many bytes (None: one file per scan).
    pub file_bytes: Option<u64>,
    /// Writer threads; None: from the data rate.
    pub writers: Option<usize>,
    /// Test aid: disks that fill or fail after some bytes.
    pub faults: Vec<(PathBuf, Fault)>,
    pub direct: bool,
    /// One scan per thread or station (None: one scan).
    pub split: Option<Split>,
}

impl ScanSetup {
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes.unwrap_or(match self.format {
            Format::Vbs => DEFAULT_VBS_CHUNK,
            Format::Mk6 => DEFAULT_MK6_BLOCK,
            Format::File => DEFAULT_FILE_PIECE,
        })
    }
}

/// Frames per chunk: the size asked for, as whole aligned runs of `run` frames (at least one).
pub fn chunk_frames(chunk_bytes: u64, frame_size: usize, run: u64) -> u64 {
    let frames = (chunk_bytes as f64 / frame_size as f64 / run as f64).round() as u64 * run;
    frames.max(run)
}

/// A scan as asked for.
#[derive(Clone, Debug)]
pub struct ScanRequest {
    pub name: String,
    pub start: Option<VdifTime>,
    pub stop: Option<VdifTime>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_whole_runs() {
        // 256 MiB of 8224-byte frames: 32640 frames (255 runs of 128).
        assert_eq!(chunk_frames(256 << 20, 8224, 128), 32_640);
        assert_eq!(chunk_frames(8 << 20, 8224, 128), 1024);
        assert_eq!(chunk_frames(1000, 8224, 128), 128);
    }
}
