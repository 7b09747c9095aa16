//! Scans on several disks (`vdif::scan`): the listing, the gathering of one into a file
//! (`vdif::gather`) and the repair of one left torn (`vdif::repair`). Opening a scan for samples is `FileReader.scan` (`file.rs`), its check
//! `check_scan` (`check.rs`).

use super::errors::{gather_err, repair_err, scan_err, ArgumentError};
use super::to_json;
use crate::vdif::gather::gather as gather_scan;
use crate::vdif::layout::Format;
use crate::vdif::repair::repair as repair_scan;
use crate::vdif::scan::{find_scans_matching, ScanLayout};
use pyo3::prelude::*;
use std::path::PathBuf;

/// The `format` argument: a layout's name, or None to detect it.
pub(crate) fn format_arg(format: Option<&str>) -> PyResult<Option<Format>> {
    format
        .map(|f| {
            Format::parse(f).ok_or_else(|| {
                ArgumentError::new_err(format!(
                    "format: {f:?} is not a scan layout; use {}",
                    Format::NAMES
                ))
            })
        })
        .transpose()
}

/// Finds scan `name` on `disks`.
pub(crate) fn locate(
    py: Python<'_>,
    name: &str,
    disks: &[PathBuf],
    format: Option<&str>,
) -> PyResult<ScanLayout> {
    let format = format_arg(format)?;
    py.detach(|| ScanLayout::locate(name, disks, format))
        .map_err(scan_err)
}

/// The scans on `disks` (those whose names match the shell-style `name`, in `format`), as
/// JSON text (a list of summaries).
#[pyfunction]
#[pyo3(signature = (disks, name=None, format=None, progress=false))]
pub fn scans(
    py: Python<'_>,
    disks: Vec<PathBuf>,
    name: Option<&str>,
    format: Option<&str>,
    progress: bool,
) -> PyResult<String> {
    let format = format_arg(format)?;
    let found = py
        .detach(|| find_scans_matching(&disks, name, format, progress))
        .map_err(scan_err)?;
    to_json(&found)
}

/// The names at the top of `disks` (scans, by their names; single-file scans by their files'
/// stems), as the catalogue holds them: those matching the shell-style `pattern`, `limit` of
/// them from the `offset`-th, with how many there are; JSON text. No disk is walked.
#[pyfunction]
#[pyo3(signature = (disks, pattern=None, offset=0, limit=None))]
pub fn scan_names(
    py: Python<'_>,
    disks: Vec<PathBuf>,
    pattern: Option<&str>,
    offset: usize,
    limit: Option<usize>,
) -> PyResult<String> {
    let page = py
        .detach(|| crate::vdif::scan::scan_names(&disks, pattern, offset, limit))
        .map_err(scan_err)?;
    to_json(&page)
}

/// Scan `name` on `disks`, as `scans` lists it (JSON text), found by its name alone: no
/// listing of everything else on the disks.
#[pyfunction]
#[pyo3(signature = (name, disks, format=None))]
pub fn scan_info(
    py: Python<'_>,
    name: &str,
    disks: Vec<PathBuf>,
    format: Option<&str>,
) -> PyResult<String> {
    let scan = locate(py, name, &disks, format)?;
    let summary = py.detach(|| scan.summary()).map_err(scan_err)?;
    to_json(&summary)
}

/// Writes scan `name`'s frames in order into the new file `out`; the report as JSON text.
#[pyfunction]
#[pyo3(signature = (name, disks, out, format=None, allow_gaps=false))]
pub fn gather(
    py: Python<'_>,
    name: &str,
    disks: Vec<PathBuf>,
    out: PathBuf,
    format: Option<&str>,
    allow_gaps: bool,
) -> PyResult<String> {
    let scan = locate(py, name, &disks, format)?;
    let report = py
        .detach(|| gather_scan(&scan, &out, allow_gaps))
        .map_err(gather_err)?;
    to_json(&report)
}

/// Cuts scan `name`'s torn pieces back to whole frames; the report as JSON text.
#[pyfunction]
#[pyo3(signature = (name, disks, format=None))]
pub fn repair(
    py: Python<'_>,
    name: &str,
    disks: Vec<PathBuf>,
    format: Option<&str>,
) -> PyResult<String> {
    let format = format_arg(format)?;
    let report = py
        .detach(|| repair_scan(name, &disks, format))
        .map_err(repair_err)?;
    to_json(&report)
}

/// Why the recorder would refuse `name` for a scan (None: it takes it): the rule the schedule
/// reader checks its names on disk against.
#[pyfunction]
pub fn scan_name_problem(name: &str) -> Option<String> {
    crate::vdif::layout::scan_name_problem(name)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scans, m)?)?;
    m.add_function(wrap_pyfunction!(scan_name_problem, m)?)?;
    m.add_function(wrap_pyfunction!(repair, m)?)?;
    m.add_function(wrap_pyfunction!(scan_info, m)?)?;
    m.add_function(wrap_pyfunction!(scan_names, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    Ok(())
}
