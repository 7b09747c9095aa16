//! The recorder: sets up the socket and the ring, runs the capture and writer threads,
//! reports while they run and summarises when they stop.

use crate::accounting::{Gap, ThreadTotals};
use crate::capture::afpacket::AfPacketBackend;
use crate::capture::pfring::PfRingBackend;
use crate::capture::udp::{UdpBackend, UdpConfig, UdpError, MAX_OFFSET};
use crate::capture::{self, Backend, CaptureSetup};
use crate::ring::{Ring, RingError, RingMemory};
use crate::stats::{CaptureStats, FileRecord, RecordRow, Stats, Summary};
use crate::writer::{self, Target, WriterConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(transparent)]
    Udp(#[from] UdpError),
    #[error(transparent)]
    AfPacket(#[from] crate::capture::afpacket::AfPacketError),
    #[error(transparent)]
    PfRing(#[from] crate::capture::pfring::PfRingError),
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error("{name}: {why}")]
    BadArgument { name: &'static str, why: String },
    #[error("{0} exists already; vdifrec never overwrites a recording: remove it or choose another --out")]
    OutputExists(PathBuf),
    #[error("directory {0} does not exist: create it first (mkdir -p {0})")]
    NoDirectory(PathBuf),
    #[error("cannot write in {path}: {source}")]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the capture thread could not start: {0}")]
    CaptureFailed(String),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    #[error(
        "cannot serve status on {addr}: {source} (choose another --status-listen address or port)"
    )]
    Status {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Which capture backend to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// A UDP socket (recvmmsg): works everywhere, no privileges.
    Udp,
    /// A TPACKET_V3 ring on an interface (CAP_NET_RAW).
    AfPacket { interface: String },
    /// PF_RING on an interface, `libpfring.so` loaded at run time (`library` overrides where
    /// from; `check_module` false skips the kernel-module check, for stand-in libraries).
    PfRing {
        interface: String,
        library: Option<PathBuf>,
        check_module: bool,
    },
}

/// Everything a recording needs to know.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub multicast: Option<IpAddr>,
    /// None: monitor without writing.
    pub target: Option<Target>,
    pub ring_bytes: u64,
    /// None: learned from the first valid frame.
    pub frame_size: Option<usize>,
    pub offset: usize,
    pub psn: bool,
    pub fps: Option<u32>,
    pub file_size: Option<u64>,
    pub capture_cpu: Option<usize>,
    pub writer_cpu: Option<usize>,
    /// With neither CPU given, pin the capture and writer to the last two CPUs this process
    /// may use, when it may use four or more (fewer: leave them to the scheduler).
    pub auto_pin: bool,
    pub direct: bool,
    pub rcvbuf: u64,
    pub huge_pages: bool,
    pub mlock: bool,
    /// Stop after this many frames are buffered.
    pub max_frames: Option<u64>,
    pub backend: BackendKind,
    /// Test aids for a slow or full disk (see WriterConfig).
    pub throttle: Option<u64>,
    pub disk_limit: Option<u64>,
    /// Headers arrive big-endian (each 32-bit word byte-swapped), as some senders write them.
    pub big_endian: bool,
    /// Serve GET /status and /metrics here (None: no status endpoint).
    pub status_listen: Option<SocketAddr>,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            multicast: None,
            target: None,
            ring_bytes: 1 << 30,
            frame_size: None,
            offset: 0,
            psn: false,
            fps: None,
            file_size: None,
            capture_cpu: None,
            writer_cpu: None,
            auto_pin: true,
            direct: true,
            rcvbuf: 256 << 20,
            huge_pages: true,
            mlock: true,
            max_frames: None,
            backend: BackendKind::Udp,
            throttle: None,
            disk_limit: None,
            big_endian: false,
            status_listen: None,
        }
    }
}

impl RecorderConfig {
    fn validate(&self) -> Result<(), RecordError> {
        let bad = |name, why: String| Err(RecordError::BadArgument { name, why });
        if self.offset > MAX_OFFSET {
            return bad(
                "offset",
                format!(
                    "{} bytes is more than the {MAX_OFFSET} vdifrec strips; a PSN is 8",
                    self.offset
                ),
            );
        }
        if self.psn && self.offset < 8 {
            return bad(
                "psn",
                "the 8-byte packet sequence number needs offset=8 (--offset 8)".into(),
            );
        }
        if let Some(fs) = self.frame_size {
            if fs % 8 != 0 || !(48..=65_536 - 8).contains(&fs) {
                return bad("frame_size", format!("{fs} bytes is not a VDIF frame size (a multiple of 8, header included, that fits a UDP datagram)"));
            }
        }
        if !matches!(self.backend, BackendKind::Udp) && self.port == 0 {
            return bad("port", "the afpacket and pfring backends select packets by port: give the stream's UDP port".into());
        }
        if self.fps == Some(0) {
            return bad("fps", "frames per second must be positive".into());
        }
        if self.ring_bytes < (1 << 20) {
            return bad(
                "ring",
                format!(
                    "{} bytes is too small: give at least 1MiB (default 1GiB)",
                    self.ring_bytes
                ),
            );
        }
        if self.file_size.is_some_and(|s| s < (1 << 20)) {
            return bad(
                "file_size",
                "rotate at 1MiB or more (e.g. --file-size 64GiB)".into(),
            );
        }
        if let Some(t) = &self.target {
            check_target(t)?;
        }
        for (name, cpu) in [
            ("capture_cpu", self.capture_cpu),
            ("writer_cpu", self.writer_cpu),
        ] {
            if let Some(c) = cpu {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                if c >= 4096 {
                    return bad(name, format!("cpu {c} does not exist (this host has {n})"));
                }
            }
        }
        Ok(())
    }
}

fn check_target(t: &Target) -> Result<(), RecordError> {
    let dir = match t {
        Target::File(p) => {
            if p.exists() {
                return Err(RecordError::OutputExists(p.clone()));
            }
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(PathBuf::from("."), |d| d.to_path_buf())
        }
        Target::Dir { dir, prefix } => {
            if prefix.is_empty()
                || prefix.contains('/')
                || prefix.contains('\0')
                || prefix.starts_with('.')
            {
                return Err(RecordError::BadArgument {
                    name: "prefix",
                    why: format!("{prefix:?} is not a plain file-name prefix (no '/', not starting with '.')"),
                });
            }
            dir.clone()
        }
    };
    if !dir.is_dir() {
        return Err(RecordError::NoDirectory(dir));
    }
    // Creating (and removing) a file proves we may write there.
    let probe = dir.join(format!(".vdifrec-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|source| RecordError::NotWritable {
        path: dir.clone(),
        source,
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A one-shot flag another thread can wait for.
pub struct Latch {
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
    pub fn wait_set(&self, v: bool) {
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

/// State shared by the recorder, the capture thread and the writer thread.
pub struct Shared {
    pub stop: AtomicBool,
    pub capture_done: AtomicBool,
    pub writer_done: AtomicBool,
    /// The capture ended without ever learning the frame size (so there is no ring).
    pub no_ring: AtomicBool,
    pub capture_ready: Latch,
    pub bytes_written: AtomicU64,
    ring: OnceLock<Arc<Ring>>,
    capture: Mutex<CaptureStats>,
    rows: Mutex<Vec<RecordRow>>,
    rows_cv: Condvar,
    /// The file being written (set when it opens and closes) and its size (every write).
    current_file: Mutex<Option<String>>,
    current_file_bytes: AtomicU64,
    files: Mutex<Vec<FileRecord>>,
    error: Mutex<Option<String>>,
    failed: AtomicBool,
    notes: Mutex<Vec<String>>,
    threads: Mutex<(Vec<ThreadTotals>, Vec<Gap>)>,
    /// CPU seconds the writer thread used (set when it ends).
    pub writer_cpu_s: Mutex<f64>,
    /// Whether frames go to disk, when the recording started, whether it has been summarised.
    has_writer: AtomicBool,
    started: Instant,
    started_unix: f64,
    stopped: AtomicBool,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            capture_done: AtomicBool::new(false),
            writer_done: AtomicBool::new(false),
            no_ring: AtomicBool::new(false),
            capture_ready: Latch::new(),
            bytes_written: AtomicU64::new(0),
            ring: OnceLock::new(),
            capture: Mutex::new(CaptureStats::default()),
            rows: Mutex::new(Vec::new()),
            rows_cv: Condvar::new(),
            current_file: Mutex::new(None),
            current_file_bytes: AtomicU64::new(0),
            files: Mutex::new(Vec::new()),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            notes: Mutex::new(Vec::new()),
            threads: Mutex::new((Vec::new(), Vec::new())),
            writer_cpu_s: Mutex::new(0.0),
            has_writer: AtomicBool::new(false),
            started: Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            stopped: AtomicBool::new(false),
        }
    }

    /// POSIX time the recording started.
    pub fn started_unix(&self) -> f64 {
        self.started_unix
    }

    /// The newest completed second, if any.
    pub fn last_row(&self) -> Option<RecordRow> {
        self.rows.lock().unwrap().last().cloned()
    }

    /// A snapshot of every counter now. Reading never blocks the capture thread (it skips a
    /// publication rather than wait for this lock).
    pub fn stats(&self) -> Stats {
        let capture = self.capture.lock().unwrap().clone();
        let ring = self.ring();
        let has_writer = self.has_writer.load(Ordering::Acquire);
        let (fill, slots) = ring.as_ref().map_or((0, 0), |r| {
            (if has_writer { r.fill() } else { 0 }, r.nslots())
        });
        let current = self.current_file.lock().unwrap().clone();
        let current_bytes = self.current_file_bytes.load(Ordering::Acquire);
        let state = if self.stopped.load(Ordering::Acquire) {
            "stopped"
        } else if self.failed() {
            "failed"
        } else if self.stop.load(Ordering::Acquire) {
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
            bytes_written: self.bytes_written.load(Ordering::Acquire),
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
            error: self.error_snapshot(),
            capture,
        }
    }

    pub fn ring(&self) -> Option<Arc<Ring>> {
        self.ring.get().cloned()
    }
    pub fn set_ring(&self, ring: Arc<Ring>) {
        let _ = self.ring.set(ring);
    }
    pub fn note(&self, text: String) {
        self.notes.lock().unwrap().push(text);
    }
    /// Records the first failure and stops the recording.
    pub fn fail(&self, why: String) {
        let mut e = self.error.lock().unwrap();
        if e.is_none() {
            *e = Some(why);
        }
        self.failed.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.rows_cv.notify_all();
    }
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
    pub fn notes_snapshot(&self) -> Vec<String> {
        self.notes.lock().unwrap().clone()
    }
    pub fn error_snapshot(&self) -> Option<String> {
        self.error.lock().unwrap().clone()
    }
    /// The capture's counters; skipped if a reader holds the lock (the capture never waits).
    pub fn publish_capture(&self, stats: &CaptureStats) {
        if let Ok(mut g) = self.capture.try_lock() {
            g.clone_from(stats);
        }
    }
    /// Final publication: waits for the lock.
    fn capture_stats(&self) -> CaptureStats {
        self.capture.lock().unwrap().clone()
    }
    pub fn push_rows(&self, rows: Vec<RecordRow>) {
        self.rows.lock().unwrap().extend(rows);
        self.rows_cv.notify_all();
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
    pub fn set_thread_totals(&self, t: Vec<ThreadTotals>, gaps: Vec<Gap>) {
        *self.threads.lock().unwrap() = (t, gaps);
    }

    /// Rows completed since `from` (an index into all rows of the recording).
    pub fn rows_from(&self, from: usize) -> Vec<RecordRow> {
        let rows = self.rows.lock().unwrap();
        rows.get(from..).map_or(Vec::new(), |r| r.to_vec())
    }

    /// Waits up to `timeout` for a row beyond `from`; returns the new rows (maybe none). Returns
    /// at once when the capture has ended.
    pub fn wait_rows(&self, from: usize, timeout: Duration) -> Vec<RecordRow> {
        let rows = self.rows.lock().unwrap();
        let (rows, _) = self
            .rows_cv
            .wait_timeout_while(rows, timeout, |r| {
                r.len() <= from && !self.capture_done.load(Ordering::Acquire) && !self.failed()
            })
            .unwrap();
        rows.get(from..).map_or(Vec::new(), |r| r.to_vec())
    }

    /// The capture has ended by itself (`max_frames` reached) or the recording failed.
    pub fn finished(&self) -> bool {
        self.capture_done.load(Ordering::Acquire) || self.failed()
    }
}

/// A capture backend ready to run.
struct OpenedBackend {
    backend: Box<dyn Backend>,
    /// Where the stream is taken from (the real port for the udp backend when 0 was asked).
    address: SocketAddr,
    /// What the backend reports to the operator about its set-up.
    notes: Vec<String>,
}

/// Opens the configured capture backend.
fn open_backend(config: &RecorderConfig) -> Result<OpenedBackend, RecordError> {
    // The raw backends bind nothing: they keep the packets for this port on an interface.
    let raw_addr = SocketAddr::new(config.bind, config.port);
    Ok(match &config.backend {
        BackendKind::AfPacket { interface } => {
            let (b, notes) = AfPacketBackend::open(interface, config.port, config.offset)?;
            OpenedBackend {
                backend: Box::new(b),
                address: raw_addr,
                notes,
            }
        }
        BackendKind::PfRing {
            interface,
            library,
            check_module,
        } => {
            let (b, notes) = PfRingBackend::open(
                interface,
                config.port,
                config.offset,
                library.as_deref(),
                *check_module,
            )?;
            OpenedBackend {
                backend: Box::new(b),
                address: raw_addr,
                notes,
            }
        }
        BackendKind::Udp => {
            let (b, addr, notes) = UdpBackend::bind(&UdpConfig {
                bind: config.bind,
                port: config.port,
                multicast: config.multicast,
                rcvbuf: config.rcvbuf as usize,
                offset: config.offset,
            })?;
            OpenedBackend {
                backend: Box::new(b),
                address: addr,
                notes,
            }
        }
    })
}

/// A running recording.
pub struct Recorder {
    shared: Arc<Shared>,
    capture: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
    config: RecorderConfig,
    started: Instant,
    summary: Option<Summary>,
    status: Option<crate::status::StatusServer>,
}

impl Recorder {
    /// Binds the socket, reserves the ring and starts the threads; returns once the socket
    /// is bound and the ring memory is allocated.
    pub fn start(mut config: RecorderConfig) -> Result<Recorder, RecordError> {
        config.validate()?;
        if config.auto_pin && config.capture_cpu.is_none() && config.writer_cpu.is_none() {
            let cpus: Vec<usize> = core_affinity::get_core_ids()
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.id)
                .collect();
            if cpus.len() >= 4 {
                config.capture_cpu = cpus.last().copied();
                config.writer_cpu = cpus.get(cpus.len() - 2).copied();
            }
        }
        let shared = Arc::new(Shared::new());
        shared
            .has_writer
            .store(config.target.is_some(), Ordering::Release);
        let OpenedBackend {
            backend,
            address: local_addr,
            notes,
        } = open_backend(&config)?;
        for n in notes {
            shared.note(n);
        }
        let memory = RingMemory::new(config.ring_bytes, config.huge_pages)?;
        let setup = CaptureSetup {
            shared: shared.clone(),
            memory,
            frame_size: config.frame_size,
            offset: config.offset,
            psn: config.psn,
            fps: config.fps,
            max_frames: config.max_frames,
            try_mlock: config.mlock,
            has_writer: config.target.is_some(),
            cpu: config.capture_cpu,
            big_endian: config.big_endian,
        };
        let capture = std::thread::Builder::new()
            .name("vdifrec-capture".into())
            .spawn(move || {
                crate::affinity::name_current("vdifrec-capture");
                capture::run(backend, setup)
            })
            .map_err(RecordError::Thread)?;
        let writer = match &config.target {
            Some(target) => {
                let wc = WriterConfig {
                    target: target.clone(),
                    file_size: config.file_size,
                    direct: config.direct,
                    cpu: config.writer_cpu,
                    throttle: config.throttle,
                    disk_limit: config.disk_limit,
                };
                let sh = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("vdifrec-writer".into())
                        .spawn(move || writer::run(sh, wc))
                        .map_err(RecordError::Thread)?,
                )
            }
            None => None,
        };
        let mut rec = Recorder {
            shared,
            capture: Some(capture),
            writer,
            local_addr,
            config,
            started: Instant::now(),
            summary: None,
            status: None,
        };
        // The capture thread allocates the ring's pages; wait for it (bounded).
        match rec.shared.capture_ready.wait(Duration::from_secs(120)) {
            Some(true) => {
                if let Some(addr) = rec.config.status_listen {
                    match crate::status::StatusServer::start(addr, rec.shared.clone()) {
                        Ok(server) => rec.status = Some(server),
                        Err(source) => {
                            rec.stop();
                            return Err(RecordError::Status { addr, source });
                        }
                    }
                }
                Ok(rec)
            }
            Some(false) => {
                let why = rec.shared.error.lock().unwrap().clone().unwrap_or_default();
                rec.stop();
                Err(RecordError::CaptureFailed(why))
            }
            None => {
                rec.stop();
                Err(RecordError::CaptureFailed(
                    "no answer from the capture thread within 120 s".into(),
                ))
            }
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where GET /status and /metrics are served, if they are.
    pub fn status_addr(&self) -> Option<SocketAddr> {
        self.status.as_ref().map(|s| s.local)
    }

    pub fn config(&self) -> &RecorderConfig {
        &self.config
    }

    pub fn ring(&self) -> Option<Arc<Ring>> {
        self.shared.ring()
    }

    pub fn notes(&self) -> Vec<String> {
        self.shared.notes.lock().unwrap().clone()
    }

    /// The capture has ended by itself: `max_frames` reached, or a failure (disk full).
    pub fn finished(&self) -> bool {
        self.shared.finished()
    }

    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().unwrap().clone()
    }

    /// A snapshot of every counter now.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The state the threads share: rows, counters, flags (for waiting without the recorder).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops: the capture ends within ~100 ms, the writer drains the ring to disk, then the
    /// summary. Calling it again returns the same summary.
    pub fn stop(&mut self) -> Summary {
        if let Some(s) = &self.summary {
            return s.clone();
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.capture.take() {
            if h.join().is_err() {
                self.shared.fail(
                    "the capture thread stopped unexpectedly (a bug: please report it)".into(),
                );
            }
        }
        // A capture that never started still counts as done for the writer.
        self.shared.capture_done.store(true, Ordering::Release);
        if let Some(h) = self.writer.take() {
            if h.join().is_err() {
                self.shared.fail(
                    "the writer thread stopped unexpectedly (a bug: please report it)".into(),
                );
            }
        }
        let summary = self.summarise();
        self.shared.stopped.store(true, Ordering::Release);
        // Watchers see the connection go away once the recording is summarised.
        self.status = None;
        self.summary = Some(summary.clone());
        summary
    }

    fn summarise(&self) -> Summary {
        let c = self.shared.capture_stats();
        let t = &c.totals;
        let files = self.shared.files.lock().unwrap().clone();
        let fs = c.frame_size as u64;
        let bytes_buffered = c.frames_received * fs;
        let bytes_written = self.shared.bytes_written.load(Ordering::Acquire);
        let (bytes_written, bytes_dropped_disk) = if self.config.target.is_some() {
            (bytes_written, bytes_buffered.saturating_sub(bytes_written))
        } else {
            (0, 0)
        };
        let file_sum: u64 = files.iter().map(|f| f.bytes).sum();
        // Monitoring writes nothing, so there is nothing to balance.
        let invariant_holds = self.config.target.is_none()
            || (bytes_buffered == bytes_written + bytes_dropped_disk && bytes_written == file_sum);
        let (threads, gaps) = self.shared.threads.lock().unwrap().clone();
        let mut error = self.error();
        if error.is_none() && bytes_dropped_disk > 0 {
            error = Some(format!(
                "{bytes_dropped_disk} bytes buffered were not written to disk"
            ));
        }
        Summary {
            frames_received: c.frames_received,
            frames_lost: t.counts.lost,
            frames_lost_network: t.counts.lost.saturating_sub(c.kernel_drops),
            frames_out_of_order: t.counts.out_of_order,
            frames_duplicate: t.counts.duplicates,
            frames_invalid: t.counts.invalid,
            frames_out_of_window: t.out_of_window,
            frames_late: t.late,
            time_jumps: t.time_jumps,
            datagrams: c.datagrams,
            datagrams_malformed: c.malformed.total(),
            datagrams_malformed_by_kind: c.malformed,
            kernel_drops: c.kernel_drops,
            ring_overflows: c.ring_overflows,
            psn_lost: self.config.psn.then_some(c.psn_lost),
            psn_out_of_order: self.config.psn.then_some(c.psn_out_of_order),
            frame_size: c.frame_size,
            frames_per_second: c.frames_per_second,
            bytes_buffered,
            bytes_written,
            bytes_dropped_disk,
            files,
            invariant_holds,
            error,
            duration_s: self.started.elapsed().as_secs_f64(),
            capture_cpu_s: c.capture_cpu_s,
            writer_cpu_s: *self.shared.writer_cpu_s.lock().unwrap(),
            threads,
            gaps,
            seconds: self.shared.rows.lock().unwrap().clone(),
            notes: self.notes(),
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if self.summary.is_none() {
            self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::SignalSpec;
    use crate::sender::{parse_drops, SendConfig, Sender};

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vdifrec-rec-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn spec() -> SignalSpec {
        SignalSpec {
            frame_size: 8224,
            fps: 2000,
            start: Some((53, 1000)),
            ..Default::default()
        }
    }

    #[test]
    fn records_exactly_what_was_sent() {
        let dir = tmpdir("exact");
        let out = dir.join("rec.vdif");
        let mut rec = Recorder::start(RecorderConfig {
            target: Some(Target::File(out.clone())),
            ring_bytes: 16 << 20,
            ..Default::default()
        })
        .unwrap();
        let mut cfg = SendConfig::new(rec.local_addr(), spec());
        cfg.frames = Some(3000);
        cfg.drops = parse_drops("0:100-109").unwrap();
        cfg.record_sent = Some(dir.join("sent.vdif"));
        let mut sender = Sender::start(cfg).unwrap();
        let sent = sender.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
        assert_eq!(sent.frames_sent, 2990);
        assert_eq!(sent.frames_dropped, 10);
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.stats().capture.frames_received < 2990 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let s = rec.stop();
        assert_eq!(s.frames_received, 2990, "{s:#?}");
        assert_eq!(s.frames_lost, 10);
        assert!(s.ok(), "{s:#?}");
        assert_eq!(s.bytes_written, 2990 * 8224);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(dir.join("sent.vdif")).unwrap()
        );
        assert_eq!(s.seconds.len(), 2);
        assert_eq!(s.seconds[0].second.counts.lost, 10);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stop_without_data_is_clean_and_prompt() {
        let mut rec = Recorder::start(RecorderConfig {
            target: Some(Target::Dir {
                dir: tmpdir("idle"),
                prefix: "idle".into(),
            }),
            ring_bytes: 4 << 20,
            ..Default::default()
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(120));
        let t = Instant::now();
        let s = rec.stop();
        assert!(t.elapsed() < Duration::from_millis(500));
        assert_eq!(s.frames_received, 0);
        assert!(s.files.is_empty());
        assert!(s.ok());
    }
}
