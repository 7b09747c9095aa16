//! `vdifrec convert`: a VDIF file, or a scan in any layout, written through a `Transform`
//! (threads kept, channels corner-turned, frames cut smaller) into a new VDIF file.
//!
//! Everything that can be checked is checked before the output is made: the options, against
//! the stream's first header and its threads (those of its first frame sets, as baseband
//! learns them), and the output, never the input itself. A frame unlike the first (another
//! size or layout, a header that does not parse) stops the conversion, naming the frame and
//! where it lies. The output is written beside its name (`.NAME.part-PID`) and renamed to it
//! once whole, so that a file of that name is always a whole conversion: a conversion that
//! fails (a frame unlike the first, a full disk) leaves no part and, with `force`, the file it
//! would have replaced as it was.
//!
//! The frames of one time (a frame set: one frame per thread) are written together in
//! frame-number order: a frame cut into k pieces makes frames f·k … f·k + k − 1 of every
//! output thread, and a reader (baseband's, `vdifrec check`) wants the frames of each number
//! together, not thread after thread.

use super::file::{first_thread_ids, map_file, FileError};
use super::frames::FrameStore;
use super::header::{field, Header};
use super::layout::Format;
use super::scan::{scan_frames, ScanError};
use super::torn::TornPiece;
use super::transform::{Transform, TransformSpec};
use crate::options::ArgError;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Where the frames come from.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    File(&'a Path),
    /// A scan by name on its disks (`format` None: detected).
    Scan {
        name: &'a str,
        disks: &'a [PathBuf],
        format: Option<Format>,
    },
}

#[derive(Debug, Error)]
pub enum ConvertError {
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("{0} exists: remove it, give another output, or let it be overwritten (force=True, --force)")]
    Exists(PathBuf),
    #[error("{input}: frame {index} (byte {offset} of {path}): {why}; `vdifrec check` shows what is wrong there")]
    Frame {
        input: String,
        index: usize,
        path: String,
        offset: usize,
        why: String,
    },
    #[error("cannot make {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing failed once the output was made (a full disk, an I/O error): what the
    /// conversion had written, none of which is left.
    #[error("cannot write {path}: {source}, after {frames} frames ({bytes} bytes) of the conversion; {left}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
        frames: u64,
        bytes: u64,
        left: &'static str,
    },
}

/// What a conversion read and wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ConvertReport {
    /// The file, or the scan as `vdifrec scans` names it (name, layout, disks).
    pub input: String,
    /// `file`, `vbs` or `mk6` for a scan; `file` for a file given by its path.
    pub format: String,
    pub out: String,
    pub frames_in: u64,
    /// Frames of the threads kept (all of them without `threads`).
    pub frames_kept: u64,
    pub frames_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub frame_size_in: usize,
    pub frame_size_out: usize,
    /// Output frames per frame kept.
    pub fan_out: usize,
    /// Thread IDs read and written, sorted.
    pub threads_in: Vec<u32>,
    pub threads_out: Vec<u32>,
    pub channels_in: u32,
    pub channels_out: u32,
    /// Bytes at the ends of files that were not whole frames, left out (a scan's torn pieces,
    /// a file's cut-short last frame).
    pub torn: Vec<TornPiece>,
    pub torn_bytes: u64,
}

/// Converts `input` into the new file `out` (an existing one only with `force`, and never the
/// input itself).
pub fn convert(
    input: Input,
    out: &Path,
    spec: &TransformSpec,
    force: bool,
) -> Result<ConvertReport, ConvertError> {
    spec.check()?;
    let source = Source::open(input)?;
    let header0 =
        Header::parse(source.frames.frame(0)).map_err(|source_err| FileError::FirstHeader {
            path: PathBuf::from(&source.label),
            source: source_err,
        })?;
    let mut transform = spec.build(&header0)?;
    let first_threads = first_thread_ids(&source.frames)?;
    if let Some(t) = spec
        .threads
        .iter()
        .flatten()
        .find(|t| !first_threads.contains(t))
    {
        return Err(ArgError::new(
            "threads",
            format!(
                "thread {t} is not in {}: its threads are {} (from its first frames)",
                source.label,
                crate::vdif::scan::runs(
                    &first_threads
                        .iter()
                        .map(|&t| u64::from(t))
                        .collect::<Vec<_>>()
                )
            ),
        )
        .into());
    }
    for &t in first_threads.iter().filter(|&&t| transform.wants(t)) {
        transform.out_threads(t)?;
    }
    let replaces = check_out(out, &source.paths, force)?;
    let part = Part::create(out)?;
    let left = if replaces {
        "the file of that name is as it was"
    } else {
        "nothing was left under that name"
    };
    let counts = write(&source, &mut transform, &part, out, left)?;
    part.finish(out, force)?;
    let mut threads_out = Vec::new();
    for t in counts.threads().filter(|&t| transform.wants(t)) {
        threads_out.extend(transform.out_threads(t)?);
    }
    threads_out.sort_unstable();
    let fs = source.frames.frame_size();
    Ok(ConvertReport {
        input: source.label,
        format: source.format.name().to_string(),
        out: out.display().to_string(),
        frames_in: source.frames.n_frames() as u64,
        frames_kept: counts.kept,
        frames_out: counts.out,
        bytes_in: (source.frames.n_frames() * fs) as u64,
        bytes_out: counts.out * transform.out_frame_size() as u64,
        frame_size_in: fs,
        frame_size_out: transform.out_frame_size(),
        fan_out: transform.fan_out(),
        threads_in: counts.threads().collect(),
        threads_out,
        channels_in: header0.nchan(),
        channels_out: if spec.channels.is_some() {
            1
        } else {
            header0.nchan()
        },
        torn_bytes: source.torn.iter().map(|t| t.bytes).sum(),
        torn: source.torn,
    })
}

/// `spec` applied to `frames`, whole frames held in memory (the first header sets the
/// stream), the output frames of each frame set in frame-number order as `convert` writes them.
pub fn convert_frames(spec: &TransformSpec, frames: &[u8]) -> Result<Vec<u8>, ConvertError> {
    let mut out = vec![0u8; output_bytes(spec, frames)?];
    let n = convert_frames_into(spec, frames, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// The bytes `convert_frames` makes of `frames` at most (exactly, when every thread is kept).
pub fn output_bytes(spec: &TransformSpec, frames: &[u8]) -> Result<usize, ConvertError> {
    let (transform, n) = memory_stream(spec, frames)?;
    Ok(n * transform.fan_out() * transform.out_frame_size())
}

/// `convert_frames` into `out` (`output_bytes` long at least); returns the bytes written.
pub fn convert_frames_into(
    spec: &TransformSpec,
    frames: &[u8],
    out: &mut [u8],
) -> Result<usize, ConvertError> {
    let (mut transform, n) = memory_stream(spec, frames)?;
    let most = n * transform.fan_out() * transform.out_frame_size();
    if out.len() < most {
        return Err(ArgError::new(
            "out",
            format!("{} bytes is too small: the output takes {most}", out.len()),
        )
        .into());
    }
    let fs = frames.len() / n;
    let mut sets = FrameSets::new(transform.out_frame_size());
    let mut at = 0;
    for (index, frame) in frames.chunks_exact(fs).enumerate() {
        sets.next_frame(frame, &mut out[..at]);
        let k = transform
            .apply_to_slice(frame, &mut out[at..])
            .map_err(|why| ConvertError::Frame {
                input: "frames".into(),
                index,
                path: "frames".into(),
                offset: index * fs,
                why,
            })?;
        at += k * transform.out_frame_size();
    }
    sets.close(&mut out[..at]);
    Ok(at)
}

/// The transform of whole frames held in memory, and how many there are.
fn memory_stream(spec: &TransformSpec, frames: &[u8]) -> Result<(Transform, usize), ConvertError> {
    spec.check()?;
    let first = Header::parse(frames)
        .map_err(|e| ArgError::new("frames", format!("the first frame: {e}")))?;
    let fs = first.frame_size();
    if frames.len() % fs != 0 {
        return Err(ArgError::new(
            "frames",
            format!(
                "{} bytes are not whole frames of {fs} bytes (the first header's size)",
                frames.len()
            ),
        )
        .into());
    }
    Ok((spec.build(&first)?, frames.len() / fs))
}

/// The input's frames, its name in messages and the files it lies in.
struct Source {
    frames: FrameStore,
    label: String,
    format: Format,
    paths: Vec<PathBuf>,
    torn: Vec<TornPiece>,
}

impl Source {
    fn open(input: Input) -> Result<Source, ConvertError> {
        match input {
            Input::File(path) => {
                let frames = map_file(path)?;
                let len = std::fs::metadata(path).map_or(0, |m| m.len());
                Ok(Source {
                    label: path.display().to_string(),
                    format: Format::File,
                    paths: vec![path.to_path_buf()],
                    torn: TornPiece::file_tail(path, len, frames.frame_size())
                        .into_iter()
                        .collect(),
                    frames,
                })
            }
            Input::Scan {
                name,
                disks,
                format,
            } => {
                let (scan, frames) = scan_frames(name, disks, format)?;
                Ok(Source {
                    label: scan.label(),
                    format: scan.format,
                    paths: scan.parts.iter().map(|p| p.path.clone()).collect(),
                    torn: scan.torn,
                    frames,
                })
            }
        }
    }
}

/// Whether `out` may be written: absent, or there and `force` given, but never one of
/// `inputs`; true when it is there (and will be replaced).
fn check_out(out: &Path, inputs: &[PathBuf], force: bool) -> Result<bool, ConvertError> {
    if let Ok(o) = std::fs::metadata(out) {
        let same = |p: &PathBuf| {
            std::fs::metadata(p).is_ok_and(|m| m.dev() == o.dev() && m.ino() == o.ino())
        };
        if inputs.iter().any(same) {
            return Err(ArgError::new(
                "out",
                format!("{} is the input: give another file to write", out.display()),
            )
            .into());
        }
        if !force {
            return Err(ConvertError::Exists(out.to_path_buf()));
        }
        return Ok(true);
    }
    Ok(false)
}

/// The output while it is written: a file beside `out`, removed unless `finish` renames it.
struct Part {
    path: PathBuf,
    file: Option<File>,
}

impl Part {
    fn create(out: &Path) -> Result<Part, ConvertError> {
        let name = out
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        let path = out.with_file_name(format!(".{name}.part-{}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| ConvertError::Create {
                path: out.to_path_buf(),
                source,
            })?;
        Ok(Part {
            path,
            file: Some(file),
        })
    }

    /// The whole output under its name. Without `force` a file that appeared there meanwhile
    /// is kept (a hard link is made only where the name is free); with it, replaced.
    fn finish(mut self, out: &Path, force: bool) -> Result<(), ConvertError> {
        self.file = None;
        let done = if force {
            std::fs::rename(&self.path, out)
        } else {
            std::fs::hard_link(&self.path, out).or_else(|e| match e.kind() {
                // A file system without hard links (vfat, exFAT): a rename where the name is
                // still free (it was a moment ago).
                std::io::ErrorKind::AlreadyExists => Err(e),
                _ if out.symlink_metadata().is_err() => std::fs::rename(&self.path, out),
                _ => Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
            })
        };
        done.map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => ConvertError::Exists(out.to_path_buf()),
            _ => ConvertError::Create {
                path: out.to_path_buf(),
                source,
            },
        })
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        // After a rename there is nothing here to remove; after a link, the part's name.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What went through: frames kept and written, and every input thread seen.
struct Counts {
    kept: u64,
    out: u64,
    seen: Vec<bool>,
}

impl Counts {
    fn threads(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.seen.len() as u32).filter(|&t| self.seen[t as usize])
    }
}

fn write(
    source: &Source,
    transform: &mut Transform,
    part: &Part,
    out: &Path,
    left: &'static str,
) -> Result<Counts, ConvertError> {
    let file = part
        .file
        .as_ref()
        .expect("a part being written has its file");
    let frame_size = transform.out_frame_size() as u64;
    // What the conversion got to before the error: what reached the part (removed since), in
    // whole frames.
    let write_err = |source| {
        let bytes = file.metadata().map_or(0, |m| m.len());
        ConvertError::Write {
            path: out.to_path_buf(),
            source,
            frames: bytes / frame_size,
            bytes: bytes / frame_size * frame_size,
            left,
        }
    };
    let mut w = BufWriter::with_capacity(8 << 20, file);
    let mut sets = FrameSets::new(transform.out_frame_size());
    // The output of the frame set under way (written once the next set starts).
    let mut pending = Vec::new();
    let mut counts = Counts {
        kept: 0,
        out: 0,
        seen: vec![false; field::THREAD_ID.max() as usize + 1],
    };
    for index in 0..source.frames.n_frames() {
        let frame = source.frames.frame(index);
        if sets.next_frame(frame, &mut pending) || pending.len() > MOST_PENDING {
            w.write_all(&pending).map_err(write_err)?;
            pending.clear();
            sets.restart();
        }
        let refused = |why| {
            let (path, offset) = source.frames.whereis(index);
            ConvertError::Frame {
                input: source.label.clone(),
                index,
                path: path.display().to_string(),
                offset,
                why,
            }
        };
        let thread = Header::parse_unchecked(frame)
            .map_err(|e| refused(e.to_string()))?
            .thread_id();
        counts.seen[thread as usize] = true;
        let n = transform.apply(frame, &mut pending).map_err(refused)?;
        if n > 0 {
            counts.kept += 1;
            counts.out += n as u64;
        }
    }
    sets.close(&mut pending);
    w.write_all(&pending).map_err(write_err)?;
    w.flush().map_err(write_err)?;
    file.sync_all().map_err(write_err)?;
    Ok(counts)
}

/// The frame sets (the input frames of one second and frame number) of the output: each put
/// in frame-number order once complete. The output of the set under way is the end of a
/// buffer, from `start`.
struct FrameSets {
    start: usize,
    key: Option<(u32, u32)>,
    frame_size: usize,
}

/// Output held back at most: a stream whose frames never change time (a broken one) is
/// written as it comes rather than held whole.
const MOST_PENDING: usize = 64 << 20;

impl FrameSets {
    fn new(frame_size: usize) -> FrameSets {
        FrameSets {
            start: 0,
            key: None,
            frame_size,
        }
    }

    /// Call before the output of input `frame` is appended to `buf`: when the frame starts a
    /// new set, the set before it is put in order, and true says it is complete.
    fn next_frame(&mut self, frame: &[u8], buf: &mut [u8]) -> bool {
        let key = Header::parse_unchecked(frame)
            .ok()
            .map(|h| (h.get(field::SECONDS), h.frame_nr()));
        if key == self.key {
            return false;
        }
        self.key = key;
        self.close(buf);
        self.start = buf.len();
        true
    }

    /// The buffer was emptied: the set under way starts at its beginning.
    fn restart(&mut self) {
        self.start = 0;
    }

    /// Puts the set under way in frame-number order (a stable sort: threads keep their order
    /// within a number). Frames cut into k make numbers f·k … f·k + k − 1 for every thread.
    fn close(&mut self, buf: &mut [u8]) {
        let set = &mut buf[self.start..];
        let number =
            |f: &[u8]| u32::from_le_bytes([f[4], f[5], f[6], f[7]]) & field::FRAME_NR.max();
        let frames = || set.chunks_exact(self.frame_size);
        if frames()
            .zip(frames().skip(1))
            .all(|(a, b)| number(a) <= number(b))
        {
            return;
        }
        let mut order: Vec<&[u8]> = frames().collect();
        order.sort_by_key(|f| number(f));
        let sorted = order.concat();
        set.copy_from_slice(&sorted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::generate::{write_frames, SignalSpec};
    use crate::vdif::layout;
    use crate::vdif::transform::parse_index_list;

    fn stream(nchan: u32, threads: u32, frame_sets: u64) -> (SignalSpec, Vec<u8>) {
        let spec = SignalSpec {
            frame_size: 32 + 1024,
            fps: 100,
            nchan,
            bits: 2,
            threads,
            ref_epoch: Some(53),
            start_second: Some(7),
            ..Default::default()
        };
        let mut data = Vec::new();
        write_frames(&spec, frame_sets, &mut data, "memory").unwrap();
        (spec, data)
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vdifrec-convert-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn keys(data: &[u8], fs: usize) -> Vec<(u32, u32)> {
        data.chunks_exact(fs)
            .map(|f| {
                let h = Header::parse(f).unwrap();
                (h.frame_nr(), h.thread_id())
            })
            .collect()
    }

    #[test]
    fn a_file_converts_in_frame_set_order_and_is_never_the_input() {
        let d = dir("file");
        let (_, data) = stream(4, 2, 3); // 3 frame sets of 2 threads
        let input = d.join("in.vdif");
        std::fs::write(&input, &data).unwrap();
        let spec = TransformSpec {
            threads: None,
            channels: Some(parse_index_list("channels", "1,3").unwrap()),
            payload: Some(128),
        };
        let out = d.join("out.vdif");
        let r = convert(Input::File(&input), &out, &spec, false).unwrap();
        assert_eq!((r.frames_in, r.frames_kept, r.frames_out), (6, 6, 6 * 4));
        assert_eq!(
            (r.frame_size_out, r.fan_out, r.channels_out),
            (32 + 128, 4, 1)
        );
        assert_eq!(r.threads_in, [0, 1]);
        assert_eq!(r.threads_out, [1, 3, 5, 7]);
        let written = std::fs::read(&out).unwrap();
        assert_eq!(written.len() as u64, r.bytes_out);
        let k = keys(&written, 160);
        // Frame set f: frames 2f and 2f+1 of threads 1, 3 (thread 0), 5, 7 (thread 1).
        let want: Vec<(u32, u32)> = (0..3)
            .flat_map(|f| (0..2).flat_map(move |i| [1, 3, 5, 7].map(|t| (2 * f + i, t))))
            .collect();
        assert_eq!(k, want);
        assert_eq!(written, convert_frames(&spec, &data).unwrap());

        assert!(matches!(
            convert(Input::File(&input), &out, &spec, false),
            Err(ConvertError::Exists(_))
        ));
        assert!(convert(Input::File(&input), &out, &spec, true).is_ok());
        let e = convert(Input::File(&input), &input, &spec, true).unwrap_err();
        assert!(
            matches!(e, ConvertError::BadArgument(ref a) if a.name == "out"),
            "{e}"
        );
        assert_eq!(std::fs::read(&input).unwrap(), data);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_options_are_named_before_anything_is_written() {
        let d = dir("bad");
        let (_, data) = stream(4, 2, 4);
        let input = d.join("in.vdif");
        std::fs::write(&input, &data).unwrap();
        let out = d.join("out.vdif");
        for (spec, name, says) in [
            (
                TransformSpec {
                    threads: Some(vec![5]),
                    ..Default::default()
                },
                "threads",
                "its threads are 0-1",
            ),
            (
                TransformSpec {
                    channels: Some(vec![4]),
                    ..Default::default()
                },
                "channels",
                "has 4 channels",
            ),
            (
                TransformSpec {
                    payload: Some(1000),
                    ..Default::default()
                },
                "payload",
                "such as",
            ),
        ] {
            let e = convert(Input::File(&input), &out, &spec, false).unwrap_err();
            assert!(
                matches!(e, ConvertError::BadArgument(ref a) if a.name == name && a.why.contains(says)),
                "{e}"
            );
            assert!(!out.exists());
        }
        // A frame unlike the first stops it, and what was written is removed.
        let mut bad = data.clone();
        bad[3 * 1056 + 11] ^= 0x02; // frame 3: 8 channels
        std::fs::write(&input, &bad).unwrap();
        let spec = TransformSpec {
            channels: Some(vec![0]),
            ..Default::default()
        };
        let e = convert(Input::File(&input), &out, &spec, false).unwrap_err();
        assert!(e.to_string().contains("frame 3 (byte 3168"), "{e}");
        assert!(!out.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_vbs_scan_converts_like_its_gathered_file() {
        let d = dir("vbs");
        let disks: Vec<PathBuf> = (0..2).map(|i| d.join(format!("m{i}"))).collect();
        let (spec, data) = stream(8, 1, 20);
        let fs = spec.frame_size;
        for (n, range) in [(0u64, 0..7), (1, 7..20)] {
            let p = layout::vbs_chunk_path(&disks[n as usize], "s", n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &data[range.start * fs..range.end * fs]).unwrap();
        }
        let t = TransformSpec {
            channels: Some(vec![0, 7]),
            ..Default::default()
        };
        let out = d.join("out.vdif");
        let input = Input::Scan {
            name: "s",
            disks: &disks,
            format: None,
        };
        let r = convert(input, &out, &t, false).unwrap();
        assert_eq!((r.format.as_str(), r.frames_out), ("vbs", 40));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            convert_frames(&t, &data).unwrap()
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
