//! What the recorder reports: counters published by the capture, per-second rows, the summary.

use crate::accounting::{Gap, SecondRow, ThreadTotals, Totals};
use crate::classify::MalformedCounts;
use serde::Serialize;

/// Time of the newest frame seen, as its header has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FrameTime {
    pub ref_epoch: u32,
    pub seconds: u32,
    pub frame_nr: u32,
    pub thread_id: u32,
}

/// Counters the capture thread owns and publishes every 50 ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CaptureStats {
    /// Datagrams received, of any kind.
    pub datagrams: u64,
    /// Bytes of all datagrams received (offsets included).
    pub bytes_received: u64,
    /// Frames accepted into the ring (and so destined for disk).
    pub frames_received: u64,
    pub malformed: MalformedCounts,
    /// Datagrams the kernel dropped (socket buffer full).
    pub kernel_drops: u64,
    /// Valid frames dropped because the ring was full (disk too slow, or views pinning it).
    pub ring_overflows: u64,
    /// Gaps and reversals in the packet sequence numbers (with --psn).
    pub psn_lost: u64,
    pub psn_out_of_order: u64,
    /// The stream's accounting: lost, out of order, duplicates, invalid ...
    pub totals: Totals,
    pub frames_per_second: u32,
    /// 0 until the frame size is known.
    pub frame_size: usize,
    pub latest_frame: Option<FrameTime>,
    /// Seconds since the last datagram (None before the first).
    pub seconds_since_datagram: Option<f64>,
    pub socket_errors: u64,
    pub last_socket_error: Option<String>,
    /// CPU time the capture thread has used on frames, in seconds (set-up excluded).
    pub capture_cpu_s: f64,
    /// CPU time the capture thread spent setting up the ring (allocating, locking pages).
    pub capture_setup_cpu_s: f64,
}

/// One completed VDIF second, with the recording's counters when it completed.
#[derive(Clone, Debug, Serialize)]
pub struct RecordRow {
    #[serde(flatten)]
    pub second: SecondRow,
    /// Frames buffered since the start.
    pub total_frames: u64,
    /// Bytes received into the ring since the start.
    pub bytes_buffered: u64,
    /// Bytes written to disk since the start.
    pub bytes_written: u64,
    /// Malformed datagrams since the previous row.
    pub malformed: u64,
    /// Kernel drops since the previous row.
    pub kernel_drops: u64,
}

/// A file written, with its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileRecord {
    pub path: String,
    pub bytes: u64,
}

/// The end of a recording: every counter, the files, the rows.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub frames_received: u64,
    pub frames_lost: u64,
    /// Lost frames beyond what the kernel reported dropping: the network's or the sender's.
    pub frames_lost_network: u64,
    pub frames_out_of_order: u64,
    pub frames_duplicate: u64,
    pub frames_invalid: u64,
    pub frames_out_of_window: u64,
    pub frames_late: u64,
    pub time_jumps: u64,
    pub datagrams: u64,
    pub datagrams_malformed: u64,
    pub datagrams_malformed_by_kind: MalformedCounts,
    pub kernel_drops: u64,
    pub ring_overflows: u64,
    pub psn_lost: Option<u64>,
    pub psn_out_of_order: Option<u64>,
    pub frame_size: usize,
    pub frames_per_second: u32,
    pub bytes_buffered: u64,
    pub bytes_written: u64,
    pub bytes_dropped_disk: u64,
    pub files: Vec<FileRecord>,
    /// bytes_buffered == bytes_written + bytes_dropped_disk and bytes_written == sum of sizes.
    pub invariant_holds: bool,
    /// Why the recording stopped early or failed (disk full, ...), if it did.
    pub error: Option<String>,
    pub duration_s: f64,
    /// CPU seconds used by the capture and writer threads.
    pub capture_cpu_s: f64,
    pub writer_cpu_s: f64,
    pub threads: Vec<ThreadTotals>,
    pub gaps: Vec<Gap>,
    pub seconds: Vec<RecordRow>,
    /// What the recorder said about its set-up (ring, socket buffer, pinning, O_DIRECT).
    pub notes: Vec<String>,
}

impl Summary {
    /// The recording is good: everything buffered is on disk (network loss is reported, not
    /// an error).
    pub fn ok(&self) -> bool {
        self.invariant_holds && self.bytes_dropped_disk == 0 && self.error.is_none()
    }
}

/// A snapshot of a running recording.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// "waiting" (no frame yet), "recording", "stopping", "failed" or "stopped".
    pub state: &'static str,
    pub elapsed_s: f64,
    #[serde(flatten)]
    pub capture: CaptureStats,
    pub bytes_buffered: u64,
    pub bytes_written: u64,
    /// Frames in the ring not yet on disk, the ring's size in frames, and their ratio.
    pub ring_frames: u64,
    pub ring_slots: u64,
    pub ring_fill: f64,
    pub current_file: Option<String>,
    pub current_file_bytes: u64,
    pub files_closed: usize,
    pub error: Option<String>,
}
