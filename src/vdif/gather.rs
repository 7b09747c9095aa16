//! `vdifrec gather`: a scan spread over disks (vbs chunks, Mark6 blocks) written back into one
//! VDIF file, its frames in order, as jive5ab's `disk2file` and DiFX's `mk6gather` do.
//!
//! A scan with a missing part is refused unless gaps are allowed; then what exists is written
//! and the report names what is missing. Torn pieces (`vdif::torn`: what a recorder stopped
//! mid-write left at a file's end) are no reason to refuse: the whole frames are written, and
//! the report names what was left out. The output is never overwritten, and a gather that
//! fails half-way removes what it wrote, so a file of that name is always a whole gather.

use crate::vdif::scan::{PartGap, ScanError, ScanLayout};
use crate::vdif::torn::TornPiece;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GatherError {
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("{0} exists: gather never overwrites a file; remove it or give another output")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read scan {scan}: {source}")]
    Read {
        scan: String,
        source: std::io::Error,
    },
}

/// What a gather wrote.
#[derive(Clone, Debug, Serialize)]
pub struct GatherReport {
    pub scan: String,
    pub format: crate::vdif::layout::Format,
    pub out: String,
    /// Bytes written: the sum of the parts found.
    pub bytes: u64,
    pub parts: usize,
    pub missing: Vec<u64>,
    pub gaps: Vec<PartGap>,
    /// Every part from 0 to the last was there.
    pub complete: bool,
    /// Torn pieces left out (bytes at files' ends that are not whole frames), and their bytes.
    pub torn: Vec<TornPiece>,
    pub torn_bytes: u64,
}

/// Writes the frames of `scan` in order into `out`, a new file.
pub fn gather(
    scan: &ScanLayout,
    out: &Path,
    allow_gaps: bool,
) -> Result<GatherReport, GatherError> {
    if !allow_gaps {
        scan.require_complete()?;
    }
    let gaps = scan.gaps()?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => GatherError::Exists(out.to_path_buf()),
            _ => GatherError::Write {
                path: out.to_path_buf(),
                source,
            },
        })?;
    let bytes = match copy(scan, file, out) {
        Ok(n) => n,
        Err(e) => {
            // Half a scan under the asked-for name would pass for a whole one.
            let _ = std::fs::remove_file(out);
            return Err(e);
        }
    };
    Ok(GatherReport {
        scan: scan.name.clone(),
        format: scan.format,
        out: out.display().to_string(),
        bytes,
        parts: scan.parts.len(),
        missing: scan.missing.clone(),
        complete: gaps.is_empty(),
        gaps,
        torn: scan.torn.clone(),
        torn_bytes: scan.torn_bytes(),
    })
}

fn copy(scan: &ScanLayout, file: File, out: &Path) -> Result<u64, GatherError> {
    let write = |source| GatherError::Write {
        path: out.to_path_buf(),
        source,
    };
    let mut w = BufWriter::with_capacity(8 << 20, file);
    let mut reader = scan.reader();
    let mut buf = vec![0u8; 8 << 20];
    let mut total = 0u64;
    loop {
        let n = match std::io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(GatherError::Read {
                    scan: scan.label(),
                    source,
                })
            }
        };
        w.write_all(&buf[..n]).map_err(write)?;
        total += n as u64;
    }
    let file = w.into_inner().map_err(|e| write(e.into_error()))?;
    file.sync_all().map_err(write)?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::layout;

    #[test]
    fn gathers_exactly_and_never_overwrites() {
        let root = std::env::temp_dir().join(format!("vdifrec-gather-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let disks: Vec<PathBuf> = (0..2).map(|i| root.join(format!("m{i}"))).collect();
        // 30 frames in three chunks of 10, 15 and 5 frames on two disks.
        let spec = crate::sources::generate::SignalSpec {
            frame_size: 32 + 256,
            fps: 10,
            nchan: 1,
            bits: 2,
            threads: 1,
            ref_epoch: Some(53),
            start_second: Some(7),
            ..Default::default()
        };
        let mut data = Vec::new();
        crate::sources::generate::write_frames(&spec, 30, &mut data, "memory").unwrap();
        let fs = spec.frame_size;
        for (n, range) in [(0u64, 0..10), (1, 10..25), (2, 25..30)] {
            let p = layout::vbs_chunk_path(&disks[n as usize % 2], "g", n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &data[range.start * fs..range.end * fs]).unwrap();
        }
        let scan = ScanLayout::locate("g", &disks, None).unwrap();
        let out = root.join("out.vdif");
        let r = gather(&scan, &out, false).unwrap();
        assert_eq!(r.bytes, data.len() as u64);
        assert!(r.complete);
        assert_eq!(std::fs::read(&out).unwrap(), data);
        assert!(matches!(
            gather(&scan, &out, false),
            Err(GatherError::Exists(_))
        ));

        std::fs::remove_file(layout::vbs_chunk_path(&disks[1], "g", 1)).unwrap();
        let scan = ScanLayout::locate("g", &disks, None).unwrap();
        let out2 = root.join("out2.vdif");
        assert!(matches!(
            gather(&scan, &out2, false),
            Err(GatherError::Scan(ScanError::Gaps { .. }))
        ));
        assert!(!out2.exists());
        let r = gather(&scan, &out2, true).unwrap();
        assert!(!r.complete);
        assert_eq!(r.missing, vec![1]);
        let mut want = data[..10 * fs].to_vec();
        want.extend(&data[25 * fs..]);
        assert_eq!(std::fs::read(&out2).unwrap(), want);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
