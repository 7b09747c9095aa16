//! What `vdifrec send --file F` / `--scan NAME --disk DIR` replays: a recording's whole frames
//! in recorded order, each exactly as recorded, and the rate it went at.
//!
//! The rate comes from the data: within a VDIF second that the recording has passed (a thread's
//! frames move on to a later second), the highest frame number + 1 is that thread's frames per
//! second; the highest over the first two whole seconds of every thread, so that a recording
//! that starts mid-second, or lost the last frames of a second, still reads right. A recording
//! that never passes a whole second (shorter than one, or than two when it starts mid-second
//! and ends before the next) takes the sample rate of its headers where the EDV carries one
//! (1, 3). Frames per second in all are that times the threads seen. A rate the user gives
//! (`rate`, bytes of frames per second) overrides both.

use crate::vdif::frames::FrameStore;
use crate::vdif::header::Header;
use crate::vdif::layout::Format;
use crate::vdif::scan::{scan_frames, ScanError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("file: cannot read {path}: {why}")]
    File { path: PathBuf, why: String },
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("rate: cannot tell the frame rate of {label}: it never passes a whole VDIF second (its frame numbers do not wrap to 0) and its headers ({edv}) carry no sample rate; give the rate to replay it at, e.g. 4Gbps or 500MB/s")]
    NoRate { label: String, edv: String },
}

/// What to replay.
#[derive(Clone, Debug, PartialEq)]
pub enum Recording {
    File(PathBuf),
    /// Scan `name` on `disks`, in `format` (None: detected).
    Scan {
        name: String,
        disks: Vec<PathBuf>,
        format: Option<Format>,
    },
}

/// How fast a replay goes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FrameRate {
    /// Frames per second per thread.
    pub per_thread: f64,
    pub threads: u32,
    /// How it was found: "frame-number wrap", "header" or "rate" (given).
    pub source: &'static str,
}

impl FrameRate {
    /// Frames per second, all threads.
    pub fn total(&self) -> f64 {
        self.per_thread * self.threads as f64
    }

    /// The rate of a recording of `frame_size`-byte frames: `given` (bytes of frames per
    /// second) where there is one, else from its frame-number wrap, else from its headers.
    pub fn of(clues: &RateClues, frame_size: usize, given: Option<f64>) -> Option<FrameRate> {
        let threads = clues.threads.max(1);
        let (per_thread, source) = match (given, clues.wrap, clues.header_fps) {
            (Some(bytes), _, _) => (bytes / frame_size as f64 / threads as f64, "rate"),
            (None, Some(max_nr), _) => (max_nr as f64 + 1.0, "frame-number wrap"),
            (None, None, Some(fps)) => (fps, "header"),
            (None, None, None) => return None,
        };
        Some(FrameRate {
            per_thread,
            threads,
            source,
        })
    }
}

/// What the start of a recording says about its rate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateClues {
    /// Distinct thread ids seen.
    pub threads: u32,
    /// The highest frame number in a whole VDIF second of any thread (None: none passed).
    pub wrap: Option<u32>,
    /// Frames per second per thread by the first header's sample rate (EDV 1 and 3).
    pub header_fps: Option<f64>,
}

/// One thread's walk through its seconds.
struct ThreadWalk {
    second: u32,
    highest: u32,
    /// Seconds this thread has passed.
    passed: u32,
}

/// Reads the headers from the start until every thread has passed two whole seconds (or one
/// thread three, or the recording ends): at most about three seconds of data.
pub fn rate_clues(frames: &FrameStore) -> RateClues {
    let fs = frames.frame_size();
    let mut threads: BTreeMap<u32, ThreadWalk> = BTreeMap::new();
    let mut wrap: Option<u32> = None;
    let mut first: Option<Header> = None;
    for k in 0..frames.n_frames() {
        let Ok(h) = Header::parse_unchecked(frames.frame(k)) else {
            continue;
        };
        if h.is_invalid() || h.frame_size() != fs {
            continue;
        }
        first.get_or_insert(h);
        let (second, nr) = (h.seconds(), h.frame_nr());
        let t = threads.entry(h.thread_id()).or_insert(ThreadWalk {
            second,
            highest: nr,
            passed: 0,
        });
        if second > t.second {
            wrap = wrap.max(Some(t.highest));
            t.passed += 1;
            t.second = second;
            t.highest = nr;
        } else if second == t.second {
            t.highest = t.highest.max(nr);
        }
        let passed = threads.values().map(|t| t.passed);
        if passed.clone().min() >= Some(2) || passed.max() >= Some(3) {
            break;
        }
    }
    let header_fps = first.and_then(|h| {
        let spf = h.samples_per_frame();
        h.sample_rate_hz()
            .filter(|_| spf > 0)
            .map(|sr| sr / spf as f64)
    });
    RateClues {
        threads: threads.len() as u32,
        wrap,
        header_fps,
    }
}

/// A recording opened for replay.
pub struct Replay {
    pub frames: FrameStore,
    /// What it is called in messages: the file, or the scan and its disks.
    pub label: String,
    pub first: Header,
    pub rate: FrameRate,
}

impl Replay {
    /// Opens (maps) the recording and works out its rate (`rate`: bytes of frames per second
    /// given by the user, overriding).
    pub fn open(what: &Recording, rate: Option<f64>) -> Result<Replay, ReplayError> {
        let (frames, label) = match what {
            Recording::File(path) => (map_file(path)?, path.display().to_string()),
            Recording::Scan {
                name,
                disks,
                format,
            } => {
                let (scan, frames) = scan_frames(name, disks, *format)?;
                (frames, scan.label())
            }
        };
        let first = Header::parse_unchecked(frames.frame(0)).map_err(|e| ReplayError::File {
            path: label.clone().into(),
            why: e.to_string(),
        })?;
        let rate =
            FrameRate::of(&rate_clues(&frames), frames.frame_size(), rate).ok_or_else(|| {
                ReplayError::NoRate {
                    label: label.clone(),
                    edv: first.edv().map_or("legacy".into(), |e| format!("EDV {e}")),
                }
            })?;
        Ok(Replay {
            frames,
            label,
            first,
            rate,
        })
    }
}

/// A VDIF file's whole frames, their size from its first header.
fn map_file(path: &std::path::Path) -> Result<FrameStore, ReplayError> {
    let err = |why: String| ReplayError::File {
        path: path.to_path_buf(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    // SAFETY: read-only map of a recording the operator asked to replay.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| err(e.to_string()))?;
    let h = Header::parse_unchecked(&map).map_err(|e| err(e.to_string()))?;
    let fs = h.frame_size();
    if fs <= h.header_size() {
        return Err(err(format!("its first frame claims {fs} bytes")));
    }
    crate::vdif::header::check_frame_size(fs)
        .map_err(|why| err(format!("its first frame: {why}")))?;
    if map.len() < fs {
        return Err(err(format!(
            "it holds {} bytes, less than the {fs}-byte frame its first header claims (is it VDIF?)",
            map.len()
        )));
    }
    Ok(FrameStore::file(path, map, fs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::generate::{frame_header, SignalSpec};

    const FS: usize = 64;

    /// Frames of `threads` threads at `fps` per thread, starting at frame number `start` of
    /// second 1000, `sets` frame sets, as a store (headers only; EDV `edv`).
    fn stream(fps: u32, threads: u32, start: u32, sets: u64, edv: u32) -> FrameStore {
        let spec = SignalSpec {
            frame_size: FS,
            fps,
            threads,
            edv,
            ref_epoch: Some(50),
            start_second: Some(1000),
            ..SignalSpec::default()
        };
        let mut template = spec.template().unwrap();
        template
            .set(crate::vdif::header::field::FRAME_NR, start)
            .unwrap();
        let n = sets as usize * threads as usize;
        let mut bytes = memmap2::MmapMut::map_anon(n * FS).unwrap();
        for set in 0..sets {
            for t in 0..threads {
                let at = (set as usize * threads as usize + t as usize) * FS;
                frame_header(&template, fps, set, t).write_to(&mut bytes[at..at + 32]);
            }
        }
        FrameStore::file(
            std::path::Path::new("test"),
            bytes.make_read_only().unwrap(),
            FS,
        )
    }

    #[test]
    fn the_wrap_gives_the_rate_even_from_mid_second() {
        // 1.5 s from the middle of a second: one whole second passed.
        let c = rate_clues(&stream(2000, 1, 1000, 3000, 0));
        assert_eq!((c.threads, c.wrap), (1, Some(1999)));
        let r = FrameRate::of(&c, FS, None).unwrap();
        assert_eq!(
            (r.per_thread, r.total(), r.source),
            (2000.0, 2000.0, "frame-number wrap")
        );
        // Four threads, from the start of a second, 3 s: the walk stops after two seconds.
        let c = rate_clues(&stream(500, 4, 0, 1500, 0));
        assert_eq!((c.threads, c.wrap), (4, Some(499)));
        assert_eq!(FrameRate::of(&c, FS, None).unwrap().total(), 2000.0);
    }

    #[test]
    fn a_lost_end_of_second_is_made_good_by_the_next() {
        // The first second's last 10 frames lost: the second whole second has them.
        let full = stream(1000, 1, 0, 2500, 0);
        let mut bytes = memmap2::MmapMut::map_anon((2500 - 10) * FS).unwrap();
        let mut at = 0;
        for k in (0..2500).filter(|k| !(990..1000).contains(k)) {
            bytes[at..at + FS].copy_from_slice(full.frame(k));
            at += FS;
        }
        let store = FrameStore::file(
            std::path::Path::new("t"),
            bytes.make_read_only().unwrap(),
            FS,
        );
        assert_eq!(rate_clues(&store).wrap, Some(999));
    }

    #[test]
    fn within_one_second_the_header_or_the_user_says() {
        // EDV 0: nothing to go by.
        let c = rate_clues(&stream(2000, 2, 100, 500, 0));
        assert_eq!((c.threads, c.wrap, c.header_fps), (2, None, None));
        assert_eq!(FrameRate::of(&c, FS, None), None);
        // 1 MB/s of 64-byte frames over two threads.
        let r = FrameRate::of(&c, FS, Some(1e6)).unwrap();
        assert_eq!(
            (r.total(), r.per_thread, r.source),
            (15625.0, 7812.5, "rate")
        );
        // EDV 3 carries the sample rate: the header says.
        let c = rate_clues(&stream(2000, 1, 100, 500, 3));
        let r = FrameRate::of(&c, FS, None).unwrap();
        assert_eq!((r.per_thread, r.source), (2000.0, "header"));
        // A given rate overrides the wrap.
        let c = rate_clues(&stream(2000, 1, 0, 3000, 0));
        assert_eq!(FrameRate::of(&c, FS, Some(64e3)).unwrap().total(), 1000.0);
    }
}
