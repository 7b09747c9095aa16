//! The recorder wires a recording together: it checks where the output goes (`target`) and
//! opens the disks of scans (`scan::disks`), allocates each stream's ring on its capture's CPU
//! and opens its backend (`capture::open`), pins the threads as `affinity` decides, starts the
//! capture, writer, scan gate, status and live monitor threads, hands scans to the gate as
//! `scan::plan` plans them, and when the threads stop asks each part for its report, which
//! `summary` adds up. What each part does is decided in that part; here they are only put
//! together.

use crate::affinity;
use crate::options::ArgError;
use crate::record::capture::open::{open_backend, OpenError, OpenedBackend};
use crate::record::capture::{self, CaptureSetup};
pub use crate::record::config::{
    BackendKind, PortOption, RecorderConfig, RecorderOptions, StreamAddr, Target,
};
use crate::record::forward::{Destination, ForwardStats, Forwarding};
use crate::record::live::{Analyser, LiveMonitor};
use crate::record::ring::{RingError, RingMemory};
use crate::record::scan::disks::{open_disks, unused_name, DiskSet};
use crate::record::scan::gate::Gate;
use crate::record::scan::plan::{self, Asked};
use crate::record::scan::unclosed;
use crate::record::scan::window::Window;
use crate::record::scan::{ScanRequest, ScanSummary};
use crate::record::shared::Shared;
use crate::record::stats::Stats;
use crate::record::summary::{summarise, Ended, Summary};
use crate::record::target::{check_target, TargetError};
use crate::record::writer::{self, WriterConfig};
use crate::vdif::layout;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    #[error(transparent)]
    Backend(#[from] OpenError),
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error(transparent)]
    Target(#[from] TargetError),
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

#[derive(Debug, Error)]
pub enum ScanCommandError {
    #[error("disks: this recorder has no disks to write scans to: give disks=[...] (--disk DIR)")]
    NoDisks,
    #[error("scan {0} is running: stop it first (stop_scan, record=off), or give the new scan a start at or after its stop to queue it")]
    Busy(String),
    #[error("no scan is running")]
    NoScan,
    #[error("the recording has ended: start a new recorder for more scans")]
    Finished,
    #[error("name: {0}")]
    BadName(String),
    #[error("{name}: {why}")]
    BadTime { name: &'static str, why: String },
    #[error("disks: every disk has left the set (full or failed): see the last scan's summary")]
    NoDiskLeft,
}

/// One stream of a recording: its capture thread, its ring (in `shared`), its address.
struct StreamRun {
    shared: Arc<Shared>,
    capture: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
}

/// Allocates stream `addr`'s ring, opens its backend and starts its capture thread.
fn start_stream(
    config: &RecorderConfig,
    addr: StreamAddr,
    shared: Arc<Shared>,
    cpu: Option<usize>,
) -> Result<StreamRun, RecordError> {
    if config.latency {
        shared.enable_latency();
    }
    // The ring is allocated, mapped and locked before the socket is bound: nothing that
    // arrives can be lost to an allocation, and a machine without the memory says so now.
    // Its pages are touched from the capture's CPU, so they lie on that CPU's NUMA node.
    let memory = affinity::on_cpu("ring set-up", cpu, || {
        RingMemory::new(
            config.ring_bytes,
            config.huge_pages,
            config.mlock,
            config.frame_size,
        )
    })?;
    let has_writer = config.writes();
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
    let mut c = config.clone();
    (c.bind, c.port) = (addr.bind, addr.port);
    let OpenedBackend {
        backend,
        address: local_addr,
        notes,
    } = open_backend(&c)?;
    shared.set_port(local_addr.port());
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
        stream: local_addr.port(),
        has_writer,
        cpu,
        big_endian: config.big_endian,
        tag_senders: config.tags_senders(),
    };
    let capture = std::thread::Builder::new()
        .name("vdifrec-capture".into())
        .spawn(move || {
            affinity::name_current("vdifrec-capture");
            capture::run(backend, setup)
        })
        .map_err(RecordError::Thread)?;
    Ok(StreamRun {
        shared,
        capture: Some(capture),
        local_addr,
    })
}

/// A running recording.
pub struct Recorder {
    /// The first stream's state (the views, the status, the rows of every stream).
    shared: Arc<Shared>,
    /// Every stream, the first included.
    streams: Vec<StreamRun>,
    writer: Option<JoinHandle<()>>,
    /// Scans: the gate that follows the rings, and the disks (None without disks).
    gate: Option<Gate>,
    disks: Option<Arc<DiskSet>>,
    /// Scan names used in this run (a repeated name gets a suffix even before it is on disk).
    scan_names: Vec<String>,
    /// The CPUs the captures are pinned to (scan writers keep off them).
    capture_cpus: Vec<usize>,
    config: RecorderConfig,
    started: Instant,
    summary: Option<Summary>,
    status: Option<crate::record::status::StatusServer>,
    live: Option<LiveMonitor>,
    /// The destinations the stream is forwarded to while it is recorded.
    forwarding: Forwarding,
}

impl Recorder {
    /// Binds the sockets, reserves the rings and starts the threads; returns once every
    /// socket is bound and every ring's memory is allocated. Without an analysis to hand the
    /// live monitor (`start_with`), the monitor does not run.
    pub fn start(config: RecorderConfig) -> Result<Recorder, RecordError> {
        Recorder::start_with(config, None)
    }

    /// `start`, handing the live monitor (when `config.live` asks for it) its analysis
    /// (`analysis::live::analyser()`).
    pub fn start_with(
        mut config: RecorderConfig,
        analyser: Option<Analyser>,
    ) -> Result<Recorder, RecordError> {
        // A configuration made in Rust gets the same checks as one made from options.
        config.check(true)?;
        if let Some(t) = &config.target {
            check_target(t)?;
        }
        if config.auto_pin && config.capture_cpu.is_none() && config.writer_cpu.is_none() {
            if let Some((capture, writer)) = affinity::auto_pin(&affinity::allowed_cpus()) {
                config.capture_cpu = Some(capture);
                config.writer_cpu = Some(writer);
            }
        }
        let (disks, disk_notes, unclosed) = match &config.scans {
            Some(setup) => {
                let opened = open_disks(setup)?;
                // Before anything is written: what a crash of the last run left.
                let (unclosed, notes) = unclosed::find(&setup.disks);
                let mut all = opened.notes;
                all.extend(notes);
                (Some(Arc::new(opened.set)), all, unclosed)
            }
            None => (None, Vec::new(), Vec::new()),
        };
        let shared = Arc::new(Shared::new(config.writes()));
        if let Some(m) = config.max_frames {
            shared.limit_frames(m);
        }
        shared.set_unclosed_scans(unclosed);
        for n in disk_notes {
            shared.note(n);
        }
        let first = StreamAddr {
            bind: config.bind,
            port: config.port,
        };
        let mut streams = vec![start_stream(
            &config,
            first,
            shared.clone(),
            config.capture_cpu,
        )?];
        let more = config.more_streams.clone();
        let more_cpus = affinity::more_capture_cpus(
            &affinity::allowed_cpus(),
            more.len(),
            config.capture_cpu,
            config.writer_cpu,
        );
        let capture_cpus: Vec<usize> = config
            .capture_cpu
            .into_iter()
            .chain(more_cpus.iter().flatten().copied())
            .collect();
        for (addr, cpu) in more.into_iter().zip(more_cpus) {
            let sh = Arc::new(shared.another_stream());
            match start_stream(&config, addr, sh, cpu) {
                Ok(s) => streams.push(s),
                Err(e) => {
                    for s in &streams {
                        s.shared.request_stop();
                    }
                    for s in &mut streams {
                        if let Some(h) = s.capture.take() {
                            let _ = h.join();
                        }
                    }
                    return Err(e);
                }
            }
        }
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
        let gate = match &disks {
            Some(d) => {
                let inputs = streams
                    .iter()
                    .map(|s| (s.local_addr.port(), s.shared.clone()))
                    .collect();
                Some(
                    Gate::start(inputs, d.clone(), config.big_endian)
                        .map_err(RecordError::Thread)?,
                )
            }
            None => None,
        };
        let forwarding = Forwarding::new(
            streams.iter().map(|s| s.shared.clone()).collect(),
            streams.iter().map(|s| s.local_addr).collect(),
        );
        let mut rec = Recorder {
            shared,
            streams,
            writer,
            gate,
            disks,
            scan_names: Vec::new(),
            capture_cpus,
            config,
            started: Instant::now(),
            summary: None,
            status: None,
            live: None,
            forwarding,
        };
        // Each capture thread pins itself and says it is receiving; wait for them (bounded).
        for k in 0..rec.streams.len() {
            let sh = rec.streams[k].shared.clone();
            match sh.wait_capture_ready(Duration::from_secs(30)) {
                Some(true) => {}
                Some(false) => {
                    let why = sh.error().unwrap_or_default();
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
        }
        for text in rec.config.forward.clone() {
            if let Err(e) = rec.forwarding.add(&text, true, false) {
                rec.stop();
                return Err(e.into());
            }
        }
        if let Some(addr) = rec.config.status_listen {
            // Absolute, as a control room reads them (the status never changes directory).
            let disks = rec
                .config
                .disk_dirs()
                .into_iter()
                .map(|d| std::path::absolute(&d).unwrap_or(d))
                .collect();
            match crate::record::status::StatusServer::start(addr, rec.shareds(), disks) {
                Ok(server) => rec.status = Some(server),
                Err(source) => {
                    rec.stop();
                    return Err(RecordError::Status { addr, source });
                }
            }
        }
        match (rec.config.live, analyser) {
            (Some(live), Some(analyser)) => {
                let busy = rec.streams.len() + usize::from(rec.writer.is_some());
                match LiveMonitor::start(rec.shared.clone(), live, analyser, busy) {
                    Ok(m) => rec.live = Some(m),
                    Err(e) => rec
                        .shared
                        .note(format!("live monitor: could not start its thread ({e})")),
                }
            }
            (Some(_), None) => rec.shared.note(
                "live monitor: off (no analysis was handed to the recorder: Recorder::start_with)"
                    .into(),
            ),
            _ => {}
        }
        Ok(rec)
    }

    /// Where the streams are taken from, for the operator (`127.0.0.1:46227`, or
    /// `eth2:46227 (afpacket)` for the raw backends; several joined by commas).
    pub fn source(&self) -> String {
        let mut out = Vec::new();
        for s in &self.streams {
            let mut c = self.config.clone();
            c.bind = s.local_addr.ip();
            out.push(c.source(s.local_addr.port()));
        }
        out.join(", ")
    }

    /// The first stream's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.streams[0].local_addr
    }

    /// Every stream's address, in the order given.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.streams.iter().map(|s| s.local_addr).collect()
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

    /// What the recorder reported about its set-up; a stream after the first says which.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.shared.notes();
        for s in &self.streams[1..] {
            let port = s.local_addr.port();
            notes.extend(
                s.shared
                    .notes()
                    .into_iter()
                    .map(|n| format!("port {port}: {n}")),
            );
        }
        notes
    }

    /// The capture has ended by itself: `max_frames` reached, or a failure (disk full).
    pub fn finished(&self) -> bool {
        self.streams.iter().any(|s| s.shared.failed())
            || self.streams.iter().all(|s| s.shared.finished())
    }

    /// The first failure of any stream.
    pub fn error(&self) -> Option<String> {
        self.streams.iter().find_map(|s| s.shared.error())
    }

    /// A snapshot of every counter now.
    pub fn stats(&self) -> Stats {
        crate::record::shared::stats_of(&self.shareds())
    }

    fn shareds(&self) -> Vec<Arc<Shared>> {
        self.streams.iter().map(|s| s.shared.clone()).collect()
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
        // The monitor first: it must not look at a ring being drained.
        self.live = None;
        for s in &self.streams {
            s.shared.request_stop();
        }
        for s in &mut self.streams {
            if let Some(h) = s.capture.take() {
                if h.join().is_err() {
                    s.shared.fail(
                        "the capture thread stopped unexpectedly (a bug: please report it)".into(),
                    );
                }
            }
            // A capture that never started still counts as done for the writer.
            s.shared.set_capture_done();
        }
        // The forwarders send what is left in the rings while the writers drain them.
        self.forwarding.drain();
        if let Some(g) = &mut self.gate {
            // A running scan is closed and written out first.
            g.join();
        }
        if let Some(h) = self.writer.take() {
            if h.join().is_err() {
                self.shared.fail(
                    "the writer thread stopped unexpectedly (a bug: please report it)".into(),
                );
            }
        }
        self.forwarding.finish();
        let summary = self.summarise();
        self.shared.set_stopped();
        // Watchers see the connection go away once the recording is summarised.
        self.status = None;
        self.summary = Some(summary.clone());
        summary
    }

    /// Forwards the stream to `destination` (`udp://host:port?...`) from its newest frame
    /// on; `enabled` false connects but sends nothing until `set_forward`. Returns its id.
    pub fn add_forward(&mut self, destination: &str, enabled: bool) -> Result<u32, ArgError> {
        if self.summary.is_some() {
            return Err(ArgError::new(
                "forward",
                "the recording has ended: start a new recorder to forward",
            ));
        }
        self.forwarding.add(destination, enabled, true)
    }

    /// Whether forwarding to `destination` would send the stream back to this recorder's own
    /// data port (`add_forward` refuses it then); an error if it is no destination.
    pub fn forward_feeds_itself(&self, destination: &str) -> Result<bool, ArgError> {
        Ok(self
            .forwarding
            .feeds_itself(&Destination::parse(destination)?))
    }

    /// Pauses (false) or resumes (true) forwarding to destination `id`.
    pub fn set_forward(&self, id: u32, enabled: bool) -> Result<(), ArgError> {
        self.forwarding.set_enabled(id, enabled)
    }

    /// Paces destination `id` anew on the same connection (`rate=2Gbps`, `ipd=10`, or empty
    /// text for none).
    pub fn pace_forward(&self, id: u32, pacing: &str) -> Result<(), ArgError> {
        self.forwarding.set_pacing(id, pacing)
    }

    /// Stops forwarding to destination `id` and closes its connection; returns its counters.
    pub fn remove_forward(&mut self, id: u32) -> Result<ForwardStats, ArgError> {
        self.forwarding.remove(id)
    }

    /// Every forwarding destination of the run (removed ones too), counters now.
    pub fn forward_stats(&self) -> Vec<ForwardStats> {
        self.shared.forward_stats()
    }

    /// Starts a scan: from now (or from `start`, VDIF time) until `stop_scan` (or `stop`),
    /// the frames in the window are written to the disks. Returns the name used on disk: the
    /// name asked for, or with jive5ab's suffix (`a`, `b`, …) when a scan of that name exists.
    pub fn start_scan(&mut self, req: ScanRequest) -> Result<String, ScanCommandError> {
        let Some(gate) = &self.gate else {
            return Err(ScanCommandError::NoDisks);
        };
        // From the command on, every frame that arrives waits for this scan: its first frame
        // is the first after the command, however long what follows takes.
        let rings: Vec<_> = self.streams.iter().map(|s| s.shared.ring()).collect();
        let from_seq = gate.hold(&rings);
        // Let go however this ends (a refusal, a panic) unless the scan is handed over.
        struct Held<'a>(&'a Gate, bool);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.unhold();
                }
            }
        }
        let mut held = Held(gate, true);
        let plan = self.plan_scan(req, from_seq)?;
        let name = plan.name.clone();
        held.1 = false;
        held.0.start_scan(plan);
        drop(held);
        self.scan_names.push(name.clone());
        Ok(name)
    }

    /// The plan of the scan `req` asks for, or why it cannot start; `from_seq` as
    /// `Gate::hold` gave it.
    fn plan_scan(
        &self,
        req: ScanRequest,
        from_seq: Vec<u64>,
    ) -> Result<plan::ScanPlan, ScanCommandError> {
        let (Some(gate), Some(disks), Some(setup)) = (&self.gate, &self.disks, &self.config.scans)
        else {
            return Err(ScanCommandError::NoDisks);
        };
        if self.shared.finished() {
            return Err(ScanCommandError::Finished);
        }
        if let Some(why) = layout::scan_name_problem(&req.name) {
            return Err(ScanCommandError::BadName(why));
        }
        let c = self.shared.capture_stats();
        let fps = self
            .config
            .fps
            // Only a rate known for sure: before the frame numbers wrap, the highest seen is a
            // lower bound, and a boundary within a second would fall on the wrong frame.
            .or((c.frames_per_second_known && c.frames_per_second > 0)
                .then_some(c.frames_per_second));
        let window = Window::new(req.start, req.stop, fps)
            .map_err(|(name, why)| ScanCommandError::BadTime { name, why })?;
        // A scan may be queued behind those running: it must start at or after every one of
        // them stops, so that each frame has one scan at most.
        if let Some((name, _)) = gate.queued().into_iter().find(
            |(_, w)| !matches!((w.stop, window.start), (Some(stop), Some(start)) if start >= stop),
        ) {
            return Err(ScanCommandError::Busy(name));
        }
        let name = unused_name(&req.name, disks, &self.scan_names);
        if name.len() > layout::MAX_SCAN_NAME {
            return Err(ScanCommandError::BadName(format!(
                "a scan {} exists, and with jive5ab's suffix ({name}) the name is longer than {} characters: choose another name",
                req.name,
                layout::MAX_SCAN_NAME
            )));
        }
        let alive = disks.alive();
        if alive.is_empty() {
            return Err(ScanCommandError::NoDiskLeft);
        }
        let seen: Vec<_> = self
            .streams
            .iter()
            .map(|s| s.shared.capture_stats())
            .collect();
        let plan = plan::plan(
            setup,
            disks,
            Asked {
                request: &req,
                name: name.clone(),
                window,
                fps,
                fps_given: self.config.fps,
                bits_per_second: plan::bits_per_second(
                    &seen,
                    self.config.fps,
                    self.config.frame_size,
                ),
                alive,
                writer_cpus: affinity::writer_cpus(&affinity::allowed_cpus(), &self.capture_cpus),
            },
        );
        Ok(plan::ScanPlan { from_seq, ..plan })
    }

    /// Ends the running scan now and waits until it is on disk; its summary. Scans queued
    /// behind it end too, without a frame.
    pub fn stop_scan(&self) -> Result<ScanSummary, ScanCommandError> {
        let running = self.active_scan().ok_or(ScanCommandError::NoScan)?;
        self.end_scan(None)?;
        self.wait_for_scan(&running, None)
            .ok_or(ScanCommandError::NoScan)
    }

    /// Asks the running scan, and any queued behind it, to end now (they are then written
    /// out: see `wait_scan`); with `name`, only that scan.
    pub fn end_scan(&self, name: Option<String>) -> Result<(), ScanCommandError> {
        let Some(gate) = &self.gate else {
            return Err(ScanCommandError::NoDisks);
        };
        let queued = gate.queued();
        if queued.is_empty()
            || name
                .as_ref()
                .is_some_and(|n| !queued.iter().any(|q| q.0 == *n))
        {
            return Err(ScanCommandError::NoScan);
        }
        gate.stop_scan(name);
        Ok(())
    }

    /// Waits (at most `timeout`) for the running scan to end by its stop time; its summary,
    /// or None if it is still running. With no scan running, the last scan's summary.
    pub fn wait_scan(&self, timeout: Option<Duration>) -> Option<ScanSummary> {
        self.gate.as_ref()?.wait_scan(timeout)
    }

    /// Waits (at most `timeout`) until scan `name` (as `start_scan` returned it) is on disk;
    /// its summary, or None if it is still running or was never started.
    pub fn wait_for_scan(&self, name: &str, timeout: Option<Duration>) -> Option<ScanSummary> {
        self.gate.as_ref()?.wait_for(name, timeout)
    }

    /// Every scan running or queued, in order (the first is the one recording now).
    pub fn queued_scans(&self) -> Vec<String> {
        self.gate
            .as_ref()
            .map(|g| g.queued().into_iter().map(|q| q.0).collect())
            .unwrap_or_default()
    }

    /// The scan running now (or still being written out), if any.
    pub fn active_scan(&self) -> Option<String> {
        self.gate.as_ref()?.active()
    }

    /// Every stream's latency stamps, added up (None when off).
    pub fn latency_report(&self) -> Option<crate::record::latency::LatencyReport> {
        self.config.latency.then(|| {
            crate::record::latency::report(self.streams.iter().filter_map(|s| s.shared.latency()))
        })
    }

    /// The run's summary, added up by `summary::summarise` from what every part reports.
    fn summarise(&self) -> Summary {
        summarise(Ended {
            streams: self
                .streams
                .iter()
                .map(|s| (s.local_addr.port(), &*s.shared))
                .collect(),
            writes: self.config.writes(),
            to_target: self.config.target.is_some(),
            scans: self.gate.as_ref().map(|g| g.results()),
            psn: self.config.psn,
            live: self.config.live.is_some(),
            error: self.error(),
            notes: self.notes(),
            latency: self.latency_report(),
            duration_s: self.started.elapsed().as_secs_f64(),
        })
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
    use crate::record::scan::ScanSetup;
    use crate::sources::generate::SignalSpec;
    use crate::sources::sender::{parse_drops, SendConfig, Sender};
    use crate::vdif::layout::{self, Format};
    use crate::vdif::Header;
    use std::path::PathBuf;

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
        assert!(s.ok, "{s:#?}");
        assert_eq!(s.bytes_written, 2990 * 8224);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(dir.join("sent.vdif")).unwrap()
        );
        assert_eq!(s.seconds.len(), 2);
        assert_eq!(s.seconds[0].second.counts.lost, 10);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Sends `frames` frames (with `drops`) to the recorder and waits until it has them.
    fn send(rec: &Recorder, spec: SignalSpec, frames: u64, drops: &str, sent: &std::path::Path) {
        let mut cfg = SendConfig::new(rec.local_addr(), spec);
        cfg.frames = Some(frames);
        if !drops.is_empty() {
            cfg.drops = parse_drops(drops).unwrap();
        }
        cfg.record_sent = Some(sent.to_path_buf());
        let mut sender = Sender::start(cfg).unwrap();
        let s = sender.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.stats().capture.frames_received < s.frames_sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Scans of `format` on `disks` from a 16 MiB ring of 8224-byte frames at 2000 frames/s:
    /// 1 MiB chunks, 2 writers (tests change what they need).
    fn scan_config(disks: &[PathBuf], format: Format) -> RecorderConfig {
        RecorderConfig {
            ring_bytes: 16 << 20,
            frame_size: Some(8224),
            fps: Some(2000),
            scans: Some(ScanSetup {
                disks: disks.to_vec(),
                format,
                chunk_bytes: Some(1 << 20),
                file_bytes: None,
                writers: Some(2),
                faults: Vec::new(),
                direct: true,
                split: None,
            }),
            ..Default::default()
        }
    }

    fn setup_of(c: &mut RecorderConfig) -> &mut ScanSetup {
        c.scans.as_mut().expect("a scan configuration")
    }

    fn disks(name: &str, n: usize) -> Vec<PathBuf> {
        let root = tmpdir(name);
        (0..n)
            .map(|i| {
                let d = root.join(format!("disk{i}"));
                std::fs::create_dir_all(&d).unwrap();
                d
            })
            .collect()
    }

    /// The vbs chunks of `scan` on `disks`, concatenated in chunk-number order.
    fn gather_vbs(disks: &[PathBuf], scan: &str) -> (Vec<u8>, usize) {
        let mut chunks = std::collections::BTreeMap::new();
        for d in disks {
            let Ok(rd) = std::fs::read_dir(layout::vbs_dir(d, scan)) else {
                continue;
            };
            for e in rd {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(n) = layout::vbs_chunk_number(&name, scan) {
                    assert!(chunks.insert(n, std::fs::read(e.path()).unwrap()).is_none());
                }
            }
        }
        let n = chunks.len();
        assert_eq!(
            chunks.keys().copied().collect::<Vec<_>>(),
            (0..n as u64).collect::<Vec<_>>()
        );
        (chunks.into_values().flatten().collect(), n)
    }

    /// The mk6 blocks of `scan` on `disks`, concatenated in block-number order.
    fn gather_mk6(disks: &[PathBuf], scan: &str) -> Vec<u8> {
        let mut blocks = std::collections::BTreeMap::new();
        for d in disks {
            let Ok(data) = std::fs::read(layout::mk6_path(d, scan)) else {
                continue;
            };
            let h = layout::Mk6FileHeader::parse(&data).unwrap();
            assert_eq!(h.packet_size, 8224);
            let mut at = layout::MK6_FILE_HEADER_BYTES;
            while at < data.len() {
                let b = layout::Mk6BlockHeader::parse(&data[at..]).unwrap();
                assert!(b.wb_size <= h.block_size);
                let payload = &data[at + 8..at + b.wb_size as usize];
                assert!(blocks.insert(b.blocknum, payload.to_vec()).is_none());
                at += b.wb_size as usize;
            }
        }
        let n = blocks.len() as u32;
        assert_eq!(
            blocks.keys().copied().collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        blocks.into_values().flatten().collect()
    }

    #[test]
    fn a_vbs_scan_over_three_disks_is_what_was_sent() {
        let ds = disks("vbs", 3);
        let mut rec = Recorder::start(scan_config(&ds, Format::Vbs)).unwrap();
        let name = rec
            .start_scan(ScanRequest {
                name: "kvn_scan1".into(),
                start: None,
                stop: None,
            })
            .unwrap();
        assert_eq!(name, "kvn_scan1");
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        send(&rec, spec(), 3000, "0:100-109", &sent);
        let s = rec.stop_scan().unwrap();
        assert!(s.invariant_holds, "{s:#?}");
        assert_eq!(s.frames, 2990);
        assert_eq!(s.counts.frames_lost, 10);
        assert_eq!(s.bytes_written, 2990 * 8224);
        let (data, chunks) = gather_vbs(&ds, "kvn_scan1");
        assert_eq!(data, std::fs::read(&sent).unwrap());
        // 1 MiB is 128 frames: 2990 frames make 24 chunks (the first ends on an aligned run).
        assert_eq!(chunks as u64, s.chunks);
        assert!(chunks >= 24);
        assert_eq!(
            s.disks.iter().map(|d| d.bytes).sum::<u64>(),
            s.bytes_written
        );
        assert!(s.disks.iter().all(|d| d.chunks > 0), "{:?}", s.disks);
        // The same name again gets jive5ab's suffix.
        let again = rec
            .start_scan(ScanRequest {
                name: "kvn_scan1".into(),
                start: None,
                stop: None,
            })
            .unwrap();
        assert_eq!(again, "kvn_scan1a");
        let empty = rec.stop_scan().unwrap();
        assert_eq!(empty.frames, 0);
        let run = rec.stop();
        assert!(run.invariant_holds, "{run:#?}");
        assert_eq!(run.scans.len(), 2);
        assert_eq!(run.bytes_written, 2990 * 8224);
    }

    #[test]
    fn a_scan_starts_with_the_first_frame_after_its_command_however_long_the_command_takes() {
        let ds = disks("first-frame", 2);
        let mut rec = Recorder::start(scan_config(&ds, Format::Vbs)).unwrap();
        let before = ds[0].parent().unwrap().join("before.vdif");
        send(&rec, spec(), 500, "", &before);
        // The command arrives (record=on), and 1000 frames come while it is worked out: as if
        // the disks were slow to answer.
        let gate = rec.gate.as_ref().unwrap();
        let rings: Vec<_> = rec.streams.iter().map(|s| s.shared.ring()).collect();
        let from = gate.hold(&rings);
        let during = ds[0].parent().unwrap().join("during.vdif");
        let later = SignalSpec {
            start_second: Some(1001),
            ..spec()
        };
        send(&rec, later, 1000, "", &during);
        let req = ScanRequest {
            name: "vgos1".into(),
            start: None,
            stop: None,
        };
        let plan = rec.plan_scan(req, from).unwrap();
        rec.scan_names.push(plan.name.clone());
        rec.gate.as_ref().unwrap().start_scan(plan);
        let s = rec.stop_scan().unwrap();
        assert!(s.ok, "{s:#?}");
        assert_eq!(s.frames, 1000);
        assert_eq!(gather_vbs(&ds, "vgos1").0, std::fs::read(&during).unwrap());
        // A refused command lets the frames go on to be counted outside any scan.
        let before_refusal = rec.stats();
        let _ = rec.start_scan(ScanRequest {
            name: "bad/name".into(),
            start: None,
            stop: None,
        });
        send(&rec, spec(), 200, "", &before);
        let run = rec.stop();
        assert!(run.invariant_holds, "{run:#?}");
        assert_eq!(run.bytes_outside_scans, 700 * 8224, "{before_refusal:?}");
    }

    #[test]
    fn a_file_scan_rotates_by_size_in_whole_chunks() {
        let ds = disks("rotate", 1);
        let mut c = scan_config(&ds, Format::File);
        // 3 MiB files of 1 MiB (128-frame) chunks: 382 frames fit, 256 (two chunks) are used.
        setup_of(&mut c).file_bytes = Some(3 << 20);
        let mut rec = Recorder::start(c).unwrap();
        rec.start_scan(ScanRequest {
            name: "r1".into(),
            start: None,
            stop: None,
        })
        .unwrap();
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        send(&rec, spec(), 3000, "", &sent);
        let s = rec.stop_scan().unwrap();
        assert!(s.ok, "{s:#?}");
        assert_eq!(s.frames, 3000);
        let parts = s.files.len();
        assert!(parts >= 12, "{:?}", s.files);
        let mut data = Vec::new();
        for (k, f) in s.files.iter().enumerate() {
            let path = layout::file_part_path(&ds[0], "r1", k as u64);
            assert_eq!(f.path, path.display().to_string());
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len() as u64, f.bytes);
            assert!(f.bytes <= 256 * 8224 && f.bytes % 8224 == 0, "{f:?}");
            data.extend(bytes);
        }
        assert!(!layout::file_part_path(&ds[0], "r1", parts as u64).exists());
        assert_eq!(data, std::fs::read(&sent).unwrap());
        // The reader finds the parts in order.
        let found = crate::vdif::scan::ScanLayout::locate("r1", &ds, None).unwrap();
        assert_eq!(found.parts.len(), parts);
        assert!(found.missing.is_empty());
        rec.stop();
    }

    #[test]
    fn a_mk6_scan_holds_exactly_its_window() {
        let ds = disks("mk6", 2);
        let mut rec = Recorder::start(scan_config(&ds, Format::Mk6)).unwrap();
        let sp = spec();
        // Seconds 1000..1003 of epoch 53 at 2000 frames/s; the scan is [1000.25 s, 1001.5 s).
        let t0 = crate::vdif::time::utc_unix(53, 1000);
        let at = |s: i64, f: f64| crate::vdif::time::VdifTime {
            unix_seconds: t0 + s,
            fraction: f,
        };
        rec.start_scan(ScanRequest {
            name: "w".into(),
            start: Some(at(0, 0.25)),
            stop: Some(at(1, 0.5)),
        })
        .unwrap();
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        send(&rec, sp, 6000, "", &sent);
        let s = rec
            .wait_scan(Some(Duration::from_secs(10)))
            .expect("the scan ends at its stop");
        assert!(s.ok, "{s:#?}");
        assert_eq!(s.frames, 2500);
        let all = std::fs::read(&sent).unwrap();
        assert_eq!(gather_mk6(&ds, "w"), all[500 * 8224..3000 * 8224]);
        let run = rec.stop();
        assert!(run.invariant_holds, "{run:#?}");
        assert_eq!(run.bytes_outside_scans, 3500 * 8224);
    }

    #[test]
    fn scans_queued_back_to_back_lose_no_frame_between_them() {
        let ds = disks("queued", 2);
        let mut c = scan_config(&ds, Format::Vbs);
        c.fps = Some(500);
        let mut rec = Recorder::start(c).unwrap();
        let t0 = crate::vdif::time::utc_unix(53, 1000);
        let at = |s: f64| crate::vdif::time::VdifTime {
            unix_seconds: t0 + s.floor() as i64,
            fraction: s.fract(),
        };
        let scan = |name: &str, a: f64, b: f64| ScanRequest {
            name: name.into(),
            start: Some(at(a)),
            stop: Some(at(b)),
        };
        // Three windows one after another, all asked for before the first frame: each waits
        // its turn; the second starts where the first stops.
        for (name, a, b) in [("q1", 0.25, 1.0), ("q2", 1.0, 1.75), ("q3", 2.0, 2.5)] {
            assert_eq!(rec.start_scan(scan(name, a, b)).unwrap(), name);
        }
        assert_eq!(rec.queued_scans(), ["q1", "q2", "q3"]);
        // A scan that would overlap one queued is refused, naming it.
        match rec.start_scan(scan("q4", 2.25, 3.0)) {
            Err(ScanCommandError::Busy(n)) => assert_eq!(n, "q3"),
            other => panic!("{other:?}"),
        }
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        let sp = SignalSpec {
            fps: 500,
            threads: 4,
            ..spec()
        };
        send(&rec, sp, 6000, "", &sent);
        let all = std::fs::read(&sent).unwrap();
        // Frames of 4 threads, 2000 a second: [a, b) is frames 2000a..2000b of the stream.
        for (name, a, b) in [("q1", 0.25, 1.0), ("q2", 1.0, 1.75), ("q3", 2.0, 2.5)] {
            let s = rec
                .wait_for_scan(name, Some(Duration::from_secs(10)))
                .expect("each scan ends at its stop");
            let (first, last) = ((a * 2000.0) as usize, (b * 2000.0) as usize);
            assert!(s.ok, "{s:#?}");
            assert_eq!(s.frames, (last - first) as u64, "{name}");
            let (data, _) = gather_vbs(&ds, name);
            assert!(data == all[first * 8224..last * 8224], "{name}");
        }
        let run = rec.stop();
        assert!(run.invariant_holds, "{run:#?}");
        assert_eq!(run.bytes_outside_scans, (6000 - 4000) * 8224);
    }

    #[test]
    fn a_scan_split_by_thread_is_one_exact_scan_per_thread() {
        let ds = disks("split", 2);
        let mut c = scan_config(&ds, Format::Vbs);
        c.fps = Some(500);
        setup_of(&mut c).split = Some(crate::record::scan::Split::Thread);
        let mut rec = Recorder::start(c).unwrap();
        rec.start_scan(ScanRequest {
            name: "sp".into(),
            start: None,
            stop: None,
        })
        .unwrap();
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        let sp = SignalSpec {
            fps: 500,
            threads: 4,
            ..spec()
        };
        send(&rec, sp, 4000, "", &sent);
        let s = rec.stop_scan().unwrap();
        assert!(s.invariant_holds, "{s:#?}");
        let all = std::fs::read(&sent).unwrap();
        let mut keys: Vec<&str> = s.data_streams.iter().map(|d| d.key.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["0", "1", "2", "3"]);
        for d in &s.data_streams {
            let t: u32 = d.key.parse().unwrap();
            let want: Vec<u8> = all
                .chunks(8224)
                .filter(|f| Header::parse(f).unwrap().thread_id() == t)
                .flatten()
                .copied()
                .collect();
            assert_eq!(d.name, format!("sp_ds{t}"));
            assert_eq!(gather_vbs(&ds, &d.name).0, want, "thread {t}");
            assert_eq!(d.frames, 1000);
        }
    }

    #[test]
    fn a_scan_split_by_sender_is_one_exact_scan_per_sender() {
        let ds = disks("senders", 2);
        let mut c = scan_config(&ds, Format::Vbs);
        setup_of(&mut c).split = Some(crate::record::scan::Split::Sender);
        let mut rec = Recorder::start(c).unwrap();
        rec.start_scan(ScanRequest {
            name: "by".into(),
            start: None,
            stop: None,
        })
        .unwrap();
        let root = ds[0].parent().unwrap().to_path_buf();
        // One sender after the other: the first to arrive is data stream 0.
        for k in 0..2 {
            send(
                &rec,
                spec(),
                1500 + 500 * k as u64,
                "",
                &root.join(format!("sent{k}.vdif")),
            );
        }
        let s = rec.stop_scan().unwrap();
        assert!(s.invariant_holds, "{s:#?}");
        for k in 0..2 {
            let name = format!("by_ds{k}");
            assert_eq!(
                gather_vbs(&ds, &name).0,
                std::fs::read(root.join(format!("sent{k}.vdif"))).unwrap(),
                "{name}"
            );
        }
        assert!(s
            .notes
            .iter()
            .any(|n| n.starts_with("data stream by_ds1: frames from 127.0.0.1:")));
    }

    #[test]
    fn two_ports_are_two_streams_in_one_scan() {
        let ds = disks("ports", 2);
        let mut c = scan_config(&ds, Format::Vbs);
        c.more_streams = vec![StreamAddr {
            bind: "127.0.0.1".parse().unwrap(),
            port: 0,
        }];
        let mut rec = Recorder::start(c).unwrap();
        let addrs = rec.local_addrs();
        assert_eq!(addrs.len(), 2);
        assert_ne!(addrs[0].port(), addrs[1].port());
        rec.start_scan(ScanRequest {
            name: "two".into(),
            start: None,
            stop: None,
        })
        .unwrap();
        let root = ds[0].parent().unwrap().to_path_buf();
        let mut senders = Vec::new();
        for (k, a) in addrs.iter().enumerate() {
            let mut cfg = SendConfig::new(
                *a,
                SignalSpec {
                    station: k as u16 + 1,
                    ..spec()
                },
            );
            cfg.frames = Some(3000);
            cfg.record_sent = Some(root.join(format!("sent{k}.vdif")));
            senders.push(Sender::start(cfg).unwrap());
        }
        for mut s in senders {
            s.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.stats().capture.frames_received < 6000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let s = rec.stop_scan().unwrap();
        assert!(s.invariant_holds, "{s:#?}");
        assert_eq!(s.frames, 6000);
        assert_eq!(s.streams.len(), 2);
        assert!(s.streams.iter().all(|x| x.frames == 3000));
        // The scan holds each stream exactly, in its order.
        let (data, _) = gather_vbs(&ds, "two");
        for k in 0..2u32 {
            let mine: Vec<u8> = data
                .chunks(8224)
                .filter(|f| Header::parse(f).unwrap().station_id() == k + 1)
                .flatten()
                .copied()
                .collect();
            assert_eq!(
                mine,
                std::fs::read(root.join(format!("sent{k}.vdif"))).unwrap()
            );
        }
        let run = rec.stop();
        assert!(run.invariant_holds && run.ok, "{run:#?}");
        assert_eq!(run.frames_received, 6000);
        assert_eq!(run.streams.len(), 2);
        assert_eq!(run.streams[1].port, addrs[1].port());
        let rows_per_stream = |p: u16| run.seconds.iter().filter(|r| r.stream == p).count();
        assert_eq!(rows_per_stream(addrs[0].port()), 2);
        assert_eq!(rows_per_stream(addrs[1].port()), 2);
    }

    #[test]
    fn a_frame_limit_counts_every_stream() {
        let mut rec = Recorder::start(RecorderConfig {
            ring_bytes: 16 << 20,
            frame_size: Some(8224),
            more_streams: vec![StreamAddr {
                bind: "127.0.0.1".parse().unwrap(),
                port: 0,
            }],
            max_frames: Some(2500),
            ..Default::default()
        })
        .unwrap();
        let mut senders = Vec::new();
        for a in rec.local_addrs() {
            let mut cfg = SendConfig::new(a, spec());
            cfg.frames = Some(2000);
            senders.push(Sender::start(cfg).unwrap());
        }
        for mut s in senders {
            s.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !rec.finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let run = rec.stop();
        assert_eq!(run.frames_received, 2500, "{:?}", run.streams);
    }

    #[test]
    fn a_disk_that_fails_mid_scan_loses_nothing() {
        let ds = disks("fail", 3);
        let mut c = scan_config(&ds, Format::Vbs);
        setup_of(&mut c).faults = vec![(
            ds[1].clone(),
            crate::record::diskio::Fault {
                kind: crate::record::diskio::FaultKind::Error,
                after: 3 << 20,
            },
        )];
        let mut rec = Recorder::start(c).unwrap();
        rec.start_scan(ScanRequest {
            name: "f".into(),
            start: None,
            stop: None,
        })
        .unwrap();
        let sent = ds[0].parent().unwrap().join("sent.vdif");
        send(&rec, spec(), 4000, "", &sent);
        let s = rec.stop_scan().unwrap();
        assert!(s.invariant_holds, "{s:#?}");
        assert_eq!(s.bytes_dropped_disk, 0);
        assert_eq!(gather_vbs(&ds, "f").0, std::fs::read(&sent).unwrap());
        let failed = &s.disks[1];
        assert!(
            failed
                .dropped
                .as_deref()
                .unwrap()
                .contains("Input/output error"),
            "{failed:?}"
        );
        assert!(failed.bytes < 3 << 20);
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
