//! The ring: one page-aligned buffer of fixed-stride frame slots between the capture and its
//! consumers (the disk writer, Python views).
//!
//! The memory is a memfd mapped twice, back to back, so that any run of up to `nslots` frames
//! is one contiguous range of addresses even where it wraps past the end: the writer can hand
//! it to the kernel in one write, and a Python view across the wrap is still one NumPy array.
//! 8224-byte frames are 32 × 257 bytes, so a run of 128 frames starting at a slot index that
//! is a multiple of 128 is 4 KiB-aligned and can be written with O_DIRECT straight from here.
//!
//! Sequence numbers count accepted frames from 0 and never wrap; frame `seq` lives in slot
//! `seq % nslots`. The capture publishes `write_seq`; the writer advances `read_seq`; a held
//! view pins the oldest frame it shows. The capture never writes frame `seq` unless
//! `seq < min(read_seq, oldest pin) + nslots`: a full ring drops the new frame, never an old one.
//!
//! A view that yields (the default for Python views and the live monitor) pins nothing: the
//! recording comes first, and the capture may take its slots. A slot's generation is its lap of
//! the ring (`seq / nslots`); since the capture takes slots strictly in sequence order, the
//! frames of a view that have been overwritten (or are being written) are exactly those whose
//! next generation the capture has reserved: `reserved_seq - nslots - first` of them, counted
//! in O(1) from one atomic the capture already keeps.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use thiserror::Error;

/// Most views that may pin frames at once.
pub const MAX_PINS: usize = 64;
const FREE: u64 = u64::MAX;

#[derive(Debug, Error)]
pub enum RingError {
    #[error("ring of {asked} bytes is smaller than one aligned run of {run} bytes ({frames} frames of {frame_size} bytes): give a ring of at least {run} bytes")]
    TooSmall {
        asked: u64,
        run: u64,
        frames: u64,
        frame_size: usize,
    },
    #[error(
        "cannot allocate the {bytes}-byte ring: {source} (free memory, or give a smaller ring)"
    )]
    Alloc { bytes: u64, source: std::io::Error },
    #[error("cannot map the ring: {0}")]
    Map(std::io::Error),
    #[error("too many live views ({MAX_PINS}) pin the ring: release some (use `with rec.view(n)`, or `del` old views)")]
    TooManyPins,
    #[error("frames {first}..{end} are not in the ring: it holds frames {oldest}..{newest}")]
    NotInRing {
        first: u64,
        end: u64,
        oldest: u64,
        newest: u64,
    },
    #[error("the ring holds only {slots} frames; a view of {asked} frames cannot fit")]
    ViewTooLarge { asked: u64, slots: u64 },
    #[error("n: a view of {asked} frames is more than half the ring ({half} of its {slots} frames): the capture would have too little room while it is held; view at most {half} frames (a fraction of a second), or give a larger ring")]
    ViewOverHalf { asked: u64, half: u64, slots: u64 },
}

/// Frames per aligned run: the smallest count whose byte length is a multiple of 4096.
pub fn frames_per_run(frame_size: usize) -> u64 {
    let g = gcd(frame_size as u64, 4096);
    4096 / g
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Memory for a ring, allocated, mapped and locked when the recording starts, before its
/// frame size is known: a memfd (of huge pages where reserved), every page allocated now
/// (`fallocate`, so a machine short of memory says so here rather than killing the process
/// with SIGBUS at the first frame), mapped once with its page tables filled, inside an address
/// range twice its size that the ring's mirror will use. Laying out the slots later costs
/// one `mmap` call and no page faults in the capture thread.
pub struct RingMemory {
    file: File,
    /// Bytes of the memfd (one half of the reserved range).
    bytes: u64,
    huge_pages: bool,
    /// Start of the reserved range of `2 * bytes`; the first `bytes` are mapped.
    base: *mut u8,
    locked: bool,
    /// What happened about huge pages and locking, for the operator.
    note: String,
}

// SAFETY: the mapping is plain shared memory owned by this value; nothing else refers to it
// until a Ring takes it over.
unsafe impl Send for RingMemory {}
unsafe impl Sync for RingMemory {}

const HUGE_PAGE: u64 = 2 << 20;

/// The smallest ring of `frame_size` frames on huge pages: whole aligned runs that are whole
/// huge pages too (the mirror must start on a huge-page boundary).
fn huge_unit(frame_size: usize) -> u64 {
    lcm(frames_per_run(frame_size) * frame_size as u64, HUGE_PAGE)
}

/// Whether a ring of `bytes` will be on huge pages: asked for, the frame size known, a whole
/// huge-page run of it fits, and enough huge pages are free.
pub fn uses_huge_pages(bytes: u64, want_huge: bool, frame_size: Option<usize>) -> bool {
    why_not_huge_pages(bytes, want_huge, frame_size).is_none()
}

/// Why a ring of `bytes` will not be on huge pages, for the operator; None when it will be.
/// The one place the choice is made (the memfd's creation may still fail, and says so).
fn why_not_huge_pages(bytes: u64, want_huge: bool, frame_size: Option<usize>) -> Option<String> {
    if !want_huge {
        return Some("huge pages: not asked for".into());
    }
    let Some(fs) = frame_size else {
        return Some("huge pages: used only when the frame size is given (it decides how the ring is laid out in them); using 4 KiB pages".into());
    };
    let unit = huge_unit(fs);
    if bytes.next_multiple_of(HUGE_PAGE) < unit {
        return Some(format!(
            "huge pages: a {} MiB ring holds no run of {fs}-byte frames that is whole huge pages ({} MiB); using 4 KiB pages",
            bytes >> 20,
            unit >> 20
        ));
    }
    if !huge_pages_cover(bytes) {
        let free = huge_pages_free().unwrap_or(0) * HUGE_PAGE;
        return Some(format!(
            "huge pages: {} MiB free, {} MiB needed; using 4 KiB pages (reserve with `sysctl vm.nr_hugepages=N`)",
            free >> 20,
            bytes.next_multiple_of(HUGE_PAGE) >> 20
        ));
    }
    None
}

/// The smallest ring that frames of `frame_size` can be laid out in on 4 KiB pages: one
/// 4 KiB-aligned run.
pub fn smallest_ring(frame_size: usize) -> u64 {
    frames_per_run(frame_size) * frame_size as u64
}

/// Whether the free huge pages can hold `bytes`.
pub fn huge_pages_cover(bytes: u64) -> bool {
    huge_pages_free().unwrap_or(0) * HUGE_PAGE >= bytes.next_multiple_of(HUGE_PAGE)
}

impl RingMemory {
    /// Allocates `bytes` (rounded up to the page size), maps them and, with `try_mlock`, locks
    /// them. Huge pages are used when `want_huge`, enough are free and the frame size is known
    /// (a huge-page ring is laid out in runs that are whole huge pages too, which only a known
    /// frame size can tell fit); otherwise 4 KiB pages, with a note. A refused lock is a note,
    /// never an error.
    pub fn new(
        bytes: u64,
        want_huge: bool,
        try_mlock: bool,
        frame_size: Option<usize>,
    ) -> Result<RingMemory, RingError> {
        let (file, bytes, huge_pages, huge_note) =
            RingMemory::create(bytes, want_huge, frame_size)?;
        allocate(&file, bytes)?;
        let base = map_first_half(&file, bytes as usize, huge_pages)?;
        let mut memory = RingMemory {
            file,
            bytes,
            huge_pages,
            base,
            locked: false,
            note: String::new(),
        };
        let lock_note = if !try_mlock {
            "mlock: not asked for".to_string()
        } else if memory.lock() {
            "mlock: yes".to_string()
        } else {
            format!(
                "mlock: not permitted ({}); the ring may be swapped out under memory pressure (raise `ulimit -l` or run with CAP_IPC_LOCK)",
                std::io::Error::last_os_error()
            )
        };
        memory.note = format!("{huge_note}; {lock_note}");
        Ok(memory)
    }

    /// The memfd, of huge pages if asked and enough are free.
    fn create(
        bytes: u64,
        want_huge: bool,
        frame_size: Option<usize>,
    ) -> Result<(File, u64, bool, String), RingError> {
        let small = |note: String| -> Result<(File, u64, bool, String), RingError> {
            let rounded = bytes.next_multiple_of(4096);
            let file =
                memfd(rounded, false).map_err(|source| RingError::Alloc { bytes, source })?;
            Ok((file, rounded, false, note))
        };
        if let Some(note) = why_not_huge_pages(bytes, want_huge, frame_size) {
            return small(note);
        }
        let rounded = bytes.next_multiple_of(HUGE_PAGE);
        match memfd(rounded, true) {
            Ok(file) => Ok((file, rounded, true, "huge pages: yes (2 MiB)".into())),
            Err(e) => small(format!(
                "huge pages: could not be used ({e}); using 4 KiB pages"
            )),
        }
    }

    fn lock(&mut self) -> bool {
        // SAFETY: the first half is our own mapping.
        self.locked =
            unsafe { libc::mlock(self.base as *const libc::c_void, self.bytes as usize) == 0 };
        self.locked
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn huge_pages(&self) -> bool {
        self.huge_pages
    }

    /// Huge pages and locking, as they turned out.
    pub fn note(&self) -> &str {
        &self.note
    }
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps the reserved range; no reference into it outlives this value (a Ring
        // that lays it out owns it and keeps it alive as long as any view).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, 2 * self.bytes as usize);
        }
    }
}

/// Gives the memfd all its pages now. File systems that cannot preallocate are left to
/// MAP_POPULATE; a machine without the memory is an error here.
fn allocate(file: &File, bytes: u64) -> Result<(), RingError> {
    // SAFETY: fallocate on a descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::ENOMEM) => Err(RingError::Alloc { bytes, source: e }),
        _ => Ok(()),
    }
}

/// The system call itself rather than glibc's `memfd_create` wrapper, which only glibc 2.27
/// and later have: the wheel is built against glibc 2.17 (manylinux2014) and must load on
/// every system that tag promises; the kernel call exists since Linux 3.17.
fn memfd(bytes: u64, huge: bool) -> std::io::Result<File> {
    let name = c"vdifrec-ring";
    let flags = libc::MFD_CLOEXEC | if huge { libc::MFD_HUGETLB } else { 0 };
    // SAFETY: plain system calls on a descriptor this function owns.
    unsafe {
        let fd = libc::syscall(libc::SYS_memfd_create, name.as_ptr(), flags) as libc::c_int;
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let file = File::from_raw_fd(fd);
        if libc::ftruncate(fd, bytes as libc::off_t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(file)
    }
}

fn huge_pages_free() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("HugePages_Free:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The ring of frame slots.
pub struct Ring {
    base: *mut u8,
    /// Bytes of one half of the mirrored mapping.
    bytes: usize,
    frame_size: usize,
    nslots: u64,
    run: u64,
    write_seq: AtomicU64,
    /// Highest sequence number (exclusive) the capture may be writing into now.
    reserved_seq: AtomicU64,
    read_seq: AtomicU64,
    pins: [AtomicU64; MAX_PINS],
    pins_active: AtomicU64,
    /// A small tag per slot beside the frames: the index of the sender of the frame in it
    /// (for scans split by sender; 0 otherwise).
    tags: Box<[AtomicU16]>,
    /// Owns the mapping; unmapped when the ring (and every view holding it) is gone.
    memory: RingMemory,
}

// SAFETY: the raw mapping is shared memory whose use is coordinated by the atomics above
// (the capture writes only slots no consumer or view can see; readers read only published,
// pinned or not-yet-consumed slots).
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Ring {
    /// Lays `memory` out as slots of `frame_size` bytes: the largest multiple of the aligned
    /// run that fits (and of the huge page size when huge pages back it), and maps the mirror
    /// right behind them, so that runs across the end stay contiguous.
    pub fn new(memory: RingMemory, frame_size: usize) -> Result<Ring, RingError> {
        let run = frames_per_run(frame_size);
        let run_bytes = run * frame_size as u64;
        let unit = if memory.huge_pages {
            huge_unit(frame_size)
        } else {
            run_bytes
        };
        let bytes = memory.bytes / unit * unit;
        if bytes == 0 {
            return Err(RingError::TooSmall {
                asked: memory.bytes,
                run: unit,
                frames: unit / frame_size as u64,
                frame_size,
            });
        }
        map_mirror(&memory, bytes as usize)?;
        Ok(Ring {
            base: memory.base,
            bytes: bytes as usize,
            frame_size,
            nslots: bytes / frame_size as u64,
            run,
            write_seq: AtomicU64::new(0),
            reserved_seq: AtomicU64::new(0),
            read_seq: AtomicU64::new(0),
            pins: std::array::from_fn(|_| AtomicU64::new(FREE)),
            pins_active: AtomicU64::new(0),
            tags: (0..bytes / frame_size as u64)
                .map(|_| AtomicU16::new(0))
                .collect(),
            memory,
        })
    }

    pub fn frame_size(&self) -> usize {
        self.frame_size
    }
    pub fn nslots(&self) -> u64 {
        self.nslots
    }
    /// Frames per 4 KiB-aligned run.
    pub fn run(&self) -> u64 {
        self.run
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn huge_pages(&self) -> bool {
        self.memory.huge_pages
    }
    pub fn locked(&self) -> bool {
        self.memory.locked
    }

    /// Address of frame `seq`'s slot; the `n` frames from there are contiguous for `n <= nslots`.
    #[inline]
    pub fn slot_ptr(&self, seq: u64) -> *mut u8 {
        let idx = (seq % self.nslots) as usize;
        // SAFETY: idx < nslots, so the slot lies in the first half of the mapping.
        unsafe { self.base.add(idx * self.frame_size) }
    }

    /// The bytes of frames `seq..seq + n` (`n <= nslots`).
    ///
    /// # Safety
    /// The caller must hold those frames: published and not yet released by its consumer
    /// position or pin, so the capture cannot be writing them.
    #[inline]
    pub unsafe fn frames(&self, seq: u64, n: u64) -> &[u8] {
        debug_assert!(n <= self.nslots);
        unsafe { std::slice::from_raw_parts(self.slot_ptr(seq), n as usize * self.frame_size) }
    }

    // -- capture side ------------------------------------------------------------------

    /// Tags frame `seq` (before it is published).
    pub fn set_tag(&self, seq: u64, tag: u16) {
        self.tags[(seq % self.nslots) as usize].store(tag, Ordering::Relaxed);
    }

    /// The tag of published frame `seq` (publication orders it after `set_tag`).
    pub fn tag(&self, seq: u64) -> u16 {
        self.tags[(seq % self.nslots) as usize].load(Ordering::Relaxed)
    }

    pub fn write_seq(&self) -> u64 {
        self.write_seq.load(Ordering::Acquire)
    }

    /// Publishes frames up to `seq` (exclusive) to the consumers.
    #[inline]
    pub fn publish(&self, seq: u64) {
        self.write_seq.store(seq, Ordering::Release);
    }

    /// Announces that the capture may write frames below `end`, then returns how many frames
    /// from `next` it may really write: the room left by the writer and the views.
    #[inline]
    pub fn reserve(&self, next: u64, end: u64) -> u64 {
        // Store, then read the pins (both SeqCst): a view pinning at the same moment either
        // sees this reservation and gives up, or is seen here.
        self.reserved_seq.store(end, Ordering::SeqCst);
        let limit = self.oldest_held() + self.nslots;
        let allowed = limit.min(end).saturating_sub(next);
        // Lower the announcement to what will really be written, so views of the oldest
        // frames are not refused while the ring is full.
        self.reserved_seq.store(next + allowed, Ordering::SeqCst);
        allowed
    }

    /// The oldest frame still needed by the writer or a view.
    fn oldest_held(&self) -> u64 {
        let mut oldest = self.read_seq.load(Ordering::SeqCst);
        if self.pins_active.load(Ordering::SeqCst) > 0 {
            for p in &self.pins {
                oldest = oldest.min(p.load(Ordering::SeqCst));
            }
        }
        oldest
    }

    // -- consumer side -----------------------------------------------------------------

    pub fn read_seq(&self) -> u64 {
        self.read_seq.load(Ordering::Acquire)
    }

    /// The writer has consumed frames below `seq`.
    pub fn release(&self, seq: u64) {
        self.read_seq.store(seq, Ordering::SeqCst);
    }

    /// Makes the ring behave as if it had no consumer (monitoring without writing).
    pub fn set_no_consumer(&self) {
        self.read_seq.store(u64::MAX / 2, Ordering::SeqCst);
    }

    /// Frames held and not yet consumed by the writer.
    pub fn fill(&self) -> u64 {
        self.write_seq()
            .saturating_sub(self.read_seq().min(self.write_seq()))
    }

    /// Pins frames `first..first + n` against overwriting; returns the pin's index.
    pub fn pin(&self, first: u64, n: u64) -> Result<usize, RingError> {
        if n > self.nslots {
            return Err(RingError::ViewTooLarge {
                asked: n,
                slots: self.nslots,
            });
        }
        let idx = self
            .pins
            .iter()
            .position(|p| {
                p.compare_exchange(FREE, first, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            })
            .ok_or(RingError::TooManyPins)?;
        self.pins_active.fetch_add(1, Ordering::SeqCst);
        // Checked after the pin is stored (see `reserve`).
        if let Err(e) = self.in_ring(first, n) {
            self.unpin(idx);
            return Err(e);
        }
        Ok(idx)
    }

    /// Frames `first..first + n` are published, and the capture is not (about to be) writing
    /// their slots.
    fn in_ring(&self, first: u64, n: u64) -> Result<(), RingError> {
        let reserved = self.reserved_seq.load(Ordering::SeqCst);
        let written = self.write_seq.load(Ordering::SeqCst);
        if n > self.nslots || first + n > written || reserved > first + self.nslots {
            return Err(RingError::NotInRing {
                first,
                end: first + n,
                oldest: reserved
                    .saturating_sub(self.nslots)
                    .max(written.saturating_sub(self.nslots)),
                newest: written,
            });
        }
        Ok(())
    }

    /// Refuses a view of more than half the ring: a view that large leaves the capture too
    /// little room (held) or is overwritten before it can be read (yielding).
    pub fn check_view_size(&self, n: u64) -> Result<(), RingError> {
        let half = self.nslots / 2;
        if n > half {
            return Err(RingError::ViewOverHalf {
                asked: n,
                half,
                slots: self.nslots,
            });
        }
        Ok(())
    }

    /// Checks that frames `first..first + n` are there to be viewed without pinning them
    /// (a view that yields to the capture): published, and not yet taken by the capture.
    pub fn watch(&self, first: u64, n: u64) -> Result<(), RingError> {
        self.in_ring(first, n)
    }

    /// The newest `n` frames (all there are, when fewer have arrived), checked as `watch`
    /// does; returns (first frame, frames).
    pub fn watch_latest(&self, n: u64) -> Result<(u64, u64), RingError> {
        let mut last_err = None;
        for _ in 0..16 {
            let w = self.write_seq();
            let first = w.saturating_sub(n);
            match self.watch(first, w - first) {
                Ok(()) => return Ok((first, w - first)),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.expect("set in the loop"))
    }

    /// How many of frames `first..first + n` the capture has overwritten or may be writing
    /// now (0 while they are pinned or not yet lapped). Read it after using the frames: a
    /// result of 0 then means every byte read was the frames'.
    pub fn overwritten(&self, first: u64, n: u64) -> u64 {
        // The frames' bytes were read before: they must not be reordered past this check.
        std::sync::atomic::fence(Ordering::Acquire);
        let reserved = self.reserved_seq.load(Ordering::SeqCst);
        reserved.saturating_sub(first + self.nslots).min(n)
    }

    /// The capture has ended at `seq`: nothing more is reserved, so `overwritten` counts
    /// exactly the frames rewritten.
    pub fn settle(&self, seq: u64) {
        self.reserved_seq.store(seq, Ordering::SeqCst);
    }

    pub fn unpin(&self, idx: usize) {
        self.pins[idx].store(FREE, Ordering::SeqCst);
        self.pins_active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Pins the newest `n` frames (all there are, when fewer have arrived); returns (pin,
    /// first frame, frames pinned).
    pub fn pin_latest(&self, n: u64) -> Result<(usize, u64, u64), RingError> {
        // Retry a few times: the capture may overtake a pin between reading and pinning.
        let mut last_err = None;
        for _ in 0..16 {
            let w = self.write_seq();
            let first = w.saturating_sub(n);
            match self.pin(first, w - first) {
                Ok(idx) => return Ok((idx, first, w - first)),
                Err(e @ RingError::NotInRing { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("set in the loop"))
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// Reserves an address range of twice `bytes` (aligned for huge pages) and maps the memfd
/// into its first half, page tables filled.
fn map_first_half(file: &File, bytes: usize, huge: bool) -> Result<*mut u8, RingError> {
    let err = || RingError::Map(std::io::Error::last_os_error());
    // SAFETY: reserve 2 × bytes of address space, then replace the first half with a shared
    // mapping of the file at a fixed address inside the reservation.
    unsafe {
        let align = if huge { HUGE_PAGE as usize } else { 4096 };
        let reserve = libc::mmap(
            std::ptr::null_mut(),
            2 * bytes + align,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if reserve == libc::MAP_FAILED {
            return Err(err());
        }
        // Align the start (huge pages need 2 MiB alignment), give back the slack.
        let start = (reserve as usize).next_multiple_of(align);
        let slack_front = start - reserve as usize;
        if slack_front > 0 {
            libc::munmap(reserve, slack_front);
        }
        let slack_back = align - slack_front;
        if slack_back > 0 {
            libc::munmap((start + 2 * bytes) as *mut libc::c_void, slack_back);
        }
        let p = libc::mmap(
            start as *mut libc::c_void,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            // Fill the page tables now, while nothing is arriving.
            libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED || p as usize != start {
            let e = err();
            libc::munmap(start as *mut libc::c_void, 2 * bytes);
            return Err(e);
        }
        Ok(start as *mut u8)
    }
}

/// Maps the memfd's first `used` bytes again right behind themselves. Only runs and views
/// across the ring's end touch this second copy, so its pages are left to fault in (they are
/// the same, already allocated and locked pages): no page-table work in the capture thread.
fn map_mirror(memory: &RingMemory, used: usize) -> Result<(), RingError> {
    // SAFETY: the target range [base + used, base + 2·used) lies inside the reservation made
    // by map_first_half (used <= bytes); it replaces the unused tail of the first mapping
    // and reserved address space, nothing any reference points into.
    unsafe {
        let addr = memory.base.add(used) as *mut libc::c_void;
        let p = libc::mmap(
            addr,
            used,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            memory.file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED || p != addr {
            return Err(RingError::Map(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(bytes: u64, fs: usize) -> Ring {
        Ring::new(RingMemory::new(bytes, false, false, None).unwrap(), fs).unwrap()
    }

    #[test]
    fn runs_are_page_aligned() {
        assert_eq!(frames_per_run(8224), 128);
        assert_eq!(frames_per_run(5032), 512);
        assert_eq!(frames_per_run(4096 + 32), 128);
        for fs in [8224usize, 5032, 1056, 8032, 544] {
            assert_eq!(frames_per_run(fs) * fs as u64 % 4096, 0);
        }
        let r = ring(64 << 20, 8224);
        assert_eq!(r.nslots() % 128, 0);
        assert_eq!(r.base as usize % 4096, 0);
        assert_eq!(r.slot_ptr(128) as usize % 4096, 0);
        assert_eq!(r.bytes(), r.nslots() as usize * 8224);
    }

    #[test]
    fn mirror_makes_the_wrap_contiguous() {
        let r = ring(2 << 20, 8224);
        let n = r.nslots();
        // Write a pattern into the last and first slot through their own addresses.
        unsafe {
            std::ptr::write_bytes(r.slot_ptr(n - 1), 0xAB, 8224);
            std::ptr::write_bytes(r.slot_ptr(n), 0xCD, 8224);
        }
        r.publish(n + 1);
        let both = unsafe { r.frames(n - 1, 2) };
        assert!(both[..8224].iter().all(|b| *b == 0xAB));
        assert!(both[8224..].iter().all(|b| *b == 0xCD));
    }

    #[test]
    fn reserve_respects_writer_and_pins() {
        let r = ring(2 << 20, 8224);
        let n = r.nslots();
        assert_eq!(r.reserve(0, 64), 64);
        r.publish(n);
        // Full: the writer has consumed nothing.
        assert_eq!(r.reserve(n, n + 64), 0);
        r.release(10);
        assert_eq!(r.reserve(n, n + 64), 10);
        // The capture now owns slots 0..10: a view of frame 5 is refused.
        assert!(matches!(r.pin(5, 3), Err(RingError::NotInRing { .. })));
        // Before that reservation, a view pinning frame 5 holds the capture back further.
        r.release(0);
        assert_eq!(r.reserve(n, n), 0);
        let p = r.pin(5, 3).unwrap();
        r.release(n);
        assert_eq!(r.reserve(n, n + 64), 5);
        r.unpin(p);
        assert_eq!(r.reserve(n, n + 64), 64);
    }

    #[test]
    fn pins_refuse_frames_not_there() {
        let r = ring(2 << 20, 8224);
        let n = r.nslots();
        r.publish(100);
        assert!(matches!(r.pin(90, 20), Err(RingError::NotInRing { .. })));
        r.release(n + 50);
        r.reserve(n + 50, n + 60);
        r.publish(n + 60);
        // Frame 30's slot is being rewritten by frame n + 30.
        assert!(matches!(r.pin(30, 5), Err(RingError::NotInRing { .. })));
        let (idx, first, count) = r.pin_latest(10).unwrap();
        assert_eq!((first, count), (n + 50, 10));
        r.unpin(idx);
        let all: Vec<usize> = (0..MAX_PINS).map(|_| r.pin(n + 55, 1).unwrap()).collect();
        assert!(matches!(r.pin(n + 55, 1), Err(RingError::TooManyPins)));
        for i in all {
            r.unpin(i);
        }
        assert!(matches!(
            r.pin(0, n + 1),
            Err(RingError::ViewTooLarge { .. })
        ));
    }

    #[test]
    fn a_yielding_view_counts_what_the_capture_took() {
        let r = ring(2 << 20, 8224);
        let n = r.nslots();
        r.set_no_consumer();
        assert_eq!(r.reserve(0, n), n);
        r.publish(n);
        r.watch(10, 20).unwrap();
        assert!(matches!(
            r.check_view_size(n / 2 + 1),
            Err(RingError::ViewOverHalf { .. })
        ));
        r.check_view_size(n / 2).unwrap();
        // The view pins nothing: the capture laps it, and 15 of its 20 frames are taken.
        assert_eq!(r.reserve(n, n + 25), 25);
        assert_eq!(r.overwritten(10, 20), 15);
        r.publish(n + 25);
        assert!(matches!(r.watch(10, 20), Err(RingError::NotInRing { .. })));
        let (first, count) = r.watch_latest(5).unwrap();
        assert_eq!((first, count), (n + 20, 5));
        assert_eq!(r.overwritten(first, count), 0);
        // Reserved but never received: the end of a recording says exactly what was taken.
        assert_eq!(r.reserve(n + 25, n + 89), 64);
        assert_eq!(r.overwritten(10, 80), 79);
        r.settle(n + 25);
        assert_eq!(r.overwritten(10, 80), 15);
        // A held view (a pin) is never lapped.
        let p = r.pin(n + 20, 5).unwrap();
        assert_eq!(r.reserve(n + 25, 2 * n + 100), n - 5);
        assert_eq!(r.overwritten(n + 20, 5), 0);
        r.unpin(p);
    }

    #[test]
    fn too_small_is_explained() {
        let m = RingMemory::new(4096, false, false, None).unwrap();
        let err = Ring::new(m, 8224).err().unwrap().to_string();
        assert!(
            err.contains("give a ring of at least 1052672 bytes"),
            "{err}"
        );
    }
}
