//! What the recorder's threads share: the stop and done flags, the ring once it is laid out,
//! the capture's published counters, the per-second rows, the files written, notes and the
//! first error.
//!
//! It sits below the threads: capture, writer, status and the live monitor use it, the
//! recorder creates it and reads it at the end, and it uses none of them (the monitor's
//! results it holds are `live::state`, which sits below the monitor too). The capture thread
//! never waits here: it publishes its counters with `try_lock` and skips a publication rather
//! than block.

use crate::record::accounting::{Gap, ThreadTotals};
use crate::record::forward::{ForwardRow, ForwardStats, Link};
use crate::record::ring::Ring;
use crate::record::scan::unclosed::UnclosedScan;
use crate::record::stats::{CaptureStats, FileRecord, RecordRow, ScanDurable, Stats};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A one-shot answer another thread can wait for.
struct Latch {
    value: Mutex<Option<bool>>,
    cv: Condvar,
}

impl Latch {
    fn new() -> Latch {
        Latch {
            value: Mutex::new(None),
            cv: Condvar::new(),
        }
    }

    fn set(&self, v: bool) {
        *self.value.lock().unwrap() = Some(v);
        self.cv.notify_all();
    }

    fn wait(&self, timeout: Duration) -> Option<bool> {
        let g = self.value.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |v| v.is_none())
            .unwrap();
        *g
    }
}

/// What every stream of a recording shares: the per-second rows (of all streams, in the
/// order they complete) and the frames all streams together may still buffer.
struct Common {
    rows: Mutex<Vec<RecordRow>>,
    rows_cv: Condvar,
    /// Frames the streams may still take for batches, together (`u64::MAX`: no limit).
    frames_left: AtomicU64,
    /// The limit, and the frames the streams have buffered under it.
    frames_limit: AtomicU64,
    frames_buffered: AtomicU64,
    /// Senders in order of first arrival, over every stream (their keys, `capture::sender_key`).
    senders: Mutex<Vec<u64>>,
    /// The scan being written (from its start until its tail is on disk), for the status.
    scan: Mutex<Option<String>>,
    /// The disks that scan is being written to (those still in the set), for the status.
    scan_disks: Mutex<Vec<String>>,
    /// How much of that scan is known to be on disk, for the status.
    scan_durable: Mutex<Option<ScanDurable>>,
    /// Why the last scan ended by itself (every disk of the set full or failed), until the
    /// next scan starts, for the status.
    scan_ended: Mutex<Option<String>>,
    /// Scans no recorder closed, found on the disks at start (a crash), for the status.
    unclosed: Mutex<Vec<UnclosedScan>>,
    /// The observation a schedule drives, as its script last told it, for the status.
    observation: Mutex<Option<crate::record::observing::Observation>>,
    /// The forwarding destinations of the run (removed ones too: their accounting stays),
    /// and each one's counters at the previous row, for the rows' per-second changes.
    forward: Mutex<Vec<Arc<Link>>>,
    forward_at_row: Mutex<(Instant, Vec<ForwardStats>)>,
}

/// State shared by the recorder, the capture thread, the writer thread and the status server
/// (one per stream; the streams of a recording share their rows and frame limit).
pub struct Shared {
    stop: AtomicBool,
    capture_done: AtomicBool,
    capture_ready: Latch,
    bytes_written: AtomicU64,
    ring: OnceLock<Arc<Ring>>,
    capture: Mutex<CaptureStats>,
    common: Arc<Common>,
    /// The file being written (set when it opens and closes) and its size (every write).
    current_file: Mutex<Option<String>>,
    current_file_bytes: AtomicU64,
    files: Mutex<Vec<FileRecord>>,
    error: Mutex<Option<String>>,
    failed: AtomicBool,
    notes: Mutex<Vec<String>>,
    threads: Mutex<(Vec<ThreadTotals>, Vec<Gap>)>,
    /// CPU seconds the writer thread used (set when it ends).
    writer_cpu_s: Mutex<f64>,
    /// Whether frames go to disk (the ring's fill means nothing otherwise).
    has_writer: bool,
    started: Instant,
    started_unix: f64,
    stopped: AtomicBool,
    /// The stream's port, once bound.
    port: OnceLock<u16>,
    /// What the live quality monitor found (views of the first stream only).
    live: crate::record::live::state::LiveState,
    /// Per-stage latency stamps, when asked for (set before the threads start).
    latency: OnceLock<crate::record::latency::Latency>,
}

/// A snapshot of every stream of a recording: the first's, with the others' counters added
/// and each listed in `streams`.
pub fn stats_of(streams: &[Arc<Shared>]) -> Stats {
    let mut st = streams[0].stats();
    let mut each = vec![crate::record::stats::StreamStats::of(
        streams[0].port(),
        &st,
    )];
    for s in &streams[1..] {
        let o = s.stats();
        each.push(crate::record::stats::StreamStats::of(s.port(), &o));
        st.capture.merge(&o.capture);
        st.bytes_buffered += o.bytes_buffered;
        st.ring_frames += o.ring_frames;
        st.ring_slots += o.ring_slots;
        st.error = st.error.or(o.error);
    }
    if st.ring_slots > 0 {
        st.ring_fill = st.ring_frames as f64 / st.ring_slots as f64;
    }
    st.streams = each;
    st.forward = streams[0].forward_stats();
    st
}

impl Shared {
    pub fn new(has_writer: bool) -> Shared {
        let common = Arc::new(Common {
            rows: Mutex::new(Vec::new()),
            rows_cv: Condvar::new(),
            frames_left: AtomicU64::new(u64::MAX),
            frames_limit: AtomicU64::new(u64::MAX),
            frames_buffered: AtomicU64::new(0),
            senders: Mutex::new(Vec::new()),
            scan: Mutex::new(None),
            scan_disks: Mutex::new(Vec::new()),
            scan_ended: Mutex::new(None),
            scan_durable: Mutex::new(None),
            unclosed: Mutex::new(Vec::new()),
            observation: Mutex::new(None),
            forward: Mutex::new(Vec::new()),
            forward_at_row: Mutex::new((Instant::now(), Vec::new())),
        });
        Shared::with_common(has_writer, common)
    }

    /// Another stream of the same recording: its rows and frame limit are `first`'s.
    pub fn another_stream(&self) -> Shared {
        Shared::with_common(self.has_writer, self.common.clone())
    }

    fn with_common(has_writer: bool, common: Arc<Common>) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            capture_done: AtomicBool::new(false),
            capture_ready: Latch::new(),
            bytes_written: AtomicU64::new(0),
            ring: OnceLock::new(),
            capture: Mutex::new(CaptureStats::default()),
            common,
            current_file: Mutex::new(None),
            current_file_bytes: AtomicU64::new(0),
            files: Mutex::new(Vec::new()),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            notes: Mutex::new(Vec::new()),
            threads: Mutex::new((Vec::new(), Vec::new())),
            writer_cpu_s: Mutex::new(0.0),
            has_writer,
            started: Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            stopped: AtomicBool::new(false),
            port: OnceLock::new(),
            live: Default::default(),
            latency: OnceLock::new(),
        }
    }

    // -- flags ------------------------------------------------------------------------

    /// Asks every thread to stop (the capture ends within ~100 ms, the writer drains).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The capture has ended: what is in the ring now is all there will be.
    pub fn set_capture_done(&self) {
        self.capture_done.store(true, Ordering::Release);
        self.common.rows_cv.notify_all();
    }
    pub fn capture_done(&self) -> bool {
        self.capture_done.load(Ordering::Acquire)
    }

    /// The capture thread says whether its set-up worked.
    pub fn set_capture_ready(&self, ok: bool) {
        self.capture_ready.set(ok);
    }
    /// Waits (bounded) for the capture thread's answer; None if it gave none in time.
    pub fn wait_capture_ready(&self, timeout: Duration) -> Option<bool> {
        self.capture_ready.wait(timeout)
    }

    /// The summary has been made; status readers see "stopped".
    pub fn set_stopped(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Records the first failure and stops the recording.
    pub fn fail(&self, why: String) {
        let mut e = self.error.lock().unwrap();
        if e.is_none() {
            *e = Some(why);
        }
        self.failed.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.common.rows_cv.notify_all();
    }
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap().clone()
    }

    /// The capture has ended by itself (`max_frames` reached) or the recording failed.
    pub fn finished(&self) -> bool {
        self.capture_done() || self.failed()
    }

    // -- the ring ---------------------------------------------------------------------

    pub fn ring(&self) -> Option<Arc<Ring>> {
        self.ring.get().cloned()
    }
    /// The ring, laid out in slots once the frame size is known.
    pub fn set_ring(&self, ring: Arc<Ring>) {
        let _ = self.ring.set(ring);
    }

    // -- the frame limit (all streams together) -----------------------------------------

    /// Limits the frames all streams together may buffer.
    pub fn limit_frames(&self, n: u64) {
        self.common.frames_left.store(n, Ordering::Release);
        self.common.frames_limit.store(n, Ordering::Release);
    }
    /// Takes up to `want` frames of the limit for a batch (0: none left).
    pub fn grant_frames(&self, want: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .common
            .frames_left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                if left == u64::MAX {
                    granted = want;
                    return None;
                }
                granted = want.min(left);
                Some(left - granted)
            });
        granted
    }
    /// A batch buffered `used` of the `granted` frames; the rest goes back.
    pub fn settle_frames(&self, granted: u64, used: u64) {
        // Without a limit there is nothing to count (and no cache line to share between the
        // streams' captures).
        if self.common.frames_limit.load(Ordering::Acquire) == u64::MAX {
            return;
        }
        self.common
            .frames_buffered
            .fetch_add(used, Ordering::AcqRel);
        let n = granted - used;
        if n > 0 {
            let _ =
                self.common
                    .frames_left
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                        (left != u64::MAX).then(|| left + n)
                    });
        }
    }
    /// Whether the streams together have not yet buffered the limit (a stream whose batch
    /// finds none left for now waits: another may give frames back).
    pub fn frames_left(&self) -> bool {
        self.common.frames_buffered.load(Ordering::Acquire)
            < self.common.frames_limit.load(Ordering::Acquire)
    }

    // -- senders (scans split by sender) ------------------------------------------------

    /// The index of sender `key` in order of first arrival over all streams (a capture asks
    /// only for a sender it has not seen before).
    pub fn sender_index(&self, key: u64) -> u16 {
        let mut v = self.common.senders.lock().unwrap();
        let i = v.iter().position(|k| *k == key).unwrap_or_else(|| {
            v.push(key);
            v.len() - 1
        });
        i.min(u16::MAX as usize) as u16
    }

    /// Sender `index` as an address, for the operator.
    pub fn sender_text(&self, index: u16) -> String {
        let v = self.common.senders.lock().unwrap();
        match v.get(index as usize) {
            Some(k) if k >> 48 == 1 => {
                let ip = std::net::Ipv4Addr::from(((k >> 16) & 0xffff_ffff) as u32);
                format!("{ip}:{}", k & 0xffff)
            }
            Some(_) => "an IPv6 sender".into(),
            None => "unknown".into(),
        }
    }

    // -- scans ----------------------------------------------------------------------------

    /// The scan now written (its name on disk), or None once it is closed: set by the scan
    /// gate as the scan starts and ends, read by the status.
    pub fn set_scan(&self, name: Option<String>) {
        if name.is_none() {
            self.common.scan_disks.lock().unwrap().clear();
        }
        // A scan starts with nothing on disk; between scans there is no figure.
        *self.common.scan_durable.lock().unwrap() = name.as_ref().map(|_| ScanDurable::default());
        *self.common.scan.lock().unwrap() = name;
    }
    pub fn scan(&self) -> Option<String> {
        self.common.scan.lock().unwrap().clone()
    }

    /// Why the last scan ended by itself (None: it was stopped, or a scan runs since).
    pub fn set_scan_ended(&self, why: Option<String>) {
        *self.common.scan_ended.lock().unwrap() = why;
    }
    pub fn scan_ended(&self) -> Option<String> {
        self.common.scan_ended.lock().unwrap().clone()
    }

    /// The disks the scan now written goes to (a disk that fills or fails leaves the list):
    /// set by the scan gate, cleared with the scan, read by the status.
    pub fn set_scan_disks(&self, disks: Vec<String>) {
        *self.common.scan_disks.lock().unwrap() = disks;
    }
    pub fn scan_disks(&self) -> Vec<String> {
        self.common.scan_disks.lock().unwrap().clone()
    }

    /// How much of the scan now written is known to be on disk: set by the scan gate as its
    /// durable prefix grows (after the bytes written that hold it), cleared with the scan.
    pub fn set_scan_durable(&self, durable: ScanDurable) {
        let mut d = self.common.scan_durable.lock().unwrap();
        if d.is_some() {
            *d = Some(durable);
        }
    }
    pub fn scan_durable(&self) -> Option<ScanDurable> {
        self.common.scan_durable.lock().unwrap().clone()
    }

    /// The scans no recorder closed that were on the disks when the recorder started.
    pub fn set_unclosed_scans(&self, found: Vec<UnclosedScan>) {
        *self.common.unclosed.lock().unwrap() = found;
    }
    pub fn unclosed_scans(&self) -> Vec<UnclosedScan> {
        self.common.unclosed.lock().unwrap().clone()
    }

    /// The observation a schedule drives (`vdifrec observe`), as its script tells it.
    pub fn set_observation(&self, o: Option<crate::record::observing::Observation>) {
        *self.common.observation.lock().unwrap() = o;
    }
    pub fn observation(&self) -> Option<crate::record::observing::Observation> {
        self.common.observation.lock().unwrap().clone()
    }

    // -- what the threads report ------------------------------------------------------

    pub fn note(&self, text: String) {
        self.notes.lock().unwrap().push(text);
    }
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap().clone()
    }

    /// The capture's counters; skipped if a reader holds the lock (the capture never waits).
    pub fn publish_capture(&self, stats: &CaptureStats) {
        if let Ok(mut g) = self.capture.try_lock() {
            g.clone_from(stats);
        }
    }
    /// The capture's last publication (waits for the lock: for the summary, not the capture).
    pub fn capture_stats(&self) -> CaptureStats {
        self.capture.lock().unwrap().clone()
    }

    pub fn push_rows(&self, mut rows: Vec<RecordRow>) {
        if let Some(last) = rows.last_mut() {
            last.forward = self.forward_since_last_row();
        }
        self.common.rows.lock().unwrap().extend(rows);
        self.common.rows_cv.notify_all();
    }

    // -- forwarding ---------------------------------------------------------------------

    /// A forwarding destination joins the run's accounting.
    pub fn add_forward_link(&self, link: Arc<Link>) {
        self.common.forward.lock().unwrap().push(link);
    }
    /// Every destination's counters now (removed ones too).
    pub fn forward_stats(&self) -> Vec<ForwardStats> {
        let links = self.common.forward.lock().unwrap().clone();
        links.iter().map(|l| l.snapshot()).collect()
    }
    /// What each destination did since the previous row (of any stream).
    fn forward_since_last_row(&self) -> Vec<ForwardRow> {
        let now = self.forward_stats();
        if now.is_empty() {
            return Vec::new();
        }
        let mut at = self.common.forward_at_row.lock().unwrap();
        let seconds = at.0.elapsed().as_secs_f64();
        let rows = now
            .iter()
            .map(|s| ForwardRow::between(at.1.iter().find(|b| b.id == s.id), s, seconds))
            .collect();
        *at = (Instant::now(), now);
        rows
    }
    /// Every completed second so far.
    pub fn rows(&self) -> Vec<RecordRow> {
        self.common.rows.lock().unwrap().clone()
    }
    /// The newest `n` rows (all streams'), copied under the lock the capture takes to add
    /// rows: only the tail, never the whole recording's.
    pub fn last_rows(&self, n: usize) -> Vec<RecordRow> {
        let rows = self.common.rows.lock().unwrap();
        rows[rows.len().saturating_sub(n)..].to_vec()
    }
    /// The newest completed second of stream `port`, if any.
    pub fn last_row_of(&self, port: u16) -> Option<RecordRow> {
        let rows = self.common.rows.lock().unwrap();
        rows.iter().rev().find(|r| r.stream == port).cloned()
    }
    /// The newest completed second, if any.
    pub fn last_row(&self) -> Option<RecordRow> {
        self.common.rows.lock().unwrap().last().cloned()
    }
    /// Waits up to `timeout` for a row beyond `from`; returns the new rows (maybe none). Returns
    /// at once when the capture has ended.
    pub fn wait_rows(&self, from: usize, timeout: Duration) -> Vec<RecordRow> {
        let rows = self.common.rows.lock().unwrap();
        let (rows, _) = self
            .common
            .rows_cv
            .wait_timeout_while(rows, timeout, |r| r.len() <= from && !self.finished())
            .unwrap();
        rows.get(from..).map_or(Vec::new(), |r| r.to_vec())
    }

    /// Per-thread totals and gaps, set once by the capture when it ends.
    pub fn set_thread_totals(&self, t: Vec<ThreadTotals>, gaps: Vec<Gap>) {
        *self.threads.lock().unwrap() = (t, gaps);
    }
    pub fn thread_totals(&self) -> (Vec<ThreadTotals>, Vec<Gap>) {
        self.threads.lock().unwrap().clone()
    }

    // -- the writer -------------------------------------------------------------------

    /// Bytes on disk so far (the writer's running total).
    pub fn set_bytes_written(&self, bytes: u64) {
        self.bytes_written.store(bytes, Ordering::Release);
    }
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Acquire)
    }
    /// A file opened (its size starts at 0) or, with None, closed.
    pub fn set_current_file(&self, path: Option<String>) {
        self.current_file_bytes.store(0, Ordering::Release);
        *self.current_file.lock().unwrap() = path;
    }
    /// The current file's size after a write (no lock, no allocation: called per write).
    pub fn set_current_file_bytes(&self, bytes: u64) {
        self.current_file_bytes.store(bytes, Ordering::Release);
    }
    pub fn add_file(&self, f: FileRecord) {
        self.files.lock().unwrap().push(f);
    }
    pub fn files(&self) -> Vec<FileRecord> {
        self.files.lock().unwrap().clone()
    }
    pub fn set_writer_cpu_s(&self, s: f64) {
        *self.writer_cpu_s.lock().unwrap() = s;
    }
    pub fn writer_cpu_s(&self) -> f64 {
        *self.writer_cpu_s.lock().unwrap()
    }

    // -- snapshots --------------------------------------------------------------------

    /// The stream's port (set once it is bound; 0 before).
    pub fn set_port(&self, port: u16) {
        let _ = self.port.set(port);
    }
    pub fn port(&self) -> u16 {
        self.port.get().copied().unwrap_or(0)
    }

    /// Turns the latency stamps on (before the threads start).
    pub fn enable_latency(&self) {
        let _ = self.latency.set(Default::default());
    }
    /// The latency stamps, when on.
    pub fn latency(&self) -> Option<&crate::record::latency::Latency> {
        self.latency.get()
    }

    /// The live monitor's results (empty when it does not run).
    pub fn live(&self) -> &crate::record::live::state::LiveState {
        &self.live
    }

    /// POSIX time the recording started.
    pub fn started_unix(&self) -> f64 {
        self.started_unix
    }

    /// A snapshot of every counter now. Reading never blocks the capture thread (it skips a
    /// publication rather than wait for this lock).
    pub fn stats(&self) -> Stats {
        // Before the bytes written: the gate sets them before the durable prefix they hold,
        // so what is durable never reads as more than what was written.
        let scan_durable = self.scan_durable();
        let capture = self.capture.lock().unwrap().clone();
        let (fill, slots) = self.ring().map_or((0, 0), |r| {
            (if self.has_writer { r.fill() } else { 0 }, r.nslots())
        });
        let current = self.current_file.lock().unwrap().clone();
        let current_bytes = self.current_file_bytes.load(Ordering::Acquire);
        let state = if self.stopped.load(Ordering::Acquire) {
            "stopped"
        } else if self.failed() {
            "failed"
        } else if self.stop_requested() {
            "stopping"
        } else if capture.frames_received == 0 {
            "waiting"
        } else {
            "recording"
        };
        Stats {
            state,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            bytes_buffered: capture.frames_received * capture.frame_size as u64,
            bytes_written: self.bytes_written(),
            ring_frames: fill,
            ring_slots: slots,
            ring_fill: if slots > 0 {
                fill as f64 / slots as f64
            } else {
                0.0
            },
            current_file_bytes: if current.is_some() { current_bytes } else { 0 },
            current_file: current,
            files_closed: self.files.lock().unwrap().len(),
            scan_durable,
            error: self.error(),
            capture,
            streams: Vec::new(),
            // The streams share one board of destinations: `stats_of` adds it once.
            forward: Vec::new(),
        }
    }
}
