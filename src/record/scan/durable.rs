//! How much of a scan is known to be on disk, should the recorder be killed or the station
//! lose power now: the longest run of the scan's chunks, from chunk 0, that the writers have
//! made durable (see `chunk` for when each layout does). Chunks become durable out of order
//! (several writers share the disks, and a `file` or `mk6` file is synced now and then), so
//! a chunk past one not yet durable waits for it: a reader after a crash gets the scan whole
//! up to there, and perhaps more.
//!
//! Chunks are numbered per data stream (the scan's name, or `<scan>_ds<key>` with a split), so
//! each data stream has its prefix; the scan's figure adds them up.

use crate::record::scan::window::FramePoint;
use std::collections::BTreeMap;

/// A chunk a writer made durable, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableChunk {
    /// The data stream it belongs to (its name on disk).
    pub name: String,
    pub number: u64,
    pub frames: u64,
    /// Bytes of frames (a Mark6 block's header not counted, as in `bytes_written`).
    pub bytes: u64,
    /// The VDIF time of its last frame.
    pub last: FramePoint,
}

/// What is known to be on disk of a data stream or of a scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known {
    pub frames: u64,
    pub bytes: u64,
    /// The VDIF time of the last frame of the durable prefix; None while nothing is.
    pub last: Option<FramePoint>,
}

/// One data stream's prefix.
#[derive(Default)]
struct Prefix {
    known: Known,
    /// The chunk the prefix waits for.
    next: u64,
    /// Chunks durable past it, by number.
    waiting: BTreeMap<u64, DurableChunk>,
}

/// The durable prefix of every data stream of one scan.
#[derive(Default)]
pub struct Durable {
    streams: BTreeMap<String, Prefix>,
}

impl Durable {
    /// Data stream `name` has frames in the scan: until its first chunk is durable, nothing of
    /// the scan is known up to any time.
    pub fn expect(&mut self, name: &str) {
        if !self.streams.contains_key(name) {
            self.streams.insert(name.to_string(), Prefix::default());
        }
    }

    /// Chunk `c` is durable; whether the prefix of its data stream grew.
    pub fn add(&mut self, c: DurableChunk) -> bool {
        let p = self.streams.entry(c.name.clone()).or_default();
        if c.number < p.next || p.waiting.contains_key(&c.number) {
            // Told twice (a bug elsewhere): counted once.
            return false;
        }
        p.waiting.insert(c.number, c);
        let mut grew = false;
        while let Some(c) = p.waiting.remove(&p.next) {
            p.known.frames += c.frames;
            p.known.bytes += c.bytes;
            p.known.last = Some(c.last);
            p.next += 1;
            grew = true;
        }
        grew
    }

    /// What is known of data stream `name`.
    pub fn stream(&self, name: &str) -> Known {
        self.streams.get(name).map_or(Known::default(), |p| p.known)
    }

    /// What is known of the whole scan: its data streams' frames and bytes added up, and the
    /// earliest of their last frames' times (every data stream is on disk up to there; None
    /// while one has nothing on disk).
    pub fn scan(&self) -> Known {
        let mut all = Known::default();
        let mut last: Option<Option<FramePoint>> = None;
        for p in self.streams.values() {
            all.frames += p.known.frames;
            all.bytes += p.known.bytes;
            last = Some(match (last, p.known.last) {
                (None, l) => l,
                (Some(Some(a)), Some(b)) => Some(a.min(b)),
                (Some(_), _) => None,
            });
        }
        all.last = last.flatten();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(name: &str, number: u64, last: FramePoint) -> DurableChunk {
        DurableChunk {
            name: name.into(),
            number,
            frames: 10,
            bytes: 10 * 8224,
            last,
        }
    }

    #[test]
    fn chunks_durable_out_of_order_count_once_the_gap_fills() {
        let mut d = Durable::default();
        d.expect("s");
        assert_eq!(d.scan(), Known::default());
        // Chunk 1 first (another writer still has chunk 0): nothing is known yet.
        assert!(!d.add(chunk("s", 1, (100, 20))));
        assert!(!d.add(chunk("s", 2, (100, 30))));
        assert_eq!(d.stream("s"), Known::default());
        // Chunk 0 fills the gap: 0, 1 and 2 at once, up to chunk 2's last frame.
        assert!(d.add(chunk("s", 0, (100, 10))));
        let k = d.stream("s");
        assert_eq!(
            (k.frames, k.bytes, k.last),
            (30, 30 * 8224, Some((100, 30)))
        );
        // Chunk 4 waits for chunk 3, however long.
        assert!(!d.add(chunk("s", 4, (101, 0))));
        assert_eq!(d.stream("s").last, Some((100, 30)));
        assert!(d.add(chunk("s", 3, (100, 40))));
        assert_eq!(d.stream("s").frames, 50);
        assert_eq!(d.stream("s").last, Some((101, 0)));
        // A chunk told twice counts once.
        assert!(!d.add(chunk("s", 3, (100, 40))));
        assert_eq!(d.scan().frames, 50);
    }

    #[test]
    fn a_split_scan_is_on_disk_up_to_its_slowest_data_stream() {
        let mut d = Durable::default();
        d.expect("s_ds0");
        d.expect("s_ds1");
        d.add(chunk("s_ds0", 0, (100, 10)));
        d.add(chunk("s_ds0", 1, (100, 20)));
        // ds1 has frames but nothing on disk: the scan is known up to no time at all.
        let k = d.scan();
        assert_eq!((k.frames, k.last), (20, None));
        d.add(chunk("s_ds1", 0, (100, 15)));
        let k = d.scan();
        assert_eq!(
            (k.frames, k.bytes, k.last),
            (30, 30 * 8224, Some((100, 15)))
        );
        // Each data stream keeps its own prefix (chunks are numbered per data stream).
        assert_eq!(d.stream("s_ds0").last, Some((100, 20)));
        assert_eq!(d.stream("s_ds1").frames, 10);
        assert_eq!(d.stream("s_ds2"), Known::default());
    }
}
