//! What one disk holds of one scan name, as the catalogue or a listing found it.

use super::read::VbsDir;
use crate::vdif::layout::{self, Format};
use std::path::PathBuf;

/// What one disk holds of one scan name, in every layout it could be in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holding {
    /// The disk as the caller named it.
    pub disk: PathBuf,
    /// `<scan>.vdif`, `<scan>.NNNN.vdif`: (part number, path), by number.
    pub file_parts: Vec<(u64, PathBuf)>,
    /// `<scan>/`, where it is a directory.
    pub vbs: Option<VbsDir>,
    /// `<scan>`, where it is a file.
    pub mk6: Option<PathBuf>,
    /// `.vdifrec/<scan>.summary.json` and `.vdifrec/<scan>.repair.json` (file and mk6 scans).
    pub noted_summary: bool,
    pub noted_repair: bool,
}

impl Holding {
    /// Nothing of the scan on this disk.
    pub fn is_empty(&self) -> bool {
        self.file_parts.is_empty()
            && self.vbs.is_none()
            && self.mk6.is_none()
            && !self.noted_summary
            && !self.noted_repair
    }

    /// The layouts the scan is found in on this disk.
    pub fn formats(&self) -> Vec<Format> {
        let mut f = Vec::new();
        if !self.file_parts.is_empty() {
            f.push(Format::File);
        }
        if self.vbs.as_ref().is_some_and(|v| !v.chunks.is_empty()) {
            f.push(Format::Vbs);
        }
        if self.mk6.is_some() {
            f.push(Format::Mk6);
        }
        f
    }

    /// The recorder's summary of the scan on this disk, where there is one.
    pub fn summary(&self, name: &str, format: Format) -> Option<PathBuf> {
        let there = match format {
            Format::Vbs => self.vbs.as_ref().is_some_and(|v| v.summary),
            _ => self.noted_summary,
        };
        there.then(|| layout::summary_path(&self.disk, name, format))
    }

    /// The report `scans --repair` left beside the scan on this disk, where there is one.
    pub fn repair(&self, name: &str, format: Format) -> Option<PathBuf> {
        let there = match format {
            Format::Vbs => self.vbs.as_ref().is_some_and(|v| v.repair),
            _ => self.noted_repair,
        };
        there.then(|| layout::repair_path(&self.disk, name, format))
    }
}
