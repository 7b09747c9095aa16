//! What one scan holds and what happened to it: the summary returned by `stop_scan`, listed in
//! the run's summary and written as JSON beside the scan on each disk that holds part of it.

use crate::record::accounting::{SecondRow, ThreadTotals};
use crate::record::stats::{FileRecord, StreamCounts};
use serde::Serialize;

/// One disk's part in a scan.
#[derive(Clone, Debug, Serialize)]
pub struct DiskSummary {
    pub path: String,
    /// Bytes of frames this disk took in the scan.
    pub bytes: u64,
    /// vbs chunks (for file and mk6: the scan's files on this disk).
    pub chunks: u64,
    /// Why the disk left the set, if it did (during this scan or before it).
    pub dropped: Option<String>,
}

/// One data stream of a split scan (`<scan>_ds<key>`), or the whole scan.
#[derive(Clone, Debug, Serialize)]
pub struct DataStreamSummary {
    pub name: String,
    /// The thread number or station code (empty: the scan is not split).
    pub key: String,
    pub frames: u64,
    pub chunks: u64,
    pub bytes_written: u64,
    /// What of it is known to be on disk (see `ScanSummary::durable_frames`).
    pub durable_frames: u64,
    pub durable_bytes: u64,
    pub durable_up_to: Option<String>,
}

/// One stream's part in a scan (one per port).
#[derive(Clone, Debug, Serialize)]
pub struct ScanStreamSummary {
    pub port: u16,
    pub frames: u64,
    #[serde(flatten)]
    pub counts: StreamCounts,
    pub frames_lost_at_edges: u64,
    pub ring_overflows: u64,
    pub kernel_drops: u64,
    pub bytes_buffered: u64,
}

/// A second of the scan on one stream.
#[derive(Clone, Debug, Serialize)]
pub struct ScanSecond {
    /// The stream's port.
    pub stream: u16,
    #[serde(flatten)]
    pub row: SecondRow,
}

/// A thread of the scan on one stream.
#[derive(Clone, Debug, Serialize)]
pub struct ScanThread {
    pub stream: u16,
    #[serde(flatten)]
    pub totals: ThreadTotals,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScanSummary {
    /// The name on disk (the name asked for, with jive5ab's suffix when that was taken).
    pub name: String,
    pub requested_name: String,
    pub format: &'static str,
    /// The window asked for, ISO UTC (None: open on that side).
    pub start: Option<String>,
    pub stop: Option<String>,
    /// VDIF time of the first and last frame the scan holds (ISO UTC).
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub frames: u64,
    pub frame_size: usize,
    /// Bytes per chunk (vbs) or block (mk6, without its header).
    pub chunk_size: u64,
    /// A `file` scan rotated by size: the most bytes in one file (whole chunks); None: one file.
    pub file_size: Option<u64>,
    pub chunks: u64,
    /// The scan's data streams: one per thread or station with a split, else the scan itself.
    pub data_streams: Vec<DataStreamSummary>,
    pub writers: usize,
    #[serde(flatten)]
    pub counts: StreamCounts,
    /// Frames missing between the window's start and each thread's first frame, and between
    /// each thread's last frame and the window's stop (included in `frames_lost`).
    pub frames_lost_at_edges: u64,
    /// Frames the capture could not buffer while the scan ran (the disks were too slow).
    pub ring_overflows: u64,
    pub kernel_drops: u64,
    pub bytes_buffered: u64,
    pub bytes_written: u64,
    pub bytes_dropped_disk: u64,
    /// Bytes of format headers in the files (Mark6 file and block headers).
    pub bytes_headers: u64,
    /// The frames (and their bytes) known to be on disk, synced, should the recorder have
    /// died as the scan ended: its chunks from 0 without a gap. All of `bytes_written` for a
    /// scan whose files all closed well; less when a chunk after them was dropped or a sync
    /// failed.
    pub durable_frames: u64,
    pub durable_bytes: u64,
    /// The VDIF time of the last of them (ISO UTC; with a split, the earliest of the data
    /// streams'); None when nothing is on disk.
    pub durable_up_to: Option<String>,
    pub files: Vec<FileRecord>,
    pub disks: Vec<DiskSummary>,
    /// Each stream's part (the counters above are their sums).
    pub streams: Vec<ScanStreamSummary>,
    /// `bytes_buffered == bytes_written + bytes_dropped_disk` and the files' sizes add up to
    /// `bytes_written + bytes_headers`.
    pub invariant_holds: bool,
    pub error: Option<String>,
    pub seconds: Vec<ScanSecond>,
    pub threads: Vec<ScanThread>,
    pub notes: Vec<String>,
    pub ok: bool,
}

impl ScanSummary {
    /// Sets `ok`: everything in the window was received and written, and is known to be on
    /// disk; nothing failed.
    pub fn judge(mut self) -> ScanSummary {
        let file_sum: u64 = self.files.iter().map(|f| f.bytes).sum();
        self.invariant_holds = self.bytes_buffered == self.bytes_written + self.bytes_dropped_disk
            && file_sum == self.bytes_written + self.bytes_headers;
        self.ok = self.invariant_holds
            && self.error.is_none()
            && self.bytes_dropped_disk == 0
            && self.durable_bytes == self.bytes_written
            && self.counts.frames_lost == 0
            && self.ring_overflows == 0;
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary serialises")
    }
}
