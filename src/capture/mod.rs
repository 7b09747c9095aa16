//! The capture thread: datagrams in, frames into the ring, everything counted.
//!
//! Backends (one file each) only move datagrams into buffers this loop chooses: straight into
//! ring slots when there is room, into a scratch area when the ring is full (the frames are
//! then counted as ring overflows), into a large scratch buffer while the frame size is still
//! unknown. Classification, compaction, accounting and publishing are the same for all.

pub mod afpacket;
pub mod packet;
pub mod pfring;
pub mod udp;

use crate::accounting::{Accounting, Fate, GapPolicy};
use crate::classify::{learn_datagram, Malformed, StreamFormat};
use crate::recorder::Shared;
use crate::ring::{Ring, RingMemory};
use crate::stats::{CaptureStats, FrameTime, RecordRow};
use std::sync::atomic::Ordering;
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
}

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

    /// IP fragments to our port seen so far (backends that see whole packets cannot
    /// reassemble them; the udp backend never sees them).
    fn fragments(&self) -> u64 {
        0
    }
}

/// Everything the capture loop needs besides its backend.
pub struct CaptureSetup {
    pub shared: Arc<Shared>,
    pub memory: RingMemory,
    pub frame_size: Option<usize>,
    pub offset: usize,
    pub psn: bool,
    pub fps: Option<u32>,
    pub max_frames: Option<u64>,
    pub try_mlock: bool,
    pub has_writer: bool,
    /// CPU to pin the capture thread to.
    pub cpu: Option<usize>,
    /// The sender writes headers big-endian (each 32-bit word byte-swapped).
    pub big_endian: bool,
}

struct Counters {
    stats: CaptureStats,
    psn_last: Option<u64>,
    last_datagram: Option<Instant>,
    malformed_at_last_row: u64,
    drops_at_last_row: u64,
}

/// Runs the capture until the stop flag is set (or `max_frames` are buffered).
pub fn run(mut backend: Box<dyn Backend>, setup: CaptureSetup) {
    let shared = setup.shared.clone();
    let mut pin_note = None;
    if let Some(cpu) = setup.cpu {
        pin_note = Some(crate::affinity::pin_current("capture", cpu));
    }
    let ring_options = RingOptions {
        try_mlock: setup.try_mlock,
        has_writer: setup.has_writer,
    };
    let mut memory = Some(setup.memory);
    // CPU spent setting up (faulting in the ring) is not per-frame work: keep it apart.
    let mut setup_cpu = 0.0;
    let cpu0 = crate::affinity::thread_cpu_seconds();
    let mut ring: Option<Arc<Ring>> = None;
    let mut format: Option<StreamFormat> = None;
    if let Some(fs) = setup.frame_size {
        match install_ring(&shared, memory.take().expect("memory"), fs, ring_options) {
            Ok(r) => ring = Some(r),
            Err(e) => {
                shared.fail(e);
                shared.capture_ready.wait_set(false);
                return;
            }
        }
    } else if let Some(m) = memory.as_ref() {
        // Fault the memory in now, from this thread, so the first second is not lost to it.
        // The pages stay allocated in the memfd for the ring mapping made once the frame size
        // is known; that mapping then only has to fill in page tables.
        m.prefault();
    }
    if let Some(n) = pin_note {
        shared.note(n);
    }
    setup_cpu += crate::affinity::thread_cpu_seconds() - cpu0;
    shared.capture_ready.wait_set(true);

    let mut acc = Accounting::new(setup.fps, GapPolicy::WallClock);
    let mut c = Counters {
        stats: CaptureStats::default(),
        psn_last: None,
        last_datagram: None,
        malformed_at_last_row: 0,
        drops_at_last_row: 0,
    };
    let mut infos = [DatagramInfo::default(); BATCH];
    let mut learn_buf = vec![0u8; MAX_DATAGRAM];
    let mut scratch: Vec<u8> = Vec::new();
    let mut seq: u64 = 0;
    let mut last_publish = Instant::now();
    let offset = setup.offset;
    let psn_on = setup.psn;
    let setup_frame_size = setup.frame_size;
    let big_endian = setup.big_endian;
    let max_frames = setup.max_frames;

    loop {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        if max_frames.is_some_and(|m| seq >= m) {
            break;
        }
        let now = Instant::now();
        acc.set_wall_clock(unix_now());
        if now.duration_since(last_publish) >= PUBLISH_EVERY {
            read_backend_counters(&mut c, backend.as_mut());
            c.stats.capture_setup_cpu_s = setup_cpu;
            publish(&shared, &mut c, &acc, now, ring.as_deref());
            last_publish = now;
        }

        // Where the next datagrams go.
        let (dst, stride, max, into_ring) = match (&ring, &format) {
            (Some(r), Some(f)) => {
                let want = max_frames.map_or(BATCH as u64, |m| (m - seq).min(BATCH as u64));
                let k = r.reserve(seq, seq + want) as usize;
                if k > 0 {
                    (r.slot_ptr(seq), f.frame_size, k, true)
                } else {
                    if scratch.len() < BATCH * f.frame_size {
                        scratch.resize(BATCH * f.frame_size, 0);
                    }
                    (scratch.as_mut_ptr(), f.frame_size, want as usize, false)
                }
            }
            _ => (learn_buf.as_mut_ptr(), MAX_DATAGRAM, 1, false),
        };
        // SAFETY: dst is valid for max * stride bytes: reserved ring slots (contiguous through
        // the mirror), or one of our own scratch buffers sized for it.
        let n = match unsafe { backend.receive(dst, stride, max, &mut infos[..max]) } {
            Ok(n) => n,
            Err(e) => {
                c.stats.socket_errors += 1;
                c.stats.last_socket_error = Some(e.to_string());
                std::thread::sleep(Duration::from_millis(1));
                0
            }
        };
        if n == 0 {
            continue;
        }
        c.last_datagram = Some(Instant::now());
        c.stats.datagrams += n as u64;

        if format.is_none() {
            // Learning the frame size from the first valid datagram.
            let info = infos[0];
            count_psn(&mut c, psn_on, &info);
            c.stats.bytes_received += info.len as u64;
            let frame_len = info.len.saturating_sub(offset).min(MAX_DATAGRAM);
            let learned = learn_datagram(
                info.len,
                info.truncated,
                offset,
                &learn_buf[..frame_len],
                big_endian,
                setup_frame_size,
            );
            let (f, h) = match learned {
                Ok(v) => v,
                Err(kind) => {
                    c.stats.malformed.add(kind);
                    continue;
                }
            };
            if ring.is_none() {
                let before = crate::affinity::thread_cpu_seconds();
                match install_ring(
                    &shared,
                    memory.take().expect("memory"),
                    f.frame_size,
                    ring_options,
                ) {
                    Ok(r) => ring = Some(r),
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                }
                setup_cpu += crate::affinity::thread_cpu_seconds() - before;
            }
            format = Some(f);
            let r = ring.as_ref().expect("installed");
            // The one copy of the capture's life: the learning datagram into slot 0.
            // SAFETY: slot 0 is free (nothing published yet) and frame_len == frame_size.
            unsafe {
                std::ptr::copy_nonoverlapping(learn_buf.as_ptr(), r.slot_ptr(0), frame_len);
            }
            acc.frame(&h, Fate::Buffered);
            note_frame_time(&mut c, &h);
            seq = 1;
            c.stats.frames_received = 1;
            r.publish(seq);
            continue;
        }

        let f = format.expect("format known");
        let fs = f.frame_size;
        let mut accepted = 0usize;
        for (i, info) in infos[..n].iter().enumerate() {
            count_psn(&mut c, psn_on, info);
            c.stats.bytes_received += info.len as u64;
            // SAFETY: datagram i was written at dst + i * fs, at most fs bytes.
            let frame = unsafe { std::slice::from_raw_parts(dst.add(i * fs), fs) };
            let header = f.classify_datagram(info.len, info.truncated, offset, frame, big_endian);
            let h = match header {
                Ok(h) => h,
                Err(k) => {
                    c.stats.malformed.add(k);
                    continue;
                }
            };
            note_frame_time(&mut c, &h);
            if into_ring {
                if i != accepted {
                    // Close the hole a malformed datagram left (rare: only after bad input).
                    // SAFETY: both slots are inside this batch's reservation.
                    unsafe { std::ptr::copy(dst.add(i * fs), dst.add(accepted * fs), fs) };
                }
                acc.frame(&h, Fate::Buffered);
                accepted += 1;
            } else {
                acc.frame(&h, Fate::RingOverflow);
                c.stats.ring_overflows += 1;
            }
        }
        if accepted > 0 {
            seq += accepted as u64;
            c.stats.frames_received = seq;
            ring.as_ref().expect("ring").publish(seq);
        }
        emit_rows(&shared, &mut c, &mut acc, ring.as_deref());
    }

    // Stopping: publish the last frames and count the last (partial) seconds.
    acc.finish();
    read_backend_counters(&mut c, backend.as_mut());
    c.stats.capture_setup_cpu_s = setup_cpu;
    emit_rows(&shared, &mut c, &mut acc, ring.as_deref());
    publish(&shared, &mut c, &acc, Instant::now(), ring.as_deref());
    shared.set_thread_totals(acc.thread_totals(), acc.gaps().0.to_vec());
    if ring.is_none() {
        // Nothing ever arrived: the writer must not wait for a ring.
        shared.no_ring.store(true, Ordering::Release);
    }
    shared.capture_done.store(true, Ordering::Release);
}

/// POSIX time now, in seconds (the arrival times in per-second rows).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How the ring is to be laid out once the frame size is known.
#[derive(Clone, Copy)]
struct RingOptions {
    try_mlock: bool,
    has_writer: bool,
}

fn install_ring(
    shared: &Arc<Shared>,
    memory: RingMemory,
    frame_size: usize,
    setup: RingOptions,
) -> Result<Arc<Ring>, String> {
    let huge_note = memory.huge_page_note.clone();
    // Mapping with MAP_POPULATE from this thread allocates (or maps) every page here.
    let (ring, lock_note) =
        Ring::new(memory, frame_size, setup.try_mlock).map_err(|e| e.to_string())?;
    if !setup.has_writer {
        ring.set_no_consumer();
    }
    let ring = Arc::new(ring);
    shared.note(format!(
        "ring: {} in {} slots of {} bytes; {}; {}",
        crate::units::format_size(ring.bytes() as u64),
        ring.nslots(),
        frame_size,
        if huge_note.is_empty() {
            "huge pages: yes"
        } else {
            &huge_note
        },
        lock_note
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
    c.stats.frame_size = ring.map_or(0, |r| r.frame_size());
    c.stats.seconds_since_datagram = c.last_datagram.map(|t| now.duration_since(t).as_secs_f64());
    shared.publish_capture(&c.stats);
}

fn emit_rows(shared: &Shared, c: &mut Counters, acc: &mut Accounting, ring: Option<&Ring>) {
    let rows = acc.take_rows();
    if rows.is_empty() {
        return;
    }
    let frame_size = ring.map_or(0, |r| r.frame_size()) as u64;
    let written = shared.bytes_written.load(Ordering::Acquire);
    let malformed = c.stats.malformed.total();
    let drops = c.stats.kernel_drops;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(RecordRow {
            second: row,
            total_frames: c.stats.frames_received,
            bytes_buffered: c.stats.frames_received * frame_size,
            bytes_written: written,
            malformed: malformed - c.malformed_at_last_row,
            kernel_drops: drops.saturating_sub(c.drops_at_last_row),
        });
        c.malformed_at_last_row = malformed;
        c.drops_at_last_row = drops;
    }
    shared.push_rows(out);
}
