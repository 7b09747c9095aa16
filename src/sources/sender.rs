//! `vdifrec send`: a FILA10G-like VDIF source, or the replay of a recording at its own rate,
//! over UDP (`sendmmsg`), UDP with packet sequence numbers, or TCP (`link`).
//!
//! Generated payloads come from a pool made once (noise plus tone, see `generate`), so sending
//! costs no synthesis; each datagram is gathered from a small header buffer and a pool payload.
//! A replay (`replay`) sends a file's or a scan's frames in recorded order, each exactly as
//! recorded, paced at the recording's own frame rate (or the rate given). Faults can be
//! injected deterministically: drops (`S:A-B`, `every:N`), reordering, stray datagrams.
//! `record_sent` writes exactly the frames sent, in order, for byte-exact comparisons.

use crate::options::{disk_dirs, in_range, ArgError};
use crate::sources::generate::{frame_header, GenerateError, SignalSpec, Synth};
use crate::sources::link::{destination, Datagram, Endpoint, Framing, Link, LinkError, Outcome};
use crate::sources::replay::{Recording, Replay, ReplayError};
use crate::vdif::header::check_datagram_frame_size;
use crate::vdif::header::Header;
use crate::vdif::layout::Format;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Datagrams per batch (one `sendmmsg`, or one `sendmsg` on TCP).
const SEND_BATCH: usize = 32;

#[derive(Debug, Error)]
pub enum SendError {
    #[error(transparent)]
    Option(#[from] ArgError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Replay(#[from] ReplayError),
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
    /// Where to, and how: `HOST:PORT` or `udp://HOST:PORT` (a frame per datagram),
    /// `udps://HOST:PORT` (each led by a 64-bit packet sequence number), `tcp://HOST:PORT`
    /// (frames back to back on one connection). `[::1]:PORT` for IPv6; `localhost` is 127.0.0.1.
    pub to: String,
    /// Seconds of data to send.
    pub duration: Option<f64>,
    /// Frames to send (all threads).
    pub frames: Option<i64>,
    /// Prepend an 8-byte packet sequence number (UDP: the same as `udps://`).
    pub psn: bool,
    /// Frames to leave out: `S:A-B` (second S from the start, frames A..B), `every:N`.
    pub drop: Option<String>,
    /// Swap every N-th frame with the next.
    pub reorder: Option<i64>,
    /// Stray datagrams of random size and content to mix in (UDP only).
    pub garbage: i64,
    /// Replay this VDIF file instead of generating.
    pub file: Option<PathBuf>,
    /// Replay this scan, found on `disks`, instead of generating.
    pub scan: Option<String>,
    /// The directories (or globs such as `/mnt/disk*`) the scan was recorded on.
    pub disks: Vec<String>,
    /// The scan's layout: `file`, `vbs` or `mk6` (None: detected).
    pub format: Option<String>,
    /// Replay at this data rate of frames (`4Gbps`, `500MB/s`) instead of the recording's own.
    pub rate: Option<String>,
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
            scan: None,
            disks: Vec::new(),
            format: None,
            rate: None,
            record_sent: None,
            pool: 1024,
            cpu: None,
            signal: SignalSpec::default(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct SendConfig {
    /// Where to and how (the framing says whether a PSN leads each frame).
    pub to: Endpoint,
    pub spec: SignalSpec,
    /// Seconds of data to send (bounds the sequence).
    pub duration: Option<f64>,
    /// Frames of the sequence to send (all threads; bounds it too).
    pub frames: Option<u64>,
    pub drops: Vec<DropRule>,
    /// Swap every n-th frame with the one after it.
    pub reorder: Option<u64>,
    /// Stray datagrams of random size and content spread through the stream.
    pub garbage: u64,
    /// Replay this recording's frames instead of generating.
    pub replay: Option<Recording>,
    /// Pace a replay at this many bytes of frames per second instead of its own rate.
    pub rate: Option<f64>,
    pub record_sent: Option<PathBuf>,
    /// Frame sets in the payload pool.
    pub pool: usize,
    pub cpu: Option<usize>,
}

impl SendConfig {
    /// A send of `spec` to `to` over plain UDP, bounded by nothing yet (set `duration` or
    /// `frames`).
    pub fn new(to: SocketAddr, spec: SignalSpec) -> SendConfig {
        SendConfig {
            to: Endpoint::udp(to),
            spec,
            duration: None,
            frames: None,
            drops: Vec::new(),
            reorder: None,
            garbage: 0,
            replay: None,
            rate: None,
            record_sent: None,
            pool: SendOptions::default().pool as usize,
            cpu: None,
        }
    }

    /// Reads the options (a negative count, an address, a rate or a drop rule that cannot be
    /// read is named) and checks the configuration they make; opens nothing.
    pub fn from_options(o: &SendOptions) -> Result<SendConfig, ArgError> {
        let count = |name, v: i64, least| in_range(name, v, least, i64::MAX, "");
        let mut to = destination("to", &o.to)?;
        if o.psn {
            to.framing =
                match to.framing {
                    Framing::Udp | Framing::Udps => Framing::Udps,
                    Framing::Tcp => return Err(ArgError::new(
                        "psn",
                        "tcp:// carries the frames back to back, without packet sequence numbers: \
                         leave psn out, or send to udps://HOST:PORT",
                    )),
                };
        }
        let cfg = SendConfig {
            to,
            spec: o.signal.clone(),
            duration: o.duration,
            frames: o.frames.map(|n| count("frames", n, 1)).transpose()?,
            drops: match &o.drop {
                Some(d) => parse_drops(d)?,
                None => Vec::new(),
            },
            reorder: o.reorder.map(|n| count("reorder", n, 1)).transpose()?,
            garbage: count("garbage", o.garbage, 0)?,
            replay: recording(o)?,
            rate: o
                .rate
                .as_deref()
                .map(|r| crate::units::parse_rate("rate", r))
                .transpose()
                .map_err(|e| ArgError::new("rate", e.to_string().trim_start_matches("rate: ")))?,
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
        if self.duration.is_none() && self.frames.is_none() && self.replay.is_none() {
            return Err(ArgError::new(
                "duration",
                "give duration or frames (or a file or scan to replay) to bound what is sent",
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
        if self.to.framing == Framing::Tcp && self.garbage > 0 {
            return Err(ArgError::new(
                "garbage",
                "stray datagrams need UDP: on tcp:// they would break the stream of frames; \
                 send to udp:// or udps://, or leave garbage out",
            ));
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(ArgError::new("rate", format!("{r} is not a positive rate")));
            }
            if self.replay.is_none() {
                return Err(ArgError::new(
                    "rate",
                    "paces a replay (file or scan); the generated signal goes at fps x threads \
                     frames per second: give fps instead",
                ));
            }
        }
        if self.replay.is_none() {
            // The signal is generated: its settings, and one frame per datagram.
            self.spec.template().map_err(signal_error)?;
            if self.to.framing != Framing::Tcp {
                check_datagram_frame_size(self.spec.frame_size, self.psn_bytes())
                    .map_err(|why| ArgError::new("frame_size", why))?;
            }
        }
        Ok(())
    }

    /// Bytes before each frame: the PSN's 8, or none.
    fn psn_bytes(&self) -> usize {
        if self.to.framing.psn() {
            8
        } else {
            0
        }
    }
}

/// What the options say to replay, checked: a file, or a scan on its disks (globs expanded);
/// None: generate.
fn recording(o: &SendOptions) -> Result<Option<Recording>, ArgError> {
    let disks = disk_dirs("disks", &o.disks)?;
    let format = o
        .format
        .as_deref()
        .map(|f| {
            Format::parse(f).ok_or_else(|| {
                ArgError::new(
                    "format",
                    format!("{f:?} is not a scan layout; use {}", Format::NAMES),
                )
            })
        })
        .transpose()?;
    if let Some(p) = &o.file {
        if p.as_os_str().is_empty() {
            return Err(ArgError::new("file", "an empty path names no file"));
        }
    }
    match (&o.file, &o.scan) {
        (Some(_), Some(_)) => Err(ArgError::new(
            "scan",
            "give file or scan, not both: file replays one VDIF file, scan a scan found on disks",
        )),
        (None, Some(name)) => {
            if name.trim().is_empty() {
                return Err(ArgError::new("scan", "an empty name names no scan"));
            }
            if disks.is_empty() {
                return Err(ArgError::new(
                    "disks",
                    format!("none given: name the directories (mount points) scan {name:?} was recorded on"),
                ));
            }
            Ok(Some(Recording::Scan {
                name: name.clone(),
                disks,
                format,
            }))
        }
        (file, None) => {
            if !disks.is_empty() || format.is_some() {
                return Err(ArgError::new(
                    if disks.is_empty() { "format" } else { "disks" },
                    "where and how a scan lies: give scan (its name) too; a file needs file alone",
                ));
            }
            Ok(file.clone().map(Recording::File))
        }
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

/// What a send did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SendSummary {
    /// Where to, with its framing: `udp://HOST:PORT`, `udps://...` or `tcp://...`.
    pub to: String,
    /// The file or scan replayed (None: the signal was generated).
    pub replayed: Option<String>,
    /// VDIF frames handed to the kernel.
    pub frames_sent: u64,
    /// Bytes handed to the kernel (PSNs and stray datagrams included).
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
    /// Frames per second per thread (rounded where a given rate makes a fraction).
    pub frames_per_second: u32,
    pub threads: u32,
    /// Frames per second, all threads, that the send was paced at.
    pub frame_rate: f64,
    /// How `frame_rate` was found: "signal" (the generated signal's fps x threads),
    /// "frame-number wrap" (the highest frame number of a whole VDIF second + 1, per thread,
    /// of the recording replayed), "header" (its EDV sample rate) or "rate" (given).
    pub rate_source: String,
    /// Reference epoch and seconds of the first frame.
    pub ref_epoch: u32,
    pub start_second: u32,
    /// Seconds from the first frame to the end of the last (its place in the pace).
    pub duration_s: f64,
    /// Achieved frames per second: frames_sent / duration_s.
    pub achieved_frame_rate: f64,
    /// Achieved rate in Gbit/s of the bytes sent.
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
    Replay(Replay),
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
    link: Link,
    source: Source,
    stream: Stream,
    total: u64,
    frame_size: usize,
    record: Option<std::io::BufWriter<std::fs::File>>,
}

impl Job {
    fn prepare(mut cfg: SendConfig) -> Result<Job, SendError> {
        // Like a real source, start at a whole second of the clock: the next one (unless a
        // start was given, which is sent at once).
        let mut start_at = None;
        if cfg.spec.start_second.is_none() && cfg.replay.is_none() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let next = now.as_secs() + 1;
            cfg.spec = cfg.spec.starting(cfg.spec.start_at(next as i64));
            start_at = Some(Instant::now() + (Duration::from_secs(next) - now));
        }
        cfg.check()?;
        let source = match &cfg.replay {
            Some(what) => Source::Replay(Replay::open(what, cfg.rate)?),
            None => Source::Pool(Pool::new(&cfg.spec, cfg.pool)?),
        };
        let (stream, frame_size, mut total) = match &source {
            Source::Pool(p) => {
                let stream = Stream {
                    per_second: p.fps as f64 * p.threads as f64,
                    threads: p.threads,
                    fps: p.fps,
                    first: p.template,
                    rate_source: "signal",
                };
                (stream, cfg.spec.frame_size, u64::MAX)
            }
            Source::Replay(r) => {
                let fs = r.frames.frame_size();
                if cfg.to.framing != Framing::Tcp {
                    let what = match &cfg.replay {
                        Some(Recording::Scan { .. }) => "scan",
                        _ => "file",
                    };
                    check_datagram_frame_size(fs, cfg.psn_bytes()).map_err(|why| {
                        ArgError::new(
                            what,
                            format!("{}: its frames: {why}; or replay it over tcp://", r.label),
                        )
                    })?;
                }
                let stream = Stream {
                    per_second: r.rate.total(),
                    threads: r.rate.threads,
                    fps: r.rate.per_thread.round() as u32,
                    first: r.first,
                    rate_source: r.rate.source,
                };
                (stream, fs, r.frames.n_frames() as u64)
            }
        };
        if let Some(d) = cfg.duration {
            total = total.min((d * stream.per_second).round() as u64);
        }
        if let Some(n) = cfg.frames {
            total = total.min(n);
        }
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
        let link = Link::open(cfg.to.clone())?;
        Ok(Job {
            cfg,
            start_at,
            link,
            source,
            stream,
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
        let stream = &self.stream;
        let mut sum = SendSummary {
            to: self.cfg.to.to_string(),
            replayed: match &self.source {
                Source::Replay(r) => Some(r.label.clone()),
                Source::Pool(_) => None,
            },
            frame_size: self.frame_size,
            frames_per_second: stream.fps,
            threads: stream.threads,
            frame_rate: stream.per_second,
            rate_source: stream.rate_source.into(),
            ref_epoch: stream.first.ref_epoch(),
            start_second: stream.first.seconds(),
            ..Default::default()
        };
        let per_second = stream.per_second;
        // Batches of at most a millisecond of stream, so that a slow one is not sent in bursts.
        let most = ((per_second / 1000.0) as usize).clamp(1, SEND_BATCH);
        let mut schedule = Schedule::new(self.total, self.cfg.garbage, most);
        let mut bufs = Buffers::new(self.cfg.spec.seed);
        if let Some(t) = self.start_at {
            while Instant::now() < t && !stop.load(Ordering::Acquire) {
                std::thread::sleep((t - Instant::now()).min(Duration::from_millis(20)));
            }
        }
        let started = Instant::now();
        let due = |k: u64| started + Duration::from_secs_f64(k as f64 / per_second);
        while !schedule.done() {
            // Pace: the batch's first frame is due at its place in the sequence.
            let first = schedule.next;
            if !wait_until(due(first), stop) {
                sum.stopped_early = true;
                break;
            }
            let batch = self.schedule(&mut schedule, &mut sum);
            let (mut datagrams, is_frame) = self.gather(&batch, &mut bufs);
            self.transmit(&mut datagrams, &is_frame, &mut sum, stop)?;
        }
        if !sum.stopped_early {
            // The last frame's time runs out where the next would be due (a stop cuts it short).
            wait_until(due(schedule.next), stop);
        }
        if let Some(mut w) = self.record.take() {
            w.flush().map_err(|e| format!("record_sent: {e}"))?;
        }
        sum.duration_s = started.elapsed().as_secs_f64();
        let seconds = sum.duration_s.max(1e-9);
        sum.achieved_frame_rate = sum.frames_sent as f64 / seconds;
        sum.gbps = sum.bytes_sent as f64 * 8.0 / seconds / 1e9;
        Ok(sum)
    }

    /// The next batch in sending order: sequence numbers with drops left out, swaps done and
    /// stray datagrams mixed in.
    fn schedule(&self, s: &mut Schedule, sum: &mut SendSummary) -> Vec<Item> {
        let mut batch: Vec<Item> = Vec::with_capacity(SEND_BATCH + 2);
        while batch.len() < s.batch && !s.done() {
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
            if self.dropped(k) {
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

    /// The batch's datagrams: [PSN], header, payload of a generated frame (the payload
    /// straight from the pool), [PSN], the whole frame of a replayed one (straight from the
    /// recording), or random bytes for a stray datagram; and which of them are frames.
    fn gather(&self, batch: &[Item], bufs: &mut Buffers) -> (Vec<Datagram>, Vec<bool>) {
        let mut out = Vec::with_capacity(batch.len());
        let mut is_frame = Vec::with_capacity(batch.len());
        for (i, item) in batch.iter().enumerate() {
            let mut d = Datagram::new();
            match *item {
                Item::Garbage => {
                    let len = (bufs.rng.next_u64() % 9000) as usize;
                    for b in bufs.garbage[..len].chunks_mut(8) {
                        let r = bufs.rng.next_u64().to_le_bytes();
                        b.copy_from_slice(&r[..b.len()]);
                    }
                    d.push(bufs.garbage.as_ptr(), len);
                }
                Item::Frame(k) => {
                    // The PSN is the frame's place in the sequence: a dropped frame leaves a
                    // gap, a swapped one arrives out of order, as on a real network.
                    if self.cfg.to.framing.psn() {
                        bufs.psns[i] = k.to_le_bytes();
                        d.push(bufs.psns[i].as_ptr(), 8);
                    }
                    match &self.source {
                        Source::Pool(p) => {
                            let (t, set) = ((k % p.threads as u64) as u32, k / p.threads as u64);
                            let (h, payload) = p.frame(set, t);
                            h.write_to(&mut bufs.headers[i]);
                            d.push(bufs.headers[i].as_ptr(), 32);
                            d.push(payload.as_ptr(), payload.len());
                        }
                        Source::Replay(r) => {
                            let frame = r.frames.frame(k as usize);
                            d.push(frame.as_ptr(), frame.len());
                        }
                    }
                }
            }
            out.push(d);
            is_frame.push(matches!(item, Item::Frame(_)));
        }
        (out, is_frame)
    }

    /// Hands the batch to the link, counts what became of each datagram and writes the frames
    /// sent to `record_sent`.
    fn transmit(
        &mut self,
        batch: &mut [Datagram],
        is_frame: &[bool],
        sum: &mut SendSummary,
        stop: &AtomicBool,
    ) -> Result<(), String> {
        let to = self.link.destination().clone();
        let outcomes = self.link.send(batch, stop).map_err(|e| {
            format!(
                "{to}: the connection broke after {} frames: {e}",
                sum.frames_sent
            )
        })?;
        let psn = usize::from(self.cfg.to.framing.psn());
        for ((d, frame), outcome) in batch.iter().zip(is_frame).zip(outcomes) {
            match outcome {
                Outcome::Refused => sum.refused += 1,
                Outcome::Failed => sum.send_errors += 1,
                Outcome::Unsent => {}
                Outcome::Sent => {
                    sum.bytes_sent += d.len() as u64;
                    if !frame {
                        sum.garbage_sent += 1;
                        continue;
                    }
                    sum.frames_sent += 1;
                    if let Some(w) = self.record.as_mut() {
                        for part in &d.parts()[psn..] {
                            // SAFETY: the iovec points at a live header, payload or frame.
                            let s = unsafe {
                                std::slice::from_raw_parts(part.iov_base as *const u8, part.iov_len)
                            };
                            w.write_all(s).map_err(|e| format!("record_sent: {e}"))?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether frame `k` of the sequence is to be dropped.
    fn dropped(&self, k: u64) -> bool {
        if self.cfg.drops.is_empty() {
            return false;
        }
        let (second, fnr) = self.place(k);
        self.cfg.drops.iter().any(|r| match *r {
            DropRule::Range {
                second: s,
                first: a,
                last: b,
            } => second == s && (a..=b).contains(&fnr),
            DropRule::Every(n) => (k + 1) % n == 0,
        })
    }

    /// The VDIF second (counted from the first frame's) and frame number of frame `k`.
    fn place(&self, k: u64) -> (u64, u32) {
        let first = &self.stream.first;
        match &self.source {
            Source::Pool(p) => {
                let (fps, set) = (p.fps as u64, k / p.threads as u64);
                let seq = first.frame_nr() as u64 + set;
                (seq / fps, (seq % fps) as u32)
            }
            Source::Replay(r) => match Header::parse_unchecked(r.frames.frame(k as usize)) {
                Ok(h) => (
                    h.seconds().saturating_sub(first.seconds()) as u64,
                    h.frame_nr(),
                ),
                Err(_) => (u64::MAX, u32::MAX),
            },
        }
    }
}

#[derive(Clone, Copy)]
enum Item {
    Frame(u64),
    Garbage,
}

/// The stream being sent: frames per second in all, threads, frames per second per thread,
/// the first frame's header, and how the rate was found.
struct Stream {
    per_second: f64,
    threads: u32,
    fps: u32,
    first: Header,
    rate_source: &'static str,
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
    /// Frames per batch, at most.
    batch: usize,
}

impl Schedule {
    fn new(total: u64, garbage: u64, batch: usize) -> Schedule {
        Schedule {
            next: 0,
            total,
            batch,
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

/// Sleeps until `due`, spinning for the last stretch (sleep is coarse at these rates); false
/// if a stop was asked first.
fn wait_until(due: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(20)));
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

    fn options(to: &str) -> SendOptions {
        SendOptions {
            to: to.into(),
            frames: Some(10),
            ..SendOptions::default()
        }
    }

    #[test]
    fn options_name_what_to_fix() {
        let err = |o: SendOptions| SendConfig::from_options(&o).unwrap_err().to_string();
        let both = SendOptions {
            file: Some("a.vdif".into()),
            scan: Some("s".into()),
            disks: vec!["/tmp".into()],
            ..options("127.0.0.1:9")
        };
        assert!(err(both).starts_with("scan: give file or scan, not both"));
        let no_disks = SendOptions {
            scan: Some("s".into()),
            ..options("127.0.0.1:9")
        };
        assert!(err(no_disks).starts_with("disks: none given"));
        let psn_tcp = SendOptions {
            psn: true,
            ..options("tcp://127.0.0.1:9")
        };
        assert!(err(psn_tcp).starts_with("psn: tcp://"));
        let rate_alone = SendOptions {
            rate: Some("1Gbps".into()),
            ..options("127.0.0.1:9")
        };
        assert!(err(rate_alone).starts_with("rate: paces a replay"));
        let bad_rate = SendOptions {
            rate: Some("fast".into()),
            file: Some("a.vdif".into()),
            ..options("127.0.0.1:9")
        };
        assert!(err(bad_rate).starts_with("rate: cannot read \"fast\" as a rate"));
        assert!(err(options("ftp://127.0.0.1:9")).starts_with("to: unknown scheme"));
        // psn on UDP is udps.
        let cfg = SendConfig::from_options(&SendOptions {
            psn: true,
            ..options("udp://127.0.0.1:9")
        })
        .unwrap();
        assert_eq!(cfg.to.framing, Framing::Udps);
    }

    /// A two-thread file replayed over TCP: the bytes as recorded, at its own rate.
    #[test]
    fn a_replay_goes_as_recorded_at_its_own_rate() {
        let dir = std::env::temp_dir().join(format!("vdifrec-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("two_threads.vdif");
        let signal = SignalSpec {
            frame_size: 1056,
            fps: 400,
            threads: 2,
            ref_epoch: Some(53),
            start_second: Some(1000),
            ..SignalSpec::default()
        };
        crate::sources::generate::write_file(
            &file,
            &crate::sources::generate::GenerateOptions {
                seconds: 1.25,
                signal,
            },
        )
        .unwrap();
        let (port, reader) = crate::sources::link::tests::tcp_sink();
        let cfg = SendConfig::from_options(&SendOptions {
            to: format!("tcp://127.0.0.1:{port}"),
            file: Some(file.clone()),
            ..SendOptions::default()
        })
        .unwrap();
        let mut sender = Sender::start(cfg).unwrap();
        let sum = sender.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
        drop(sender);
        let recorded = std::fs::read(&file).unwrap();
        assert_eq!(reader.join().unwrap(), recorded);
        assert_eq!(sum.frames_sent, 1000);
        assert_eq!(sum.bytes_sent, recorded.len() as u64);
        assert_eq!((sum.threads, sum.frames_per_second), (2, 400));
        assert_eq!(
            (sum.frame_rate, sum.rate_source.as_str()),
            (800.0, "frame-number wrap")
        );
        assert!(
            (sum.achieved_frame_rate / 800.0 - 1.0).abs() < 0.05,
            "{sum:?}"
        );
        assert_eq!(sum.to, format!("tcp://127.0.0.1:{port}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
