//! Per-second, per-thread accounting of a VDIF stream: what arrived and what was lost.
//!
//! The same code counts a live capture and a file (`vdifrec check`), so the two always agree.
//!
//! Definitions (for users, with expected, late and how seconds close, in
//! `docs/reference/formats/counting.md`):
//! - A frame is *lost* when it is missing between the first and the last frame received on
//!   its thread. Nothing is guessed before the first frame or after the last.
//! - A frame below the highest seen on its thread is *out of order* if it was missing, a
//!   *duplicate* if it was already seen.
//! - Frames the ring had no room for are *ring overflows*: seen (so not lost), not recorded.
//!
//! Each thread keeps one bitmap of frame numbers per open VDIF second. A second closes once
//! its thread is `margin` frames into a later second (so modest reordering is not called loss),
//! or two seconds into the future, or at `finish`. A frame whose second is more than one second
//! ahead of (or two behind) its thread is held as a *jump candidate*: eight consecutive frames
//! near it confirm a real jump, anything else makes it a stray frame, counted out of window.
//! Counting never decides what is recorded: the capture records every valid frame.

use crate::vdif::header::Header;
use serde::Serialize;
use std::collections::VecDeque;

/// Frames in a row that confirm a jump of the stream's time.
const CONFIRM_FRAMES: usize = 8;
/// Stations told apart in one stream; frames of any further station count with the first's.
const MAX_STATIONS: usize = 16;
/// Seconds behind a thread's highest second that still count as late rather than a jump back.
const LATE_SECONDS: i64 = 2;
/// A thread this many seconds behind the newest second of the stream is treated as stopped.
const STALL_SECONDS: i64 = 3;
/// Most frames a VDIF second can number (24-bit frame number).
const MAX_FRAMES_PER_SECOND: u32 = 1 << 24;
/// Longest confirmed gap counted as lost frames; a longer one is a jump of the sender's
/// time (a file whose time field was corrupted consistently, or a sender restarted).
const MAX_GAP_SECONDS: i64 = 3600;
/// Wall-clock seconds without a frame of any thread after which the stream is taken to have
/// stopped: what follows may be another stream, at another rate (`serve` runs for days).
const QUIET_SECONDS: f64 = 1.0;

/// What happened to a frame the capture saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Written into the ring (and so, to disk).
    Buffered,
    /// Dropped because the ring was full.
    RingOverflow,
}

/// How to treat a forward jump in time that is confirmed by the frames after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapPolicy {
    /// The frames in between are lost (a file, or a stream where time is trusted).
    CountAsLoss,
    /// Count as loss only up to this many seconds plus the wall-clock time the thread was
    /// silent; a longer jump is a jump of the sender's clock: restart counting there.
    WallClock,
}

/// Counts of one thread in one second (or summed over threads or seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Frames buffered (recorded), duplicates and invalid-flagged frames included.
    pub received: u64,
    /// Frames expected between the first and last frame of the thread (see module docs).
    pub expected: u64,
    /// Expected frames never seen.
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Frames with the invalid flag set (recorded, and counted here).
    pub invalid: u64,
    /// Frames seen but dropped because the ring was full.
    pub ring_overflow: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.received += o.received;
        self.expected += o.expected;
        self.lost += o.lost;
        self.out_of_order += o.out_of_order;
        self.duplicates += o.duplicates;
        self.invalid += o.invalid;
        self.ring_overflow += o.ring_overflow;
    }
}

/// A VDIF station id, written as the station's two-character code where printable (`Kv`),
/// its number otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Station(pub u16);

impl std::fmt::Display for Station {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::vdif::header::station_name_of(self.0 as u32))
    }
}

impl Serialize for Station {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One thread's part of a second.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadSecond {
    /// The station the thread belongs to: a thread is (station, thread id), so two stations'
    /// thread 0 arriving in one stream are two threads.
    pub station: Station,
    pub thread: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// Lowest and highest frame number seen this second.
    pub first_frame: u32,
    pub last_frame: u32,
    /// Wall-clock time (the caller's clock; POSIX seconds for live capture) of the first and
    /// last frame of this second that arrived.
    pub first_seen: f64,
    pub last_seen: f64,
}

/// One VDIF second of the stream, all threads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SecondRow {
    /// Seconds since 1970 (reference epoch + seconds field).
    pub unix_second: i64,
    /// Reference epoch and seconds field as the headers carry them.
    pub ref_epoch: u32,
    pub vdif_seconds: u32,
    /// Frames per second per thread used for `expected`.
    pub frames_per_second: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// Arrival (wall clock) of the second's first and last frame, all threads.
    pub first_seen: f64,
    pub last_seen: f64,
    pub threads: Vec<ThreadSecond>,
}

/// Per-thread totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadTotals {
    pub station: Station,
    pub thread: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// Frames whose time lay outside the thread's window and were not confirmed as a jump.
    pub out_of_window: u64,
    /// Frames that came after their second had been closed and reported.
    pub late: u64,
    /// Confirmed jumps of the sender's time (counting restarted there).
    pub time_jumps: u64,
    /// First and last frame seen, as (unix second, frame number).
    pub first: Option<(i64, u32)>,
    pub last: Option<(i64, u32)>,
}

/// A stretch of missing frames on one thread, for reports (capped in number).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub station: Station,
    pub thread: u32,
    /// First and last missing frame, as (unix second, frame number).
    pub first_missing: (i64, u32),
    pub last_missing: (i64, u32),
    pub missing: u64,
}

/// A gap that may continue into the next second.
struct OpenGap {
    gap: Gap,
    open_to_next: bool,
}

struct Slot {
    second: i64,
    ref_epoch: u32,
    vdif_seconds: u32,
    bitmap: Vec<u64>,
    unique: u64,
    counts: Counts,
    min_fnr: u32,
    max_fnr: u32,
    first_seen: f64,
    last_seen: f64,
    /// The thread's first second: nothing before its first frame is expected.
    is_first: bool,
}

impl Slot {
    fn has(&self, fnr: u32) -> bool {
        self.bitmap
            .get((fnr / 64) as usize)
            .is_some_and(|w| w >> (fnr % 64) & 1 == 1)
    }

    fn mark(&mut self, fnr: u32) -> bool {
        let (w, b) = ((fnr / 64) as usize, fnr % 64);
        if w >= self.bitmap.len() {
            self.bitmap.resize(w + 1, 0);
        }
        let seen = self.bitmap[w] >> b & 1 == 1;
        self.bitmap[w] |= 1 << b;
        if !seen {
            self.unique += 1;
        }
        !seen
    }
}

/// The rate being learned again after the stream stopped.
#[derive(Clone, Copy, Debug)]
struct Relearning {
    /// The second of the first frame after the quiet.
    second: Option<i64>,
    /// The highest frame number (plus one) seen in it.
    highest: u32,
}

#[derive(Clone, Copy)]
struct Candidate {
    second: i64,
    fnr: u32,
    header: Header,
    fate: Fate,
}

struct ThreadState {
    station: Station,
    id: u32,
    slots: VecDeque<Slot>,
    /// Highest (second, frame number) seen.
    highest: Option<(i64, u32)>,
    /// Frames seen in seconds after the oldest open slot, for the close margin.
    frames_since_advance: u64,
    candidates: Vec<Candidate>,
    totals: ThreadTotals,
    /// Wall-clock time (seconds, caller's clock) of the last frame, for GapPolicy::WallClock.
    last_seen_wall: f64,
    stalled: bool,
    open_gap: Option<OpenGap>,
}

/// The accounting state of one stream.
pub struct Accounting {
    fps_given: Option<u32>,
    fps_learned: u32,
    /// A thread has gone on into a later second: the frame numbers have wrapped, so the
    /// highest seen is the rate (until then it is a running estimate from below).
    fps_settled: bool,
    /// After the stream stopped: the rate is learned again from the frames that follow (the
    /// old one counts until then), settled once a thread goes on from the second its first
    /// frame after the quiet was in.
    relearning: Option<Relearning>,
    /// Wall-clock time of the newest frame of any thread (GapPolicy::WallClock).
    last_frame_wall: f64,
    gap_policy: GapPolicy,
    /// Seconds of plain gap tolerated by GapPolicy::WallClock beyond the silent time.
    wall_tolerance: f64,
    /// Thread index by thread id (10-bit ids), one table per station (a stream rarely
    /// carries more than one, so finding the table is one comparison).
    index: Vec<(Station, Vec<Option<u16>>)>,
    threads: Vec<ThreadState>,
    /// Closed (thread, slot) results waiting for the other threads' part of their second.
    closed: VecDeque<(i64, ThreadSecond, u32, u32)>,
    rows: VecDeque<SecondRow>,
    newest_second: Option<i64>,
    free_bitmaps: Vec<Vec<u64>>,
    gaps: Vec<Gap>,
    max_gaps: usize,
    gaps_dropped: u64,
    now_wall: f64,
}

impl Accounting {
    /// `fps`: frames per second per thread if known; otherwise it is learned from the
    /// highest frame number seen.
    pub fn new(fps: Option<u32>, gap_policy: GapPolicy) -> Accounting {
        Accounting {
            fps_given: fps.filter(|f| *f > 0),
            fps_learned: 0,
            fps_settled: false,
            relearning: None,
            last_frame_wall: f64::INFINITY,
            gap_policy,
            wall_tolerance: 2.0,
            index: Vec::new(),
            threads: Vec::new(),
            closed: VecDeque::new(),
            rows: VecDeque::new(),
            newest_second: None,
            free_bitmaps: Vec::new(),
            gaps: Vec::new(),
            max_gaps: 1000,
            gaps_dropped: 0,
            now_wall: 0.0,
        }
    }

    /// Frames per second in use: given, or learned (0 until a frame has been seen).
    pub fn frames_per_second(&self) -> u32 {
        self.fps_given.unwrap_or(self.fps_learned)
    }

    /// The frame rate once it is known for sure: given, or learned from a wrap (None while
    /// the highest frame number seen is only a lower bound, and after the stream stopped
    /// until what follows has wrapped).
    pub fn frames_per_second_known(&self) -> Option<u32> {
        // During a quiet the next frames may be another stream's: nothing is sure until then.
        let quiet = self.gap_policy == GapPolicy::WallClock
            && self.now_wall - self.last_frame_wall > QUIET_SECONDS;
        let sure = self.fps_settled && self.fps_learned > 0 && self.relearning.is_none() && !quiet;
        self.fps_given.or(sure.then_some(self.fps_learned))
    }

    pub fn fps_is_given(&self) -> bool {
        self.fps_given.is_some()
    }

    /// Tells the accounting the wall-clock time (seconds) before frames are counted; only
    /// GapPolicy::WallClock uses it.
    pub fn set_wall_clock(&mut self, now: f64) {
        self.now_wall = now;
    }

    /// Counts one frame with a valid header of the stream's frame size.
    pub fn frame(&mut self, header: &Header, fate: Fate) {
        if self.gap_policy == GapPolicy::WallClock {
            if self.fps_given.is_none() && self.now_wall - self.last_frame_wall > QUIET_SECONDS {
                self.relearning = Some(Relearning {
                    second: None,
                    highest: 0,
                });
            }
            self.last_frame_wall = self.now_wall;
        }
        let tid = header.thread_id();
        let station = Station(header.station_id() as u16);
        let table = match self.index.iter().position(|(s, _)| *s == station) {
            Some(k) => k,
            None if self.index.len() < MAX_STATIONS => {
                self.index.push((station, vec![None; 1024]));
                self.index.len() - 1
            }
            // More stations than any real stream carries (stray frames with random station
            // ids, say): counted with the first station's threads, so memory stays bounded.
            None => 0,
        };
        let station = self.index[table].0;
        let ti = match self.index[table].1[tid as usize] {
            Some(i) => i as usize,
            None => {
                self.index[table].1[tid as usize] = Some(self.threads.len() as u16);
                self.threads.push(ThreadState {
                    station,
                    id: tid,
                    slots: VecDeque::new(),
                    highest: None,
                    frames_since_advance: 0,
                    candidates: Vec::new(),
                    totals: ThreadTotals {
                        station,
                        thread: tid,
                        ..Default::default()
                    },
                    last_seen_wall: self.now_wall,
                    stalled: false,
                    open_gap: None,
                });
                self.threads.len() - 1
            }
        };
        if fate == Fate::Buffered {
            self.threads[ti].totals.counts.received += 1;
            if header.is_invalid() {
                self.threads[ti].totals.counts.invalid += 1;
            }
        } else {
            self.threads[ti].totals.counts.ring_overflow += 1;
        }
        self.place(ti, header.unix_second(), header.frame_nr(), *header, fate);
        self.threads[ti].last_seen_wall = self.now_wall;
    }

    fn place(&mut self, ti: usize, second: i64, fnr: u32, header: Header, fate: Fate) {
        if let Some(fps) = self.fps_given {
            if fnr >= fps {
                self.threads[ti].totals.out_of_window += 1;
                return;
            }
        }
        let Some((hs, _)) = self.threads[ti].highest else {
            self.threads[ti].stalled = false;
            self.start_at(ti, second, fnr, header, fate);
            return;
        };
        if self.threads[ti].stalled {
            // The thread stopped and resumed: count it afresh from here.
            self.threads[ti].stalled = false;
            self.threads[ti].highest = None;
            self.start_at(ti, second, fnr, header, fate);
            return;
        }
        let in_window = second <= hs + 1 && second >= hs - LATE_SECONDS;
        if in_window {
            if !self.threads[ti].candidates.is_empty() {
                let strays = self.threads[ti].candidates.len() as u64;
                self.threads[ti].totals.out_of_window += strays;
                self.threads[ti].candidates.clear();
            }
            self.count(ti, second, fnr, header, fate);
            return;
        }
        // Outside the window: hold it until the frames after it say jump or stray.
        let t = &mut self.threads[ti];
        if let Some(c0) = t.candidates.first() {
            if (second - c0.second).abs() > 1 {
                t.totals.out_of_window += t.candidates.len() as u64;
                t.candidates.clear();
            }
        }
        t.candidates.push(Candidate {
            second,
            fnr,
            header,
            fate,
        });
        if t.candidates.len() >= CONFIRM_FRAMES {
            self.confirm_jump(ti);
        }
    }

    fn confirm_jump(&mut self, ti: usize) {
        let candidates = std::mem::take(&mut self.threads[ti].candidates);
        let (hs, _) = self.threads[ti].highest.expect("thread has started");
        let target = candidates[0].second;
        let silent = (self.now_wall - self.threads[ti].last_seen_wall).max(0.0);
        let plausible_gap = target > hs
            && target - hs <= MAX_GAP_SECONDS
            && match self.gap_policy {
                GapPolicy::CountAsLoss => true,
                GapPolicy::WallClock => ((target - hs) as f64) <= silent + self.wall_tolerance,
            };
        if plausible_gap {
            for c in candidates {
                self.count(ti, c.second, c.fnr, c.header, c.fate);
            }
        } else {
            // The sender's clock jumped: close what is open without guessing, start afresh.
            self.threads[ti].totals.time_jumps += 1;
            self.close_all(ti);
            self.threads[ti].highest = None;
            let first = candidates[0];
            self.start_at(ti, first.second, first.fnr, first.header, first.fate);
            for c in &candidates[1..] {
                self.count(ti, c.second, c.fnr, c.header, c.fate);
            }
        }
    }

    fn start_at(&mut self, ti: usize, second: i64, fnr: u32, header: Header, fate: Fate) {
        let mut slot = self.new_slot(second, &header, second, true);
        slot.is_first = true;
        let t = &mut self.threads[ti];
        t.slots.push_back(slot);
        t.highest = Some((second, fnr));
        t.frames_since_advance = 0;
        if t.totals.first.is_none() {
            t.totals.first = Some((second, fnr));
        }
        self.count(ti, second, fnr, header, fate);
    }

    /// A slot for `second`, labelled from `header`, a frame of second `header_second`.
    fn new_slot(
        &mut self,
        second: i64,
        header: &Header,
        header_second: i64,
        is_first: bool,
    ) -> Slot {
        // Bitmaps grow as frame numbers arrive (a second nobody sent stays empty); recycled
        // ones keep their capacity, so a steady stream allocates nothing.
        let mut bitmap = self.free_bitmaps.pop().unwrap_or_default();
        bitmap.clear();
        let vdif_seconds = (header.seconds() as i64 - (header_second - second)).max(0) as u32;
        Slot {
            second,
            ref_epoch: header.ref_epoch(),
            vdif_seconds,
            bitmap,
            unique: 0,
            counts: Counts::default(),
            min_fnr: u32::MAX,
            max_fnr: 0,
            first_seen: f64::INFINITY,
            last_seen: f64::NEG_INFINITY,
            is_first,
        }
    }

    /// Counts a frame inside the thread's window.
    fn count(&mut self, ti: usize, second: i64, fnr: u32, header: Header, fate: Fate) {
        let fnr = fnr.min(MAX_FRAMES_PER_SECOND - 1);
        if let Some(r) = &mut self.relearning {
            let first = *r.second.get_or_insert(second);
            if second > first {
                // The new stream's frame numbers have wrapped: its rate is what they reached.
                self.fps_learned = r.highest;
                self.relearning = None;
            } else {
                r.highest = r.highest.max(fnr + 1);
            }
        }
        if fnr + 1 > self.fps_learned {
            self.fps_learned = fnr + 1;
        }
        let (hs, hf) = self.threads[ti].highest.expect("thread has started");
        if second > hs {
            self.fps_settled = true;
        }
        // Open the slots up to this second (any in between stay empty: all lost).
        let newest_open = self.threads[ti].slots.back().map(|s| s.second);
        if newest_open.is_none_or(|n| second > n) {
            let from = newest_open.map_or(second, |n| n + 1);
            for s in from..=second {
                let slot = self.new_slot(s, &header, second, false);
                self.threads[ti].slots.push_back(slot);
            }
        }
        let t = &mut self.threads[ti];
        let oldest = t.slots.front().map_or(i64::MAX, |s| s.second);
        if second < oldest {
            // Its second is already reported.
            t.totals.late += 1;
            t.totals.counts.out_of_order += 1;
            return;
        }
        let slot = &mut t.slots[(second - oldest) as usize];
        let fresh = slot.mark(fnr);
        slot.min_fnr = slot.min_fnr.min(fnr);
        slot.max_fnr = slot.max_fnr.max(fnr);
        slot.first_seen = slot.first_seen.min(self.now_wall);
        slot.last_seen = slot.last_seen.max(self.now_wall);
        match fate {
            Fate::Buffered => {
                slot.counts.received += 1;
                if header.is_invalid() {
                    slot.counts.invalid += 1;
                }
            }
            Fate::RingOverflow => slot.counts.ring_overflow += 1,
        }
        if !fresh {
            slot.counts.duplicates += 1;
            t.totals.counts.duplicates += 1;
        } else if (second, fnr) < (hs, hf) {
            slot.counts.out_of_order += 1;
            t.totals.counts.out_of_order += 1;
        }
        if (second, fnr) > (hs, hf) {
            t.highest = Some((second, fnr));
            t.totals.last = t.highest;
        }
        if second > oldest {
            t.frames_since_advance += 1;
        }
        self.close_ready(ti);
        if self.newest_second.is_none_or(|n| second > n) {
            self.newest_second = Some(second);
            self.stall_laggards();
        }
    }

    /// Lists the runs of missing frames of a closing slot in `[start, end)`, joining a run
    /// that continues from the previous second.
    fn collect_gaps(&mut self, ti: usize, slot: &Slot, start: u32, end: u32) {
        let mut fnr = start;
        while fnr < end {
            if slot.has(fnr) {
                fnr += 1;
                continue;
            }
            let run_start = fnr;
            while fnr < end && !slot.has(fnr) {
                fnr += 1;
            }
            let t = &mut self.threads[ti];
            match t.open_gap.as_mut() {
                Some(g) if run_start == 0 && g.open_to_next => {
                    g.gap.missing += (fnr - run_start) as u64;
                    g.gap.last_missing = (slot.second, fnr - 1);
                    g.open_to_next = fnr == end;
                }
                _ => {
                    self.flush_gap(ti);
                    self.threads[ti].open_gap = Some(OpenGap {
                        gap: Gap {
                            station: self.threads[ti].station,
                            thread: self.threads[ti].id,
                            first_missing: (slot.second, run_start),
                            last_missing: (slot.second, fnr - 1),
                            missing: (fnr - run_start) as u64,
                        },
                        open_to_next: fnr == end,
                    });
                }
            }
            if fnr < end {
                self.flush_gap(ti);
            }
        }
        if start < end
            && self.threads[ti]
                .open_gap
                .as_ref()
                .is_some_and(|g| !g.open_to_next)
        {
            self.flush_gap(ti);
        }
    }

    fn flush_gap(&mut self, ti: usize) {
        if let Some(g) = self.threads[ti].open_gap.take() {
            if self.gaps.len() < self.max_gaps {
                self.gaps.push(g.gap);
            } else {
                self.gaps_dropped += 1;
            }
        }
    }

    /// Frames into a newer second after which a second is closed.
    fn margin(&self) -> u64 {
        match self.frames_per_second() {
            0 => 64,
            f => (f as u64 / 16).clamp(1, 4096),
        }
    }

    fn close_ready(&mut self, ti: usize) {
        let margin = self.margin();
        loop {
            let t = &self.threads[ti];
            let (Some(front), Some((hs, _))) = (t.slots.front(), t.highest) else {
                return;
            };
            let ready =
                hs >= front.second + 2 || (hs > front.second && t.frames_since_advance >= margin);
            if !ready {
                return;
            }
            self.close_front(ti, false);
            // Frames counted so far in the next second already belong to it.
            self.threads[ti].frames_since_advance = 0;
        }
    }

    fn close_all(&mut self, ti: usize) {
        while !self.threads[ti].slots.is_empty() {
            let last = self.threads[ti].slots.len() == 1;
            self.close_front(ti, last);
        }
    }

    /// Threads far behind the newest second have stopped: close them as ended.
    fn stall_laggards(&mut self) {
        let Some(newest) = self.newest_second else {
            return;
        };
        for ti in 0..self.threads.len() {
            let t = &self.threads[ti];
            if !t.stalled
                && t.highest
                    .is_some_and(|(hs, _)| hs + STALL_SECONDS <= newest)
            {
                self.close_all(ti);
                self.threads[ti].stalled = true;
            }
        }
        self.emit_rows();
    }

    fn close_front(&mut self, ti: usize, is_last: bool) {
        let fps = self.frames_per_second();
        let mut slot = self.threads[ti].slots.pop_front().expect("slot to close");
        let seen = slot.unique > 0;
        let start = if slot.is_first && seen {
            slot.min_fnr
        } else {
            0
        };
        let end = if is_last && seen {
            slot.max_fnr + 1
        } else {
            fps.max(slot.max_fnr + u32::from(seen))
        };
        slot.counts.expected = end.saturating_sub(start) as u64;
        slot.counts.lost = slot.counts.expected.saturating_sub(slot.unique);
        if slot.counts.lost > 0 {
            self.collect_gaps(ti, &slot, start, end);
        } else {
            self.flush_gap(ti);
        }
        let t = &mut self.threads[ti];
        t.totals.counts.expected += slot.counts.expected;
        t.totals.counts.lost += slot.counts.lost;
        let ts = ThreadSecond {
            station: t.station,
            thread: t.id,
            counts: slot.counts,
            first_frame: if seen { slot.min_fnr } else { 0 },
            last_frame: slot.max_fnr,
            first_seen: if slot.first_seen.is_finite() {
                slot.first_seen
            } else {
                0.0
            },
            last_seen: if slot.last_seen.is_finite() {
                slot.last_seen
            } else {
                0.0
            },
        };
        self.closed
            .push_back((slot.second, ts, slot.ref_epoch, slot.vdif_seconds));
        self.free_bitmaps.push(std::mem::take(&mut slot.bitmap));
        self.emit_rows();
    }

    /// Moves seconds that no running thread can still add to into `rows`.
    fn emit_rows(&mut self) {
        // The oldest second some running thread still has open (or has not reached yet).
        let pending = self
            .threads
            .iter()
            .filter(|t| !t.stalled && t.highest.is_some())
            .map(|t| {
                t.slots
                    .front()
                    .map_or(t.highest.unwrap().0 + 1, |s| s.second)
            })
            .min();
        loop {
            let Some(second) = self.closed.iter().map(|c| c.0).min() else {
                return;
            };
            if pending.is_some_and(|p| second >= p) {
                return;
            }
            let mut row = SecondRow {
                unix_second: second,
                ref_epoch: 0,
                vdif_seconds: 0,
                frames_per_second: self.frames_per_second(),
                counts: Counts::default(),
                first_seen: f64::INFINITY,
                last_seen: 0.0,
                threads: Vec::new(),
            };
            let mut keep = VecDeque::with_capacity(self.closed.len());
            for (s, ts, epoch, vsec) in self.closed.drain(..) {
                if s == second {
                    if row.threads.is_empty() {
                        row.ref_epoch = epoch;
                        row.vdif_seconds = vsec;
                    }
                    row.counts.add(&ts.counts);
                    if ts.counts.received + ts.counts.ring_overflow > 0 {
                        row.first_seen = row.first_seen.min(ts.first_seen);
                        row.last_seen = row.last_seen.max(ts.last_seen);
                    }
                    row.threads.push(ts);
                } else {
                    keep.push_back((s, ts, epoch, vsec));
                }
            }
            self.closed = keep;
            if !row.first_seen.is_finite() {
                row.first_seen = 0.0;
            }
            row.threads.sort_by_key(|t| t.thread);
            self.rows.push_back(row);
        }
    }

    /// Takes the seconds completed so far, oldest first.
    pub fn take_rows(&mut self) -> Vec<SecondRow> {
        self.rows.drain(..).collect()
    }

    /// Closes everything: held jump candidates become out-of-window frames, open seconds close
    /// with nothing guessed after the last frame.
    pub fn finish(&mut self) {
        for ti in 0..self.threads.len() {
            let strays = self.threads[ti].candidates.len() as u64;
            self.threads[ti].totals.out_of_window += strays;
            self.threads[ti].candidates.clear();
            self.close_all(ti);
            self.flush_gap(ti);
            self.threads[ti].stalled = true;
        }
        self.emit_rows();
    }

    /// Totals per thread, by thread id.
    pub fn thread_totals(&self) -> Vec<ThreadTotals> {
        let mut v: Vec<ThreadTotals> = self.threads.iter().map(|t| t.totals.clone()).collect();
        v.sort_by_key(|t| t.thread);
        v
    }

    /// Totals over all threads.
    pub fn totals(&self) -> Totals {
        let mut out = Totals::default();
        for t in &self.threads {
            out.counts.add(&t.totals.counts);
            out.out_of_window += t.totals.out_of_window;
            out.late += t.totals.late;
            out.time_jumps += t.totals.time_jumps;
        }
        out.threads = self.threads.len() as u32;
        out
    }

    /// Gaps seen so far (the first `max_gaps`), and how many more were not listed.
    pub fn gaps(&self) -> (&[Gap], u64) {
        (&self.gaps, self.gaps_dropped)
    }
}

/// Totals over all threads of a stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub counts: Counts,
    pub out_of_window: u64,
    pub late: u64,
    pub time_jumps: u64,
    pub threads: u32,
}

impl Totals {
    /// Adds another stream's totals (its threads are threads of their own).
    pub fn merge(&mut self, o: &Totals) {
        self.counts.add(&o.counts);
        self.out_of_window += o.out_of_window;
        self.late += o.late;
        self.time_jumps += o.time_jumps;
        self.threads += o.threads;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::header::field;

    fn hdr(thread: u32, second: u32, fnr: u32) -> Header {
        let mut h = Header::new(Some(0), 8224, 4, 2, false).unwrap();
        h.set(field::REF_EPOCH, 40).unwrap();
        h.set(field::SECONDS, second).unwrap();
        h.set(field::FRAME_NR, fnr).unwrap();
        h.set(field::THREAD_ID, thread).unwrap();
        h
    }

    fn feed(acc: &mut Accounting, frames: &[(u32, u32, u32)]) {
        for &(t, s, f) in frames {
            acc.frame(&hdr(t, s, f), Fate::Buffered);
        }
    }

    fn seq(thread: u32, fps: u32, from: (u32, u32), n: u32) -> Vec<(u32, u32, u32)> {
        (0..n as u64)
            .map(|i| {
                let k = from.0 as u64 * fps as u64 + from.1 as u64 + i;
                (thread, (k / fps as u64) as u32, (k % fps as u64) as u32)
            })
            .collect()
    }

    #[test]
    fn clean_stream_counts_exactly() {
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        feed(&mut acc, &seq(0, 100, (10, 37), 400));
        acc.finish();
        let rows = acc.take_rows();
        assert_eq!(rows.len(), 5);
        let got: Vec<(u32, u64, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r.vdif_seconds,
                    r.counts.received,
                    r.counts.expected,
                    r.counts.lost,
                )
            })
            .collect();
        // First second starts at frame 37, last ends at frame 36: nothing guessed outside.
        assert_eq!(
            got,
            vec![
                (10, 63, 63, 0),
                (11, 100, 100, 0),
                (12, 100, 100, 0),
                (13, 100, 100, 0),
                (14, 37, 37, 0)
            ]
        );
        let t = acc.totals();
        assert_eq!(t.counts.received, 400);
        assert_eq!(t.counts.lost, 0);
    }

    #[test]
    fn a_thread_is_a_station_and_a_thread_id() {
        // Two stations' thread 0 interleaved in one stream (two senders into one port), the
        // second with frames 50..59 of second 11 missing: two threads, no duplicates.
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        let station = |id: u32, h: Header| {
            let mut h = h;
            h.set(field::STATION_ID, id).unwrap();
            h
        };
        for (_, s, f) in seq(0, 100, (10, 0), 300) {
            acc.frame(&station(0x4b76, hdr(0, s, f)), Fate::Buffered); // Kv
            if !(s == 11 && (50..60).contains(&f)) {
                acc.frame(&station(0x4b75, hdr(0, s, f)), Fate::Buffered); // Ku
            }
        }
        acc.finish();
        let t = acc.totals();
        assert_eq!((t.counts.received, t.counts.duplicates), (590, 0));
        assert_eq!(t.counts.lost, 10);
        let per: Vec<(String, u32, u64, u64)> = acc
            .thread_totals()
            .iter()
            .map(|t| {
                (
                    t.station.to_string(),
                    t.thread,
                    t.counts.received,
                    t.counts.lost,
                )
            })
            .collect();
        assert_eq!(
            per,
            vec![("Kv".into(), 0, 300, 0), ("Ku".into(), 0, 290, 10)]
        );
        let rows = acc.take_rows();
        let second_11: Vec<(String, u64)> = rows[1]
            .threads
            .iter()
            .map(|t| (t.station.to_string(), t.counts.lost))
            .collect();
        assert_eq!(second_11, vec![("Kv".into(), 0), ("Ku".into(), 10)]);
        assert_eq!(acc.gaps().0[0].station.to_string(), "Ku");
        // A 17th station and more are counted with the first station's threads.
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        for id in 1..=20 {
            acc.frame(&station(id, hdr(0, 10, id)), Fate::Buffered);
        }
        assert_eq!(acc.thread_totals().len(), MAX_STATIONS);
        assert_eq!(acc.thread_totals()[0].counts.received, 5);
    }

    #[test]
    fn drops_reorder_and_duplicates_are_told_apart() {
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        let mut frames = seq(0, 100, (5, 0), 300);
        frames.retain(|f| !(f.1 == 6 && (10..=19).contains(&f.2))); // drop 10 in second 6
        frames.swap(50, 51); // one out of order
        frames.insert(120, frames[119]); // one duplicate
        feed(&mut acc, &frames);
        acc.finish();
        let rows = acc.take_rows();
        let lost: Vec<u64> = rows.iter().map(|r| r.counts.lost).collect();
        assert_eq!(lost, vec![0, 10, 0]);
        let t = acc.totals();
        assert_eq!(t.counts.lost, 10);
        assert_eq!(t.counts.out_of_order, 1);
        assert_eq!(t.counts.duplicates, 1);
        assert_eq!(t.counts.received, 291);
        let (gaps, more) = acc.gaps();
        assert_eq!(more, 0);
        assert_eq!(gaps.len(), 1);
        assert_eq!(gaps[0].missing, 10);
        assert_eq!(gaps[0].first_missing.1, 10);
        assert_eq!(gaps[0].last_missing.1, 19);
    }

    #[test]
    fn fps_is_learned_from_the_wrap() {
        let mut acc = Accounting::new(None, GapPolicy::CountAsLoss);
        let mut frames = seq(0, 250, (0, 100), 1000);
        frames.retain(|f| !(f.1 == 2 && f.2 == 7));
        feed(&mut acc, &frames);
        acc.finish();
        assert_eq!(acc.frames_per_second(), 250);
        assert_eq!(acc.totals().counts.lost, 1);
        assert_eq!(acc.totals().counts.expected, 1000);
    }

    #[test]
    fn stray_frames_are_out_of_window_and_do_not_fake_loss() {
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        let mut frames = seq(0, 100, (50, 0), 300);
        frames.insert(40, (0, 1000, 3)); // far ahead
        frames.insert(90, (0, 10, 3)); // far behind
        feed(&mut acc, &frames);
        acc.finish();
        let t = acc.totals();
        assert_eq!(t.out_of_window, 2);
        assert_eq!(t.counts.lost, 0);
        assert_eq!(t.counts.received, 302);
        assert_eq!(acc.take_rows().len(), 3);
    }

    #[test]
    fn confirmed_jump_in_a_file_is_a_gap() {
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        let mut frames = seq(0, 100, (50, 0), 150);
        frames.extend(seq(0, 100, (53, 50), 50)); // 3 s missing, confirmed by what follows
        feed(&mut acc, &frames);
        acc.finish();
        let rows = acc.take_rows();
        let lost: Vec<(u32, u64)> = rows
            .iter()
            .map(|r| (r.vdif_seconds, r.counts.lost))
            .collect();
        assert_eq!(lost, vec![(50, 0), (51, 50), (52, 100), (53, 50)]);
        let (gaps, _) = acc.gaps();
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert_eq!(gaps[0].missing, 200);
        assert_eq!(gaps[0].first_missing.1, 50);
        assert_eq!(gaps[0].last_missing.1, 49);
    }

    #[test]
    fn a_huge_confirmed_jump_is_a_time_jump_not_billions_of_lost_frames() {
        // Found by fuzzing: eight frames 2^29 seconds ahead made a file check allocate a
        // slot per second in between.
        let mut acc = Accounting::new(None, GapPolicy::CountAsLoss);
        let mut frames = seq(0, 100, (50, 0), 150);
        frames.extend(seq(0, 100, (1 << 29, 0), 20));
        feed(&mut acc, &frames);
        acc.finish();
        let t = acc.totals();
        assert_eq!(t.time_jumps, 1);
        assert_eq!(t.counts.lost, 0);
        assert_eq!(t.counts.received, 170);
        assert_eq!(acc.take_rows().len(), 3);
    }

    #[test]
    fn a_stream_after_a_quiet_is_counted_at_its_own_rate() {
        let mut acc = Accounting::new(None, GapPolicy::WallClock);
        acc.set_wall_clock(0.0);
        feed(&mut acc, &seq(0, 100, (50, 0), 250));
        assert_eq!(acc.frames_per_second_known(), Some(100));
        // Five seconds later a stream of 20 frames a second, at a time of its own: until it
        // has wrapped its rate is not known for sure, then it is its own.
        acc.set_wall_clock(5.0);
        feed(&mut acc, &seq(0, 20, (5000, 0), 10));
        assert_eq!(acc.frames_per_second_known(), None);
        feed(&mut acc, &seq(0, 20, (5000, 10), 50));
        assert_eq!(acc.frames_per_second_known(), Some(20));
        acc.finish();
        let t = acc.totals();
        assert_eq!(
            (t.counts.received, t.counts.lost, t.out_of_window),
            (310, 0, 0)
        );
        // A pause of the same stream loses what it lost, counted at the rate it had.
        let mut acc = Accounting::new(None, GapPolicy::WallClock);
        acc.set_wall_clock(0.0);
        feed(&mut acc, &seq(0, 100, (50, 0), 250));
        acc.set_wall_clock(3.0);
        feed(&mut acc, &seq(0, 100, (53, 0), 200));
        acc.finish();
        let t = acc.totals();
        assert_eq!((t.counts.lost, acc.frames_per_second()), (50, 100));
    }

    #[test]
    fn clock_jump_restarts_live_counting() {
        let mut acc = Accounting::new(Some(100), GapPolicy::WallClock);
        acc.set_wall_clock(0.0);
        let mut frames = seq(0, 100, (50, 0), 150);
        frames.extend(seq(0, 100, (5000, 0), 150));
        feed(&mut acc, &frames);
        acc.finish();
        let t = acc.totals();
        assert_eq!(t.time_jumps, 1);
        assert_eq!(t.counts.lost, 0);
        assert_eq!(t.counts.received, 300);
    }

    #[test]
    fn multi_thread_rows_wait_for_every_thread() {
        let mut acc = Accounting::new(Some(10), GapPolicy::CountAsLoss);
        let mut frames = Vec::new();
        for k in 0..40u32 {
            for t in 0..3 {
                if !(t == 2 && k == 15) {
                    frames.push((t, 7 + k / 10, k % 10));
                }
            }
        }
        feed(&mut acc, &frames);
        acc.finish();
        let rows = acc.take_rows();
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.threads.len() == 3));
        assert_eq!(rows[1].counts.lost, 1);
        assert_eq!(rows[1].threads[2].counts.lost, 1);
        assert_eq!(rows[1].counts.received, 29);
    }

    #[test]
    fn ring_overflow_is_not_loss() {
        let mut acc = Accounting::new(Some(100), GapPolicy::CountAsLoss);
        for (i, (t, s, f)) in seq(0, 100, (1, 0), 200).into_iter().enumerate() {
            let fate = if (50..60).contains(&i) {
                Fate::RingOverflow
            } else {
                Fate::Buffered
            };
            acc.frame(&hdr(t, s, f), fate);
        }
        acc.finish();
        let t = acc.totals();
        assert_eq!(t.counts.lost, 0);
        assert_eq!(t.counts.ring_overflow, 10);
        assert_eq!(t.counts.received, 190);
    }
}
