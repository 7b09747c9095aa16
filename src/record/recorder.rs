//! The recorder: allocates the ring and opens the capture backend, runs the capture and
//! writer threads, reports while they run and summarises when they stop.

use crate::options::ArgError;
use crate::record::capture::afpacket::AfPacketBackend;
use crate::record::capture::pfring::PfRingBackend;
use crate::record::capture::udp::{UdpBackend, UdpConfig, UdpError};
use crate::record::capture::{self, Backend, CaptureSetup};
pub use crate::record::config::{BackendKind, RecorderConfig, RecorderOptions, Target};
use crate::record::ring::{RingError, RingMemory};
use crate::record::shared::Shared;
use crate::record::stats::{Stats, StreamCounts, Summary};
use crate::record::writer::{self, WriterConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    #[error(transparent)]
    Udp(#[from] UdpError),
    #[error(transparent)]
    AfPacket(#[from] crate::record::capture::afpacket::AfPacketError),
    #[error(transparent)]
    PfRing(#[from] crate::record::capture::pfring::PfRingError),
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error("path: {0} exists already; vdifrec never overwrites a recording: remove it or choose another path")]
    OutputExists(PathBuf),
    #[error("{name}: directory {dir} does not exist: create it first (mkdir -p {dir})")]
    NoDirectory { name: &'static str, dir: PathBuf },
    #[error("directory: {0} is a file, not a directory")]
    NotADirectory(PathBuf),
    #[error("{name}: cannot write in {path}: {source}")]
    NotWritable {
        name: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the capture thread could not start: {0}")]
    CaptureFailed(String),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    #[error(
        "status_listen: cannot serve status on {addr}: {source} (choose another address or port)"
    )]
    Status {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The output can be written: a file that does not exist yet in a directory we may write, or
/// a directory we may write.
fn check_target(t: &Target) -> Result<(), RecordError> {
    // Errors name the option the user gave: `path` (one file) or `directory`.
    let (name, dir) = match t {
        Target::File(p) => {
            if p.exists() {
                return Err(RecordError::OutputExists(p.clone()));
            }
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(PathBuf::from("."), |d| d.to_path_buf());
            ("path", dir)
        }
        Target::Dir { dir, .. } => {
            if dir.exists() && !dir.is_dir() {
                return Err(RecordError::NotADirectory(dir.clone()));
            }
            ("directory", dir.clone())
        }
    };
    if !dir.is_dir() {
        return Err(RecordError::NoDirectory { name, dir });
    }
    // Creating (and removing) a file proves we may write there.
    let probe = dir.join(format!(".vdifrec-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|source| RecordError::NotWritable {
        name,
        path: dir.clone(),
        source,
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// With neither CPU given and `auto_pin`, the capture and the writer take the last two CPUs
/// this process may use, when it may use four or more (fewer: the scheduler places them).
fn auto_pin(config: &mut RecorderConfig) {
    if !config.auto_pin || config.capture_cpu.is_some() || config.writer_cpu.is_some() {
        return;
    }
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

/// Runs `f` on a thread pinned to `cpu` (when given and permitted), so that the memory it
/// touches first is placed on that CPU's NUMA node.
fn on_cpu<T: Send>(cpu: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    let Some(cpu) = cpu else { return f() };
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = crate::affinity::pin_current("ring set-up", cpu);
            f()
        })
        .join()
        .expect("the ring set-up thread does not panic")
    })
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
    status: Option<crate::record::status::StatusServer>,
}

impl Recorder {
    /// Binds the socket, reserves the ring and starts the threads; returns once the socket
    /// is bound and the ring memory is allocated.
    pub fn start(mut config: RecorderConfig) -> Result<Recorder, RecordError> {
        // A configuration made in Rust gets the same checks as one made from options.
        config.check(true)?;
        if let Some(t) = &config.target {
            check_target(t)?;
        }
        auto_pin(&mut config);
        let shared = Arc::new(Shared::new(config.target.is_some()));
        // The ring is allocated, mapped and locked before the socket is bound: nothing that
        // arrives can be lost to an allocation, and a machine without the memory says so now.
        // Its pages are touched from the capture's CPU, so they lie on that CPU's NUMA node.
        let memory = on_cpu(config.capture_cpu, || {
            RingMemory::new(
                config.ring_bytes,
                config.huge_pages,
                config.mlock,
                config.frame_size,
            )
        })?;
        let has_writer = config.target.is_some();
        let memory = match config.frame_size {
            Some(fs) => {
                capture::install_ring(&shared, memory, fs, has_writer)?;
                None
            }
            None => {
                shared.note(format!(
                    "ring: {} allocated, laid out in slots when the first frame tells the frame size; {}",
                    crate::units::format_size(memory.bytes()),
                    memory.note()
                ));
                Some(memory)
            }
        };
        let OpenedBackend {
            backend,
            address: local_addr,
            notes,
        } = open_backend(&config)?;
        for n in notes {
            shared.note(n);
        }
        let setup = CaptureSetup {
            shared: shared.clone(),
            memory,
            frame_size: config.frame_size,
            offset: config.offset,
            psn: config.psn,
            fps: config.fps,
            max_frames: config.max_frames,
            has_writer,
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
        // The capture thread pins itself and says it is receiving; wait for it (bounded).
        match rec.shared.wait_capture_ready(Duration::from_secs(30)) {
            Some(true) => {}
            Some(false) => {
                let why = rec.shared.error().unwrap_or_default();
                rec.stop();
                return Err(RecordError::CaptureFailed(why));
            }
            None => {
                rec.stop();
                return Err(RecordError::CaptureFailed(
                    "no answer from the capture thread within 30 s".into(),
                ));
            }
        }
        if let Some(addr) = rec.config.status_listen {
            match crate::record::status::StatusServer::start(addr, rec.shared.clone()) {
                Ok(server) => rec.status = Some(server),
                Err(source) => {
                    rec.stop();
                    return Err(RecordError::Status { addr, source });
                }
            }
        }
        Ok(rec)
    }

    /// Where the stream is taken from, for the operator (`127.0.0.1:46227`, or
    /// `eth2:46227 (afpacket)` for the raw backends).
    pub fn source(&self) -> String {
        self.config.source(self.local_addr.port())
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

    pub fn ring(&self) -> Option<Arc<crate::record::ring::Ring>> {
        self.shared.ring()
    }

    pub fn notes(&self) -> Vec<String> {
        self.shared.notes()
    }

    /// The capture has ended by itself: `max_frames` reached, or a failure (disk full).
    pub fn finished(&self) -> bool {
        self.shared.finished()
    }

    pub fn error(&self) -> Option<String> {
        self.shared.error()
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
        self.shared.request_stop();
        if let Some(h) = self.capture.take() {
            if h.join().is_err() {
                self.shared.fail(
                    "the capture thread stopped unexpectedly (a bug: please report it)".into(),
                );
            }
        }
        // A capture that never started still counts as done for the writer.
        self.shared.set_capture_done();
        if let Some(h) = self.writer.take() {
            if h.join().is_err() {
                self.shared.fail(
                    "the writer thread stopped unexpectedly (a bug: please report it)".into(),
                );
            }
        }
        let summary = self.summarise();
        self.shared.set_stopped();
        // Watchers see the connection go away once the recording is summarised.
        self.status = None;
        self.summary = Some(summary.clone());
        summary
    }

    fn summarise(&self) -> Summary {
        let c = self.shared.capture_stats();
        let t = &c.totals;
        let files = self.shared.files();
        let fs = c.frame_size as u64;
        let bytes_buffered = c.frames_received * fs;
        let bytes_written = self.shared.bytes_written();
        let (bytes_written, bytes_dropped_disk) = if self.config.target.is_some() {
            (bytes_written, bytes_buffered.saturating_sub(bytes_written))
        } else {
            (0, 0)
        };
        let file_sum: u64 = files.iter().map(|f| f.bytes).sum();
        // Monitoring writes nothing, so there is nothing to balance.
        let invariant_holds = self.config.target.is_none()
            || (bytes_buffered == bytes_written + bytes_dropped_disk && bytes_written == file_sum);
        let (threads, gaps) = self.shared.thread_totals();
        let mut error = self.error();
        if error.is_none() && bytes_dropped_disk > 0 {
            error = Some(format!(
                "{bytes_dropped_disk} bytes buffered were not written to disk"
            ));
        }
        Summary {
            frames_received: c.frames_received,
            counts: StreamCounts::from(t),
            frames_lost_network: t.counts.lost.saturating_sub(c.kernel_drops),
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
            writer_cpu_s: self.shared.writer_cpu_s(),
            threads,
            gaps,
            seconds: self.shared.rows(),
            notes: self.notes(),
            ok: false,
        }
        .judge()
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
    use crate::tools::generate::SignalSpec;
    use crate::tools::sender::{parse_drops, SendConfig, Sender};

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
            ref_epoch: Some(53),
            start_second: Some(1000),
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
            frame_size: Some(8224),
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
        assert_eq!(s.counts.frames_lost, 10);
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
    fn a_configuration_made_in_rust_is_checked_at_start() {
        let bad = |c: RecorderConfig| match Recorder::start(c) {
            Err(RecordError::BadArgument(e)) => e.name,
            other => panic!("expected a bad argument, got {:?}", other.map(|_| ())),
        };
        let psn = RecorderConfig {
            psn: true,
            ..Default::default()
        };
        assert_eq!(bad(psn), "psn");
        let small = RecorderConfig {
            ring_bytes: 4 << 20,
            ..Default::default()
        };
        assert_eq!(bad(small), "ring");
        let huge_frame = RecorderConfig {
            frame_size: Some(65_512),
            ..Default::default()
        };
        assert_eq!(bad(huge_frame), "frame_size");
    }

    #[test]
    fn stop_without_data_is_clean_and_prompt() {
        let mut rec = Recorder::start(RecorderConfig {
            target: Some(Target::Dir {
                dir: tmpdir("idle"),
                prefix: "idle".into(),
            }),
            ring_bytes: 4 << 20,
            frame_size: Some(8224),
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
