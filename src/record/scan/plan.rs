//! A scan's plan, made when the scan is asked for: how fast the streams bring data, how many
//! writers that needs on how many disks, and the notes that tell the operator so, with
//! whether the disks hold what the scan will need. The gate then runs the plan.

use crate::record::scan::disks::{free_space_note, DiskSet};
use crate::record::scan::window::Window;
use crate::record::scan::{ScanRequest, ScanSetup, Split};
use crate::record::stats::CaptureStats;
use crate::vdif::layout::Format;

/// A scan ready to run: its name resolved, its window and writers decided.
#[derive(Clone, Debug)]
pub struct ScanPlan {
    pub name: String,
    pub requested_name: String,
    pub window: Window,
    pub start_text: Option<String>,
    pub stop_text: Option<String>,
    pub format: Format,
    pub chunk_bytes: u64,
    /// `file` scans rotated by size: bytes per file at most.
    pub file_bytes: Option<u64>,
    pub writers: usize,
    pub direct: bool,
    /// Frames per second per thread, given or as the stream has shown it, for the window and
    /// the space the scan needs.
    pub fps: Option<u32>,
    /// The rate the operator gave (`fps=`, `mode=`), the only one the scan's own counting
    /// starts from: a rate learned before the scan may be another stream's, so the scan
    /// learns its own from its frames.
    pub fps_given: Option<u32>,
    pub split: Option<Split>,
    pub writer_cpus: Vec<usize>,
    pub notes: Vec<String>,
    /// Each stream's ring write index when the scan was commanded (`Gate::hold`): the frames
    /// below it arrived before the command and are no part of the scan. Empty: none held.
    pub from_seq: Vec<u64>,
}

/// Writer threads for a stream of `bits_per_second`: one per 5 Gbit/s plus one, as FlexBuff
/// operators tune it; never more than there are disks to write to.
pub fn default_writers(bits_per_second: f64, disks: usize) -> usize {
    let per_rate = (bits_per_second / 5e9).ceil().max(1.0) as usize + 1;
    per_rate.min(disks.max(1))
}

/// The rate of every stream together, in bits per second: frames per second per thread
/// (`fps` given, or as each stream has seen), the frame size (given, or seen), the threads
/// each stream has shown.
pub fn bits_per_second(
    streams: &[CaptureStats],
    fps: Option<u32>,
    frame_size: Option<usize>,
) -> f64 {
    streams
        .iter()
        .map(|c| {
            let f = fps.unwrap_or(c.frames_per_second) as f64;
            let fs = frame_size.unwrap_or(c.frame_size) as f64;
            f * fs * 8.0 * c.totals.threads.max(1) as f64
        })
        .sum()
}

/// What a scan was asked as and what the recorder resolved for it before its plan is made.
pub struct Asked<'a> {
    pub request: &'a ScanRequest,
    /// The name on disk: the one asked for, or with jive5ab's suffix.
    pub name: String,
    pub window: Window,
    /// Frames per second per thread (given, or as seen), if known.
    pub fps: Option<u32>,
    /// Frames per second per thread as the operator gave them.
    pub fps_given: Option<u32>,
    /// Every stream together (`bits_per_second`).
    pub bits_per_second: f64,
    /// The disks still in the set (`DiskSet::alive`), at least one.
    pub alive: Vec<usize>,
    /// The CPUs the scan's writers may run on.
    pub writer_cpus: Vec<usize>,
}

/// The plan of a scan written as `setup` says to `disks`.
pub fn plan(setup: &ScanSetup, disks: &DiskSet, asked: Asked) -> ScanPlan {
    let Asked {
        request,
        name,
        window,
        fps,
        fps_given,
        bits_per_second,
        alive,
        writer_cpus,
    } = asked;
    let usable = if setup.format == Format::File {
        1
    } else {
        alive.len()
    };
    // One file is written in order by one writer.
    let writers = match setup.format {
        Format::File => 1,
        _ => setup
            .writers
            .unwrap_or_else(|| default_writers(bits_per_second, usable)),
    };
    let mut notes = vec![format!(
        "scan {name}: {} on {} disk(s), {writers} writer(s)",
        setup.format.name(),
        usable
    )];
    if name != request.name {
        notes.push(format!(
            "scan {}: exists already; recorded as {name}",
            request.name
        ));
    }
    notes.push(free_space_note(
        disks,
        &alive,
        &window,
        fps,
        bits_per_second / 8.0,
    ));
    ScanPlan {
        name,
        requested_name: request.name.clone(),
        start_text: request.start.map(|t| t.iso()),
        stop_text: request.stop.map(|t| t.iso()),
        window,
        format: setup.format,
        chunk_bytes: setup.chunk_bytes(),
        file_bytes: setup.file_bytes,
        writers,
        direct: setup.direct,
        fps,
        fps_given,
        split: setup.split,
        writer_cpus,
        notes,
        from_seq: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn writers_follow_the_rate_and_the_disks() {
        assert_eq!(default_writers(8.224e9, 12), 3);
        assert_eq!(default_writers(8.224e9, 2), 2);
        assert_eq!(default_writers(0.0, 12), 2);
    }

    #[test]
    fn the_rate_adds_every_stream_and_thread() {
        let mut a = CaptureStats::default();
        (a.frames_per_second, a.frame_size, a.totals.threads) = (1000, 8000, 2);
        let mut b = CaptureStats::default();
        (b.frames_per_second, b.frame_size) = (500, 8000);
        assert_eq!(bits_per_second(&[a.clone(), b.clone()], None, None), 160e6);
        // What was given counts over what was seen.
        assert_eq!(bits_per_second(&[a, b], Some(100), Some(1000)), 2.4e6);
    }

    #[test]
    fn a_plan_says_what_it_decided() {
        let disks = DiskSet::new(&[PathBuf::from("/"), PathBuf::from("/")], &[]);
        let setup = ScanSetup {
            disks: vec![],
            format: Format::Vbs,
            chunk_bytes: None,
            file_bytes: None,
            writers: None,
            faults: vec![],
            direct: false,
            split: None,
        };
        let request = ScanRequest {
            name: "s1".into(),
            start: None,
            stop: None,
        };
        let asked = |name: &str, alive: Vec<usize>| Asked {
            request: &request,
            name: name.into(),
            window: Window::default(),
            fps: None,
            fps_given: None,
            bits_per_second: 8.224e9,
            alive,
            writer_cpus: vec![],
        };
        let p = plan(&setup, &disks, asked("s1", vec![0, 1]));
        assert_eq!((p.writers, p.chunk_bytes), (2, 256 << 20));
        assert_eq!(p.notes[0], "scan s1: vbs on 2 disk(s), 2 writer(s)");
        assert!(p.notes[1].starts_with("disks: "), "{:?}", p.notes);
        // A name taken already is said; a file scan has one writer on one disk.
        let file = ScanSetup {
            format: Format::File,
            ..setup
        };
        let p = plan(&file, &disks, asked("s1a", vec![1]));
        assert_eq!(p.writers, 1);
        assert_eq!(
            p.notes[..2],
            [
                "scan s1a: file on 1 disk(s), 1 writer(s)",
                "scan s1: exists already; recorded as s1a"
            ]
        );
    }
}
