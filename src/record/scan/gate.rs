//! The scan gate: one thread that follows the ring behind the capture. Between scans it
//! releases every frame unwritten (they were counted by the capture: the recorder monitors).
//! During a scan it reads each frame's header, keeps the frames whose VDIF time lies in the
//! scan's window, cuts them into numbered chunks for the writers, counts them in the scan's
//! own accounting, and releases ring slots only when every chunk holding them is on disk (so a
//! disk that fails mid-chunk loses nothing: the chunk is written again elsewhere).

use crate::record::accounting::{Accounting, Fate, GapPolicy};
use crate::record::classify::swapped_header;
use crate::record::ring::Ring;
use crate::record::scan::chunk::{self, ChunkJob, ScanOut};
use crate::record::scan::disks::DiskSet;
use crate::record::scan::summary::{DataStreamSummary, DiskSummary, ScanSummary};
use crate::record::scan::window::{frames_between, FramePoint, Place, Window};
use crate::record::scan::writers::{Done, Writers};
use crate::record::scan::Split;
use crate::record::shared::Shared;
use crate::record::stats::{FileRecord, StreamCounts};
use crate::vdif::header::Header;
use crate::vdif::layout::{self, Format};
use crate::vdif::time::{utc_unix, Utc};
use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Idle wait when the ring has nothing new.
const IDLE_WAIT: Duration = Duration::from_micros(200);
/// Most frames examined before the gate looks at commands and completions again.
const FRAMES_PER_PASS: u64 = 8192;
/// After the first frame at or past the stop time, how long stragglers of other threads may
/// still arrive before the scan is closed.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// A scan ready to run: its name resolved, its window and writers decided.
#[derive(Clone, Debug)]
pub struct ScanPlan {
    pub name: String,
    pub requested_name: String,
    pub window: Window,
    pub start_text: Option<String>,
    pub stop_text: Option<String>,
    pub format: Format,
    pub chunk_bytes: u64,
    pub writers: usize,
    pub direct: bool,
    pub fps: Option<u32>,
    pub split: Option<Split>,
    pub writer_cpus: Vec<usize>,
    pub notes: Vec<String>,
}

enum Command {
    Start(Box<ScanPlan>),
    Stop,
}

/// What the gate tells the recorder: whether a scan runs, the summaries of finished scans.
#[derive(Default)]
struct Board {
    active: Option<String>,
    finished: Vec<ScanSummary>,
    bytes_outside: u64,
    exited: bool,
}

pub struct Gate {
    commands: Sender<Command>,
    board: Arc<(Mutex<Board>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Gate {
    pub fn start(
        shared: Arc<Shared>,
        disks: Arc<DiskSet>,
        big_endian: bool,
    ) -> std::io::Result<Gate> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let board = Arc::new((Mutex::new(Board::default()), Condvar::new()));
        let b = board.clone();
        let handle = std::thread::Builder::new()
            .name("vdifrec-gate".into())
            .spawn(move || {
                let mut g = GateLoop {
                    shared,
                    disks,
                    big_endian,
                    commands: rx,
                    board: b.clone(),
                    active: None,
                    outside_frames: 0,
                    written_before: 0,
                };
                g.run();
                let (m, cv) = &*b;
                m.lock().unwrap().exited = true;
                cv.notify_all();
            })?;
        Ok(Gate {
            commands: tx,
            board,
            handle: Some(handle),
        })
    }

    /// The scan now running (or draining to disk), if any.
    pub fn active(&self) -> Option<String> {
        self.board.0.lock().unwrap().active.clone()
    }

    pub fn start_scan(&self, plan: ScanPlan) {
        self.board.0.lock().unwrap().active = Some(plan.name.clone());
        let _ = self.commands.send(Command::Start(Box::new(plan)));
    }

    /// Asks the running scan to end now.
    pub fn stop_scan(&self) {
        let _ = self.commands.send(Command::Stop);
    }

    /// Waits until no scan is active and returns the newest finished scan's summary; None
    /// when `timeout` passed first.
    pub fn wait_scan(&self, timeout: Option<Duration>) -> Option<ScanSummary> {
        let (m, cv) = &*self.board;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut b = m.lock().unwrap();
        while b.active.is_some() && !b.exited {
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
        b.finished.last().cloned()
    }

    /// Every finished scan, and the bytes buffered outside any scan.
    pub fn results(&self) -> (Vec<ScanSummary>, u64) {
        let b = self.board.0.lock().unwrap();
        (b.finished.clone(), b.bytes_outside)
    }

    /// Waits for the gate to finish (the capture must have ended): a running scan is closed
    /// and written out first.
    pub fn join(&mut self) {
        let _ = self.commands.send(Command::Stop);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One data stream of a scan (the whole scan unless it is split): its chunks, numbered
/// from 0.
struct DataStream {
    key: String,
    out: Arc<ScanOut>,
    building: Option<Building>,
    next_chunk: u64,
    frames: u64,
}

/// A chunk being filled.
struct Building {
    ranges: Vec<(u64, u64)>,
    frames: u64,
    /// Frames this chunk will hold when full.
    limit: u64,
}

/// The scan being gated.
struct Active {
    plan: ScanPlan,
    /// What every data stream's chunks share (the name is the scan's).
    base: ScanOut,
    streams: Vec<DataStream>,
    /// Data stream index by thread or station id (split scans).
    by_key: std::collections::HashMap<u32, usize>,
    ring: Arc<Ring>,
    acc: Accounting,
    writers: Option<Writers>,
    jobs: Option<Sender<ChunkJob>>,
    done: Receiver<Done>,
    /// Chunks handed to the writers and not yet done: first sequence number → frames.
    held: BTreeMap<u64, u64>,
    frames: u64,
    first_frame: Option<FramePoint>,
    last_frame: Option<FramePoint>,
    /// The stop was asked for, or the window's end was reached: no more frames are taken.
    closing: bool,
    /// Asked to stop: the scan takes the frames buffered before that (ring sequence numbers
    /// below this), then closes.
    stop_at: Option<u64>,
    past_stop_since: Option<Instant>,
    overflows_at_start: u64,
    drops_at_start: u64,
    notes: Vec<String>,
}

struct GateLoop {
    shared: Arc<Shared>,
    disks: Arc<DiskSet>,
    big_endian: bool,
    commands: Receiver<Command>,
    board: Arc<(Mutex<Board>, Condvar)>,
    active: Option<Active>,
    outside_frames: u64,
    /// Bytes written by scans already finished (for the live total).
    written_before: u64,
}

impl GateLoop {
    fn run(&mut self) {
        let mut pending: Option<Box<ScanPlan>> = None;
        let mut stop_asked = false;
        // Until the first frame lays the ring out, only commands can come.
        let ring = loop {
            if let Some(r) = self.shared.ring() {
                break r;
            }
            while let Ok(c) = self.commands.try_recv() {
                match c {
                    Command::Start(p) => pending = Some(p),
                    Command::Stop => stop_asked = true,
                }
            }
            if self.shared.capture_done() && self.shared.ring().is_none() {
                // The recording ended before any frame: a scan asked for is empty.
                if let Some(p) = pending.take() {
                    self.finish_empty(*p);
                }
                return;
            }
            if stop_asked {
                if let Some(p) = pending.take() {
                    self.finish_empty(*p);
                }
                stop_asked = false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let fs = ring.frame_size() as u64;
        let mut pos = ring.read_seq();
        if let Some(p) = pending.take() {
            self.activate(*p, &ring);
            if stop_asked {
                self.active.as_mut().expect("activated").stop_at = Some(ring.write_seq());
            }
        }
        loop {
            while let Ok(c) = self.commands.try_recv() {
                match c {
                    Command::Start(p) => {
                        if self.active.is_none() {
                            self.activate(*p, &ring);
                        }
                    }
                    Command::Stop => {
                        // Frames already buffered when the stop came belong to the scan: it
                        // takes them up to the write index now, then closes.
                        if let Some(a) = &mut self.active {
                            a.stop_at.get_or_insert(ring.write_seq());
                        }
                    }
                }
            }
            // Read `done` before the write index: once done, the index is final.
            let capture_done = self.shared.capture_done();
            let end = ring.write_seq();
            let upto = end.min(pos + FRAMES_PER_PASS);
            let now_wall = unix_now();
            for seq in pos..upto {
                let taken = match &mut self.active {
                    Some(a) if !a.closing && a.stop_at.is_none_or(|s| seq < s) => {
                        a.offer(seq, self.big_endian, now_wall)
                    }
                    _ => false,
                };
                if !taken {
                    self.outside_frames += 1;
                }
            }
            let progressed = upto > pos;
            pos = upto;
            if let Some(a) = &mut self.active {
                a.collect_done();
                if !a.closing {
                    a.relieve(pos);
                }
                if (capture_done && pos == end) || a.stop_at.is_some_and(|s| pos >= s) {
                    a.closing = true;
                }
                if a.past_stop_since.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
                    a.closing = true;
                }
                if a.closing {
                    a.close_input();
                }
                let written = a
                    .writers
                    .as_ref()
                    .map_or(0, |w| w.log.lock().unwrap().bytes_written);
                self.shared.set_bytes_written(self.written_before + written);
            }
            let low = self
                .active
                .as_ref()
                .and_then(|a| a.lowest_held())
                .map_or(pos, |h| h.min(pos));
            ring.release(low);
            if self
                .active
                .as_ref()
                .is_some_and(|a| a.closing && a.held.is_empty())
            {
                let a = self.active.take().expect("active");
                self.finish(a, fs);
            }
            {
                let (m, _) = &*self.board;
                m.lock().unwrap().bytes_outside = self.outside_frames * fs;
            }
            if capture_done && pos == end && self.active.is_none() {
                return;
            }
            if !progressed {
                std::thread::sleep(IDLE_WAIT);
            }
        }
    }

    fn activate(&mut self, mut plan: ScanPlan, ring: &Arc<Ring>) {
        let fs = ring.frame_size();
        let run = ring.run();
        let mut chunk_frames = super::chunk_frames(plan.chunk_bytes, fs, run);
        // The ring must hold a chunk for every writer and one filling, or it could fill with
        // chunks that never complete.
        let most = (ring.nslots() / (plan.writers as u64 + 1)) / run * run;
        if chunk_frames > most {
            plan.notes.push(format!(
                "chunk_size: {} chunks do not fit the {} ring {} times (one per writer plus one filling); using {} chunks (give a larger ring for larger chunks)",
                crate::units::format_size(chunk_frames * fs as u64),
                crate::units::format_size(ring.bytes() as u64),
                plan.writers + 1,
                crate::units::format_size(most.max(run) * fs as u64)
            ));
            chunk_frames = most.max(run);
        }
        let out = ScanOut {
            name: plan.name.clone(),
            format: plan.format,
            frame_size: fs,
            direct: plan.direct,
            chunk_frames,
        };
        self.disks.begin_scan();
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let writers = Writers::start(
            plan.writers,
            ring.clone(),
            self.disks.clone(),
            jobs_rx,
            done_tx,
            &plan.writer_cpus,
        );
        let mut notes = std::mem::take(&mut plan.notes);
        let (writers, jobs) = match writers {
            Ok(w) => (Some(w), Some(jobs_tx)),
            Err(e) => {
                notes.push(format!("cannot start the scan's writers: {e}"));
                (None, None)
            }
        };
        let c = self.shared.capture_stats();
        let streams = match plan.split {
            None => vec![DataStream {
                key: String::new(),
                out: Arc::new(out.clone()),
                building: None,
                next_chunk: 0,
                frames: 0,
            }],
            Some(_) => Vec::new(),
        };
        self.active = Some(Active {
            acc: Accounting::new(plan.fps, GapPolicy::WallClock),
            plan,
            base: out,
            streams,
            by_key: Default::default(),
            ring: ring.clone(),
            writers,
            jobs,
            done: done_rx,
            held: BTreeMap::new(),
            frames: 0,
            first_frame: None,
            last_frame: None,
            closing: false,
            stop_at: None,
            past_stop_since: None,
            overflows_at_start: c.ring_overflows,
            drops_at_start: c.kernel_drops,
            notes,
        });
    }

    /// A scan asked for that never saw a frame: an empty summary, nothing on disk.
    fn finish_empty(&mut self, plan: ScanPlan) {
        let s = ScanSummary {
            name: plan.name.clone(),
            requested_name: plan.requested_name,
            format: plan.format.name(),
            start: plan.start_text,
            stop: plan.stop_text,
            first_frame: None,
            last_frame: None,
            frames: 0,
            frame_size: 0,
            chunk_size: 0,
            chunks: 0,
            data_streams: Vec::new(),
            writers: 0,
            counts: StreamCounts::default(),
            frames_lost_at_edges: 0,
            ring_overflows: 0,
            kernel_drops: 0,
            bytes_buffered: 0,
            bytes_written: 0,
            bytes_dropped_disk: 0,
            bytes_headers: 0,
            files: Vec::new(),
            disks: self.disk_summaries(),
            invariant_holds: true,
            error: None,
            seconds: Vec::new(),
            threads: Vec::new(),
            notes: plan.notes,
            ok: false,
        }
        .judge();
        self.publish(s);
    }

    fn disk_summaries(&self) -> Vec<DiskSummary> {
        self.disks
            .disks
            .iter()
            .map(|d| {
                let s = d.state.lock().unwrap();
                DiskSummary {
                    path: d.path.display().to_string(),
                    bytes: s.scan_frame_bytes,
                    chunks: s.scan_chunks,
                    dropped: s.dropped.clone(),
                }
            })
            .collect()
    }

    fn publish(&mut self, s: ScanSummary) {
        self.written_before += s.bytes_written;
        let (m, cv) = &*self.board;
        let mut b = m.lock().unwrap();
        b.finished.push(s);
        b.active = None;
        cv.notify_all();
    }

    /// The scan's input is closed and every chunk is done: close its files, count, write the
    /// JSON summary beside it.
    fn finish(&mut self, mut a: Active, fs: u64) {
        let log = match a.writers.take() {
            Some(w) => w.join(),
            None => Default::default(),
        };
        let log = std::mem::take(&mut *log.lock().unwrap());
        let mut files = log.files;
        let mut error = log.error;
        let mut notes = a.notes;
        notes.extend(log.notes);
        let mut chunks_per_disk = vec![0u64; self.disks.disks.len()];
        if a.base.format != Format::Vbs {
            for (i, d) in self.disks.disks.iter().enumerate() {
                let (closed, e) = chunk::close_scan_files(d, a.base.format, a.base.frame_size);
                chunks_per_disk[i] = closed.len() as u64;
                for (path, bytes) in closed {
                    files.push(FileRecord {
                        path: path.display().to_string(),
                        bytes,
                    });
                }
                if let Some(e) = e {
                    error.get_or_insert(e);
                }
            }
        }
        a.acc.finish();
        let totals = a.acc.totals();
        let threads = a.acc.thread_totals();
        let fps = a.acc.frames_per_second();
        // Frames missing at the window's edges, per thread (the accounting counts only
        // between a thread's first and last frame).
        let mut edges = 0u64;
        if fps > 0 {
            for t in &threads {
                if let (Some(s), Some(first)) = (a.plan.window.start, t.first) {
                    edges += frames_between(s, first, fps).max(0) as u64;
                }
                if let (Some(s), Some(last)) = (a.plan.window.stop, t.last) {
                    edges += (frames_between(last, s, fps) - 1).max(0) as u64;
                }
            }
        }
        let mut counts = StreamCounts::from(&totals);
        counts.frames_lost += edges;
        let c = self.shared.capture_stats();
        let mut disks = self.disk_summaries();
        for (d, n) in disks.iter_mut().zip(chunks_per_disk) {
            if a.base.format != Format::Vbs {
                d.chunks = n;
            }
        }
        let iso = |p: Option<FramePoint>| {
            p.map(|(s, f)| {
                let frac = if fps > 0 { f as f64 / fps as f64 } else { 0.0 };
                crate::vdif::time::VdifTime {
                    unix_seconds: s,
                    fraction: frac,
                }
                .iso()
            })
        };
        if a.frames == 0 {
            notes.push(
                "no frame of the stream fell in the scan's window: nothing was written".into(),
            );
        }
        let s = ScanSummary {
            name: a.plan.name.clone(),
            requested_name: a.plan.requested_name.clone(),
            format: a.base.format.name(),
            start: a.plan.start_text.clone(),
            stop: a.plan.stop_text.clone(),
            first_frame: iso(a.first_frame),
            last_frame: iso(a.last_frame),
            frames: a.frames,
            frame_size: fs as usize,
            chunk_size: a.base.chunk_frames * fs,
            chunks: a.streams.iter().map(|d| d.next_chunk).sum(),
            data_streams: a
                .streams
                .iter()
                .map(|d| DataStreamSummary {
                    name: d.out.name.clone(),
                    key: d.key.clone(),
                    frames: d.frames,
                    chunks: d.next_chunk,
                    bytes_written: log.bytes_by_scan.get(&d.out.name).copied().unwrap_or(0),
                })
                .collect(),
            writers: a.plan.writers,
            counts,
            frames_lost_at_edges: edges,
            ring_overflows: c.ring_overflows - a.overflows_at_start,
            kernel_drops: c.kernel_drops - a.drops_at_start,
            bytes_buffered: a.frames * fs,
            bytes_written: log.bytes_written,
            bytes_dropped_disk: log.bytes_dropped,
            bytes_headers: log.header_bytes,
            files,
            disks,
            invariant_holds: false,
            error,
            seconds: a.acc.take_rows(),
            threads,
            notes,
            ok: false,
        }
        .judge();
        self.write_summary_files(&s, a.base.format);
        self.publish(s);
    }

    /// The scan's summary as JSON beside it (beside each data stream of a split scan), on
    /// every disk that holds part of it.
    fn write_summary_files(&self, s: &ScanSummary, format: Format) {
        let names: Vec<&str> =
            if s.data_streams.len() > 1 || s.data_streams.iter().any(|d| !d.key.is_empty()) {
                s.data_streams.iter().map(|d| d.name.as_str()).collect()
            } else {
                vec![s.name.as_str()]
            };
        for d in &s.disks {
            if d.bytes == 0 {
                continue;
            }
            let disk = std::path::Path::new(&d.path);
            for name in &names {
                let path = layout::summary_path(disk, name, format);
                // Only where that data stream has a part (a vbs directory), or beside a file.
                if format == Format::Vbs && !path.parent().is_some_and(|p| p.is_dir()) {
                    continue;
                }
                // A failing disk may refuse this too; the summary is still returned.
                let _ = std::fs::write(&path, s.to_json());
            }
        }
    }
}

impl Active {
    /// Takes frame `seq` into the scan if its time lies in the window; false if not.
    fn offer(&mut self, seq: u64, big_endian: bool, now_wall: f64) -> bool {
        // SAFETY: `seq` is published and not yet released (the gate releases it later).
        let bytes = unsafe { self.ring.frames(seq, 1) };
        let parsed = if big_endian {
            Header::parse_unchecked(&swapped_header(bytes))
        } else {
            Header::parse_unchecked(bytes)
        };
        // The capture accepted only frames with a valid header.
        let Ok(h) = parsed else { return false };
        let point = (utc_unix(h.ref_epoch(), h.seconds()), h.frame_nr());
        match self.plan.window.place(point) {
            Place::Before => false,
            Place::After => {
                self.past_stop_since.get_or_insert_with(Instant::now);
                false
            }
            Place::Inside => {
                self.acc.set_wall_clock(now_wall);
                self.acc.frame(&h, Fate::Buffered);
                self.frames += 1;
                self.first_frame = Some(self.first_frame.map_or(point, |f| f.min(point)));
                self.last_frame = Some(self.last_frame.map_or(point, |l| l.max(point)));
                let k = self.stream_of(&h);
                self.append(seq, k);
                true
            }
        }
    }

    /// The data stream frame `h` belongs to (created at its first frame).
    fn stream_of(&mut self, h: &Header) -> usize {
        let Some(split) = self.plan.split else {
            return 0;
        };
        let (id, key) = split.key(h);
        if let Some(&i) = self.by_key.get(&id) {
            return i;
        }
        let out = ScanOut {
            name: format!("{}_ds{key}", self.plan.name),
            ..self.base.clone()
        };
        self.streams.push(DataStream {
            key,
            out: Arc::new(out),
            building: None,
            next_chunk: 0,
            frames: 0,
        });
        self.by_key.insert(id, self.streams.len() - 1);
        self.streams.len() - 1
    }

    fn append(&mut self, seq: u64, k: usize) {
        let run = self.ring.run();
        let ds = &mut self.streams[k];
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
            }
        });
        match b.ranges.last_mut() {
            Some((first, n)) if *first + *n == seq => *n += 1,
            _ => b.ranges.push((seq, 1)),
        }
        b.frames += 1;
        if b.frames >= b.limit {
            self.send_building(k);
        }
    }

    fn send_building(&mut self, k: usize) {
        let ds = &mut self.streams[k];
        let Some(b) = ds.building.take() else {
            return;
        };
        let job = ChunkJob {
            out: ds.out.clone(),
            number: ds.next_chunk,
            ranges: b.ranges,
            frames: b.frames,
        };
        ds.next_chunk += 1;
        self.held.insert(job.first_seq(), job.frames);
        match &self.jobs {
            Some(tx) => {
                let _ = tx.send(job);
            }
            None => {
                // No writer could start: the chunk is counted as not written.
                self.held.remove(&job.first_seq());
            }
        }
    }

    /// When chunks still filling hold most of the ring (a split scan whose data streams each
    /// fill a chunk), the oldest goes out short rather than let the ring fill.
    fn relieve(&mut self, pos: u64) {
        let Some(low) = self.lowest_held() else {
            return;
        };
        if (pos - low) * 4 < self.ring.nslots() * 3 {
            return;
        }
        let oldest = (0..self.streams.len())
            .filter_map(|k| {
                let first = self.streams[k].building.as_ref()?.ranges.first()?.0;
                Some((first, k))
            })
            .min();
        if let Some((_, k)) = oldest {
            self.send_building(k);
        }
    }

    /// No more frames: the last (short) chunk goes out, and the writers end when the queue
    /// is empty.
    fn close_input(&mut self) {
        for k in 0..self.streams.len() {
            self.send_building(k);
        }
        self.jobs = None;
    }

    fn collect_done(&mut self) {
        while let Ok(d) = self.done.try_recv() {
            self.held.remove(&d.first_seq);
        }
    }

    /// The oldest ring frame a chunk of this scan still needs.
    fn lowest_held(&self) -> Option<u64> {
        let building = self
            .streams
            .iter()
            .filter_map(|d| d.building.as_ref()?.ranges.first().map(|r| r.0))
            .min();
        match (self.held.keys().next().copied(), building) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The VDIF-time text of a window boundary, for summaries.
pub fn boundary_text(p: Option<FramePoint>) -> Option<String> {
    p.map(|(s, f)| {
        let t = Utc::from_unix(s).iso();
        if f == 0 {
            t
        } else {
            format!("{t} + frame {f}")
        }
    })
}
