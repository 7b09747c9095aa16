//! The host probes of `vdifrec doctor` (`crate::doctor`): the disk write test.

use super::errors;
use pyo3::prelude::*;

/// Host probe for `vdifrec doctor`: (bytes per second, O_DIRECT used) writing `max_bytes` (or
/// for `seconds`) into `directory` with `threads` writers of `block`-byte writes.
#[pyfunction]
fn disk_write_test(
    py: Python<'_>,
    directory: std::path::PathBuf,
    block: usize,
    threads: usize,
    max_bytes: u64,
    seconds: f64,
) -> PyResult<(f64, bool)> {
    py.detach(|| crate::doctor::disk_write_test(&directory, block, threads, max_bytes, seconds))
        .map_err(|e| {
            errors::io_err(
                &e,
                format!("write test in {}: {e}", directory.display()),
                &directory,
            )
        })
}

/// Registers the probes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(disk_write_test, m)?)?;
    Ok(())
}
