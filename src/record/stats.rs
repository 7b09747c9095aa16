//! What a running recorder reports: the counters the capture publishes, the per-second rows,
//! the snapshot `Recorder.stats()` and `/status` serve, and the pieces the summaries at the end
//! share with them (the counts under the names users see, the files written). The summaries
//! themselves, of the run (`summary`) and of each scan (`scan::summary`), sit above.

use crate::record::accounting::{SecondRow, Totals};
use crate::record::classify::MalformedCounts;
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
    /// Whether `frames_per_second` is known for sure (given, or learned from a wrap), not a
    /// running estimate: what frequencies and VDIF times are computed from.
    #[serde(skip)]
    pub frames_per_second_known: bool,
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

impl CaptureStats {
    /// Adds another stream's counters: the live statistics of a recording of several streams.
    pub fn merge(&mut self, o: &CaptureStats) {
        self.datagrams += o.datagrams;
        self.bytes_received += o.bytes_received;
        self.frames_received += o.frames_received;
        self.malformed += o.malformed;
        self.kernel_drops += o.kernel_drops;
        self.ring_overflows += o.ring_overflows;
        self.psn_lost += o.psn_lost;
        self.psn_out_of_order += o.psn_out_of_order;
        self.totals.merge(&o.totals);
        self.socket_errors += o.socket_errors;
        self.capture_cpu_s += o.capture_cpu_s;
        self.capture_setup_cpu_s += o.capture_setup_cpu_s;
        self.seconds_since_datagram = match (self.seconds_since_datagram, o.seconds_since_datagram)
        {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// The stream's counts (see `accounting`) under the names users see: one mapping, shared by
/// the summary and the live statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamCounts {
    pub frames_lost: u64,
    pub frames_out_of_order: u64,
    pub frames_duplicate: u64,
    pub frames_invalid: u64,
    pub frames_out_of_window: u64,
    pub frames_late: u64,
    pub time_jumps: u64,
}

impl std::ops::AddAssign for StreamCounts {
    /// Counts of several streams together.
    fn add_assign(&mut self, o: StreamCounts) {
        self.frames_lost += o.frames_lost;
        self.frames_out_of_order += o.frames_out_of_order;
        self.frames_duplicate += o.frames_duplicate;
        self.frames_invalid += o.frames_invalid;
        self.frames_out_of_window += o.frames_out_of_window;
        self.frames_late += o.frames_late;
        self.time_jumps += o.time_jumps;
    }
}

impl From<&Totals> for StreamCounts {
    fn from(t: &Totals) -> StreamCounts {
        StreamCounts {
            frames_lost: t.counts.lost,
            frames_out_of_order: t.counts.out_of_order,
            frames_duplicate: t.counts.duplicates,
            frames_invalid: t.counts.invalid,
            frames_out_of_window: t.out_of_window,
            frames_late: t.late,
            time_jumps: t.time_jumps,
        }
    }
}

/// One completed VDIF second, with the recording's counters when it completed.
#[derive(Clone, Debug, Serialize)]
pub struct RecordRow {
    /// The stream (its port) this second is of.
    pub stream: u16,
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
    /// What each forwarding destination did since the previous row.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forward: Vec<crate::record::forward::ForwardRow>,
}

/// How much of the running scan is known to be on disk, should the recorder be killed or the
/// station lose power now (`scan::durable`): `/status` `scan_durable`, the `scan_durable_*`
/// fields of `Stats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScanDurable {
    pub frames: u64,
    /// Bytes of frames.
    pub bytes: u64,
    /// The VDIF time of the last frame of that, ISO UTC; None while nothing is on disk.
    pub up_to: Option<String>,
    /// The same as POSIX seconds (`/metrics`).
    #[serde(skip)]
    pub up_to_unix: Option<f64>,
}

/// A file written, with its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileRecord {
    pub path: String,
    pub bytes: u64,
}

/// A snapshot of a running recording. Serialised flat, as `Recorder.stats()` and `/status`
/// present it (`frames_lost`, `datagrams_malformed_by_kind`, ...).
#[derive(Clone, Debug)]
pub struct Stats {
    /// "waiting" (no frame yet), "recording", "stopping", "failed" or "stopped".
    pub state: &'static str,
    pub elapsed_s: f64,
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
    /// The running scan's part known to be on disk (None between scans).
    pub scan_durable: Option<ScanDurable>,
    pub error: Option<String>,
    /// Each stream (port) of the recording; the counters above are their sums.
    pub streams: Vec<StreamStats>,
    /// Each forwarding destination's counters (empty: none).
    pub forward: Vec<crate::record::forward::ForwardStats>,
}

/// One stream's live counters (`/status` `streams`, `/metrics` with a `stream` label).
#[derive(Clone, Debug, Serialize)]
pub struct StreamStats {
    pub port: u16,
    pub frames_received: u64,
    pub frames_lost: u64,
    pub datagrams: u64,
    pub datagrams_malformed: u64,
    pub kernel_drops: u64,
    pub ring_overflows: u64,
    pub ring_fill: f64,
}

impl StreamStats {
    pub fn of(port: u16, s: &Stats) -> StreamStats {
        StreamStats {
            port,
            frames_received: s.capture.frames_received,
            frames_lost: s.capture.totals.counts.lost,
            datagrams: s.capture.datagrams,
            datagrams_malformed: s.capture.malformed.total(),
            kernel_drops: s.capture.kernel_drops,
            ring_overflows: s.capture.ring_overflows,
            ring_fill: s.ring_fill,
        }
    }
}

impl Serialize for Stats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.capture;
        let t = &c.totals;
        StatsShape {
            state: self.state,
            elapsed_s: self.elapsed_s,
            datagrams: c.datagrams,
            frames_received: c.frames_received,
            counts: StreamCounts::from(t),
            frames_expected: t.counts.expected,
            threads: t.threads,
            datagrams_malformed: c.malformed.total(),
            datagrams_malformed_by_kind: &c.malformed,
            kernel_drops: c.kernel_drops,
            ring_overflows: c.ring_overflows,
            psn_lost: c.psn_lost,
            psn_out_of_order: c.psn_out_of_order,
            frame_size: c.frame_size,
            frames_per_second: c.frames_per_second,
            frames_per_second_known: c.frames_per_second_known,
            bytes_received: c.bytes_received,
            bytes_buffered: self.bytes_buffered,
            bytes_written: self.bytes_written,
            ring_frames: self.ring_frames,
            ring_slots: self.ring_slots,
            ring_fill: self.ring_fill,
            current_file: &self.current_file,
            current_file_bytes: self.current_file_bytes,
            files_closed: self.files_closed,
            scan_durable_frames: self.scan_durable.as_ref().map_or(0, |d| d.frames),
            scan_durable_bytes: self.scan_durable.as_ref().map_or(0, |d| d.bytes),
            scan_durable_up_to: self.scan_durable.as_ref().and_then(|d| d.up_to.as_deref()),
            latest_frame: c.latest_frame,
            seconds_since_datagram: c.seconds_since_datagram,
            socket_errors: c.socket_errors,
            last_socket_error: &c.last_socket_error,
            capture_cpu_s: c.capture_cpu_s,
            capture_setup_cpu_s: c.capture_setup_cpu_s,
            error: &self.error,
            streams: &self.streams,
            forward: &self.forward,
        }
        .serialize(s)
    }
}

/// The shape users see of a `Stats`: one level, the stream's totals named as in the summary.
#[derive(Serialize)]
struct StatsShape<'a> {
    state: &'a str,
    elapsed_s: f64,
    datagrams: u64,
    frames_received: u64,
    #[serde(flatten)]
    counts: StreamCounts,
    frames_expected: u64,
    threads: u32,
    datagrams_malformed: u64,
    datagrams_malformed_by_kind: &'a MalformedCounts,
    kernel_drops: u64,
    ring_overflows: u64,
    psn_lost: u64,
    psn_out_of_order: u64,
    frame_size: usize,
    frames_per_second: u32,
    /// Whether `frames_per_second` is known for sure, not yet a lower bound.
    frames_per_second_known: bool,
    bytes_received: u64,
    bytes_buffered: u64,
    bytes_written: u64,
    ring_frames: u64,
    ring_slots: u64,
    ring_fill: f64,
    current_file: &'a Option<String>,
    current_file_bytes: u64,
    files_closed: usize,
    /// Flat, as the VSI-S `stats?` reply lists the fields: 0, 0 and null between scans.
    scan_durable_frames: u64,
    scan_durable_bytes: u64,
    scan_durable_up_to: Option<&'a str>,
    latest_frame: Option<FrameTime>,
    seconds_since_datagram: Option<f64>,
    socket_errors: u64,
    last_socket_error: &'a Option<String>,
    capture_cpu_s: f64,
    capture_setup_cpu_s: f64,
    error: &'a Option<String>,
    streams: &'a [StreamStats],
    forward: &'a [crate::record::forward::ForwardStats],
}
