//! `vdifrec push`: the station's end. For each item (a file, or a scan), one control
//! connection offers it and learns what the receiver already has; then data connections take
//! blocks from one queue, each block read from the sources, checksummed and sent, at most two
//! in flight per connection until acknowledged. A connection that breaks gives its blocks back
//! to the queue and is made again; a control connection that breaks makes the whole item
//! resume from what the receiver has on disk. With `streams = auto` the number of connections
//! follows `streams::next_step` on measured rates and both hosts' CPU use. A receiver that
//! answers "busy" (its handshake places or connections all taken), refuses the connection
//! (restarting) or drops it before the handshake ends (overloaded, a glitch on the path: see
//! `retry`) is asked again after a growing pause, within `retry_seconds`, and the summary's
//! notes say why the push waited.

use super::auth::{self, ProveError};
use super::blocks::BlockMap;
use super::cpu::{CpuCounters, CpuLoad};
use super::items::{Item, SourceReader};
use super::pacing::{self, Pacer};
use super::receive::{MAX_BLOCK, MIN_BLOCK};
use super::retry;
use super::streams::{next_step, AutoLimits, Next, Trial};
use super::wire::{self, BlockIndex, Message, PlanState, Shape};
use super::TransferError;
use crate::options::{in_range, ArgError, Size};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `auto`, or a fixed number of streams.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Streams {
    Count(i64),
    Word(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushOptions {
    /// Files; or, when `disks` is given, names of scans on those disks.
    pub sources: Vec<String>,
    /// The receiver, `HOST:PORT`.
    pub to: Option<String>,
    pub token_file: Option<PathBuf>,
    /// The recording disks to find scans on.
    pub disks: Vec<PathBuf>,
    /// A scan lands as one file (`file`) or as a `vbs` directory of its chunks.
    pub layout: String,
    pub streams: Streams,
    /// The most streams `auto` may use.
    pub max_streams: i64,
    pub block_size: Size,
    /// Aggregate cap, `4Gbps` or `500MB/s`; None: no cap.
    pub rate: Option<String>,
    /// Lower the push threads' CPU priority (nice 19) and I/O class (idle).
    pub nice: bool,
    /// Seconds to keep reconnecting after connections break without progress, and to keep
    /// asking a receiver that answers busy, refuses the connection or drops it in the
    /// handshake.
    pub retry_seconds: f64,
}

impl Default for PushOptions {
    fn default() -> PushOptions {
        PushOptions {
            sources: vec![],
            to: None,
            token_file: None,
            disks: vec![],
            layout: "file".into(),
            streams: Streams::Word("auto".into()),
            max_streams: 32,
            block_size: Size::bytes(64 << 20),
            rate: None,
            nice: false,
            retry_seconds: 60.0,
        }
    }
}

/// What the options amount to, checked.
struct Config {
    items: Vec<Item>,
    to: String,
    token: Vec<u8>,
    fixed: Option<usize>,
    limits: AutoLimits,
    block_size: u64,
    pacer: Pacer,
    nice: bool,
    retry: Duration,
    /// The count `auto` settled on for the last item: where the next one starts.
    settled: Mutex<Option<usize>>,
}

fn arg(name: &str, why: impl Into<String>) -> TransferError {
    ArgError::new(name, why).into()
}

/// Where a push goes and how fast, checked: the receiver `to` (HOST:PORT), the token read
/// from `token_file`, the rate cap (bytes per second). Also what `vdifrec observe --ship-to`
/// checks before a session starts.
pub fn destination(
    to: Option<&str>,
    token_file: Option<&std::path::Path>,
    rate: Option<&str>,
) -> Result<(String, Vec<u8>, Option<f64>), TransferError> {
    let to = to.ok_or_else(|| arg("to", "give the receiver as HOST:PORT"))?;
    match to.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
        Some((h, Ok(p))) if !h.is_empty() && p > 0 => {}
        _ => {
            return Err(arg(
                "to",
                format!("{to:?} is not HOST:PORT (e.g. correlator.example.org:2630)"),
            ))
        }
    }
    let token = auth::read_token(token_file)?;
    let rate = rate
        .map(|r| crate::units::parse_rate("rate", r))
        .transpose()
        .map_err(|e| {
            arg(
                "rate",
                e.to_string().trim_start_matches("rate: ").to_string(),
            )
        })?;
    Ok((to.to_string(), token, rate))
}

impl Config {
    fn from(o: &PushOptions) -> Result<Config, TransferError> {
        if o.sources.is_empty() {
            return Err(arg(
                "sources",
                "give at least one file (or scan, with disks=/--disk)",
            ));
        }
        let (to, token, rate) =
            destination(o.to.as_deref(), o.token_file.as_deref(), o.rate.as_deref())?;
        let max_streams = in_range("max_streams", o.max_streams, 1, 256, "")? as usize;
        let fixed = match &o.streams {
            Streams::Word(w) if w == "auto" => None,
            Streams::Count(n) => Some(in_range("streams", *n, 1, 256, "or \"auto\"")? as usize),
            Streams::Word(w) => {
                return Err(arg(
                    "streams",
                    format!("{w:?}: give a number of streams 1..256, or \"auto\""),
                ))
            }
        };
        let block_size = o.block_size.get("block_size")?;
        if !(MIN_BLOCK..=MAX_BLOCK).contains(&block_size) || block_size % 4096 != 0 {
            return Err(arg("block_size", format!("{block_size} bytes: give a multiple of 4KiB from 64KiB to 1GiB (default 64MiB)")));
        }
        if !(o.retry_seconds.is_finite() && o.retry_seconds >= 0.0) {
            return Err(arg("retry_seconds", "give seconds >= 0"));
        }
        let shape = match o.layout.as_str() {
            "file" => Shape::File,
            "vbs" => Shape::Vbs,
            other => {
                return Err(arg(
                    "layout",
                    format!(
                    "{other:?}: give file (a scan as one file) or vbs (a directory of its chunks)"
                ),
                ))
            }
        };
        if shape == Shape::Vbs && o.disks.is_empty() {
            return Err(arg(
                "layout",
                "vbs lays out scans: name the disks they are on (disks=/--disk)",
            ));
        }
        let items = o
            .sources
            .iter()
            .map(|s| {
                if o.disks.is_empty() {
                    Item::file(std::path::Path::new(s), block_size)
                } else {
                    Item::scan(s, &o.disks, shape, block_size)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = std::collections::HashSet::new();
        if let Some(dup) = items.iter().find(|i| !names.insert(&i.offer.name)) {
            return Err(arg(
                "sources",
                format!(
                    "two sources would land as {}: send them to different receivers or directories",
                    dup.offer.name
                ),
            ));
        }
        Ok(Config {
            items,
            to,
            token,
            fixed,
            limits: AutoLimits {
                max_streams,
                ..AutoLimits::default()
            },
            block_size,
            pacer: Pacer::new(rate),
            nice: o.nice,
            retry: Duration::from_secs_f64(o.retry_seconds),
            settled: Mutex::new(None),
        })
    }
}

/// How far a push has come, read while it runs (the progress bar).
#[derive(Default)]
pub struct Progress {
    pub bytes_total: AtomicU64,
    /// Acknowledged, already at the receiver, or skipped.
    pub bytes_done: AtomicU64,
    pub streams: AtomicUsize,
    pub items_total: AtomicUsize,
    pub items_done: AtomicUsize,
    pub item: Mutex<String>,
    /// Times the receiver was asked again: (item, what happened, how many times).
    asked: Mutex<Vec<(String, String, u64)>>,
}

impl Progress {
    /// The receiver is asked again after `what` happened: counted under the item under way.
    fn asked_again(&self, what: &str) {
        let item = self.item.lock().unwrap().clone();
        let mut asked = self.asked.lock().unwrap();
        match asked.iter_mut().find(|(i, w, _)| *i == item && w == what) {
            Some((_, _, n)) => *n += 1,
            None => asked.push((item, what.to_string(), 1)),
        }
    }

    /// One note per item and what made the push ask again (the receiver's reason for being
    /// busy, a refused connection, ...).
    fn asked_notes(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|(item, what, n)| format!("{item}: {what}; asked again {n} time(s)"))
            .collect()
    }
}

/// One item's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ItemSummary {
    pub name: String,
    pub source: String,
    /// `sent`, `resumed` (only what was missing was sent), `skipped` (identical already
    /// there), `refused`, `failed`, `interrupted` (resumable).
    pub state: &'static str,
    pub bytes: u64,
    /// Bytes of the blocks handed whole to a connection this time (re-sent blocks counted
    /// again; a block whose connection was cut while it was being written counts when it is
    /// sent whole).
    pub bytes_sent: u64,
    pub seconds: f64,
    /// Bits per second of the bytes sent.
    pub rate_bps: f64,
    pub streams: usize,
    pub streams_max: usize,
    pub streams_reason: String,
    pub blocks: u64,
    /// Blocks the receiver already had (a resumed copy).
    pub blocks_resumed: u64,
    /// Blocks sent more than once: damaged in flight, lost with a connection, or found wrong
    /// when the copy was read back.
    pub blocks_resent: u64,
    pub reconnects: u64,
    /// The destination's xxh3-128 over its blocks' checksums, as both ends computed it.
    pub digest: Option<String>,
    pub error: Option<String>,
    /// What the item left out of its source, said plainly (a scan's torn pieces).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PushSummary {
    pub ok: bool,
    pub to: String,
    pub items: Vec<ItemSummary>,
    pub bytes: u64,
    pub bytes_sent: u64,
    pub seconds: f64,
    pub rate_bps: f64,
    /// What could not be done to be nice (a container refusing the I/O class, say).
    pub notes: Vec<String>,
}

/// Sends every item; an item that fails or is refused does not stop the others. Errors are
/// only for what makes the whole push impossible (arguments, token, sources).
pub fn push(
    o: &PushOptions,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<PushSummary, TransferError> {
    Ok(push_checked(&Config::from(o)?, progress, stop))
}

/// A push in a thread of its own, for callers that show its progress or may interrupt it
/// (the command line, Python). Arguments are checked before it starts.
pub struct PushRun {
    pub progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<PushSummary>>>,
    done: Mutex<Option<PushSummary>>,
}

impl PushRun {
    pub fn start(o: &PushOptions) -> Result<PushRun, TransferError> {
        let cfg = Config::from(o)?;
        let progress = Arc::new(Progress::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (p, st) = (Arc::clone(&progress), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("vdifrec-push".into())
            .spawn(move || push_checked(&cfg, &p, &st))
            .map_err(|e| TransferError::Failed(format!("cannot start the push: {e}")))?;
        Ok(PushRun {
            progress,
            stop,
            thread: Mutex::new(Some(thread)),
            done: Mutex::new(None),
        })
    }

    /// Ends the push soon: connections close, the receiver keeps what it has (resumable).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The summary once the push has ended, waiting up to `timeout` for it.
    pub fn wait(&self, timeout: Duration) -> Option<PushSummary> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(s) = self.done.lock().unwrap().clone() {
                return Some(s);
            }
            let mut t = self.thread.lock().unwrap();
            if t.as_ref().is_some_and(|h| h.is_finished()) {
                let summary = t
                    .take()
                    .expect("checked")
                    .join()
                    .unwrap_or_else(|_| PushSummary {
                        notes: vec!["the push thread failed; see the log".into()],
                        ..PushSummary::default()
                    });
                *self.done.lock().unwrap() = Some(summary.clone());
                return Some(summary);
            }
            drop(t);
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
        }
    }
}

fn push_checked(cfg: &Config, progress: &Progress, stop: &AtomicBool) -> PushSummary {
    let started = Instant::now();
    let mut summary = PushSummary {
        to: cfg.to.clone(),
        ..PushSummary::default()
    };
    if cfg.nice {
        summary.notes.extend(pacing::be_nice());
    }
    progress
        .items_total
        .store(cfg.items.len(), Ordering::Relaxed);
    progress.bytes_total.store(
        cfg.items
            .iter()
            .map(|i| i.offer.files.iter().map(|f| f.size).sum::<u64>())
            .sum(),
        Ordering::Relaxed,
    );
    for item in &cfg.items {
        *progress.item.lock().unwrap() = item.offer.name.clone();
        let s = if stop.load(Ordering::Relaxed) {
            ItemSummary {
                name: item.offer.name.clone(),
                source: item.label.clone(),
                state: "interrupted",
                error: Some("not started: the push was interrupted".into()),
                notes: item.notes.clone(),
                ..ItemSummary::default()
            }
        } else {
            send_item(cfg, item, progress, stop)
        };
        progress.items_done.fetch_add(1, Ordering::Relaxed);
        summary.items.push(s);
    }
    summary.notes.extend(progress.asked_notes());
    summary.bytes = summary.items.iter().map(|i| i.bytes).sum();
    summary.bytes_sent = summary.items.iter().map(|i| i.bytes_sent).sum();
    summary.seconds = started.elapsed().as_secs_f64();
    summary.rate_bps = 8.0 * summary.bytes_sent as f64 / summary.seconds.max(1e-9);
    summary.ok = summary
        .items
        .iter()
        .all(|i| matches!(i.state, "sent" | "resumed" | "skipped"));
    summary
}

/// Why an attempt at an item ended without it being done.
enum Stop {
    /// Give up on the item (refused, a source unreadable, the receiver failed).
    Fatal(&'static str, String),
    /// Connections broke: try again from what the receiver has.
    Cut(String),
    Interrupted,
}

fn send_item(cfg: &Config, item: &Item, progress: &Progress, stop: &AtomicBool) -> ItemSummary {
    let started = Instant::now();
    let map = BlockMap::new(&item.offer.files, cfg.block_size);
    let mut s = ItemSummary {
        name: item.offer.name.clone(),
        source: item.label.clone(),
        bytes: map.total_bytes(),
        blocks: map.count(),
        notes: item.notes.clone(),
        ..ItemSummary::default()
    };
    let done_before = progress.bytes_done.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    let mut first = true;
    loop {
        let sent_before = s.bytes_sent;
        progress.bytes_done.store(done_before, Ordering::Relaxed);
        let outcome = attempt(cfg, item, &map, progress, stop, &mut s, first);
        first = false;
        match outcome {
            Ok(()) => break,
            Err(Stop::Fatal(state, why)) => {
                s.state = state;
                s.error = Some(why);
                break;
            }
            Err(Stop::Interrupted) => {
                s.state = "interrupted";
                s.error = Some("interrupted: push again to resume".into());
                break;
            }
            Err(Stop::Cut(why)) => {
                if s.bytes_sent > sent_before {
                    last_progress = Instant::now();
                }
                if last_progress.elapsed() > cfg.retry || stop.load(Ordering::Relaxed) {
                    s.state = "failed";
                    s.error = Some(format!(
                        "{why} (no progress for {:.0} s; push again to resume)",
                        cfg.retry.as_secs_f64()
                    ));
                    break;
                }
                s.reconnects += 1;
                let pause = Instant::now() + Duration::from_secs(1);
                while Instant::now() < pause && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    s.seconds = started.elapsed().as_secs_f64();
    s.rate_bps = 8.0 * s.bytes_sent as f64 / s.seconds.max(1e-9);
    progress.bytes_done.store(
        done_before
            + if s.state == "failed" || s.state == "interrupted" || s.state == "refused" {
                0
            } else {
                s.bytes
            },
        Ordering::Relaxed,
    );
    s
}

/// A connection to the receiver, proven on both sides. A receiver that answers busy, refuses
/// the connection or drops it before the handshake ends (`retry::Passing`) is asked again
/// after a pause that doubles each time, for up to `retry_seconds`, each time noted in
/// `progress`; `over` says when the connection is no longer wanted. Anything else that keeps
/// it from being made is the answer at once (another token, another protocol, a refusal), as
/// is the last reason once `retry_seconds` are over.
fn connect(
    cfg: &Config,
    progress: &Progress,
    over: &dyn Fn() -> bool,
) -> Result<TcpStream, String> {
    let until = Instant::now() + cfg.retry;
    let mut pause = retry::PAUSE.0;
    let mut asked = 0u64;
    loop {
        // What happened, as the notes count it; the reason to give now; and the reason to
        // give once retry_seconds are over.
        let (what, why, lasted) = match connect_once(cfg) {
            Ok(s) => return Ok(s),
            Err(ProveError::Failed(why)) => return Err(why),
            Err(ProveError::Busy(why)) => (
                format!("the receiver was busy ({why})"),
                format!("the receiver is busy ({why})"),
                format!(
                    "the receiver is busy ({why}) and stayed so for {:.0} s (--retry-seconds); push again later",
                    cfg.retry.as_secs_f64()
                ),
            ),
            Err(ProveError::Broken(passing, why)) => {
                let lasted = if asked == 0 {
                    why.clone()
                } else {
                    format!(
                        "{why} (the same after asking again {asked} time(s) within --retry-seconds {})",
                        cfg.retry.as_secs_f64()
                    )
                };
                (passing.said().to_string(), why, lasted)
            }
        };
        if over() {
            return Err(why);
        }
        if Instant::now() + pause > until {
            return Err(lasted);
        }
        progress.asked_again(&what);
        asked += 1;
        let wake = Instant::now() + pause;
        while Instant::now() < wake && !over() {
            std::thread::sleep(Duration::from_millis(20).min(wake - Instant::now()));
        }
        pause = (pause * 2).min(retry::PAUSE.1);
    }
}

/// One try at a proven connection.
fn connect_once(cfg: &Config) -> Result<TcpStream, ProveError> {
    let addrs: Vec<_> = cfg
        .to
        .to_socket_addrs()
        .map_err(|e| ProveError::Failed(format!("cannot find {}: {e}", cfg.to)))?
        .collect();
    let mut last = ProveError::Failed(format!("{} has no address", cfg.to));
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(10)) {
            Ok(mut s) => {
                let _ = s.set_nodelay(true);
                super::receive::keepalive(&s);
                s.set_read_timeout(Some(Duration::from_secs(60)))
                    .map_err(|e| ProveError::Failed(e.to_string()))?;
                auth::prove(&mut s, &cfg.token)?;
                return Ok(s);
            }
            Err(e) => {
                let nobody = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    "nothing listens there, "
                } else {
                    ""
                };
                last = ProveError::io(
                    &e,
                    format!(
                        "cannot connect to {} ({a}): {nobody}{e}; is `vdifrec receive` running there?",
                        cfg.to
                    ),
                );
            }
        }
    }
    Err(last)
}

/// One go at an item: offer, then send what the receiver lacks, then the whole-copy check.
fn attempt(
    cfg: &Config,
    item: &Item,
    map: &BlockMap,
    progress: &Progress,
    stop: &AtomicBool,
    s: &mut ItemSummary,
    first: bool,
) -> Result<(), Stop> {
    // The first connection failing, once `connect` has asked again for what may pass, is an
    // answer (nobody listens, a wrong token); later, a receiver restarting or a path coming
    // back is also waited for while the item makes no progress (`send_item`).
    let mut control = connect(cfg, progress, &|| stop.load(Ordering::Relaxed)).map_err(|why| {
        if stop.load(Ordering::Relaxed) {
            Stop::Interrupted
        } else if first {
            Stop::Fatal("failed", why)
        } else {
            Stop::Cut(why)
        }
    })?;
    wire::send(&mut control, &Message::Offer(item.offer.clone()))
        .map_err(|e| Stop::Cut(e.to_string()))?;
    // A destination already there is read whole by the receiver before it answers (minutes,
    // for a large scan): wait for as long as the connection lives (keepalive tells).
    let _ = control.set_read_timeout(None);
    let plan = wire::receive(&mut control)
        .map_err(|e| Stop::Cut(format!("no answer to the offer: {e}")))?;
    let _ = control.set_read_timeout(Some(Duration::from_secs(60)));
    let (session, state, done, digests) = match plan {
        Message::Plan {
            session,
            state,
            done,
            digests,
        } => (session, state, done, digests),
        // Busy with this name (perhaps this push's own connection from before a cut, not yet
        // seen dead there): try again, within retry_seconds.
        Message::Error {
            message,
            retry: true,
        } => return Err(Stop::Cut(message)),
        Message::Error { message, .. } => return Err(Stop::Fatal("refused", message)),
        other => {
            return Err(Stop::Fatal(
                "failed",
                format!("unexpected answer to the offer: {other:?}"),
            ))
        }
    };
    if state == PlanState::Exists {
        return compare(cfg, item, map, &mut control, &digests, s, progress);
    }
    let mut todo: VecDeque<BlockIndex> = VecDeque::new();
    let mut is_done = vec![false; map.count() as usize];
    for (a, b) in done {
        for i in a..b.min(map.count()) {
            is_done[i as usize] = true;
        }
    }
    let mut already = 0;
    for i in 0..map.count() {
        if is_done[i as usize] {
            already += map.span(i).map_or(0, |x| x.len);
        } else {
            todo.push_back(i);
        }
    }
    if first && state == PlanState::Resume {
        s.blocks_resumed = is_done.iter().filter(|&&d| d).count() as u64;
    }
    progress.bytes_done.fetch_add(already, Ordering::Relaxed);
    let flow = Flow {
        item,
        map,
        session,
        pending: AtomicU64::new(todo.len() as u64),
        queue: Mutex::new(todo),
        work: Condvar::new(),
        resent: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        failed: Mutex::new(None),
        cut: Mutex::new(None),
        finished: AtomicBool::new(false),
        damage: Mutex::default(),
        remote: Mutex::new(None),
        progress,
        stop,
        cfg,
    };
    let result = flow.run(control, s);
    s.bytes_sent += flow.sent.load(Ordering::Relaxed);
    s.blocks_resent += flow.resent.load(Ordering::Relaxed);
    if result.is_ok() {
        s.state = if s.blocks_resumed > 0 {
            "resumed"
        } else {
            "sent"
        };
    }
    result
}

/// The destination is already there: identical (skipped) or not (refused), by comparing the
/// receiver's block checksums with the sources'.
fn compare(
    cfg: &Config,
    item: &Item,
    map: &BlockMap,
    control: &mut TcpStream,
    theirs: &[String],
    s: &mut ItemSummary,
    progress: &Progress,
) -> Result<(), Stop> {
    let ours = local_digests(cfg, item, map).map_err(|e| Stop::Fatal("failed", e.to_string()))?;
    let differs = (0..map.count() as usize)
        .find(|&i| theirs.get(i).and_then(|t| wire::parse_hex128(t)) != Some(ours[i]));
    match differs {
        None if theirs.len() == ours.len() => {
            let _ = wire::send(control, &Message::Finish);
            s.state = "skipped";
            s.digest = Some(wire::hex128(wire::digest_of_digests(&ours)));
            progress
                .bytes_done
                .fetch_add(map.total_bytes(), Ordering::Relaxed);
            Ok(())
        }
        _ => {
            let i = differs.unwrap_or(0) as u64;
            let span = map.span(i).expect("block in range");
            let file = &item.offer.files[span.file].name;
            let at = if file.is_empty() {
                String::new()
            } else {
                format!(" of chunk {file}")
            };
            let why = format!(
                "{} is already at the receiver and differs from the source (first at byte {}{at}): \
                 remove it there, or push to another directory",
                item.offer.name, span.offset
            );
            let _ = wire::send(
                control,
                &Message::Error {
                    message: why.clone(),
                    retry: false,
                },
            );
            Err(Stop::Fatal("refused", why))
        }
    }
}

fn local_digests(cfg: &Config, item: &Item, map: &BlockMap) -> Result<Vec<u128>, TransferError> {
    map.digests(
        || {
            if cfg.nice {
                pacing::be_nice();
            }
            SourceReader::default()
        },
        |reader, span, b| reader.read(&item.sources[span.file], span.offset, b),
    )
}

/// What the receiver last reported: bytes received and its CPU counters, at its clock.
#[derive(Clone, Copy)]
struct RemoteLoad {
    received: u64,
    seconds: f64,
    cpu: CpuCounters,
}

/// One item's blocks on their way.
struct Flow<'a> {
    item: &'a Item,
    map: &'a BlockMap,
    session: u64,
    queue: Mutex<VecDeque<BlockIndex>>,
    work: Condvar,
    /// Blocks not yet acknowledged as written.
    pending: AtomicU64,
    resent: AtomicU64,
    sent: AtomicU64,
    failed: Mutex<Option<String>>,
    cut: Mutex<Option<String>>,
    finished: AtomicBool,
    /// Times each block arrived damaged.
    damage: Mutex<std::collections::HashMap<BlockIndex, u32>>,
    remote: Mutex<Option<RemoteLoad>>,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    cfg: &'a Config,
}

/// At most this many blocks per connection sent and not yet acknowledged: the next block
/// goes out while the last one's acknowledgement is on its way back.
const IN_FLIGHT: usize = 2;

/// A block damaged in flight this many times fails the item (the path corrupts data).
const MAX_DAMAGED: u32 = 8;

/// Rounds of the whole-copy check that may find blocks wrong on the receiver's disk.
const MAX_CHECKS: u32 = 3;

impl Flow<'_> {
    fn give_back(&self, blocks: impl IntoIterator<Item = BlockIndex>) {
        let mut q = self.queue.lock().unwrap();
        for b in blocks {
            q.push_front(b);
            self.resent.fetch_add(1, Ordering::Relaxed);
        }
        self.work.notify_all();
    }

    /// Block `index` arrived damaged: sent again, unless it keeps arriving damaged.
    fn damaged(&self, index: BlockIndex) {
        let mut counts = self.damage.lock().unwrap();
        let n = counts.entry(index).or_insert(0);
        *n += 1;
        if *n > MAX_DAMAGED {
            self.failed.lock().unwrap().get_or_insert(format!(
                "block {index} arrived damaged {n} times: something on the path (a NIC, a \
                 switch, a middlebox) corrupts data; check the path, or push over another"
            ));
        } else {
            self.give_back([index]);
        }
    }

    fn over(&self, own_stop: &AtomicBool) -> bool {
        self.finished.load(Ordering::Relaxed)
            || own_stop.load(Ordering::Relaxed)
            || self.stop.load(Ordering::Relaxed)
            || self.failed.lock().unwrap().is_some()
            || self.cut.lock().unwrap().is_some()
    }

    /// The next block to send; None when this stream is to end.
    fn take(&self, own_stop: &AtomicBool) -> Option<BlockIndex> {
        let mut q = self.queue.lock().unwrap();
        loop {
            if self.over(own_stop) {
                return None;
            }
            if let Some(b) = q.pop_front() {
                return Some(b);
            }
            q = self
                .work
                .wait_timeout(q, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }

    /// Runs the item's streams and its control connection until the copy is verified.
    fn run(&self, control: TcpStream, s: &mut ItemSummary) -> Result<(), Stop> {
        let (verified_tx, verified_rx) = crossbeam_channel::unbounded();
        let control_lost = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let reader_stream = control.try_clone();
            let mut control = control;
            let Ok(mut reader_stream) = reader_stream else {
                return Err(Stop::Cut("cannot share the control connection".into()));
            };
            let control_lost = &control_lost;
            let reader = sc.spawn(move || {
                // The receiver's load reports, ten times a second, and the check's verdict.
                loop {
                    match wire::readable(&reader_stream, Duration::from_millis(200)) {
                        Ok(false) => {
                            if self.stop.load(Ordering::Relaxed)
                                || self.finished.load(Ordering::Relaxed)
                            {
                                return;
                            }
                            continue;
                        }
                        Ok(true) => {}
                        Err(_) => {
                            control_lost.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                    match wire::receive(&mut reader_stream) {
                        Ok(Message::Load {
                            received,
                            seconds,
                            cpu,
                        }) => {
                            *self.remote.lock().unwrap() = Some(RemoteLoad {
                                received,
                                seconds,
                                cpu,
                            });
                        }
                        Ok(Message::Verified { resend, digest }) => {
                            let done = resend.is_empty();
                            let _ = verified_tx.send((resend, digest));
                            if done {
                                return;
                            }
                        }
                        Ok(Message::Error { message, .. }) => {
                            self.failed.lock().unwrap().get_or_insert(message);
                            return;
                        }
                        Ok(_) => {}
                        Err(_) => {
                            control_lost.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            });
            let mut streams: Vec<(std::thread::ScopedJoinHandle<'_, ()>, Arc<AtomicBool>)> =
                Vec::new();
            let mut tuner = Tuner::new(self.cfg, &control);
            let mut target = self.cfg.fixed.unwrap_or(tuner.current);
            let mut finish_sent = false;
            let mut checks = 0;
            let outcome = loop {
                // The verdict first: the receiver closes the control connection right after it.
                if let Ok((resend, digest)) = verified_rx.try_recv() {
                    if resend.is_empty() {
                        s.digest = digest;
                        break Ok(());
                    }
                    // Found wrong on the receiver's disk: send those again, then check again.
                    checks += 1;
                    if checks >= MAX_CHECKS {
                        break Err(Stop::Fatal(
                            "failed",
                            format!(
                                "blocks read back wrong from the receiver's disk {checks} times \
                                 (blocks {resend:?}): its disk or memory returns other bytes \
                                 than were written; check that host"
                            ),
                        ));
                    }
                    self.pending
                        .fetch_add(resend.len() as u64, Ordering::Relaxed);
                    for &b in &resend {
                        let len = self.map.span(b).map_or(0, |x| x.len);
                        self.progress.bytes_done.fetch_sub(len, Ordering::Relaxed);
                    }
                    self.give_back(resend);
                    finish_sent = false;
                }
                if self.stop.load(Ordering::Relaxed) {
                    let _ = wire::send(
                        &mut control,
                        &Message::Error {
                            message: "the push was interrupted".into(),
                            retry: false,
                        },
                    );
                    break Err(Stop::Interrupted);
                }
                if let Some(why) = self.failed.lock().unwrap().clone() {
                    break Err(Stop::Fatal("failed", format!("the receiver: {why}")));
                }
                if let Some(why) = self.cut.lock().unwrap().clone() {
                    break Err(Stop::Cut(why));
                }
                if control_lost.load(Ordering::Relaxed) {
                    break Err(Stop::Cut("the control connection broke".into()));
                }
                if self.pending.load(Ordering::Relaxed) == 0 && !finish_sent {
                    if let Err(e) = self.item.unchanged() {
                        break Err(Stop::Fatal("failed", e.to_string()));
                    }
                    if wire::send(&mut control, &Message::Finish).is_err() {
                        break Err(Stop::Cut("the control connection broke".into()));
                    }
                    finish_sent = true;
                }
                if self.cfg.fixed.is_none() {
                    let queued = self.queue.lock().unwrap().len();
                    if let Some(n) = tuner.tick(self, streams.len(), queued) {
                        target = n;
                    }
                }
                // Streams to match the target: new ones started, surplus ones told to end.
                streams.retain(|(h, _)| !h.is_finished());
                let live = streams
                    .iter()
                    .filter(|(_, st)| !st.load(Ordering::Relaxed))
                    .count();
                if live < target {
                    for _ in live..target {
                        let own = Arc::new(AtomicBool::new(false));
                        let own2 = Arc::clone(&own);
                        streams.push((sc.spawn(move || self.stream(&own2)), own));
                    }
                } else {
                    for (_, st) in streams
                        .iter()
                        .rev()
                        .filter(|(_, st)| !st.load(Ordering::Relaxed))
                        .take(live - target)
                    {
                        st.store(true, Ordering::Relaxed);
                    }
                }
                s.streams_max = s.streams_max.max(target);
                self.progress.streams.store(target, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            };
            self.finished.store(true, Ordering::Relaxed);
            self.work.notify_all();
            for (h, st) in streams {
                st.store(true, Ordering::Relaxed);
                let _ = h.join();
            }
            let _ = control.shutdown(std::net::Shutdown::Both);
            let _ = reader.join();
            s.streams = target;
            s.streams_reason = tuner.reason(self.cfg, target);
            outcome
        })
    }

    /// One data connection's life: join, send blocks, reconnect when it breaks.
    fn stream(&self, own_stop: &AtomicBool) {
        if self.cfg.nice {
            pacing::be_nice();
        }
        let mut reader = SourceReader::default();
        let mut buf = vec![0u8; self.cfg.block_size as usize];
        let mut failures = 0;
        while !self.over(own_stop) {
            let conn =
                connect(self.cfg, self.progress, &|| self.over(own_stop)).and_then(|mut c| {
                    wire::send(
                        &mut c,
                        &Message::Join {
                            session: self.session,
                        },
                    )
                    .map_err(|e| e.to_string())?;
                    Ok(c)
                });
            let conn = match conn {
                Ok(c) => c,
                Err(why) => {
                    failures += 1;
                    if failures > 5 {
                        self.cut.lock().unwrap().get_or_insert(why);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200 * failures));
                    continue;
                }
            };
            match self.connection(conn, own_stop, &mut reader, &mut buf) {
                Err(e) => {
                    self.failed.lock().unwrap().get_or_insert(e.to_string());
                    return;
                }
                Ok(true) => failures = 0,
                Ok(false) => failures += 1,
            }
            if failures > 5 {
                self.cut
                    .lock()
                    .unwrap()
                    .get_or_insert("data connections keep breaking".into());
                return;
            }
        }
    }

    /// Sends blocks over one connection until it ends; blocks it leaves unacknowledged go
    /// back to the queue. Ok(whether a block got through); an error is a source that cannot
    /// be read (fatal for the item).
    fn connection(
        &self,
        conn: TcpStream,
        own_stop: &AtomicBool,
        reader: &mut SourceReader,
        buf: &mut [u8],
    ) -> Result<bool, TransferError> {
        let through = AtomicBool::new(false);
        let outstanding: Mutex<Vec<BlockIndex>> = Mutex::new(Vec::new());
        let acked = Condvar::new();
        let dead = AtomicBool::new(false);
        let Ok(mut ack_stream) = conn.try_clone() else {
            return Ok(false);
        };
        let mut conn = conn;
        std::thread::scope(|sc| {
            let acks = sc.spawn(|| {
                // Acknowledgements: written (done) or damaged (sent again).
                while !dead.load(Ordering::Relaxed) {
                    match wire::readable(&ack_stream, Duration::from_millis(200)) {
                        Ok(false) => {
                            if self.finished.load(Ordering::Relaxed)
                                || self.stop.load(Ordering::Relaxed)
                            {
                                break;
                            }
                            continue;
                        }
                        Ok(true) => {}
                        Err(_) => break,
                    }
                    match wire::receive(&mut ack_stream) {
                        Ok(Message::Ack { index, ok }) => {
                            let mut o = outstanding.lock().unwrap();
                            let Some(at) = o.iter().position(|&b| b == index) else {
                                continue;
                            };
                            o.remove(at);
                            drop(o);
                            if ok {
                                through.store(true, Ordering::Relaxed);
                                let len = self.map.span(index).map_or(0, |x| x.len);
                                self.progress.bytes_done.fetch_add(len, Ordering::Relaxed);
                                self.pending.fetch_sub(1, Ordering::Relaxed);
                            } else {
                                self.damaged(index);
                            }
                            acked.notify_all();
                        }
                        // The transfer ended at the receiver (its control connection broke), or
                        // it is busy: this connection ends, and is made again if still needed.
                        Ok(Message::Error { retry: true, .. }) => break,
                        Ok(Message::Error { message, .. }) => {
                            self.failed.lock().unwrap().get_or_insert(message);
                            break;
                        }
                        _ => break,
                    }
                }
                dead.store(true, Ordering::Relaxed);
                acked.notify_all();
            });
            let mut result = Ok(());
            'send: loop {
                {
                    let mut o = outstanding.lock().unwrap();
                    while o.len() >= IN_FLIGHT && !dead.load(Ordering::Relaxed) {
                        o = acked.wait_timeout(o, Duration::from_millis(100)).unwrap().0;
                    }
                }
                if dead.load(Ordering::Relaxed) {
                    break;
                }
                let Some(index) = self.take(own_stop) else {
                    break;
                };
                let span = self.map.span(index).expect("queued blocks are in range");
                let bytes = &mut buf[..span.len as usize];
                if let Err(e) = reader.read(&self.item.sources[span.file], span.offset, bytes) {
                    self.give_back([index]);
                    result = Err(e);
                    break;
                }
                let digest = wire::hex128(wire::digest(bytes));
                outstanding.lock().unwrap().push(index);
                let header = Message::Block {
                    index,
                    len: span.len,
                    digest,
                };
                if wire::send(&mut conn, &header).is_err() {
                    break;
                }
                for piece in bytes.chunks(1 << 20) {
                    self.cfg.pacer.pace(piece.len() as u64, &|| {
                        self.stop.load(Ordering::Relaxed) || dead.load(Ordering::Relaxed)
                    });
                    if conn.write_all(piece).is_err() {
                        break 'send;
                    }
                }
                self.sent.fetch_add(span.len, Ordering::Relaxed);
            }
            // A stream told to end lets its last blocks be acknowledged first.
            let until = Instant::now() + Duration::from_secs(30);
            {
                let mut o = outstanding.lock().unwrap();
                while !o.is_empty()
                    && !dead.load(Ordering::Relaxed)
                    && Instant::now() < until
                    && !self.stop.load(Ordering::Relaxed)
                {
                    o = acked.wait_timeout(o, Duration::from_millis(100)).unwrap().0;
                }
            }
            dead.store(true, Ordering::Relaxed);
            let _ = conn.shutdown(std::net::Shutdown::Both);
            let _ = acks.join();
            let left = std::mem::take(&mut *outstanding.lock().unwrap());
            if !left.is_empty() {
                self.give_back(left);
            }
            result.map(|()| through.load(Ordering::Relaxed))
        })
    }
}

/// The `auto` stream count at work: measures each count over a window after letting it
/// settle, and asks `streams::next_step` what next.
struct Tuner {
    limits: AutoLimits,
    trials: Vec<Trial>,
    current: usize,
    since: Instant,
    settle: Duration,
    window: Duration,
    start: Option<(Instant, CpuCounters, Option<RemoteLoad>, u64)>,
    settled: Option<String>,
}

/// The smoothed round-trip time the kernel measured on `s`.
fn rtt(s: &TcpStream) -> Option<Duration> {
    use std::os::fd::AsRawFd;
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then(|| Duration::from_micros(info.tcpi_rtt as u64))
}

impl Tuner {
    fn new(cfg: &Config, control: &TcpStream) -> Tuner {
        // Long paths need longer windows: TCP needs some round trips to open up.
        let rtt = rtt(control).unwrap_or(Duration::from_millis(1));
        let window = (rtt * 10).clamp(Duration::from_millis(400), Duration::from_secs(4));
        Tuner {
            limits: cfg.limits,
            trials: Vec::new(),
            // Items of one push share a path: start where the last one settled.
            current: cfg.settled.lock().unwrap().unwrap_or(1),
            since: Instant::now(),
            settle: window / 4,
            window,
            start: None,
            settled: cfg.fixed.map(|n| format!("streams {n}: as asked")),
        }
    }

    /// A new target when a measurement is complete.
    fn tick(&mut self, flow: &Flow, running: usize, queued: usize) -> Option<usize> {
        if self.settled.is_some() || self.since.elapsed() < self.settle {
            return None;
        }
        let sent = flow.sent.load(Ordering::Relaxed);
        let remote = *flow.remote.lock().unwrap();
        let Some((t0, cpu0, remote0, sent0)) = self.start else {
            self.start = Some((Instant::now(), CpuCounters::read(), remote, sent));
            return None;
        };
        if t0.elapsed() < self.window {
            return None;
        }
        // A measurement with too little left to send (the end of the item), or with fewer
        // streams than meant (one reconnecting) says nothing about the count: measure again.
        if queued < self.current || running < self.current {
            self.start = None;
            return None;
        }
        let seconds = t0.elapsed().as_secs_f64();
        let local = CpuCounters::read().since(&cpu0, seconds);
        let (rate, remote_load) = match (remote0, remote) {
            (Some(a), Some(b)) if b.seconds > a.seconds => (
                (b.received - a.received) as f64 / (b.seconds - a.seconds),
                Some(b.cpu.since(&a.cpu, b.seconds - a.seconds)),
            ),
            _ => ((sent - sent0) as f64 / seconds, None::<CpuLoad>),
        };
        self.trials.push(Trial {
            streams: self.current,
            rate,
            local,
            remote: remote_load,
        });
        self.start = None;
        self.since = Instant::now();
        match next_step(&self.trials, &self.limits) {
            Next::Try(n) => self.current = n,
            Next::Settle { streams, reason } => {
                self.current = streams;
                self.settled = Some(reason);
                *flow.cfg.settled.lock().unwrap() = Some(streams);
            }
        }
        Some(self.current)
    }

    fn reason(&self, cfg: &Config, target: usize) -> String {
        match (&self.settled, cfg.fixed) {
            (Some(r), _) => r.clone(),
            (None, Some(n)) => format!("streams {n}: as asked"),
            (None, None) => {
                format!("streams {target}: the transfer ended before the count settled")
            }
        }
    }
}
