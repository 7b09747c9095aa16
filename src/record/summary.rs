//! The end of a recording: every counter of every stream, the files, the rows, the scans, and
//! the one verdict (`judge`) on whether everything buffered is on disk. Built by the recorder
//! when it stops; serialised as Python and `--summary-json` present it.

use crate::record::accounting::{Gap, ThreadTotals};
use crate::record::classify::MalformedCounts;
use crate::record::latency::LatencyReport;
use crate::record::scan::ScanSummary;
use crate::record::stats::{FileRecord, RecordRow, StreamCounts};
use serde::Serialize;

/// One stream of a recording (one per port) at its end.
#[derive(Clone, Debug, Serialize)]
pub struct StreamSummary {
    pub port: u16,
    pub frames_received: u64,
    #[serde(flatten)]
    pub counts: StreamCounts,
    pub frames_lost_network: u64,
    pub datagrams: u64,
    pub datagrams_malformed: u64,
    pub kernel_drops: u64,
    pub ring_overflows: u64,
    pub frame_size: usize,
    pub frames_per_second: u32,
    pub bytes_buffered: u64,
    pub capture_cpu_s: f64,
    pub threads: Vec<ThreadTotals>,
}

/// The end of a recording: every counter, the files, the rows. Serialised as Python and
/// `--summary-json` present it, `ok` included.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub frames_received: u64,
    #[serde(flatten)]
    pub counts: StreamCounts,
    /// Lost frames beyond what the kernel reported dropping: the network's or the sender's.
    pub frames_lost_network: u64,
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
    /// Bytes buffered while no scan ran (received and counted, deliberately not written).
    pub bytes_outside_scans: u64,
    pub files: Vec<FileRecord>,
    /// Every scan of the run, in order (with disks).
    pub scans: Vec<ScanSummary>,
    /// Each stream (port); the counters above are their sums.
    pub streams: Vec<StreamSummary>,
    /// bytes_buffered == bytes_written + bytes_dropped_disk + bytes_outside_scans, and the
    /// files' sizes add up to bytes_written (plus the Mark6 headers of mk6 scans).
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
    /// Per-stage latency histograms and the newest complete traces (with `latency` on).
    pub latency: Option<LatencyReport>,
    /// The live monitor's looks computed and skipped (None: it did not run).
    pub live_computed: Option<u64>,
    pub live_skips: Option<u64>,
    /// CPU seconds the live monitor used.
    pub live_cpu_s: Option<f64>,
    /// The recording is good: everything buffered is on disk (network loss is reported, not
    /// an error). Set by `judge`, the one place this is decided.
    pub ok: bool,
}

impl Summary {
    /// Decides `ok` from the counters: the invariant holds, nothing buffered was dropped on
    /// the way to disk, and nothing failed.
    pub fn judge(mut self) -> Summary {
        self.ok = self.invariant_holds && self.bytes_dropped_disk == 0 && self.error.is_none();
        self
    }

    pub fn ok(&self) -> bool {
        self.ok
    }
}
