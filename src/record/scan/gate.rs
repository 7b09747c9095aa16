//! The scan gate: one thread that follows the ring of every stream behind its capture.
//! Between scans it releases every frame unwritten (they were counted by the capture: the
//! recorder monitors).
//! Scans may be queued: a scan whose window starts at or after the stop of those before it is
//! gated at the same time as them, so that scans back to back lose no frame between them
//! (each frame goes to the scan whose window holds it, however the threads' frames interleave
//! around the boundary); the first one's last chunks go to disk while the next one fills.
//! During a scan it reads each frame's header, keeps the frames whose VDIF time lies in the
//! scan's window, cuts them into numbered chunks for the writers, counts them in the scan's
//! own accounting, and releases ring slots only when every chunk holding them is on disk (so a
//! disk that fails mid-chunk loses nothing: the chunk is written again elsewhere).

use crate::record::accounting::{Accounting, Fate, GapPolicy};
use crate::record::diskio;
use crate::record::ring::Ring;
use crate::record::scan::chunk::{self, ChunkJob, ScanOut};
use crate::record::scan::disks::DiskSet;
use crate::record::scan::durable::{Durable, Known};
use crate::record::scan::plan::ScanPlan;
use crate::record::scan::summary::{
    DataStreamSummary, DiskSummary, ScanSecond, ScanStreamSummary, ScanSummary, ScanThread,
};
use crate::record::scan::window::{frames_between, FramePoint, Place, Window};
use crate::record::scan::writers::{Done, Writers};
use crate::record::scan::Split;
use crate::record::shared::Shared;
use crate::record::stats::{FileRecord, ScanDurable, StreamCounts};
use crate::vdif::header::Header;
use crate::vdif::layout::{self, Format};
use crate::vdif::time::VdifTime;
use crossbeam_channel::{Receiver, Sender};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Idle wait when the ring has nothing new.
const IDLE_WAIT: Duration = Duration::from_micros(200);
/// Most frames examined before the gate looks at commands and completions again.
const FRAMES_PER_PASS: u64 = 8192;
/// A scan with a stop time ends once every thread's newest frame lies past it for this long
/// (a single stray frame with a later time is followed by the thread's next frame long
/// before), or once frames past the stop came and none inside the window for `STOP_GRACE`.
const STOP_SETTLE: Duration = Duration::from_millis(100);
const STOP_GRACE: Duration = Duration::from_millis(500);

enum Command {
    Start(Box<ScanPlan>),
    /// End this scan (None: every scan running or queued) now.
    Stop(Option<String>),
}

/// What the gate tells the recorder: the scans running or queued (in order, with their
/// windows), the summaries of finished scans.
#[derive(Default)]
struct Board {
    active: Vec<(String, Window)>,
    finished: Vec<ScanSummary>,
    bytes_outside: u64,
    exited: bool,
}

pub struct Gate {
    commands: Sender<Command>,
    /// Scans commanded and not yet taken in by the gate (`hold`): while any, it looks at no
    /// new frame.
    paused: Arc<AtomicUsize>,
    board: Arc<(Mutex<Board>, Condvar)>,
    handle: Option<JoinHandle<()>>,
    /// The first stream's state, where the status reads the running scan's name.
    shared: Arc<Shared>,
}

impl Gate {
    /// Follows the streams `(port, shared)`; scans go to `disks`.
    pub fn start(
        streams: Vec<(u16, Arc<Shared>)>,
        disks: Arc<DiskSet>,
        big_endian: bool,
    ) -> std::io::Result<Gate> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let board = Arc::new((Mutex::new(Board::default()), Condvar::new()));
        let shared = streams[0].1.clone();
        let b = board.clone();
        let paused = Arc::new(AtomicUsize::new(0));
        let p = paused.clone();
        let handle = std::thread::Builder::new()
            .name("vdifrec-gate".into())
            .spawn(move || {
                let inputs = streams
                    .into_iter()
                    .map(|(port, shared)| Input {
                        port,
                        shared,
                        ring: None,
                        pos: 0,
                        outside_frames: 0,
                        done: false,
                    })
                    .collect();
                let mut g = GateLoop {
                    inputs,
                    disks,
                    big_endian,
                    commands: rx,
                    board: b.clone(),
                    active: Vec::new(),
                    written_before: 0,
                    disks_shown: None,
                    head_shown: None,
                    paused: p,
                };
                g.run();
                let (m, cv) = &*b;
                m.lock().unwrap().exited = true;
                cv.notify_all();
            })?;
        Ok(Gate {
            commands: tx,
            paused,
            board,
            handle: Some(handle),
            shared,
        })
    }

    /// The scan now running (or draining to disk), if any: the first of those queued.
    pub fn active(&self) -> Option<String> {
        self.board
            .0
            .lock()
            .unwrap()
            .active
            .first()
            .map(|a| a.0.clone())
    }

    /// Every scan running or queued, in order, with its window.
    pub fn queued(&self) -> Vec<(String, Window)> {
        self.board.0.lock().unwrap().active.clone()
    }

    /// Holds every frame that has not arrived yet for the scan about to be commanded: the
    /// gate looks at no frame past each ring's write index now (the indices returned, for the
    /// plan's `from_seq`) until it takes in the next `start_scan` (or `unhold`), so that a scan
    /// starts with the first frame after its command however long the command takes.
    ///
    /// Exact by ordering, with no wait: the gate reads a ring's write index before it looks
    /// whether it is held, and a pass that found it not held therefore read an index no later
    /// than the one read here after holding.
    pub fn hold(&self, rings: &[Option<Arc<Ring>>]) -> Vec<u64> {
        self.paused.fetch_add(1, Ordering::SeqCst);
        // The hold before the indices, on every processor (the gate's side: `follow`).
        fence(Ordering::SeqCst);
        rings
            .iter()
            .map(|r| r.as_ref().map_or(0, |r| r.write_seq()))
            .collect()
    }

    /// Lets the gate go on after a `hold` that led to no scan (the command was refused).
    pub fn unhold(&self) {
        release(&self.paused);
    }

    pub fn start_scan(&self, plan: ScanPlan) {
        let mut b = self.board.0.lock().unwrap();
        b.active.push((plan.name.clone(), plan.window));
        // The status names the first; a scan queued behind it changes nothing there.
        if b.active.len() == 1 {
            self.shared.set_scan(Some(plan.name.clone()));
        }
        self.shared.set_scan_ended(None);
        drop(b);
        let _ = self.commands.send(Command::Start(Box::new(plan)));
    }

    /// Asks every scan running or queued (or only scan `name`) to end now.
    pub fn stop_scan(&self, name: Option<String>) {
        let _ = self.commands.send(Command::Stop(name));
    }

    /// Waits until scan `name` is on disk and returns its summary; None when `timeout`
    /// passed first, or no such scan was started.
    pub fn wait_for(&self, name: &str, timeout: Option<Duration>) -> Option<ScanSummary> {
        let b = self.wait_until(timeout, |b| {
            b.exited
                || b.finished.iter().any(|s| s.name == name)
                || !b.active.iter().any(|a| a.0 == name)
        })?;
        b.finished.iter().rev().find(|s| s.name == name).cloned()
    }

    /// Waits until no scan is active and returns the newest finished scan's summary; None
    /// when `timeout` passed first.
    pub fn wait_scan(&self, timeout: Option<Duration>) -> Option<ScanSummary> {
        let b = self.wait_until(timeout, |b| b.active.is_empty() || b.exited)?;
        b.finished.last().cloned()
    }

    /// The board once `settled` says so; None when `timeout` passed first.
    fn wait_until(
        &self,
        timeout: Option<Duration>,
        settled: impl Fn(&Board) -> bool,
    ) -> Option<std::sync::MutexGuard<'_, Board>> {
        let (m, cv) = &*self.board;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut b = m.lock().unwrap();
        while !settled(&b) {
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    d - now
                }
                None => Duration::from_millis(200),
            };
            b = cv.wait_timeout(b, wait).unwrap().0;
        }
        Some(b)
    }

    /// Every finished scan, and the bytes buffered outside any scan.
    pub fn results(&self) -> (Vec<ScanSummary>, u64) {
        let b = self.board.0.lock().unwrap();
        (b.finished.clone(), b.bytes_outside)
    }

    /// Waits for the gate to finish (the capture must have ended): a running scan is closed
    /// and written out first.
    pub fn join(&mut self) {
        let _ = self.commands.send(Command::Stop(None));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One stream the gate follows.
struct Input {
    port: u16,
    shared: Arc<Shared>,
    /// The stream's ring, once its first frame has laid it out.
    ring: Option<Arc<Ring>>,
    /// Next ring sequence number to look at.
    pos: u64,
    outside_frames: u64,
    /// The capture has ended and every frame it buffered has been looked at.
    done: bool,
}

/// One data stream of a scan (the whole scan unless it is split) in one stream's ring: the
/// chunk it is filling. Chunks are numbered per name, across the streams.
struct DataStream {
    input: usize,
    key: String,
    out: Arc<ScanOut>,
    building: Option<Building>,
    frames: u64,
}

/// A chunk being filled.
struct Building {
    ranges: Vec<(u64, u64)>,
    frames: u64,
    /// Frames this chunk will hold when full.
    limit: u64,
    /// The VDIF time of its newest frame.
    last: FramePoint,
}

/// The scan's part in one stream.
struct Part {
    /// Chunk size and frame size, once the stream's ring exists.
    base: Option<ScanOut>,
    acc: Accounting,
    /// Chunks handed to the writers and not yet done: first sequence number → frames.
    held: BTreeMap<u64, u64>,
    frames: u64,
    /// Asked to stop: the scan takes the frames buffered before that (ring sequence numbers
    /// below this), then this stream is finished.
    stop_at: Option<u64>,
    /// The stream's ring overflows and kernel drops when the scan began: its window's start
    /// (its first frame inside it), or its activation without a start; a scan queued behind
    /// another is not charged with what the other lost.
    overflows_at_start: u64,
    drops_at_start: u64,
    counters_taken: bool,
    /// The stream's shared state, for the latency stamps of its chunks.
    stream: Arc<Shared>,
}

/// The scan being gated.
struct Active {
    plan: ScanPlan,
    parts: Vec<Part>,
    streams: Vec<DataStream>,
    /// Data stream index by (input, thread or station id; 0 unsplit).
    by_key: HashMap<(usize, u32), usize>,
    /// Next chunk number of each data stream name.
    numbers: HashMap<String, u64>,
    writers: Option<Writers>,
    jobs: Option<Sender<ChunkJob>>,
    done: Receiver<Done>,
    frames: u64,
    first_frame: Option<FramePoint>,
    last_frame: Option<FramePoint>,
    /// No more frames are taken: the stop was asked for and reached, the window ended, or the
    /// captures ended.
    closing: bool,
    past_stop_since: Option<Instant>,
    /// Whether each (stream, thread)'s newest frame lies past the stop, and since when all
    /// of them do.
    past: HashMap<(usize, u32), bool>,
    all_past_since: Option<Instant>,
    last_inside: Option<Instant>,
    /// Bytes of chunks no writer took (the writers could not start).
    unwritten_bytes: u64,
    /// What of the scan the writers have made durable, and whether that grew since the status
    /// was last told.
    durable: Durable,
    durable_grew: bool,
    notes: Vec<String>,
}

struct GateLoop {
    inputs: Vec<Input>,
    disks: Arc<DiskSet>,
    big_endian: bool,
    commands: Receiver<Command>,
    board: Arc<(Mutex<Board>, Condvar)>,
    /// The scans being gated or written out, in the order they were started (their windows
    /// follow one another).
    active: Vec<Active>,
    /// Bytes written by scans already finished (for the live total).
    written_before: u64,
    /// The disks the status was last told the scan goes to (indices into `disks`).
    disks_shown: Option<Vec<usize>>,
    /// The scan the status was last told of (the first active one).
    head_shown: Option<String>,
    /// Scans' commands on their way (`Gate::hold`): while any, look at no new frame.
    paused: Arc<AtomicUsize>,
}

impl GateLoop {
    fn run(&mut self) {
        loop {
            while let Ok(c) = self.commands.try_recv() {
                match c {
                    Command::Start(p) => self.activate(*p),
                    Command::Stop(name) => {
                        // Frames already buffered when the stop came belong to the scans: they
                        // take them up to each write index now, then close.
                        let named =
                            |a: &&mut Active| name.as_ref().is_none_or(|n| *n == a.plan.name);
                        for a in self.active.iter_mut().filter(named) {
                            for (part, input) in a.parts.iter_mut().zip(&self.inputs) {
                                part.stop_at.get_or_insert(
                                    input.ring.as_ref().map_or(0, |r| r.write_seq()),
                                );
                            }
                        }
                    }
                }
            }
            self.close_without_disks();
            let now_wall = unix_now();
            let mut progressed = false;
            for k in 0..self.inputs.len() {
                progressed |= self.follow(k, now_wall);
            }
            let mut written = 0;
            for a in &mut self.active {
                let stopped = a
                    .parts
                    .iter()
                    .zip(&self.inputs)
                    .all(|(p, i)| i.done || p.stop_at.is_some_and(|s| i.pos >= s));
                if stopped || a.window_has_passed() {
                    a.closing = true;
                }
                if a.closing {
                    a.close_input(&self.inputs);
                }
                written += a
                    .writers
                    .as_ref()
                    .map_or(0, |w| w.log.lock().unwrap().bytes_written);
            }
            for i in &self.inputs {
                i.shared.set_bytes_written(self.written_before + written);
            }
            self.show_head();
            while let Some(k) = self
                .active
                .iter()
                .position(|a| a.closing && a.parts.iter().all(|p| p.held.is_empty()))
            {
                let a = self.active.remove(k);
                self.finish(a);
            }
            {
                let outside: u64 = self
                    .inputs
                    .iter()
                    .map(|i| {
                        i.outside_frames * i.ring.as_ref().map_or(0, |r| r.frame_size() as u64)
                    })
                    .sum();
                let (m, _) = &*self.board;
                m.lock().unwrap().bytes_outside = outside;
            }
            if self.active.is_empty() && self.inputs.iter().all(|i| i.done) {
                return;
            }
            if !progressed {
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }

    /// Scans whose disks have all left the set (full, failed) can write nothing more: they end
    /// now, as a stop would end them, so that the recorder is no longer recording them and
    /// says why; a scan is started again only on disks given again.
    fn close_without_disks(&mut self) {
        if self.active.is_empty() || self.disks.any_alive() {
            return;
        }
        let mut told = false;
        for a in self.active.iter_mut() {
            if a.parts.iter().all(|p| p.stop_at.is_some()) {
                continue;
            }
            for (part, input) in a.parts.iter_mut().zip(&self.inputs) {
                part.stop_at
                    .get_or_insert(input.ring.as_ref().map_or(0, |r| r.write_seq()));
            }
            let why = format!(
                "scan {} closed: no disk is left in the set (every disk full or failed); \
                 give disks again (set_disks=, --disk) to record",
                a.plan.name
            );
            a.notes.push(why.clone());
            // The status names the scan that was recording (those queued behind it end too).
            if let (false, Some(i)) = (told, self.inputs.first()) {
                i.shared.set_scan_ended(Some(why));
                told = true;
            }
        }
    }

    /// The status follows the first active scan: what of it is durable, the disks it goes to.
    fn show_head(&mut self) {
        let Some(a) = self.active.first_mut() else {
            self.head_shown = None;
            return;
        };
        let new_head = self.head_shown.as_deref() != Some(a.plan.name.as_str());
        if new_head {
            self.head_shown = Some(a.plan.name.clone());
            self.disks_shown = None;
        }
        // After the bytes written: a writer counts a chunk written before it reports it done,
        // so the status never shows more durable than written.
        if std::mem::take(&mut a.durable_grew) || new_head {
            self.inputs[0].shared.set_scan_durable(a.durable_now());
        }
        // The status names the disks the scan goes to; one that fills or fails leaves.
        let alive = self.disks.alive();
        if self.disks_shown.as_ref() != Some(&alive) {
            let paths = alive
                .iter()
                .map(|&d| self.disks.disks[d].path.display().to_string());
            self.inputs[0].shared.set_scan_disks(paths.collect());
            self.disks_shown = Some(alive);
        }
    }

    /// Looks at the new frames of stream `k` and releases what no chunk needs; whether there
    /// were any.
    fn follow(&mut self, k: usize, now_wall: f64) -> bool {
        let input = &mut self.inputs[k];
        // Read `done` before the write index: once done, the index is final.
        let capture_done = input.shared.capture_done();
        if input.ring.is_none() {
            input.ring = input.shared.ring();
            match &input.ring {
                Some(r) => {
                    input.pos = r.read_seq();
                    for a in &mut self.active {
                        a.lay_out(k, r, self.big_endian);
                    }
                }
                None => {
                    input.done = capture_done;
                    return false;
                }
            }
        }
        let ring = input.ring.clone().expect("laid out");
        let end = ring.write_seq();
        // After the write index (see `Gate::hold`): held, the frames from here on wait for
        // the scan being commanded.
        fence(Ordering::SeqCst);
        if self.paused.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let pos = input.pos;
        let upto = end.min(pos + FRAMES_PER_PASS);
        for seq in pos..upto {
            let mut taken = false;
            let open = |a: &Active| !a.closing && a.parts[k].stop_at.is_none_or(|s| seq < s);
            if self.active.iter().any(open) {
                if let Some((h, point)) = chunk::frame_at(&ring, seq, self.big_endian) {
                    for a in self.active.iter_mut().filter(|a| open(a)) {
                        if a.offer(k, &ring, seq, &h, point, now_wall) {
                            taken = true;
                            break;
                        }
                    }
                }
            }
            if !taken {
                self.inputs[k].outside_frames += 1;
            }
        }
        let input = &mut self.inputs[k];
        input.pos = upto;
        input.done = capture_done && upto == end;
        let mut low = upto;
        for a in &mut self.active {
            a.collect_done();
            if !a.closing {
                a.relieve(k, &ring, upto);
            }
            if let Some(h) = a.lowest_held(k) {
                low = low.min(h);
            }
        }
        ring.release(low);
        upto > pos
    }

    fn activate(&mut self, mut plan: ScanPlan) {
        self.disks.begin_scan(&plan.name, self.active.is_empty());
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let writers = Writers::start(
            plan.writers,
            self.disks.clone(),
            jobs_rx,
            done_tx,
            &plan.writer_cpus,
        );
        let mut notes = std::mem::take(&mut plan.notes);
        let (writers, jobs) = match writers {
            Ok(w) => (Some(w), Some(jobs_tx)),
            Err(e) => {
                notes.push(format!(
                    "cannot start the scan's writers: {e}; the scan's frames are counted as dropped"
                ));
                (None, None)
            }
        };
        let parts = self
            .inputs
            .iter()
            .map(|i| {
                let c = i.shared.capture_stats();
                Part {
                    base: None,
                    acc: Accounting::new(plan.fps_given, GapPolicy::WallClock),
                    held: BTreeMap::new(),
                    frames: 0,
                    stop_at: None,
                    overflows_at_start: c.ring_overflows,
                    drops_at_start: c.kernel_drops,
                    counters_taken: plan.window.start.is_none(),
                    stream: i.shared.clone(),
                }
            })
            .collect();
        let mut a = Active {
            plan,
            parts,
            streams: Vec::new(),
            by_key: HashMap::new(),
            numbers: HashMap::new(),
            writers,
            jobs,
            done: done_rx,
            frames: 0,
            first_frame: None,
            last_frame: None,
            closing: false,
            past_stop_since: None,
            past: HashMap::new(),
            all_past_since: None,
            last_inside: None,
            unwritten_bytes: 0,
            durable: Durable::default(),
            durable_grew: false,
            notes,
        };
        for (k, i) in self.inputs.iter().enumerate() {
            if let Some(r) = &i.ring {
                a.lay_out(k, r, self.big_endian);
            }
        }
        self.active.push(a);
        release(&self.paused);
    }

    fn publish(&mut self, s: ScanSummary) {
        self.written_before += s.bytes_written;
        let (m, cv) = &*self.board;
        let mut b = m.lock().unwrap();
        b.active.retain(|a| a.0 != s.name);
        b.finished.push(s);
        self.inputs[0]
            .shared
            .set_scan(b.active.first().map(|a| a.0.clone()));
        cv.notify_all();
    }

    /// The scan's input is closed and every chunk is done: close its files, count, write the
    /// JSON summary beside it.
    fn finish(&mut self, mut a: Active) {
        let log = match a.writers.take() {
            Some(w) => w.join(),
            None => Default::default(),
        };
        let log = std::mem::take(&mut *log.lock().unwrap());
        let mut files = log.files;
        let mut error = log.error;
        if a.unwritten_bytes > 0 {
            error.get_or_insert_with(|| "the scan's writer threads could not start".into());
        }
        let mut notes = std::mem::take(&mut a.notes);
        notes.extend(log.notes);
        let format = a.plan.format;
        let first_base = a.parts.iter().find_map(|p| p.base.clone());
        let frame_size = first_base.as_ref().map_or(0, |b| b.frame_size);
        // The writers are done: what the scan has on each disk is final.
        let mut on_disks = self.disks.end_scan(&a.plan.name);
        let mut chunks_per_disk: Vec<u64> = on_disks.iter().map(|d| d.chunks).collect();
        if format != Format::Vbs {
            // Every Mark6 file of the scan names the scan's largest block.
            let block_size = on_disks
                .iter()
                .flat_map(|d| d.open.iter().map(|o| o.largest_block))
                .max()
                .unwrap_or(0);
            for (i, d) in on_disks.iter_mut().enumerate() {
                let closed = chunk::close_scan_files(d, format, frame_size, block_size);
                chunks_per_disk[i] = closed.files.len() as u64;
                for (path, bytes) in closed.files {
                    files.push(FileRecord {
                        path: path.display().to_string(),
                        bytes,
                    });
                }
                // Each file's chunks since its last sync are durable with its closing sync.
                for c in closed.durable {
                    a.durable.add(c);
                }
                if let Some(e) = closed.error {
                    error.get_or_insert(e);
                }
            }
        }
        let mut counts = StreamCounts::default();
        let mut edges = 0u64;
        let mut seconds = Vec::new();
        let mut threads = Vec::new();
        let mut streams = Vec::new();
        let (mut overflows, mut drops, mut buffered) = (0u64, 0u64, 0u64);
        let mut fps_seen = 0;
        for (part, input) in a.parts.iter_mut().zip(&self.inputs) {
            part.acc.finish();
            let t = (part.acc.thread_totals(), part.acc.totals());
            let fps = part.acc.frames_per_second();
            fps_seen = fps_seen.max(fps);
            // Frames missing at the window's edges, per thread (the accounting counts only
            // between a thread's first and last frame).
            let mut part_edges = 0u64;
            if fps > 0 {
                for th in &t.0 {
                    if let (Some(s), Some(first)) = (a.plan.window.start, th.first) {
                        part_edges += frames_between(s, first, fps).max(0) as u64;
                    }
                    if let (Some(s), Some(last)) = (a.plan.window.stop, th.last) {
                        part_edges += (frames_between(last, s, fps) - 1).max(0) as u64;
                    }
                }
            }
            let mut c = StreamCounts::from(&t.1);
            c.frames_lost += part_edges;
            let cs = input.shared.capture_stats();
            let fs = part.base.as_ref().map_or(0, |b| b.frame_size as u64);
            let s = ScanStreamSummary {
                port: input.port,
                frames: part.frames,
                counts: c,
                frames_lost_at_edges: part_edges,
                ring_overflows: cs.ring_overflows - part.overflows_at_start,
                kernel_drops: cs.kernel_drops - part.drops_at_start,
                bytes_buffered: part.frames * fs,
            };
            counts += c;
            edges += part_edges;
            overflows += s.ring_overflows;
            drops += s.kernel_drops;
            buffered += s.bytes_buffered;
            for row in part.acc.take_rows() {
                seconds.push(ScanSecond {
                    stream: input.port,
                    row,
                });
            }
            for th in t.0 {
                threads.push(ScanThread {
                    stream: input.port,
                    totals: th,
                });
            }
            streams.push(s);
        }
        let disks: Vec<DiskSummary> = self
            .disks
            .disks
            .iter()
            .zip(on_disks.iter().zip(chunks_per_disk))
            .map(|(d, (on, chunks))| DiskSummary {
                path: d.path.display().to_string(),
                bytes: on.frame_bytes,
                chunks,
                dropped: d.state.lock().unwrap().dropped.clone(),
            })
            .collect();
        let iso = |p: Option<FramePoint>| p.map(|p| frame_time(p, fps_seen).iso());
        if a.frames == 0 {
            notes.push(
                "no frame of the stream fell in the scan's window: nothing was written".into(),
            );
        }
        if a.plan.split == Some(Split::Sender) {
            for d in &a.streams {
                let idx: u16 = d.key.parse().unwrap_or(0);
                let who = self.inputs[d.input].shared.sender_text(idx);
                notes.push(format!("data stream {}: frames from {who}", d.out.name));
            }
        }
        let durable: Known = a.durable.scan();
        // One entry per data stream name, over the streams.
        let mut data_streams: Vec<DataStreamSummary> = Vec::new();
        for d in &a.streams {
            match data_streams.iter_mut().find(|x| x.name == d.out.name) {
                Some(x) => x.frames += d.frames,
                None => {
                    let known = a.durable.stream(&d.out.name);
                    data_streams.push(DataStreamSummary {
                        name: d.out.name.clone(),
                        key: d.key.clone(),
                        frames: d.frames,
                        chunks: a.numbers.get(&d.out.name).copied().unwrap_or(0),
                        bytes_written: log.bytes_by_scan.get(&d.out.name).copied().unwrap_or(0),
                        durable_frames: known.frames,
                        durable_bytes: known.bytes,
                        durable_up_to: iso(known.last),
                    })
                }
            }
        }
        let s = ScanSummary {
            name: a.plan.name.clone(),
            requested_name: a.plan.requested_name.clone(),
            format: format.name(),
            start: a.plan.start_text.clone(),
            stop: a.plan.stop_text.clone(),
            first_frame: iso(a.first_frame),
            last_frame: iso(a.last_frame),
            frames: a.frames,
            frame_size,
            chunk_size: first_base
                .as_ref()
                .map_or(0, |b| b.chunk_frames * b.frame_size as u64),
            file_size: first_base.as_ref().and_then(|b| {
                b.file_chunks
                    .map(|n| n * b.chunk_frames * b.frame_size as u64)
            }),
            chunks: a.numbers.values().sum(),
            data_streams,
            writers: a.plan.writers,
            counts,
            frames_lost_at_edges: edges,
            ring_overflows: overflows,
            kernel_drops: drops,
            bytes_buffered: buffered,
            bytes_written: log.bytes_written,
            bytes_dropped_disk: log.bytes_dropped + a.unwritten_bytes,
            bytes_headers: log.header_bytes,
            durable_frames: durable.frames,
            durable_bytes: durable.bytes,
            durable_up_to: iso(durable.last),
            files,
            disks,
            streams,
            invariant_holds: false,
            error,
            seconds,
            threads,
            notes,
            ok: false,
        }
        .judge();
        let mut s = s;
        if !self.write_summary_files(&s, format) && s.frames > 0 {
            let note = format!(
                "{SUMMARY_NOWHERE}: every disk refused it (full or failed); what it says is here only"
            );
            // The status says it too: this summary is then in this process alone.
            if let Some(i) = self.inputs.first() {
                let told = i.shared.scan_ended();
                let why = format!("scan {}: {note}", s.name);
                i.shared
                    .set_scan_ended(Some(told.map_or(why.clone(), |t| format!("{t}; {why}"))));
            }
            s.notes.push(note);
        }
        self.publish(s);
    }

    /// The scan's summary as JSON beside it (beside each data stream of a split scan), on
    /// every disk that holds part of it; a scan no disk took a byte of has it on the first
    /// disk of the set that takes it (its directory then holds the summary alone), so that
    /// what became of it is on the disks. False when no disk took it.
    fn write_summary_files(&self, s: &ScanSummary, format: Format) -> bool {
        let split = s.data_streams.iter().any(|d| !d.key.is_empty());
        let names: Vec<&str> = if split {
            s.data_streams.iter().map(|d| d.name.as_str()).collect()
        } else {
            vec![s.name.as_str()]
        };
        let mut written = false;
        for d in s.disks.iter().filter(|d| d.bytes > 0) {
            written |= write_summary_on(std::path::Path::new(&d.path), &names, s, format, false);
        }
        // A scan queued behind one that closed took no frame: nothing of it is told on disk.
        if !written && s.frames > 0 {
            for d in &s.disks {
                if write_summary_on(std::path::Path::new(&d.path), &names, s, format, true) {
                    return true;
                }
            }
        }
        written
    }
}

/// What a scan's summary note says when no disk took it (the console and the log look for it).
pub const SUMMARY_NOWHERE: &str = "the scan's summary could not be written on any disk";

/// `s` as JSON beside each of `names` on `disk` (`make`: a vbs scan's directory is made for
/// it); whether it was written whole.
fn write_summary_on(
    disk: &std::path::Path,
    names: &[&str],
    s: &ScanSummary,
    format: Format,
    make: bool,
) -> bool {
    let mut written = false;
    for name in names {
        let path = layout::summary_path(disk, name, format);
        // Only where that data stream has a part (a vbs directory), or beside a file.
        if format == Format::Vbs && !make && !path.parent().is_some_and(|p| p.is_dir()) {
            continue;
        }
        let made_dir = make && format == Format::Vbs && path.parent().is_some_and(|p| !p.exists());
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Whole or not at all, and on disk with the scan's last chunks. A failing disk may
        // refuse this too; the summary is still returned.
        let ok = diskio::write_whole(&path, s.to_json().as_bytes()).is_ok();
        if made_dir {
            match (ok, path.parent()) {
                (true, _) => crate::vdif::catalogue::made(disk, name),
                // No empty directory is left where the summary did not fit.
                (false, Some(dir)) => {
                    let _ = std::fs::remove_dir(dir);
                }
                (false, None) => {}
            }
        }
        written |= ok;
    }
    if format != Format::Vbs {
        // The summaries' directory, new in the disk for the first scan.
        let _ = diskio::sync_dir(disk);
    }
    written
}

impl Active {
    /// Stream `k`'s ring exists: its chunk size is decided. The ring must hold a chunk for
    /// every writer and one filling, or it could fill with chunks that never complete.
    fn lay_out(&mut self, k: usize, ring: &Ring, big_endian: bool) {
        let plan = &self.plan;
        let fs = ring.frame_size();
        let run = ring.run();
        let mut chunk_frames = super::chunk_frames(plan.chunk_bytes, fs, run);
        let most = (ring.nslots() / (plan.writers as u64 + 1)) / run * run;
        if chunk_frames > most {
            self.notes.push(format!(
                "chunk_size: {} chunks do not fit the {} ring {} times (one per writer plus one filling); using {} chunks (give a larger ring for larger chunks)",
                crate::units::format_size(chunk_frames * fs as u64),
                crate::units::format_size(ring.bytes() as u64),
                plan.writers + 1,
                crate::units::format_size(most.max(run) * fs as u64)
            ));
            chunk_frames = most.max(run);
        }
        // A rotated file holds whole chunks: a chunk no larger than the file, and as many
        // of them as fit.
        let file_chunks = plan.file_bytes.map(|b| {
            let file_frames = (b / fs as u64 / run * run).max(run);
            chunk_frames = chunk_frames.min(file_frames);
            file_frames / chunk_frames
        });
        self.parts[k].base = Some(ScanOut {
            name: plan.name.clone(),
            scan: plan.name.clone(),
            format: plan.format,
            frame_size: fs,
            direct: plan.direct,
            chunk_frames,
            file_chunks,
            big_endian,
        });
    }

    /// Takes frame `seq` of stream `k` (header `h`, at `point`) into the scan if its time
    /// lies in the window; false if not.
    fn offer(
        &mut self,
        k: usize,
        ring: &Arc<Ring>,
        seq: u64,
        h: &Header,
        point: FramePoint,
        now_wall: f64,
    ) -> bool {
        if self.plan.from_seq.get(k).is_some_and(|&from| seq < from) {
            // Arrived before the scan's command.
            return false;
        }
        match self.plan.window.place(point) {
            Place::Before => false,
            Place::After => {
                self.past_stop_since.get_or_insert_with(Instant::now);
                self.past.insert((k, h.thread_id()), true);
                false
            }
            Place::Inside => {
                self.past.insert((k, h.thread_id()), false);
                self.last_inside = Some(Instant::now());
                let part = &mut self.parts[k];
                if !part.counters_taken {
                    let c = part.stream.capture_stats();
                    (part.overflows_at_start, part.drops_at_start) =
                        (c.ring_overflows, c.kernel_drops);
                    part.counters_taken = true;
                }
                part.acc.set_wall_clock(now_wall);
                part.acc.frame(h, Fate::Buffered);
                part.frames += 1;
                self.frames += 1;
                self.first_frame = Some(self.first_frame.map_or(point, |f| f.min(point)));
                self.last_frame = Some(self.last_frame.map_or(point, |l| l.max(point)));
                let d = self.stream_of(k, h, ring.tag(seq));
                self.append(d, ring, seq, point);
                true
            }
        }
    }

    /// The stop time has passed for good: every thread's newest frame lies past it (and has
    /// for `STOP_SETTLE`), or frames past it came and none inside the window for `STOP_GRACE`.
    fn window_has_passed(&mut self) -> bool {
        let Some(since) = self.past_stop_since else {
            return false;
        };
        if self.past.values().all(|p| *p) {
            let t = *self.all_past_since.get_or_insert_with(Instant::now);
            if t.elapsed() >= STOP_SETTLE {
                return true;
            }
        } else {
            self.all_past_since = None;
        }
        let quiet = self.last_inside.map_or(since, |t| t.max(since));
        quiet.elapsed() >= STOP_GRACE
    }

    /// The data stream frame `h` of stream `k` belongs to (created at its first frame).
    fn stream_of(&mut self, k: usize, h: &Header, sender: u16) -> usize {
        let (id, key) = match self.plan.split {
            Some(split) => split.key(h, sender),
            None => (0, String::new()),
        };
        if let Some(&i) = self.by_key.get(&(k, id)) {
            return i;
        }
        let base = self.parts[k]
            .base
            .clone()
            .expect("laid out before its frames");
        let name = if key.is_empty() {
            base.name.clone()
        } else {
            format!("{}_ds{key}", self.plan.name)
        };
        // Until its first chunk is durable, the scan is known on disk up to no time.
        self.durable.expect(&name);
        self.streams.push(DataStream {
            input: k,
            key,
            out: Arc::new(ScanOut { name, ..base }),
            building: None,
            frames: 0,
        });
        self.by_key.insert((k, id), self.streams.len() - 1);
        self.streams.len() - 1
    }

    fn append(&mut self, d: usize, ring: &Arc<Ring>, seq: u64, point: FramePoint) {
        let run = ring.run();
        let ds = &mut self.streams[d];
        ds.frames += 1;
        let b = ds.building.get_or_insert_with(|| {
            let chunk = ds.out.chunk_frames;
            let limit = if ds.out.format == Format::Vbs {
                // End the first chunk on an aligned run, so that every later chunk starts on
                // one and goes to disk with O_DIRECT straight from the ring.
                let end = (seq + chunk) / run * run;
                if end > seq {
                    end - seq
                } else {
                    chunk
                }
            } else {
                chunk
            };
            Building {
                ranges: Vec::new(),
                frames: 0,
                limit,
                last: point,
            }
        });
        b.last = point;
        match b.ranges.last_mut() {
            Some((first, n)) if *first + *n == seq => *n += 1,
            _ => b.ranges.push((seq, 1)),
        }
        b.frames += 1;
        if b.frames >= b.limit {
            self.send_building(d, ring);
        }
    }

    fn send_building(&mut self, d: usize, ring: &Arc<Ring>) {
        let ds = &mut self.streams[d];
        let Some(b) = ds.building.take() else {
            return;
        };
        let number = self.numbers.entry(ds.out.name.clone()).or_insert(0);
        let job = ChunkJob {
            out: ds.out.clone(),
            ring: ring.clone(),
            stream: self.parts[ds.input].stream.clone(),
            input: ds.input,
            number: *number,
            ranges: b.ranges,
            frames: b.frames,
            last: b.last,
        };
        *number += 1;
        let held = &mut self.parts[ds.input].held;
        held.insert(job.first_seq(), job.frames);
        match &self.jobs {
            Some(tx) => {
                let _ = tx.send(job);
            }
            None => {
                // No writer could start: the chunk is counted as dropped, not written.
                held.remove(&job.first_seq());
                self.unwritten_bytes += job.frames * job.out.frame_size as u64;
            }
        }
    }

    /// When chunks still filling hold most of stream `k`'s ring (a split scan whose data
    /// streams each fill a chunk), the oldest goes out short rather than let the ring fill.
    /// Chunks already with the writers do not count: sending a chunk early cannot make a slow
    /// disk faster, only the chunks smaller.
    fn relieve(&mut self, k: usize, ring: &Arc<Ring>, pos: u64) {
        let oldest = (0..self.streams.len())
            .filter(|d| self.streams[*d].input == k)
            .filter_map(|d| {
                let first = self.streams[d].building.as_ref()?.ranges.first()?.0;
                Some((first, d))
            })
            .min();
        let Some((first, d)) = oldest else {
            return;
        };
        if (pos - first) * 4 >= ring.nslots() * 3 {
            self.send_building(d, ring);
        }
    }

    /// No more frames: the last (short) chunks go out, and the writers end when the queue is
    /// empty.
    fn close_input(&mut self, inputs: &[Input]) {
        for d in 0..self.streams.len() {
            if let Some(ring) = inputs[self.streams[d].input].ring.clone() {
                self.send_building(d, &ring);
            }
        }
        self.jobs = None;
    }

    fn collect_done(&mut self) {
        while let Ok(d) = self.done.try_recv() {
            self.parts[d.input].held.remove(&d.first_seq);
            for c in d.durable {
                self.durable_grew |= self.durable.add(c);
            }
        }
    }

    /// What of the scan is durable now, as the status shows it.
    fn durable_now(&self) -> ScanDurable {
        let fps = self
            .parts
            .iter()
            .map(|p| p.acc.frames_per_second())
            .max()
            .unwrap_or(0);
        let known = self.durable.scan();
        let t = known.last.map(|p| frame_time(p, fps));
        ScanDurable {
            frames: known.frames,
            bytes: known.bytes,
            up_to: t.map(|t| t.iso()),
            up_to_unix: t.map(|t| t.as_f64()),
        }
    }

    /// The oldest frame of stream `k`'s ring a chunk of this scan still needs.
    fn lowest_held(&self, k: usize) -> Option<u64> {
        let building = self
            .streams
            .iter()
            .filter(|d| d.input == k)
            .filter_map(|d| d.building.as_ref()?.ranges.first().map(|r| r.0))
            .min();
        match (self.parts[k].held.keys().next().copied(), building) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The VDIF time of a frame of a stream of `fps` frames per second per thread (0: not known
/// yet, the second only).
fn frame_time((seconds, frame): FramePoint, fps: u32) -> VdifTime {
    VdifTime {
        unix_seconds: seconds,
        fraction: if fps > 0 {
            frame as f64 / fps as f64
        } else {
            0.0
        },
    }
}

/// One hold fewer (never below none).
fn release(paused: &AtomicUsize) {
    let _ = paused.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
