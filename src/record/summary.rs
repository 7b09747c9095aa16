//! The end of a recording: every counter of every stream, the files, the rows, the scans, and
//! the one verdict (`judge`) on whether everything buffered is on disk. Added up here
//! (`summarise`) from what the recorder hands over when it stops; serialised as Python and
//! `--summary-json` present it.

use crate::record::accounting::{Gap, ThreadTotals};
use crate::record::classify::MalformedCounts;
use crate::record::latency::LatencyReport;
use crate::record::scan::ScanSummary;
use crate::record::shared::Shared;
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
    /// What each forwarding destination did (empty: none). Forwarding never decides `ok`:
    /// the recording is judged by what reached the disk.
    pub forward: Vec<crate::record::forward::ForwardStats>,
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

/// What a recording ends with, as the recorder hands it over once its threads have stopped.
pub struct Ended<'a> {
    /// Every stream's port and state, the first first (its state also holds the run's files,
    /// rows and writer).
    pub streams: Vec<(u16, &'a Shared)>,
    /// The run writes what it buffers (to a target, or to scans' disks); monitoring does not.
    pub writes: bool,
    /// It writes to one target (a file or a directory) rather than to scans.
    pub to_target: bool,
    /// With disks: every scan, and the bytes buffered while none ran.
    pub scans: Option<(Vec<ScanSummary>, u64)>,
    /// Packet sequence numbers were checked; the live monitor was asked for.
    pub psn: bool,
    pub live: bool,
    /// The first failure of any stream.
    pub error: Option<String>,
    pub notes: Vec<String>,
    pub latency: Option<LatencyReport>,
    pub duration_s: f64,
}

/// The run's summary: each stream, their sums, where the bytes went, and the verdict.
pub fn summarise(run: Ended<'_>) -> Summary {
    let mut streams = Vec::new();
    let mut malformed = MalformedCounts::default();
    let mut counts = StreamCounts::default();
    let (mut psn_lost, mut psn_ooo, mut capture_cpu_s) = (0u64, 0u64, 0f64);
    let mut threads_all = Vec::new();
    for &(port, shared) in &run.streams {
        let c = shared.capture_stats();
        let (threads, _) = shared.thread_totals();
        let sc = StreamCounts::from(&c.totals);
        counts += sc;
        malformed += c.malformed;
        psn_lost += c.psn_lost;
        psn_ooo += c.psn_out_of_order;
        capture_cpu_s += c.capture_cpu_s;
        threads_all.extend(threads.iter().cloned());
        streams.push(StreamSummary {
            port,
            frames_received: c.frames_received,
            counts: sc,
            frames_lost_network: c.totals.counts.lost.saturating_sub(c.kernel_drops),
            datagrams: c.datagrams,
            datagrams_malformed: c.malformed.total(),
            kernel_drops: c.kernel_drops,
            ring_overflows: c.ring_overflows,
            frame_size: c.frame_size,
            frames_per_second: c.frames_per_second,
            bytes_buffered: c.frames_received * c.frame_size as u64,
            capture_cpu_s: c.capture_cpu_s,
            threads,
        });
    }
    let sum = |f: fn(&StreamSummary) -> u64| streams.iter().map(f).sum::<u64>();
    let frames_received = sum(|s| s.frames_received);
    let bytes_buffered = sum(|s| s.bytes_buffered);
    let kernel_drops = sum(|s| s.kernel_drops);
    let first = run.streams[0].1;
    let first_stats = first.capture_stats();
    // Where the bytes went: the writer's files, or the scans' (which say what they dropped).
    let (bytes_written, bytes_dropped_disk, files) = match &run.scans {
        Some((scans, _)) => (
            scans.iter().map(|s| s.bytes_written).sum(),
            scans.iter().map(|s| s.bytes_dropped_disk).sum(),
            scans.iter().flat_map(|s| s.files.iter().cloned()).collect(),
        ),
        None if run.to_target => {
            let written = first.bytes_written();
            (
                written,
                bytes_buffered.saturating_sub(written),
                first.files(),
            )
        }
        None => (0, 0, first.files()),
    };
    let (scans, bytes_outside_scans) = run.scans.unwrap_or_default();
    let headers: u64 = scans.iter().map(|s| s.bytes_headers).sum();
    let file_sum: u64 = files.iter().map(|f: &FileRecord| f.bytes).sum();
    // Monitoring writes nothing, so there is nothing to balance.
    let invariant_holds = !run.writes
        || (bytes_buffered == bytes_written + bytes_dropped_disk + bytes_outside_scans
            && bytes_written + headers == file_sum
            && scans.iter().all(|s| s.invariant_holds));
    let (_, gaps) = first.thread_totals();
    let error = run
        .error
        .or_else(|| {
            scans
                .iter()
                .find_map(|s| s.error.clone().map(|e| format!("scan {}: {e}", s.name)))
        })
        .or_else(|| {
            (bytes_dropped_disk > 0)
                .then(|| format!("{bytes_dropped_disk} bytes buffered were not written to disk"))
        });
    let live = run.live.then(|| first.live());
    Summary {
        frames_received,
        counts,
        frames_lost_network: counts.frames_lost.saturating_sub(kernel_drops),
        datagrams: sum(|s| s.datagrams),
        datagrams_malformed: malformed.total(),
        datagrams_malformed_by_kind: malformed,
        kernel_drops,
        ring_overflows: sum(|s| s.ring_overflows),
        psn_lost: run.psn.then_some(psn_lost),
        psn_out_of_order: run.psn.then_some(psn_ooo),
        frame_size: first_stats.frame_size,
        frames_per_second: first_stats.frames_per_second,
        bytes_buffered,
        bytes_written,
        bytes_dropped_disk,
        bytes_outside_scans,
        files,
        scans,
        streams,
        invariant_holds,
        error,
        duration_s: run.duration_s,
        capture_cpu_s,
        writer_cpu_s: first.writer_cpu_s(),
        threads: threads_all,
        gaps,
        seconds: first.rows(),
        notes: run.notes,
        latency: run.latency,
        live_computed: live.map(|l| l.computed()),
        live_skips: live.map(|l| l.skips()),
        live_cpu_s: live.map(|l| l.cpu_s()),
        forward: first.forward_stats(),
        ok: false,
    }
    .judge()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended<'a>(streams: Vec<(u16, &'a Shared)>, writes: bool) -> Ended<'a> {
        Ended {
            streams,
            writes,
            to_target: writes,
            scans: None,
            psn: false,
            live: false,
            error: None,
            notes: vec![],
            latency: None,
            duration_s: 1.0,
        }
    }

    #[test]
    fn a_run_without_frames_is_whole_and_a_failure_is_not() {
        let (a, b) = (Shared::new(true), Shared::new(true));
        let s = summarise(ended(vec![(5000, &a), (5001, &b)], true));
        assert_eq!(
            s.streams.iter().map(|s| s.port).collect::<Vec<_>>(),
            [5000, 5001]
        );
        assert!(s.ok && s.invariant_holds && s.error.is_none());
        assert_eq!((s.psn_lost, s.live_computed), (None, None));
        let failed = Ended {
            error: Some("disk full".into()),
            psn: true,
            ..ended(vec![(5000, &a)], true)
        };
        let s = summarise(failed);
        assert!(!s.ok && s.invariant_holds);
        assert_eq!(
            (s.error.as_deref(), s.psn_lost),
            (Some("disk full"), Some(0))
        );
    }
}
