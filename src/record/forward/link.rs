//! One destination's thread: reads every stream's ring behind the capture, shapes the frames
//! when asked, and sends them; never holds anything the capture or the writer waits for.
//!
//! The forwarder reads as the live monitor does, yielding: it pins nothing, so the capture
//! never waits for it. When it falls more than half a ring behind (a destination slower than
//! the stream, a pacing cap below the stream's rate), it skips ahead to a quarter ring behind
//! the newest frame, by whole frames, and counts what it passed over; the ring is never
//! lapped under a batch being sent (that would be counted as `torn`). A destination that goes
//! away is retried with a backoff of 0.1 s doubling to 5 s (back to 0.1 s once a connection
//! has lasted 10 s), its frames skipped meanwhile;
//! a pause (`mem2net=off`) follows the newest frame without counting.

use crate::record::forward::account::{Link, LinkState};
use crate::record::forward::destination::Destination;
use crate::record::forward::pacer::Pacer;
use crate::record::forward::wire::{is_gone, Wire, MAX_BATCH};
use crate::record::ring::Ring;
use crate::record::shared::Shared;
use crate::vdif::header::Header;
use crate::vdif::transform::Transform;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MOST: Duration = Duration::from_secs(5);
/// Caught up: how long to wait before looking at the rings again.
const IDLE: Duration = Duration::from_micros(200);
/// At the end of a recording, how long the forwarder may take to send what is left.
pub const DRAIN_MOST: Duration = Duration::from_secs(3);

/// What the recorder tells a forwarding thread.
#[derive(Default)]
pub struct Control {
    /// Close now.
    pub stop: AtomicBool,
    /// The capture has ended: send what is left (within `DRAIN_MOST`), then close.
    pub drain: AtomicBool,
}

/// Where the thread is in one stream's ring.
struct Cursor {
    /// The next frame to send (None until the ring exists).
    next: Option<u64>,
}

pub struct LinkRun {
    pub dest: Destination,
    pub link: Arc<Link>,
    pub streams: Vec<Arc<Shared>>,
    pub control: Arc<Control>,
    /// Added while recording: start from the newest frame, not the ring's first.
    pub from_now: bool,
}

/// Output frames made by the shaping, waiting to go (in order: each input frame's `fan_out`
/// pieces together), and how many went. An input frame counts as forwarded once all its
/// pieces are on the wire.
struct Queue {
    bytes: Vec<u8>,
    frame_size: usize,
    fan_out: usize,
    sent: usize,
}

impl Queue {
    fn len(&self) -> usize {
        (self.bytes.len() / self.frame_size.max(1)).saturating_sub(self.sent)
    }
    fn clear(&mut self) {
        self.bytes.clear();
        self.sent = 0;
    }
    /// `taken` more pieces went; the input frames that are now whole on the wire.
    fn sent_more(&mut self, taken: usize) -> u64 {
        let before = self.sent / self.fan_out.max(1);
        self.sent += taken;
        (self.sent / self.fan_out.max(1) - before) as u64
    }
    /// Input frames not yet whole on the wire.
    fn unsent_inputs(&self) -> u64 {
        let fan = self.fan_out.max(1);
        ((self.bytes.len() / self.frame_size.max(1)) / fan - self.sent / fan) as u64
    }
}

struct Connection {
    wire: Option<Wire>,
    ever_connected: bool,
    next_attempt: Instant,
    backoff: Duration,
    /// When the connection was made: the backoff starts again from its first step only once
    /// a connection has lasted `STEADY` (a UDP "connection" is always made at once, and a
    /// port with nobody listening refuses only the datagrams after it).
    since: Instant,
    psn: u64,
}

/// How long a connection must last before the backoff is reset.
const STEADY: Duration = Duration::from_secs(10);

impl LinkRun {
    pub fn run(self) {
        crate::affinity::name_current("vdifrec-forward");
        let link = &self.link;
        let mut cursors: Vec<Cursor> = self.streams.iter().map(|_| Cursor { next: None }).collect();
        let mut conn = Connection {
            wire: None,
            ever_connected: false,
            next_attempt: Instant::now(),
            backoff: BACKOFF_FIRST,
            since: Instant::now(),
            psn: first_psn(),
        };
        let (pacing, mut pacing_seen) = link.pacing();
        let mut pacer = Pacer::new(pacing);
        let mut shaping: Option<Transform> = None;
        let mut queue = Queue {
            bytes: Vec::with_capacity(MAX_BATCH * 9000),
            frame_size: 0,
            fan_out: 1,
            sent: 0,
        };
        let mut rate = RateMeter::new();
        let mut drain_since: Option<Instant> = None;
        loop {
            if self.control.stop.load(Ordering::Acquire) {
                break;
            }
            if self.control.drain.load(Ordering::Acquire) {
                let since = *drain_since.get_or_insert_with(Instant::now);
                let all_sent = queue.len() == 0 && self.caught_up(&cursors);
                if all_sent || since.elapsed() > DRAIN_MOST {
                    self.skip_rest(&mut cursors, &queue);
                    break;
                }
            }
            self.keep_connected(&mut conn);
            let (pacing, changes) = link.pacing();
            if changes != pacing_seen {
                pacer = Pacer::new(pacing);
                pacing_seen = changes;
            }
            let enabled = link.enabled.load(Ordering::Acquire);
            let mut moved = 0;
            for (k, sh) in self.streams.iter().enumerate() {
                let Some(ring) = sh.ring() else { continue };
                let cur = &mut cursors[k];
                let w = ring.write_seq();
                let next = cur.next.get_or_insert(if self.from_now { w } else { 0 });
                // Shaped frames still queued go even when nothing new has come.
                if w <= *next && queue.len() == 0 {
                    continue;
                }
                let refused = link.state().0 == LinkState::Refused;
                if !enabled || refused {
                    *next = w;
                    queue.clear();
                    continue;
                }
                if conn.wire.is_none() {
                    link.counters
                        .skipped
                        .fetch_add(w - *next, Ordering::Relaxed);
                    *next = w;
                    continue;
                }
                let limit = ring.nslots() / 2;
                if w - *next > limit && queue.len() == 0 {
                    let to = w - ring.nslots() / 4;
                    link.counters
                        .skipped
                        .fetch_add(to - *next, Ordering::Relaxed);
                    *next = to;
                }
                if self.dest.reshapes() && shaping.is_none() {
                    match self.shaping_for(&ring, *next) {
                        Ok(t) => {
                            queue.frame_size = t.out_frame_size();
                            queue.fan_out = t.fan_out();
                            shaping = Some(t);
                        }
                        Err(why) => {
                            link.set_state(LinkState::Refused, Some(why));
                            continue;
                        }
                    }
                }
                moved += match &mut shaping {
                    None => self.send_direct(&ring, next, w, &mut conn, &mut pacer),
                    Some(t) => {
                        self.send_shaped(&ring, next, w, t, &mut queue, &mut conn, &mut pacer)
                    }
                };
            }
            rate.update(link);
            if moved == 0 {
                std::thread::sleep(IDLE);
            }
        }
        if let Some(w) = &mut conn.wire {
            // A TCP frame half sent is finished if the peer takes it at once.
            let _ = w.flush();
        }
        rate.cpu(link);
        link.set_state(LinkState::Closed, None);
    }

    /// Every ring read to its end, now that the capture has ended.
    fn caught_up(&self, cursors: &[Cursor]) -> bool {
        self.streams
            .iter()
            .zip(cursors)
            .all(|(sh, c)| match sh.ring() {
                Some(r) => c.next.unwrap_or(0) >= r.write_seq(),
                None => true,
            })
    }

    /// Closing with frames unsent (the drain's time ran out): they are skipped, those shaped
    /// and still queued too.
    fn skip_rest(&self, cursors: &mut [Cursor], queue: &Queue) {
        if self.link.enabled.load(Ordering::Acquire) {
            self.link
                .counters
                .skipped
                .fetch_add(queue.unsent_inputs(), Ordering::Relaxed);
        }
        for (sh, c) in self.streams.iter().zip(cursors) {
            if let Some(r) = sh.ring() {
                let next = c.next.unwrap_or(0);
                let w = r.write_seq();
                if w > next && self.link.enabled.load(Ordering::Acquire) {
                    self.link
                        .counters
                        .skipped
                        .fetch_add(w - next, Ordering::Relaxed);
                }
                c.next = Some(w);
            }
        }
    }

    /// Connects when not connected and the backoff allows.
    fn keep_connected(&self, conn: &mut Connection) {
        let link = &self.link;
        if let Some(w) = &conn.wire {
            if conn.since.elapsed() >= STEADY {
                conn.backoff = BACKOFF_FIRST;
            }
            if w.peer_closed() {
                conn.psn = w.next_psn();
                conn.wire = None;
                self.went_away(conn, "the destination closed the connection".into());
            }
            return;
        }
        if Instant::now() < conn.next_attempt {
            return;
        }
        match Wire::connect(&self.dest.endpoint) {
            Ok(mut w) => {
                w.continue_from(conn.psn);
                conn.wire = Some(w);
                if conn.ever_connected {
                    link.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                conn.ever_connected = true;
                conn.since = Instant::now();
                let state = if link.enabled.load(Ordering::Acquire) {
                    LinkState::Sending
                } else {
                    LinkState::Paused
                };
                link.set_state(state, None);
            }
            Err(e) => {
                link.counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.went_away(conn, format!("cannot connect: {e}"));
            }
        }
    }

    fn went_away(&self, conn: &mut Connection, why: String) {
        self.link.set_state(LinkState::Down, Some(why));
        conn.next_attempt = Instant::now() + conn.backoff;
        conn.backoff = (conn.backoff * 2).min(BACKOFF_MOST);
    }

    /// The shaping for this stream, from the header of its frame `seq`.
    fn shaping_for(&self, ring: &Ring, seq: u64) -> Result<Transform, String> {
        // SAFETY: frame `seq` is published; only its 32-byte header is read, and the result
        // is checked against `overwritten` below.
        let head = unsafe { ring.frames(seq, 1) }[..32].to_vec();
        if ring.overwritten(seq, 1) > 0 {
            return Err("the stream's first frame was overwritten before it was read".into());
        }
        let h = Header::parse_unchecked(&head).map_err(|e| e.to_string())?;
        self.dest
            .transform
            .build(&h)
            .map_err(|e| format!("{}: {}", e.name, e.why))
    }

    /// The frames `next..w` straight from the ring (threads= only picks some).
    fn send_direct(
        &self,
        ring: &Ring,
        next: &mut u64,
        w: u64,
        conn: &mut Connection,
        pacer: &mut Pacer,
    ) -> u64 {
        let Some(wire) = &mut conn.wire else { return 0 };
        let fs = ring.frame_size();
        let most = pacer.batch(wire.wire_bytes(fs), MAX_BATCH) as u64;
        let n = (w - *next).min(most);
        // SAFETY: published frames, read yielding; `overwritten` below says whether the
        // capture took any of their slots while they were being sent.
        let bytes = unsafe { ring.frames(*next, n) };
        let mut picked: Vec<&[u8]> = Vec::with_capacity(n as usize);
        let mut index: Vec<u64> = Vec::with_capacity(n as usize);
        for (i, f) in bytes.chunks_exact(fs).enumerate() {
            if self.wants(f) {
                picked.push(f);
                index.push(i as u64);
            }
        }
        if picked.is_empty() {
            *next += n;
            return n;
        }
        pacer.wait(Duration::from_millis(20));
        match wire.send(&picked) {
            Ok(taken) => {
                let consumed = if taken == picked.len() {
                    n
                } else if taken == 0 {
                    0
                } else {
                    index[taken - 1] + 1
                };
                let torn = ring.overwritten(*next, consumed);
                let c = &self.link.counters;
                c.torn.fetch_add(torn, Ordering::Relaxed);
                c.frames.fetch_add(taken as u64, Ordering::Relaxed);
                c.frames_out.fetch_add(taken as u64, Ordering::Relaxed);
                let wire_bytes = taken * wire.wire_bytes(fs);
                c.bytes.fetch_add(wire_bytes as u64, Ordering::Relaxed);
                pacer.sent(taken, wire_bytes);
                *next += consumed;
                consumed
            }
            Err(e) => {
                self.lost(conn, e);
                0
            }
        }
    }

    /// Whether the threads= filter keeps this frame.
    fn wants(&self, frame: &[u8]) -> bool {
        let Some(threads) = &self.dest.transform.threads else {
            return true;
        };
        Header::parse_unchecked(frame).is_ok_and(|h| threads.contains(&h.thread_id()))
    }

    /// Frames shaped into the queue, then sent from it.
    #[allow(clippy::too_many_arguments)]
    fn send_shaped(
        &self,
        ring: &Ring,
        next: &mut u64,
        w: u64,
        shaping: &mut Transform,
        queue: &mut Queue,
        conn: &mut Connection,
        pacer: &mut Pacer,
    ) -> u64 {
        let c = &self.link.counters;
        let fs_out = shaping.out_frame_size();
        let mut consumed = 0;
        if queue.len() == 0 {
            queue.clear();
            let fs = ring.frame_size();
            let n = (w - *next).min((MAX_BATCH / shaping.fan_out()).max(1) as u64);
            // SAFETY: as in send_direct; shaped from a copy-free read, checked after.
            let bytes = unsafe { ring.frames(*next, n) };
            for f in bytes.chunks_exact(fs) {
                let thread = Header::parse_unchecked(f).map_or(u32::MAX, |h| h.thread_id());
                if shaping.wants(thread) && shaping.apply(f, &mut queue.bytes).is_err() {
                    c.refused.fetch_add(1, Ordering::Relaxed);
                }
            }
            let torn = ring.overwritten(*next, n);
            if torn > 0 {
                // Shaped from slots the capture took meanwhile: not sent at all.
                c.torn.fetch_add(torn, Ordering::Relaxed);
                c.skipped.fetch_add(n, Ordering::Relaxed);
                queue.clear();
            }
            *next += n;
            consumed = n;
        }
        let Some(wire) = &mut conn.wire else {
            return consumed;
        };
        if queue.len() == 0 {
            return consumed;
        }
        let most = pacer.batch(wire.wire_bytes(fs_out), MAX_BATCH);
        let start = queue.sent * fs_out;
        let frames: Vec<&[u8]> = queue.bytes[start..]
            .chunks_exact(fs_out)
            .take(most)
            .collect();
        pacer.wait(Duration::from_millis(20));
        match wire.send(&frames) {
            Ok(taken) => {
                let whole = queue.sent_more(taken);
                c.frames.fetch_add(whole, Ordering::Relaxed);
                c.frames_out.fetch_add(taken as u64, Ordering::Relaxed);
                let b = taken * wire.wire_bytes(fs_out);
                c.bytes.fetch_add(b as u64, Ordering::Relaxed);
                pacer.sent(taken, b);
                consumed + taken as u64
            }
            Err(e) => {
                // The shaped frames not yet sent are lost with the connection.
                c.skipped
                    .fetch_add(queue.unsent_inputs(), Ordering::Relaxed);
                queue.clear();
                self.lost(conn, e);
                consumed
            }
        }
    }

    /// A send failed: the destination has gone away (retried later) or the error is one a
    /// retry cannot mend (reported, retried all the same: the recording goes on).
    fn lost(&self, conn: &mut Connection, e: std::io::Error) {
        if let Some(w) = conn.wire.take() {
            conn.psn = w.next_psn();
        }
        if e.raw_os_error() == Some(libc::EMSGSIZE) {
            // Not a destination that went away: the frames do not fit its datagrams, and never
            // will; sending again would only fail again.
            self.link.set_state(
                LinkState::Refused,
                Some(format!(
                    "the frames do not fit a datagram on this path ({e}): give payload= to \
                     re-frame them smaller"
                )),
            );
            return;
        }
        let why = if is_gone(&e) {
            format!("the destination went away: {e}")
        } else {
            format!("send failed: {e}")
        };
        self.went_away(conn, why);
    }
}

/// Where a destination's packet sequence starts: somewhere below 2^31 that differs from one
/// connection to the next, as jive5ab starts its `udps` sequence, so that a receiver never
/// takes a new sender for the old one resumed. Kept across reconnections of one destination.
fn first_psn() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ (t.as_secs() << 20)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33
}

/// The rate on the wire over about the last second, published for the status.
struct RateMeter {
    since: Instant,
    bytes: u64,
}

impl RateMeter {
    fn new() -> RateMeter {
        RateMeter {
            since: Instant::now(),
            bytes: 0,
        }
    }

    fn update(&mut self, link: &Link) {
        let dt = self.since.elapsed().as_secs_f64();
        if dt < 1.0 {
            return;
        }
        let b = link.counters.bytes.load(Ordering::Relaxed);
        let gbps = (b - self.bytes) as f64 * 8.0 / dt / 1e9;
        link.counters.gbps.store(gbps.to_bits(), Ordering::Relaxed);
        self.bytes = b;
        self.since = Instant::now();
        self.cpu(link);
    }

    /// The thread's CPU time so far (called on the thread itself).
    fn cpu(&self, link: &Link) {
        let s = crate::affinity::thread_cpu_seconds();
        link.counters
            .cpu_ns
            .store((s * 1e9) as u64, Ordering::Relaxed);
    }
}
