//! Whole frames held in one or more memory maps, in stream order: one file, or the parts of a
//! scan (vbs chunk files, Mark6 block payloads). Each part is whole frames, so a frame never
//! straddles two parts and frame `k` is always one contiguous slice.

use memmap2::Mmap;
use std::path::{Path, PathBuf};

/// One part: `frames` whole frames from byte `start` of map `map`.
#[derive(Clone, Copy, Debug)]
struct Part {
    map: usize,
    start: usize,
    frames: usize,
}

/// A mapped file and the name it is reported by.
struct Mapped {
    path: PathBuf,
    map: Mmap,
}

/// The frames of a stream, part after part.
pub struct FrameStore {
    frame_size: usize,
    maps: Vec<Mapped>,
    parts: Vec<Part>,
    /// Index of the first frame of each part (ascending), for locating frame `k`.
    first: Vec<usize>,
    n_frames: usize,
}

impl FrameStore {
    /// An empty store of `frame_size`-byte frames; `add_map` and `add_part` fill it.
    pub fn new(frame_size: usize) -> FrameStore {
        assert!(frame_size > 0, "frames have a size");
        FrameStore {
            frame_size,
            maps: Vec::new(),
            parts: Vec::new(),
            first: Vec::new(),
            n_frames: 0,
        }
    }

    /// One file: its whole frames (bytes after the last whole frame are left out).
    pub fn file(path: &Path, map: Mmap, frame_size: usize) -> FrameStore {
        let mut s = FrameStore::new(frame_size);
        let frames = map.len() / frame_size;
        let m = s.add_map(path, map);
        s.add_part(m, 0, frames);
        s
    }

    /// Adds a memory map; returns its index for `add_part`.
    pub fn add_map(&mut self, path: &Path, map: Mmap) -> usize {
        self.maps.push(Mapped {
            path: path.to_path_buf(),
            map,
        });
        self.maps.len() - 1
    }

    /// Appends `frames` frames from byte `start` of map `map` to the stream. Panics if they lie
    /// outside the map: the caller has checked the layout.
    pub fn add_part(&mut self, map: usize, start: usize, frames: usize) {
        let end = start + frames * self.frame_size;
        assert!(end <= self.maps[map].map.len(), "part inside its map");
        if frames == 0 {
            return;
        }
        self.parts.push(Part { map, start, frames });
        self.first.push(self.n_frames);
        self.n_frames += frames;
    }

    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    pub fn n_frames(&self) -> usize {
        self.n_frames
    }

    pub fn n_parts(&self) -> usize {
        self.parts.len()
    }

    /// Part index and frame index within it of frame `k` (`k < n_frames`).
    #[inline]
    fn locate(&self, k: usize) -> (usize, usize) {
        // One part (a file): no search, the common and fast case.
        if self.parts.len() == 1 {
            return (0, k);
        }
        let p = self.first.partition_point(|&f| f <= k) - 1;
        (p, k - self.first[p])
    }

    /// Frame `k` (`k < n_frames`), its whole bytes.
    #[inline]
    pub fn frame(&self, k: usize) -> &[u8] {
        let (p, i) = self.locate(k);
        let part = self.parts[p];
        let at = part.start + i * self.frame_size;
        &self.maps[part.map].map[at..at + self.frame_size]
    }

    /// Frame `k` if it exists.
    #[inline]
    pub fn get(&self, k: usize) -> Option<&[u8]> {
        (k < self.n_frames).then(|| self.frame(k))
    }

    /// The file holding frame `k` and the frame's byte offset in it (for messages).
    pub fn whereis(&self, k: usize) -> (&Path, usize) {
        let (p, i) = self.locate(k);
        let part = self.parts[p];
        (&self.maps[part.map].path, part.start + i * self.frame_size)
    }

    /// Lets go of the pages of every map this process has touched: a long-lived reader (a
    /// Dask worker's) would otherwise count every byte it ever read in its resident memory,
    /// which a worker's memory limit reads as a leak. The data stay in the page cache, and a
    /// page read again is mapped again from it.
    pub fn release_pages(&self) -> std::io::Result<()> {
        for m in &self.maps {
            // SAFETY: the maps are read-only views of files: dropping their pages loses
            // nothing (no private copy-on-write pages exist), and a later access faults the
            // same bytes back in from the file.
            unsafe { m.map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) }?;
        }
        Ok(())
    }

    /// Each part's whole frames, in stream order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        self.parts
            .iter()
            .map(|p| &self.maps[p.map].map[p.start..p.start + p.frames * self.frame_size])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn map_of(bytes: &[u8], name: &str) -> (PathBuf, Mmap) {
        let dir = std::env::temp_dir().join(format!("vdifrec-frames-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let map = unsafe { Mmap::map(&std::fs::File::open(&path).unwrap()) }.unwrap();
        (path, map)
    }

    #[test]
    fn frames_are_found_across_parts() {
        // Frames of 4 bytes numbered by their first byte; map b has an 8-byte header and a
        // second range after 4 junk bytes, as Mark6 blocks lie.
        let (pa, a) = map_of(&[0, 0, 0, 0, 1, 1, 1, 1, 9, 9], "a");
        let (pb, b) = map_of(
            &[7; 8]
                .iter()
                .chain(&[2; 4])
                .chain(&[7; 4])
                .chain(&[3; 8])
                .copied()
                .collect::<Vec<_>>(),
            "b",
        );
        let mut s = FrameStore::new(4);
        let ma = s.add_map(&pa, a);
        let mb = s.add_map(&pb, b);
        s.add_part(ma, 0, 2);
        s.add_part(mb, 8, 1);
        s.add_part(mb, 16, 2);
        s.add_part(ma, 0, 0); // empty parts leave no trace
        assert_eq!(s.n_frames(), 5);
        assert_eq!(s.n_parts(), 3);
        let firsts: Vec<u8> = (0..5).map(|k| s.frame(k)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 3, 3]);
        assert_eq!(s.get(5), None);
        assert_eq!(s.whereis(4), (pb.as_path(), 20));
        let lens: Vec<usize> = s.parts().map(|p| p.len()).collect();
        assert_eq!(lens, [8, 4, 8]);
        let one = FrameStore::file(&pa, map_of(&[5; 10], "c").1, 4);
        assert_eq!(one.n_frames(), 2);
    }
}
