//! `vdifrec send`: a FILA10G-like VDIF source over UDP, paced with `sendmmsg`.
//!
//! Payloads come from a pool generated once (noise plus tone, see `generate`), so sending costs
//! no synthesis; each datagram is gathered from a small header buffer and a pool payload. Faults
//! can be injected deterministically: drops (`S:A-B`, `every:N`), reordering, stray datagrams.
//! `record_sent` writes exactly the frames sent, in order, for byte-exact comparisons.

use crate::options::{in_range, ArgError};
use crate::sources::generate::{frame_header, GenerateError, SignalSpec, Synth};
use crate::vdif::header::Header;
use crate::vdif::header::{check_datagram_frame_size, check_frame_size};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Datagrams per sendmmsg call.
const SEND_BATCH: usize = 32;

#[derive(Debug, Error)]
pub enum SendError {
    #[error(transparent)]
    Option(#[from] ArgError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error("cannot open the socket to {to}: {source}")]
    Socket {
        to: SocketAddr,
        source: std::io::Error,
    },
    #[error("file: cannot read {path}: {why}")]
    Replay { path: PathBuf, why: String },
    #[error("cannot read {path}: {why}")]
    Verify { path: PathBuf, why: String },
    #[error("record_sent: cannot write {path}: {source}")]
    RecordSent {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the sender thread: {0}")]
    Thread(std::io::Error),
}

/// A rule that drops frames from the sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropRule {
    /// VDIF second `second` counted from the start (0 = first), frame numbers `first..=last`.
    Range { second: u64, first: u32, last: u32 },
    /// Every `n`-th frame of the sequence (the n-th, 2n-th, ...).
    Every(u64),
}

/// Parses `S:A-B[,S:A-B][,every:N]`.
pub fn parse_drops(text: &str) -> Result<Vec<DropRule>, ArgError> {
    let bad = |why: String| ArgError::new("drop", why);
    if text.trim().is_empty() {
        return Err(bad(
            "an empty rule drops nothing: give S:A-B (second S from the start, frames A to B) or every:N".into(),
        ));
    }
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some(n) = part.strip_prefix("every:") {
            let n: u64 = n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(format!("{part:?}: every:N needs a positive N")))?;
            out.push(DropRule::Every(n));
            continue;
        }
        let (s, range) = part
            .split_once(':')
            .ok_or_else(|| bad(format!("{part:?} is neither S:A-B nor every:N")))?;
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let parse = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("{part:?}: {t:?} is not a number")))
        };
        let (second, first, last) = (parse(s)?, parse(a)?, parse(b)?);
        if first > last || last >= 1 << 24 {
            return Err(bad(format!(
                "{part:?}: frame numbers A-B must have A <= B < 2^24"
            )));
        }
        out.push(DropRule::Range {
            second,
            first: first as u32,
            last: last as u32,
        });
    }
    Ok(out)
}

/// The options of a send as a user gives them (`vdifrec.Sender(...)`, `vdifrec send`).
/// `Default` is the one place each default is written (Python: `vdifrec.defaults["sender"]`,
/// the signal's under `"signal"`); `SendConfig::from_options` makes every check.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SendOptions {
    /// Where to: `HOST:PORT` (`[::1]:PORT` for IPv6; `localhost` is 127.0.0.1).
    pub to: String,
    /// Seconds of data to send.
    pub duration: Option<f64>,
    /// Frames to send (all threads).
    pub frames: Option<i64>,
    /// Prepend an 8-byte packet sequence number.
    pub psn: bool,
    /// Frames to leave out: `S:A-B` (second S from the start, frames A..B), `every:N`.
    pub drop: Option<String>,
    /// Swap every N-th frame with the next.
    pub reorder: Option<i64>,
    /// Stray datagrams of random size and content to mix in.
    pub garbage: i64,
    /// Replay this VDIF file instead of generating.
    pub file: Option<PathBuf>,
    /// Write exactly the frames sent to this file.
    pub record_sent: Option<PathBuf>,
    /// Frame sets in the payload pool.
    pub pool: i64,
    /// Pin the sender to this CPU.
    pub cpu: Option<i64>,
    /// The synthetic signal (frame size, rate, channels, bits, tone, ...).
    pub signal: SignalSpec,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            to: String::new(),
            duration: None,
            frames: None,
            psn: false,
            drop: None,
            reorder: None,
            garbage: 0,
            file: None,
            record_sent: None,
            pool: 1024,
            cpu: None,
            signal: SignalSpec::default(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct SendConfig {
    pub to: SocketAddr,
    pub spec: SignalSpec,
    /// Seconds of data to send (bounds the generated sequence).
    pub duration: Option<f64>,
    /// Frames of the sequence to send (all threads; bounds it too).
    pub frames: Option<u64>,
    pub psn: bool,
    pub drops: Vec<DropRule>,
    /// Swap every n-th frame with the one after it.
    pub reorder: Option<u64>,
    /// Stray datagrams of random size and content spread through the stream.
    pub garbage: u64,
    /// Replay this file's frames instead of generating.
    pub file: Option<PathBuf>,
    pub record_sent: Option<PathBuf>,
    /// Frame sets in the payload pool.
    pub pool: usize,
    pub cpu: Option<usize>,
}

impl SendConfig {
    /// A send of `spec` to `to`, bounded by nothing yet (set `duration` or `frames`).
    pub fn new(to: SocketAddr, spec: SignalSpec) -> SendConfig {
        let d = SendOptions::default();
        SendConfig {
            to,
            spec,
            duration: None,
            frames: None,
            psn: d.psn,
            drops: Vec::new(),
            reorder: None,
            garbage: 0,
            file: None,
            record_sent: None,
            pool: d.pool as usize,
            cpu: None,
        }
    }

    /// Reads the options (a negative count, an address or a drop rule that cannot be read is
    /// named) and checks the configuration they make; opens nothing.
    pub fn from_options(o: &SendOptions) -> Result<SendConfig, ArgError> {
        let count = |name, v: i64, least| in_range(name, v, least, i64::MAX, "");
        let cfg = SendConfig {
            to: address("to", &o.to)?,
            spec: o.signal.clone(),
            duration: o.duration,
            frames: o.frames.map(|n| count("frames", n, 1)).transpose()?,
            psn: o.psn,
            drops: match &o.drop {
                Some(d) => parse_drops(d)?,
                None => Vec::new(),
            },
            reorder: o.reorder.map(|n| count("reorder", n, 1)).transpose()?,
            garbage: count("garbage", o.garbage, 0)?,
            file: o.file.clone(),
            record_sent: o.record_sent.clone(),
            pool: count("pool", o.pool, 1)? as usize,
            cpu: o
                .cpu
                .map(|c| in_range("cpu", c, 0, 4095, "a CPU number").map(|c| c as usize))
                .transpose()?,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Every check of a send, in one place: whoever made the configuration (options from
    /// Python or the command line, or Rust code), `Sender::start` runs it before anything.
    pub fn check(&self) -> Result<(), ArgError> {
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(ArgError::new(
                    "duration",
                    format!("{d} is not a positive number of seconds"),
                ));
            }
        }
        if self.duration.is_none() && self.frames.is_none() && self.file.is_none() {
            return Err(ArgError::new(
                "duration",
                "give duration or frames (or a file to replay) to bound what is sent",
            ));
        }
        if self.frames == Some(0) || self.reorder == Some(0) || self.pool == 0 {
            let name = if self.frames == Some(0) {
                "frames"
            } else if self.reorder == Some(0) {
                "reorder"
            } else {
                "pool"
            };
            return Err(ArgError::new(name, "0 is out of range: give 1 or more"));
        }
        if let Some(p) = &self.record_sent {
            if p.as_os_str().is_empty() {
                return Err(ArgError::new("record_sent", "an empty path names no file"));
            }
        }
        if self.file.is_none() {
            // The signal is generated: its settings, and one frame per datagram.
            self.spec.template().map_err(signal_error)?;
            let prefix = if self.psn { 8 } else { 0 };
            check_datagram_frame_size(self.spec.frame_size, prefix)
                .map_err(|why| ArgError::new("frame_size", why))?;
        }
        Ok(())
    }
}

/// A signal setting the generator refuses, named as the user gave it.
fn signal_error(e: GenerateError) -> ArgError {
    match e {
        GenerateError::BadArgument { name, value, why } => {
            ArgError::new(name, format!("{value} is out of range: {why}"))
        }
        GenerateError::Invalid { name, why } => ArgError::new(name, why),
        GenerateError::ToneOutsideBand { .. } => {
            let text = e.to_string();
            ArgError::new("tone_mhz", text.trim_start_matches("tone_mhz: "))
        }
        other => ArgError::new("signal", other.to_string()),
    }
}

/// `HOST:PORT` (`[::1]:PORT` for IPv6, `localhost` for 127.0.0.1) with a port to send to.
pub fn address(name: &str, text: &str) -> Result<SocketAddr, ArgError> {
    let bad = || {
        ArgError::new(
            name,
            format!("expected HOST:PORT such as 127.0.0.1:46227, got {text:?}"),
        )
    };
    let (host, port) = text.trim().rsplit_once(':').ok_or_else(bad)?;
    let port: i64 = port.parse().map_err(|_| bad())?;
    let port = in_range(name, port, 1, 65_535, "the receiver's UDP port")? as u16;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    Ok(SocketAddr::new(crate::options::ip(name, host)?, port))
}

/// What a send did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SendSummary {
    /// VDIF frames handed to the kernel.
    pub frames_sent: u64,
    /// Bytes of those datagrams (PSN included).
    pub bytes_sent: u64,
    /// Frames of the sequence left out on purpose (--drop).
    pub frames_dropped: u64,
    /// Frames sent out of order on purpose (--reorder).
    pub frames_reordered: u64,
    pub garbage_sent: u64,
    /// Datagrams refused because nobody listened (ICMP port unreachable).
    pub refused: u64,
    pub send_errors: u64,
    pub frame_size: usize,
    pub frames_per_second: u32,
    pub threads: u32,
    /// Reference epoch and seconds of the first frame.
    pub ref_epoch: u32,
    pub start_second: u32,
    pub duration_s: f64,
    /// Achieved rate in Gbit/s of datagram bytes.
    pub gbps: f64,
    /// The send stopped before the end of its sequence (stop asked).
    pub stopped_early: bool,
}

/// The generated stream: frame `k` of the sequence is frame set `k / threads` of thread
/// `k % threads`, its header from the template, its payload from a pool of frame sets made
/// once. The same pool regenerates what was sent, so a recording can be checked against it
/// frame by frame without keeping a copy (`verify_recording`).
pub struct Pool {
    template: Header,
    fps: u32,
    threads: u32,
    /// `sets` frame sets × `threads` payloads.
    payloads: Vec<u8>,
    sets: usize,
}

impl Pool {
    pub fn new(spec: &SignalSpec, sets: usize) -> Result<Pool, SendError> {
        let template = spec.template()?;
        let payload = template.payload_size();
        let threads = spec.threads as usize;
        let mut synth = Synth::new(spec)?;
        let mut payloads = vec![0u8; sets.max(1) * threads * payload];
        for set in payloads.chunks_mut(threads * payload) {
            let mut parts: Vec<&mut [u8]> = set.chunks_mut(payload).collect();
            synth.next_frameset(&mut parts);
        }
        Ok(Pool {
            template,
            fps: spec.fps,
            threads: spec.threads,
            payloads,
            sets: sets.max(1),
        })
    }

    pub fn template(&self) -> &Header {
        &self.template
    }

    /// Header and payload of frame set `set`, thread index `t`.
    pub fn frame(&self, set: u64, t: u32) -> (Header, &[u8]) {
        let payload = self.template.payload_size();
        let idx = (set as usize % self.sets) * self.threads as usize + t as usize;
        (
            frame_header(&self.template, self.fps, set, t),
            &self.payloads[idx * payload..(idx + 1) * payload],
        )
    }

    /// The frame set a header belongs to (None if before the start or of another stream).
    pub fn set_of(&self, h: &Header) -> Option<u64> {
        let first = self.template.seconds() as i64 * self.fps as i64;
        let this = h.seconds() as i64 * self.fps as i64 + h.frame_nr() as i64;
        (h.ref_epoch() == self.template.ref_epoch() && this >= first).then(|| (this - first) as u64)
    }
}

/// What a comparison of a recording with the generator found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verification {
    pub frames: u64,
    pub matching: u64,
    pub differing: u64,
    /// Frames whose (time, thread) is not later than the previous frame's of that thread:
    /// a duplicate or reordered frame, even if its bytes are what was sent.
    pub out_of_order: u64,
    /// Byte offset of the first frame that differs.
    pub first_difference: Option<u64>,
    /// Whether the file was read with O_DIRECT (leaving the page cache alone).
    pub direct: bool,
}

/// Compares every frame of a recording with what a sender of `spec` (and pool size `sets`)
/// sent for the same time and thread: headers and payloads byte for byte, and that each
/// thread's frames follow in time. Reads with O_DIRECT, so a check running beside a
/// recording does not compete with it for the page cache.
pub fn verify_recording(
    path: &std::path::Path,
    spec: &SignalSpec,
    sets: usize,
) -> Result<Verification, SendError> {
    let pool = Pool::new(spec, sets)?;
    let fs = spec.frame_size;
    let mut v = Verification::default();
    let mut last_set: Vec<Option<u64>> = vec![None; spec.threads as usize];
    let direct = crate::sources::readback::for_each_frame(path, fs, |i, frame| {
        v.frames += 1;
        let set = (frame.len() == fs)
            .then(|| Header::parse_unchecked(frame).ok())
            .flatten()
            .and_then(|h| {
                let thread = h.thread_id().min(spec.threads - 1);
                let set = pool.set_of(&h)?;
                let (want, payload) = pool.frame(set, thread);
                (want.to_bytes() == frame[..32] && payload == &frame[32..]).then_some((set, thread))
            });
        match set {
            Some((set, thread)) => {
                v.matching += 1;
                let last = &mut last_set[thread as usize];
                if last.is_some_and(|l| set <= l) {
                    v.out_of_order += 1;
                }
                *last = Some(set);
            }
            None => {
                v.differing += 1;
                v.first_difference.get_or_insert(i * fs as u64);
            }
        }
    })
    .map_err(|e| SendError::Verify {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    v.direct = direct;
    Ok(v)
}

/// Where frames come from.
enum Source {
    Pool(Pool),
    Replay { map: memmap2::Mmap, frames: u64 },
}

/// A sender running in its own thread.
pub struct Sender {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<SendSummary, String>>>,
    result: Arc<Mutex<Option<Result<SendSummary, String>>>>,
}

impl Sender {
    /// Prepares (pool, socket, files) and starts sending; errors in preparation come back here.
    pub fn start(cfg: SendConfig) -> Result<Sender, SendError> {
        let job = Job::prepare(cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vdifrec-send".into())
            .spawn(move || job.run(&stop2))
            .map_err(SendError::Thread)?;
        Ok(Sender {
            stop,
            handle: Some(handle),
            result: Arc::new(Mutex::new(None)),
        })
    }

    /// Asks the sender to stop after the current batch.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Waits for the end (or `timeout`); returns the summary once finished.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Option<Result<SendSummary, String>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        while !self.is_finished() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut r = self.result.lock().unwrap();
        if r.is_none() {
            if let Some(h) = self.handle.take() {
                *r = Some(
                    h.join()
                        .unwrap_or_else(|_| Err("the sender thread panicked".into())),
                );
            }
        }
        r.clone()
    }

    /// Stops and returns the summary.
    pub fn stop(&mut self) -> Result<SendSummary, String> {
        self.request_stop();
        self.wait(None).expect("finished")
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.request_stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct Job {
    cfg: SendConfig,
    /// When to send the first frame (the start of its VDIF second), if it is to wait.
    start_at: Option<Instant>,
    socket: Socket,
    source: Source,
    total: u64,
    frame_size: usize,
    record: Option<std::io::BufWriter<std::fs::File>>,
}

impl Job {
    fn prepare(mut cfg: SendConfig) -> Result<Job, SendError> {
        // Like a real source, start at a whole second of the clock: the next one (unless a
        // start was given, which is sent at once).
        let mut start_at = None;
        if cfg.spec.start_second.is_none() && cfg.file.is_none() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let next = now.as_secs() + 1;
            cfg.spec = cfg.spec.starting(cfg.spec.start_at(next as i64));
            start_at = Some(Instant::now() + (Duration::from_secs(next) - now));
        }
        cfg.check()?;
        let (source, frame_size, per_second) = match &cfg.file {
            Some(path) => {
                let replay_err = |why: String| SendError::Replay {
                    path: path.clone(),
                    why,
                };
                let file = std::fs::File::open(path).map_err(|e| replay_err(e.to_string()))?;
                // SAFETY: read-only map of a recording the operator asked to replay.
                let map =
                    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| replay_err(e.to_string()))?;
                let h = Header::parse_unchecked(&map).map_err(|e| replay_err(e.to_string()))?;
                let fs = h.frame_size();
                if fs <= h.header_size() {
                    return Err(replay_err(format!("first frame claims {fs} bytes")));
                }
                check_frame_size(fs)
                    .and_then(|()| check_datagram_frame_size(fs, if cfg.psn { 8 } else { 0 }))
                    .map_err(|why| replay_err(format!("its first frame: {why}")))?;
                let frames = (map.len() / fs) as u64;
                let mut threads = std::collections::BTreeSet::new();
                for k in 0..frames.min(4096) as usize {
                    if let Ok(h) = Header::parse_unchecked(&map[k * fs..]) {
                        threads.insert(h.thread_id());
                    }
                }
                let per_second = cfg.spec.fps as f64 * threads.len().max(1) as f64;
                (Source::Replay { map, frames }, fs, per_second)
            }
            None => {
                let spec = &cfg.spec;
                (
                    Source::Pool(Pool::new(spec, cfg.pool)?),
                    spec.frame_size,
                    spec.fps as f64 * spec.threads as f64,
                )
            }
        };
        let mut total = u64::MAX;
        if let Some(d) = cfg.duration {
            total = total.min((d * per_second).round() as u64);
        }
        if let Some(n) = cfg.frames {
            total = total.min(n);
        }
        if let Source::Replay { frames, .. } = &source {
            total = total.min(*frames);
        }
        let domain = if cfg.to.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let sock_err = |source| SendError::Socket { to: cfg.to, source };
        let socket =
            Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP)).map_err(sock_err)?;
        let _ = socket.set_send_buffer_size(64 << 20);
        socket.connect(&SockAddr::from(cfg.to)).map_err(sock_err)?;
        let record = match &cfg.record_sent {
            Some(p) => Some(std::io::BufWriter::with_capacity(
                8 << 20,
                std::fs::File::create(p).map_err(|source| SendError::RecordSent {
                    path: p.clone(),
                    source,
                })?,
            )),
            None => None,
        };
        Ok(Job {
            cfg,
            start_at,
            socket,
            source,
            total,
            frame_size,
            record,
        })
    }

    fn run(mut self, stop: &AtomicBool) -> Result<SendSummary, String> {
        crate::affinity::name_current("vdifrec-send");
        if let Some(cpu) = self.cfg.cpu {
            crate::affinity::pin_current("sender", cpu);
        }
        let stream = self.stream();
        let mut sum = SendSummary {
            frame_size: self.frame_size,
            frames_per_second: stream.fps,
            threads: stream.threads,
            ref_epoch: stream.first.ref_epoch(),
            start_second: stream.first.seconds(),
            ..Default::default()
        };
        let mut schedule = Schedule::new(self.total, self.cfg.garbage);
        let mut bufs = Buffers::new(self.cfg.spec.seed);
        if let Some(t) = self.start_at {
            while Instant::now() < t && !stop.load(Ordering::Acquire) {
                std::thread::sleep((t - Instant::now()).min(Duration::from_millis(20)));
            }
        }
        let started = Instant::now();
        while !schedule.done() {
            if stop.load(Ordering::Acquire) {
                sum.stopped_early = true;
                break;
            }
            let batch = self.schedule(&mut schedule, &stream, &mut sum);
            // Pace: the batch's first frame is due at its place in the sequence.
            let first = schedule.next.saturating_sub(batch.len() as u64);
            wait_until(started + Duration::from_secs_f64(first as f64 / stream.per_second));
            let mut datagrams = self.gather(&batch, &mut bufs);
            self.transmit(&mut datagrams, &mut sum)?;
        }
        if let Some(mut w) = self.record.take() {
            w.flush().map_err(|e| format!("record_sent: {e}"))?;
        }
        sum.duration_s = started.elapsed().as_secs_f64();
        sum.gbps = sum.bytes_sent as f64 * 8.0 / sum.duration_s.max(1e-9) / 1e9;
        Ok(sum)
    }

    /// The stream's rate, threads and first header.
    fn stream(&self) -> Stream {
        match &self.source {
            Source::Pool(p) => Stream {
                per_second: p.fps as f64 * p.threads as f64,
                threads: p.threads,
                fps: p.fps,
                first: p.template,
            },
            Source::Replay { map, .. } => Stream {
                per_second: self.cfg.spec.fps as f64,
                threads: 1,
                fps: self.cfg.spec.fps,
                first: Header::parse_unchecked(map).expect("checked in prepare"),
            },
        }
    }

    /// The next batch in sending order: sequence numbers with drops left out, swaps done and
    /// stray datagrams mixed in.
    fn schedule(&self, s: &mut Schedule, stream: &Stream, sum: &mut SendSummary) -> Vec<Item> {
        let mut batch: Vec<Item> = Vec::with_capacity(SEND_BATCH + 2);
        while batch.len() < SEND_BATCH && !s.done() {
            if s.next >= s.total {
                batch.push(Item::Frame(s.pending_swap.take().expect("pending")));
                continue;
            }
            let k = s.next;
            s.next += 1;
            if s.garbage_left > 0 && k > 0 && k % s.garbage_every == 0 {
                batch.push(Item::Garbage);
                s.garbage_left -= 1;
            }
            if self.dropped(k, &stream.first, stream.fps, stream.threads) {
                sum.frames_dropped += 1;
                continue;
            }
            if let Some(n) = self.cfg.reorder {
                if (k + 1) % n == 0 && s.pending_swap.is_none() && k + 1 < s.total {
                    s.pending_swap = Some(k);
                    sum.frames_reordered += 1;
                    continue;
                }
            }
            batch.push(Item::Frame(k));
            if let Some(p) = s.pending_swap.take() {
                batch.push(Item::Frame(p));
            }
        }
        batch
    }

    /// The batch's datagrams as iovecs: [PSN], header, payload of each frame (the payload
    /// straight from the pool or the replayed file), or random bytes for a stray datagram.
    fn gather(&self, batch: &[Item], bufs: &mut Buffers) -> Datagrams {
        let mut d = Datagrams {
            iov: Vec::with_capacity(batch.len()),
            parts: Vec::with_capacity(batch.len()),
            is_frame: Vec::with_capacity(batch.len()),
        };
        let payload_len = self.frame_size - 32;
        for (i, item) in batch.iter().enumerate() {
            let mut v = [empty_iov(), empty_iov(), empty_iov()];
            let mut n = 0;
            match *item {
                Item::Garbage => {
                    let len = (bufs.rng.next_u64() % 9000) as usize;
                    for b in bufs.garbage[..len].chunks_mut(8) {
                        let r = bufs.rng.next_u64().to_le_bytes();
                        b.copy_from_slice(&r[..b.len()]);
                    }
                    v[0] = iovec(bufs.garbage.as_ptr(), len);
                    n = 1;
                }
                Item::Frame(k) => {
                    let (hdr, payload) = self.frame_parts(k, &mut bufs.headers[i]);
                    // The PSN is the frame's place in the sequence: a dropped frame leaves a
                    // gap, a swapped one arrives out of order, as on a real network.
                    if self.cfg.psn {
                        bufs.psns[i] = k.to_le_bytes();
                        v[n] = iovec(bufs.psns[i].as_ptr(), 8);
                        n += 1;
                    }
                    v[n] = iovec(hdr, 32);
                    v[n + 1] = iovec(payload, payload_len);
                    n += 2;
                }
            }
            d.iov.push(v);
            d.parts.push(n);
            d.is_frame.push(matches!(item, Item::Frame(_)));
        }
        d
    }

    /// Hands the datagrams to the kernel (a refused one is counted and skipped) and writes
    /// the frames sent to `record_sent`.
    fn transmit(&mut self, d: &mut Datagrams, sum: &mut SendSummary) -> Result<(), String> {
        let mut msgs: Vec<libc::mmsghdr> = d
            .iov
            .iter_mut()
            .zip(&d.parts)
            .map(|(v, n)| {
                // SAFETY: zeroed mmsghdr is a valid empty value; fields set below.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v.as_mut_ptr();
                m.msg_hdr.msg_iovlen = *n;
                m
            })
            .collect();
        let mut at = 0;
        while at < msgs.len() {
            // SAFETY: the messages point at buffers alive for this call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    msgs[at..].as_mut_ptr(),
                    (msgs.len() - at) as libc::c_uint,
                    0,
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ECONNREFUSED) => {
                        // Nobody listening: this datagram is not sent; count it and go on.
                        sum.refused += 1;
                        at += 1;
                    }
                    Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    _ => {
                        sum.send_errors += 1;
                        at += 1;
                    }
                }
                continue;
            }
            for idx in at..at + rc as usize {
                let parts = &d.iov[idx][..d.parts[idx]];
                sum.bytes_sent += parts.iter().map(|v| v.iov_len as u64).sum::<u64>();
                if !d.is_frame[idx] {
                    sum.garbage_sent += 1;
                    continue;
                }
                sum.frames_sent += 1;
                if let Some(w) = self.record.as_mut() {
                    for part in &parts[usize::from(self.cfg.psn)..] {
                        // SAFETY: the iovec points at a live header or payload.
                        let s = unsafe {
                            std::slice::from_raw_parts(part.iov_base as *const u8, part.iov_len)
                        };
                        w.write_all(s).map_err(|e| format!("record_sent: {e}"))?;
                    }
                }
            }
            at += rc as usize;
        }
        Ok(())
    }

    /// Whether frame `k` of the sequence is to be dropped.
    fn dropped(&self, k: u64, first: &Header, fps: u32, threads: u32) -> bool {
        if self.cfg.drops.is_empty() {
            return false;
        }
        let set = k / threads as u64;
        let seq = first.frame_nr() as u64 + set;
        let (second, fnr) = (seq / fps as u64, (seq % fps as u64) as u32);
        self.cfg.drops.iter().any(|r| match *r {
            DropRule::Range {
                second: s,
                first: a,
                last: b,
            } => second == s && (a..=b).contains(&fnr),
            DropRule::Every(n) => (k + 1) % n == 0,
        })
    }

    /// Header (written into `hdr`) and payload pointer of frame `k`.
    fn frame_parts(&self, k: u64, hdr: &mut [u8; 32]) -> (*const u8, *const u8) {
        match &self.source {
            Source::Pool(p) => {
                let (t, set) = ((k % p.threads as u64) as u32, k / p.threads as u64);
                let (h, payload) = p.frame(set, t);
                h.write_to(hdr);
                (hdr.as_ptr(), payload.as_ptr())
            }
            Source::Replay { map, .. } => {
                let off = k as usize * self.frame_size;
                hdr.copy_from_slice(&map[off..off + 32]);
                (hdr.as_ptr(), map[off + 32..].as_ptr())
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Item {
    Frame(u64),
    Garbage,
}

/// The stream being sent: frames per second in all, threads, frames per second per thread,
/// the first frame's header.
struct Stream {
    per_second: f64,
    threads: u32,
    fps: u32,
    first: Header,
}

/// Where the sending order stands.
struct Schedule {
    /// The next position in the sequence.
    next: u64,
    total: u64,
    /// A frame held back to be sent after the next one (reordering).
    pending_swap: Option<u64>,
    garbage_left: u64,
    garbage_every: u64,
}

impl Schedule {
    fn new(total: u64, garbage: u64) -> Schedule {
        Schedule {
            next: 0,
            total,
            pending_swap: None,
            garbage_left: garbage,
            garbage_every: if garbage > 0 {
                (total / (garbage + 1)).max(1)
            } else {
                u64::MAX
            },
        }
    }

    fn done(&self) -> bool {
        self.next >= self.total && self.pending_swap.is_none()
    }
}

/// Buffers a batch's datagrams point into, made once.
struct Buffers {
    // A batch can run two past SEND_BATCH: a stray datagram and a swapped frame.
    headers: Vec<[u8; 32]>,
    psns: Vec<[u8; 8]>,
    garbage: Vec<u8>,
    rng: crate::sources::generate::Rng,
}

impl Buffers {
    fn new(seed: u64) -> Buffers {
        Buffers {
            headers: vec![[0u8; 32]; SEND_BATCH + 2],
            psns: vec![[0u8; 8]; SEND_BATCH + 2],
            garbage: vec![0u8; 9000],
            rng: crate::sources::generate::Rng::new(seed ^ 0x5eed_6a7b),
        }
    }
}

/// One batch ready for sendmmsg: up to three iovecs per datagram.
struct Datagrams {
    iov: Vec<[libc::iovec; 3]>,
    parts: Vec<usize>,
    is_frame: Vec<bool>,
}

fn iovec(base: *const u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base as *mut libc::c_void,
        iov_len: len,
    }
}

fn empty_iov() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}

/// Sleeps until `due`, spinning for the last stretch (sleep is coarse at these rates).
fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_specs() {
        assert_eq!(
            parse_drops("1:10-19, every:1000,2:5").unwrap(),
            vec![
                DropRule::Range {
                    second: 1,
                    first: 10,
                    last: 19
                },
                DropRule::Every(1000),
                DropRule::Range {
                    second: 2,
                    first: 5,
                    last: 5
                },
            ]
        );
        for bad in ["x", "1:9-3", "every:0", "1:a-b"] {
            let e = parse_drops(bad).unwrap_err().to_string();
            assert!(e.starts_with("drop: "), "{e}");
        }
    }
}
