//! Reading VDIF files as a stream of samples, the way baseband's `vdif.open(path, 'rs')` does.
//!
//! The file is memory-mapped. Frames are grouped into *frame sets*: one frame per thread for
//! the same frame number, in whatever thread order the file has. Sample `i` of the stream lies
//! in frame set `i / samples_per_frame`, located by position in the file (not by its header
//! time), so files whose frame rate is not a whole number per second read correctly.
//! Frames flagged invalid read as zeros, as baseband fills them.
//!
//! The frames come from a `FrameStore`: one memory map for a file, or several for a scan
//! spread over disks (`vdif::scan`); the reader does not care which.

use super::decode::{DecodeError, Decoder};
use super::frames::FrameStore;
use super::header::{Header, HeaderError};
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum FileError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty")]
    Empty { path: PathBuf },
    #[error("{path} does not start with a VDIF header: {source}")]
    FirstHeader { path: PathBuf, source: HeaderError },
    #[error("{path}: frame at byte {offset} is {found} bytes, not the {expected} of the first frame (run `vdifrec check` to find the corruption)")]
    FrameSizeChanged {
        path: PathBuf,
        offset: usize,
        found: usize,
        expected: usize,
    },
    #[error("{path} holds {bytes} bytes, less than one frame set of {needed} bytes ({threads} threads x {frame_size}-byte frames)")]
    TooShort {
        path: PathBuf,
        bytes: usize,
        needed: usize,
        threads: usize,
        frame_size: usize,
    },
    #[error("the sample rate of {path} cannot be learned: the file is too short to show the frame number wrap to 0 and its header (EDV {edv}) carries no rate; pass sample_rate (Hz per channel), e.g. sample_rate=1.024e9")]
    NoSampleRate { path: PathBuf, edv: String },
    #[error("sample_rate must be a positive number of samples per second per channel, got {0}")]
    BadSampleRate(f64),
    #[error(
        "read of samples {start}..{end} goes past the end of the stream ({available} samples)"
    )]
    PastEnd {
        start: usize,
        end: usize,
        available: usize,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// What a VDIF file holds, from its first frames.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub header0: Header,
    pub frame_size: usize,
    /// Thread ids, sorted; the thread axis of decoded data follows this order.
    pub thread_ids: Vec<u32>,
    pub samples_per_frame: usize,
    /// Samples per second per channel (complex samples for complex data).
    pub sample_rate: f64,
    /// Frames per second per thread.
    pub frame_rate: f64,
    /// Where the sample rate came from: "given", "frame-number wrap" or "header".
    pub sample_rate_source: &'static str,
    /// Whole frames in the file, and whole frame sets.
    pub n_frames: usize,
    pub n_framesets: usize,
}

impl StreamInfo {
    /// Real values per complete sample of one thread: channels, times two for complex data.
    pub fn values_per_sample(&self) -> usize {
        self.header0.nchan() as usize * if self.header0.is_complex() { 2 } else { 1 }
    }

    pub fn n_samples(&self) -> usize {
        self.n_framesets * self.samples_per_frame
    }
}

/// A memory-mapped VDIF file, or a scan read as one.
pub struct VdifFile {
    path: PathBuf,
    frames: FrameStore,
    info: StreamInfo,
    decoder: Decoder,
}

impl VdifFile {
    /// Opens a file. `sample_rate` (Hz per channel) is needed only when the file is too short
    /// to show the frame-number wrap and its header does not carry the rate.
    pub fn open(path: impl AsRef<Path>, sample_rate: Option<f64>) -> Result<VdifFile, FileError> {
        let path = path.as_ref().to_path_buf();
        check_sample_rate(sample_rate)?;
        let frames = map_file(&path)?;
        VdifFile::from_frames(path, frames, sample_rate)
    }

    /// Reads `frames` (a file's, or a scan's parts in order) as one stream; `path` names it in
    /// messages. `sample_rate` as for `open`.
    pub fn from_frames(
        path: PathBuf,
        frames: FrameStore,
        sample_rate: Option<f64>,
    ) -> Result<VdifFile, FileError> {
        check_sample_rate(sample_rate)?;
        let frame_size = frames.frame_size();
        let n_frames = frames.n_frames();
        let Some(first) = frames.get(0) else {
            return Err(FileError::TooShort {
                path,
                bytes: 0,
                needed: frame_size,
                threads: 1,
                frame_size,
            });
        };
        let header0 = Header::parse(first).map_err(|source| FileError::FirstHeader {
            path: path.clone(),
            source,
        })?;
        let walk = HeaderWalk {
            frames: &frames,
            frame_size,
        };
        let thread_ids = walk.thread_ids()?;
        let samples_per_frame = header0.samples_per_frame();
        let (sample_rate, source) = match sample_rate {
            Some(sr) => (sr, "given"),
            None => match walk.frame_rate_from_wrap()? {
                Some(fps) => (fps * samples_per_frame as f64, "frame-number wrap"),
                None => match header0.sample_rate_hz() {
                    Some(sr) => (sr, "header"),
                    None => {
                        return Err(FileError::NoSampleRate {
                            path,
                            edv: header0.edv().map_or("legacy".into(), |e| e.to_string()),
                        })
                    }
                },
            },
        };
        if n_frames < thread_ids.len() {
            return Err(FileError::TooShort {
                path,
                bytes: n_frames * frame_size,
                needed: thread_ids.len() * frame_size,
                threads: thread_ids.len(),
                frame_size,
            });
        }
        let decoder = Decoder::new(header0.bits())?;
        let info = StreamInfo {
            header0,
            frame_size,
            n_framesets: n_frames / thread_ids.len(),
            thread_ids,
            samples_per_frame,
            sample_rate,
            frame_rate: sample_rate / samples_per_frame as f64,
            sample_rate_source: source,
            n_frames,
        };
        Ok(VdifFile {
            path,
            frames,
            info,
            decoder,
        })
    }

    pub fn info(&self) -> &StreamInfo {
        &self.info
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops this process's resident pages of the mapped data (see `FrameStore::release_pages`).
    pub fn release_pages(&self) -> std::io::Result<()> {
        self.frames.release_pages()
    }

    /// The whole frames, part by part (one part for a file), as bytes.
    pub fn frame_parts(&self) -> impl Iterator<Item = &[u8]> {
        self.frames.parts()
    }

    /// Frame `k` of the stream (`k < n_frames`).
    #[inline]
    pub fn frame(&self, k: usize) -> &[u8] {
        self.frames.frame(k)
    }

    /// Decodes samples `start..start + count` into `out`, laid out (sample, thread, value):
    /// `out.len()` must be `count * threads * values_per_sample()`. Complex data are real,
    /// imaginary pairs (NumPy's complex64 layout).
    pub fn read(&self, start: usize, count: usize, out: &mut [f32]) -> Result<(), FileError> {
        let info = &self.info;
        let available = info.n_samples();
        if start + count > available {
            return Err(FileError::PastEnd {
                start,
                end: start + count,
                available,
            });
        }
        let nthread = info.thread_ids.len();
        let group = info.values_per_sample();
        let row = nthread * group;
        let needed = count * row;
        if out.len() < needed {
            return Err(DecodeError::OutputTooSmall {
                needed,
                got: out.len(),
            }
            .into());
        }
        let spf = info.samples_per_frame;
        let hs = info.header0.header_size();
        let mut scratch = if nthread > 1 {
            vec![0f32; spf.min(count) * group]
        } else {
            Vec::new()
        };
        let mut filled = vec![false; nthread];
        let mut done = 0;
        while done < count {
            let sample = start + done;
            let (set, in_frame) = (sample / spf, sample % spf);
            let n = (spf - in_frame).min(count - done);
            let set_first = set * nthread;
            let dst = &mut out[done * row..(done + n) * row];
            filled.fill(false);
            for j in 0..nthread {
                let frame = self.frames.frame(set_first + j);
                let Ok(h) = Header::parse_unchecked(frame) else {
                    continue;
                };
                let Ok(col) = info.thread_ids.binary_search(&h.thread_id()) else {
                    continue;
                };
                if h.is_invalid() || filled[col] {
                    continue;
                }
                filled[col] = true;
                let payload = &frame[hs..];
                if nthread == 1 {
                    self.decoder.decode_range(payload, in_frame * group, dst)?;
                } else {
                    let tmp = &mut scratch[..n * group];
                    self.decoder.decode_range(payload, in_frame * group, tmp)?;
                    for (t, vals) in tmp.chunks_exact(group).enumerate() {
                        dst[t * row + col * group..t * row + (col + 1) * group]
                            .copy_from_slice(vals);
                    }
                }
            }
            // Missing or invalid frames read as zeros.
            for (col, _) in filled.iter().enumerate().filter(|(_, f)| !**f) {
                for t in 0..n {
                    dst[t * row + col * group..t * row + (col + 1) * group].fill(0.0);
                }
            }
            done += n;
        }
        Ok(())
    }
}

impl VdifFile {
    /// `read` split over the available CPUs (whole frames per part); for large reads.
    pub fn read_parallel(
        &self,
        start: usize,
        count: usize,
        out: &mut [f32],
    ) -> Result<(), FileError> {
        let spf = self.info.samples_per_frame;
        let row = self.info.thread_ids.len() * self.info.values_per_sample();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Parts of at least 64 frames, so threads are worth starting.
        let parts = cpus.min(count / (64 * spf).max(1)).max(1);
        if parts == 1 || out.len() < count * row {
            return self.read(start, count, out);
        }
        let per = count.div_ceil(parts).div_ceil(spf) * spf;
        std::thread::scope(|sc| {
            let mut rest = &mut out[..count * row];
            let mut handles = Vec::new();
            let mut at = 0;
            while at < count {
                let n = per.min(count - at);
                let (mine, tail) = rest.split_at_mut(n * row);
                rest = tail;
                let first = start + at;
                handles.push(sc.spawn(move || self.read(first, n, mine)));
                at += n;
            }
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("reader thread"))
        })
    }
}

fn check_sample_rate(sample_rate: Option<f64>) -> Result<(), FileError> {
    match sample_rate {
        Some(sr) if !(sr.is_finite() && sr > 0.0) => Err(FileError::BadSampleRate(sr)),
        _ => Ok(()),
    }
}

/// The whole frames of the file at `path`, memory-mapped, their size from the first header
/// (bytes after the last whole frame are left out).
pub fn map_file(path: &Path) -> Result<FrameStore, FileError> {
    let open = |source| FileError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open)?;
    if file.metadata().map_err(open)?.len() == 0 {
        return Err(FileError::Empty {
            path: path.to_path_buf(),
        });
    }
    // SAFETY: the map is read-only; a recording that another process truncates while it is
    // open would fault, which is the documented risk of reading files by mmap.
    let map = unsafe { Mmap::map(&file) }.map_err(open)?;
    let header0 = Header::parse(&map).map_err(|source| FileError::FirstHeader {
        path: path.to_path_buf(),
        source,
    })?;
    let frame_size = header0.frame_size();
    if map.len() < frame_size {
        return Err(FileError::TooShort {
            path: path.to_path_buf(),
            bytes: map.len(),
            needed: frame_size,
            threads: 1,
            frame_size,
        });
    }
    Ok(FrameStore::file(path, map, frame_size))
}

/// The thread IDs of a stream's first frame sets, sorted: read until the set of threads has
/// not grown for two frame sets more (baseband's rule), or the stream ends.
pub fn first_thread_ids(frames: &FrameStore) -> Result<Vec<u32>, FileError> {
    HeaderWalk {
        frames,
        frame_size: frames.frame_size(),
    }
    .thread_ids()
}

/// Header walks over the start of a stream.
struct HeaderWalk<'a> {
    frames: &'a FrameStore,
    frame_size: usize,
}

impl HeaderWalk<'_> {
    fn header(&self, k: usize) -> Result<Header, FileError> {
        let (path, offset) = self.frames.whereis(k);
        let h = Header::parse_unchecked(self.frames.frame(k)).map_err(|source| {
            FileError::FirstHeader {
                path: path.to_path_buf(),
                source,
            }
        })?;
        if h.frame_size() != self.frame_size {
            return Err(FileError::FrameSizeChanged {
                path: path.to_path_buf(),
                offset,
                found: h.frame_size(),
                expected: self.frame_size,
            });
        }
        Ok(h)
    }
    /// Thread ids of the first frame sets: frame sets are read until the set of threads has
    /// not grown for two more (baseband's rule), or the file ends.
    fn thread_ids(&self) -> Result<Vec<u32>, FileError> {
        let mut ids: Vec<u32> = Vec::new();
        let mut k = 0;
        let mut checks_left = 1;
        while checks_left > 0 && k < self.frames.n_frames() {
            let frame_nr = self.header(k)?.frame_nr();
            let before = ids.len();
            while k < self.frames.n_frames() {
                let h = self.header(k)?;
                if h.frame_nr() != frame_nr {
                    break;
                }
                if !ids.contains(&h.thread_id()) {
                    ids.push(h.thread_id());
                }
                k += 1;
            }
            if ids.len() > before {
                checks_left = 2;
            } else {
                checks_left -= 1;
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Frames per second from the highest frame number before the number wraps to 0
    /// (baseband's rule). None when the file ends first.
    fn frame_rate_from_wrap(&self) -> Result<Option<f64>, FileError> {
        let mut k = 0;
        let fnr0 = self.header(0)?.frame_nr();
        let mut max_frame = fnr0;
        while k < self.frames.n_frames() && self.header(k)?.frame_nr() == fnr0 {
            k += 1;
        }
        while k < self.frames.n_frames() {
            let fnr = self.header(k)?.frame_nr();
            if fnr == 0 {
                return Ok(Some(max_frame as f64 + 1.0));
            }
            max_frame = max_frame.max(fnr);
            k += 1;
        }
        Ok(None)
    }
}
