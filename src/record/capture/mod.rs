//! The capture thread: datagrams in, frames into the ring, everything counted.
//!
//! Backends (one file each) only move datagrams into buffers this loop chooses: straight into
//! ring slots when there is room, into a scratch area when the ring is full (the frames are
//! then counted as ring overflows), into a large scratch buffer while the frame size is still
//! unknown. Classification, compaction, accounting and publishing are the same for all.
//! `open` opens the backend a recorder's configuration names.

pub mod afpacket;
pub mod open;
pub mod packet;
pub mod pfring;
pub mod udp;

use crate::record::accounting::{Accounting, Fate, GapPolicy};
use crate::record::classify::{learn_datagram, Malformed, StreamFormat};
use crate::record::latency;
use crate::record::ring::{Ring, RingError, RingMemory};
use crate::record::shared::Shared;
use crate::record::stats::{CaptureStats, FrameTime, RecordRow};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Datagrams received per call at most.
pub const BATCH: usize = 64;
/// Largest UDP datagram.
pub const MAX_DATAGRAM: usize = 65_536;
/// How often the capture publishes its counters.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// What a backend reports about one received datagram.
#[derive(Clone, Copy, Debug, Default)]
pub struct DatagramInfo {
    /// Whole datagram length in bytes, offset included (as far as the backend knows it).
    pub len: usize,
    /// The datagram was longer than the buffer it was given (MSG_TRUNC).
    pub truncated: bool,
    /// Leading `offset` bytes as a little-endian number (the PSN), when offset is 8.
    pub psn: Option<u64>,
    /// Who sent it, when the backend was asked to tell (`sender_key`; 0: not known).
    pub sender: u64,
    /// The kernel's (or the NIC ring's) receive stamp, ns since the epoch; 0: none (latency
    /// stamps off, or the backend has none).
    pub kernel_ns: i64,
}

/// A sender's address as one number (IPv4 address and port; a hash for IPv6), 0 for none.
pub fn sender_key(addr: &std::net::SocketAddr) -> u64 {
    match addr {
        std::net::SocketAddr::V4(a) => {
            (1 << 48) | (u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port())
        }
        std::net::SocketAddr::V6(a) => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            a.hash(&mut h);
            h.finish() | 1
        }
    }
}

/// A receive failure the backend cannot recover from (PF_RING's `pfring_recv` failing, say):
/// returned inside an `io::Error`, it stops the recording with its message. Any other receive
/// error is counted as a socket error and the capture carries on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FatalReceive(pub String);

/// A source of datagrams.
pub trait Backend: Send {
    /// Receives up to `max` datagrams. Datagram `i` goes to `dst + i * stride` after its first
    /// `offset` bytes are stripped; at most `stride` bytes of it are kept. Waits at most about
    /// 50 ms for the first datagram, then takes only what has already arrived. Returns the
    /// number received (0 on timeout).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `max * stride` bytes.
    unsafe fn receive(
        &mut self,
        dst: *mut u8,
        stride: usize,
        max: usize,
        info: &mut [DatagramInfo],
    ) -> std::io::Result<usize>;

    /// Datagrams the kernel dropped for lack of buffer space, since the start.
    fn kernel_drops(&mut self) -> u64;

    /// Waits at most `timeout` for a datagram to be there to receive; whether one is (true
    /// where the backend cannot tell: `receive` then waits itself).
    fn wait_readable(&mut self, _timeout: Duration) -> bool {
        true
    }

    /// IP fragments to our port seen so far (backends that see whole packets cannot
    /// reassemble them; the udp backend never sees them).
    fn fragments(&self) -> u64 {
        0
    }
}

/// Everything the capture loop needs besides its backend.
pub struct CaptureSetup {
    pub shared: Arc<Shared>,
    /// The ring's memory while the frame size is unknown (None: the ring is laid out already).
    pub memory: Option<RingMemory>,
    pub frame_size: Option<usize>,
    pub offset: usize,
    pub psn: bool,
    pub fps: Option<u32>,
    /// The stream's port, as its per-second rows name it.
    pub stream: u16,
    pub has_writer: bool,
    /// CPU to pin the capture thread to.
    pub cpu: Option<usize>,
    /// The sender writes headers big-endian (each 32-bit word byte-swapped).
    pub big_endian: bool,
    /// Tag each frame with its sender's index (scans split by sender).
    pub tag_senders: bool,
}

struct Counters {
    stats: CaptureStats,
    psn_last: Option<u64>,
    last_datagram: Option<Instant>,
    malformed_at_last_row: u64,
    drops_at_last_row: u64,
}

/// Where the next datagrams go.
struct Batch {
    dst: *mut u8,
    stride: usize,
    max: usize,
    /// Into reserved ring slots (else a scratch buffer: the ring is full or the frame size
    /// still unknown).
    into_ring: bool,
    /// Frames of the recording's limit taken for this batch (what is not buffered goes back).
    granted: u64,
}

/// The capture loop's state: set up before the first datagram, nothing allocated after.
struct Capture {
    shared: Arc<Shared>,
    backend: Box<dyn Backend>,
    setup: CaptureSetup,
    ring: Option<Arc<Ring>>,
    format: Option<StreamFormat>,
    acc: Accounting,
    c: Counters,
    infos: [DatagramInfo; BATCH],
    learn_buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Frames accepted so far: the next frame's sequence number in the ring.
    seq: u64,
    /// Senders seen by this capture: (key, index), so the shared list is asked once each.
    senders: Vec<(u64, u16)>,
    last_publish: Instant,
    /// Latency stamps on: when the last receive call returned (ns since the epoch), and the
    /// sampled frames of the batch waiting for their publish stamp: (seq, kernel, VDIF time).
    stamps_on: bool,
    returned_ns: i64,
    sampled: Vec<(u64, i64, Option<i64>)>,
}

/// Runs the capture until the stop flag is set (or the recording's frame limit is reached).
pub fn run(backend: Box<dyn Backend>, setup: CaptureSetup) {
    let shared = setup.shared.clone();
    if let Some(cpu) = setup.cpu {
        shared.note(crate::affinity::pin_current("capture", cpu));
    }
    let mut cap = Capture::new(backend, setup);
    shared.set_capture_ready(true);
    let mut idle = false;
    while cap.keeps_going() {
        cap.publish_now_and_then();
        // A stream with nothing to receive waits here, holding none of the frame limit, so
        // another stream with frames waiting can take the rest of it.
        if idle && !cap.backend.wait_readable(Duration::from_millis(50)) {
            continue;
        }
        let batch = cap.place_batch();
        if batch.max == 0 {
            // Another stream holds the last frames of the limit for now.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let n = cap.receive(&batch);
        idle = n == 0;
        let accepted = if n == 0 {
            0
        } else if cap.format.is_none() {
            cap.learn_first_frame()
        } else {
            cap.take_batch(&batch, n)
        };
        cap.shared.settle_frames(batch.granted, accepted);
    }
    cap.finish();
}

impl Capture {
    fn new(backend: Box<dyn Backend>, setup: CaptureSetup) -> Capture {
        // The scratch buffer for a full ring is sized now, not at the first overflow.
        let scratch = vec![0u8; BATCH * setup.frame_size.unwrap_or(0)];
        Capture {
            shared: setup.shared.clone(),
            backend,
            ring: setup.shared.ring(),
            format: None,
            acc: Accounting::new(setup.fps, GapPolicy::WallClock),
            c: Counters {
                // CPU spent before the loop (pinning) is not per-frame work: keep it apart.
                stats: CaptureStats {
                    capture_setup_cpu_s: crate::affinity::thread_cpu_seconds(),
                    ..CaptureStats::default()
                },
                psn_last: None,
                last_datagram: None,
                malformed_at_last_row: 0,
                drops_at_last_row: 0,
            },
            infos: [DatagramInfo::default(); BATCH],
            learn_buf: vec![0u8; MAX_DATAGRAM],
            scratch,
            seq: 0,
            senders: Vec::new(),
            last_publish: Instant::now(),
            stamps_on: setup.shared.latency().is_some(),
            returned_ns: 0,
            sampled: Vec::with_capacity(BATCH / latency::SAMPLE_EVERY as usize + 2),
            setup,
        }
    }

    fn keeps_going(&self) -> bool {
        !self.shared.stop_requested() && self.shared.frames_left()
    }

    fn publish_now_and_then(&mut self) {
        let now = Instant::now();
        self.acc.set_wall_clock(unix_now());
        if now.duration_since(self.last_publish) >= PUBLISH_EVERY {
            read_backend_counters(&mut self.c, self.backend.as_mut());
            publish(
                &self.shared,
                &mut self.c,
                &self.acc,
                now,
                self.ring.as_deref(),
            );
            self.last_publish = now;
        }
    }

    /// Reserved ring slots when there is room, the scratch buffer when the ring is full
    /// (those frames are counted as ring overflows), one large buffer while the frame size
    /// is unknown.
    fn place_batch(&mut self) -> Batch {
        let (Some(r), Some(f)) = (&self.ring, &self.format) else {
            let granted = self.shared.grant_frames(1);
            return Batch {
                dst: self.learn_buf.as_mut_ptr(),
                stride: MAX_DATAGRAM,
                max: granted as usize,
                into_ring: false,
                granted,
            };
        };
        // The recording's frame limit (all streams together) is taken batch by batch.
        let want = self.shared.grant_frames(BATCH as u64);
        let k = r.reserve(self.seq, self.seq + want) as usize;
        if k > 0 {
            return Batch {
                dst: r.slot_ptr(self.seq),
                stride: f.frame_size,
                max: k,
                into_ring: true,
                granted: want,
            };
        }
        // The scratch buffer holds a batch: sized at set-up, or when the frame size was learned.
        Batch {
            dst: self.scratch.as_mut_ptr(),
            stride: f.frame_size,
            max: want as usize,
            into_ring: false,
            granted: want,
        }
    }

    /// Receives into the batch's buffers; a socket error is counted, never fatal.
    fn receive(&mut self, b: &Batch) -> usize {
        // SAFETY: dst is valid for max * stride bytes: reserved ring slots (contiguous through
        // the mirror), or one of our own scratch buffers sized for it.
        let n = match unsafe {
            self.backend
                .receive(b.dst, b.stride, b.max, &mut self.infos[..b.max])
        } {
            Ok(n) => n,
            Err(e) if e.get_ref().is_some_and(|r| r.is::<FatalReceive>()) => {
                self.shared.fail(format!("the capture stopped: {e}"));
                0
            }
            Err(e) => {
                self.c.stats.socket_errors += 1;
                self.c.stats.last_socket_error = Some(e.to_string());
                std::thread::sleep(Duration::from_millis(1));
                0
            }
        };
        if n > 0 {
            self.c.last_datagram = Some(Instant::now());
            self.c.stats.datagrams += n as u64;
            if self.stamps_on {
                self.returned_ns = latency::now_ns();
            }
        }
        n
    }

    /// Latency stamps: the sampled frames about to be published.
    fn stamp_published(&mut self) {
        if self.sampled.is_empty() {
            return;
        }
        let published = latency::now_ns();
        if let Some(l) = self.shared.latency() {
            for (seq, kernel, vdif) in self.sampled.drain(..) {
                l.received(seq, kernel, self.returned_ns, published, vdif);
            }
        }
    }

    /// The first valid datagram tells the frame size: the ring is laid out (if it was not
    /// already) and the frame copied into slot 0, the one copy of the capture's life.
    fn learn_first_frame(&mut self) -> u64 {
        let info = self.infos[0];
        self.c.stats.bytes_received += info.len as u64;
        let offset = self.setup.offset;
        let frame_len = info.len.saturating_sub(offset).min(MAX_DATAGRAM);
        let learned = learn_datagram(
            info.len,
            info.truncated,
            offset,
            &self.learn_buf[..frame_len],
            self.setup.big_endian,
            self.setup.frame_size,
        );
        let (f, h) = match learned {
            Ok(v) => v,
            Err(kind) => {
                self.c.stats.malformed.add(kind);
                return 0;
            }
        };
        // Only frames of the stream count in its packet sequence: a stray datagram's first
        // eight bytes are no sequence number.
        count_psn(&mut self.c, self.setup.psn, &info);
        if self.ring.is_none() {
            let memory = self
                .setup
                .memory
                .take()
                .expect("memory until the ring is laid out");
            match install_ring(&self.shared, memory, f.frame_size, self.setup.has_writer) {
                Ok(r) => self.ring = Some(r),
                Err(e) => {
                    self.shared.fail(e.to_string());
                    return 0;
                }
            }
        }
        self.scratch.resize(BATCH * f.frame_size, 0);
        self.format = Some(f);
        let r = self.ring.clone().expect("installed");
        // SAFETY: slot 0 is free (nothing published yet) and frame_len == frame_size.
        unsafe {
            std::ptr::copy_nonoverlapping(self.learn_buf.as_ptr(), r.slot_ptr(0), frame_len);
        }
        self.acc.frame(&h, Fate::Buffered);
        note_frame_time(&mut self.c, &h);
        if self.setup.tag_senders {
            r.set_tag(0, sender_tag(&mut self.senders, &self.shared, info.sender));
        }
        if self.stamps_on {
            let fps = self.acc.frames_per_second_known();
            sample(&mut self.sampled, fps, 0, &info, &h);
        }
        self.seq = 1;
        self.c.stats.frames_received = 1;
        self.stamp_published();
        r.publish(self.seq);
        1
    }

    /// Classifies and counts a received batch, closes the holes malformed datagrams left, and
    /// publishes the accepted frames.
    fn take_batch(&mut self, b: &Batch, n: usize) -> u64 {
        let f = self.format.expect("format known");
        let fs = f.frame_size;
        let mut accepted = 0usize;
        for (i, info) in self.infos[..n].iter().enumerate() {
            self.c.stats.bytes_received += info.len as u64;
            // SAFETY: datagram i was written at dst + i * fs, at most fs bytes.
            let frame = unsafe { std::slice::from_raw_parts(b.dst.add(i * fs), fs) };
            let header = f.classify_datagram(
                info.len,
                info.truncated,
                self.setup.offset,
                frame,
                self.setup.big_endian,
            );
            let h = match header {
                Ok(h) => h,
                Err(k) => {
                    self.c.stats.malformed.add(k);
                    continue;
                }
            };
            count_psn(&mut self.c, self.setup.psn, info);
            note_frame_time(&mut self.c, &h);
            if b.into_ring {
                if i != accepted {
                    // Close the hole a malformed datagram left (rare: only after bad input).
                    // SAFETY: both slots are inside this batch's reservation.
                    unsafe { std::ptr::copy(b.dst.add(i * fs), b.dst.add(accepted * fs), fs) };
                }
                self.acc.frame(&h, Fate::Buffered);
                if self.stamps_on {
                    let fps = self.acc.frames_per_second_known();
                    sample(&mut self.sampled, fps, self.seq + accepted as u64, info, &h);
                }
                if self.setup.tag_senders {
                    let tag = sender_tag(&mut self.senders, &self.shared, info.sender);
                    self.ring
                        .as_ref()
                        .expect("ring")
                        .set_tag(self.seq + accepted as u64, tag);
                }
                accepted += 1;
            } else {
                self.acc.frame(&h, Fate::RingOverflow);
                self.c.stats.ring_overflows += 1;
            }
        }
        if accepted > 0 {
            self.seq += accepted as u64;
            self.c.stats.frames_received = self.seq;
            // Stamped just before publishing: the writer may take the frames the moment they
            // are published, and must find their stamps (publish's Release store orders them).
            self.stamp_published();
            self.ring.as_ref().expect("ring").publish(self.seq);
        }
        emit_rows(
            &self.shared,
            self.setup.stream,
            &mut self.c,
            &mut self.acc,
            self.ring.as_deref(),
        );
        accepted as u64
    }

    /// Stopping: publish the last frames and count the last (partial) seconds.
    fn finish(mut self) {
        self.acc.finish();
        if let Some(r) = &self.ring {
            // Nothing more will be written: views count exactly the frames rewritten.
            r.settle(self.seq);
        }
        read_backend_counters(&mut self.c, self.backend.as_mut());
        emit_rows(
            &self.shared,
            self.setup.stream,
            &mut self.c,
            &mut self.acc,
            self.ring.as_deref(),
        );
        publish(
            &self.shared,
            &mut self.c,
            &self.acc,
            Instant::now(),
            self.ring.as_deref(),
        );
        self.shared
            .set_thread_totals(self.acc.thread_totals(), self.acc.gaps().0.to_vec());
        self.shared.set_capture_done();
    }
}

/// The index of a datagram's sender (first arrival order over all streams), asking the shared
/// list only for a sender this capture has not seen.
fn sender_tag(seen: &mut Vec<(u64, u16)>, shared: &Shared, key: u64) -> u16 {
    if let Some(&(_, i)) = seen.iter().find(|(k, _)| *k == key) {
        return i;
    }
    let i = shared.sender_index(key);
    seen.push((key, i));
    i
}

/// Latency stamps: notes frame `seq` if it is one of the sampled (stamped once published).
#[inline]
fn sample(
    sampled: &mut Vec<(u64, i64, Option<i64>)>,
    fps: Option<u32>,
    seq: u64,
    info: &DatagramInfo,
    h: &crate::vdif::Header,
) {
    if seq % latency::SAMPLE_EVERY != 0 {
        return;
    }
    // A frame's VDIF time needs the frame rate for sure (a running estimate would put frames
    // up to a second early): until it is known, the `off` stage is not stamped.
    let vdif = fps.filter(|f| *f > 0).map(|fps| {
        crate::vdif::time::utc_unix(h.ref_epoch(), h.seconds()) * 1_000_000_000
            + i64::from(h.frame_nr()) * 1_000_000_000 / i64::from(fps)
    });
    sampled.push((seq, info.kernel_ns, vdif));
}

/// POSIX time now, in seconds (the arrival times in per-second rows).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Lays the ring's memory out in slots of `frame_size` and hands the ring to the other
/// threads. No page is touched: the memory was allocated and mapped at start.
pub fn install_ring(
    shared: &Shared,
    memory: RingMemory,
    frame_size: usize,
    has_writer: bool,
) -> Result<Arc<Ring>, RingError> {
    let note = memory.note().to_string();
    let ring = Ring::new(memory, frame_size)?;
    if !has_writer {
        ring.set_no_consumer();
    }
    let ring = Arc::new(ring);
    if let Some(l) = shared.latency() {
        l.size_for(ring.nslots());
    }
    shared.note(format!(
        "ring: {} in {} slots of {} bytes; {}",
        crate::units::format_size(ring.bytes() as u64),
        ring.nslots(),
        frame_size,
        note
    ));
    shared.set_ring(ring.clone());
    Ok(ring)
}

/// The counts only the backend knows: kernel drops, and IP fragments (raw backends).
fn read_backend_counters(c: &mut Counters, backend: &mut dyn Backend) {
    c.stats.kernel_drops = backend.kernel_drops();
    c.stats
        .malformed
        .set(Malformed::Fragmented, backend.fragments());
}

fn count_psn(c: &mut Counters, psn_on: bool, info: &DatagramInfo) {
    if !psn_on {
        return;
    }
    let Some(psn) = info.psn else {
        return;
    };
    match c.psn_last {
        Some(last) if psn > last + 1 => {
            c.stats.psn_lost += psn - last - 1;
            c.psn_last = Some(psn);
        }
        Some(last) if psn <= last => c.stats.psn_out_of_order += 1,
        _ => c.psn_last = Some(psn),
    }
}

fn note_frame_time(c: &mut Counters, h: &crate::vdif::Header) {
    c.stats.latest_frame = Some(FrameTime {
        ref_epoch: h.ref_epoch(),
        seconds: h.seconds(),
        frame_nr: h.frame_nr(),
        thread_id: h.thread_id(),
    });
}

fn publish(shared: &Shared, c: &mut Counters, acc: &Accounting, now: Instant, ring: Option<&Ring>) {
    c.stats.capture_cpu_s = crate::affinity::thread_cpu_seconds() - c.stats.capture_setup_cpu_s;
    c.stats.totals = acc.totals();
    c.stats.frames_per_second = acc.frames_per_second();
    c.stats.frames_per_second_known = acc.frames_per_second_known().is_some();
    c.stats.frame_size = ring.map_or(0, |r| r.frame_size());
    c.stats.seconds_since_datagram = c.last_datagram.map(|t| now.duration_since(t).as_secs_f64());
    shared.publish_capture(&c.stats);
}

fn emit_rows(
    shared: &Shared,
    stream: u16,
    c: &mut Counters,
    acc: &mut Accounting,
    ring: Option<&Ring>,
) {
    let rows = acc.take_rows();
    if rows.is_empty() {
        return;
    }
    let frame_size = ring.map_or(0, |r| r.frame_size()) as u64;
    let written = shared.bytes_written();
    let malformed = c.stats.malformed.total();
    let drops = c.stats.kernel_drops;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(RecordRow {
            stream,
            second: row,
            total_frames: c.stats.frames_received,
            bytes_buffered: c.stats.frames_received * frame_size,
            bytes_written: written,
            malformed: malformed - c.malformed_at_last_row,
            kernel_drops: drops.saturating_sub(c.drops_at_last_row),
            forward: Vec::new(),
        });
        c.malformed_at_last_row = malformed;
        c.drops_at_last_row = drops;
    }
    shared.push_rows(out);
}
