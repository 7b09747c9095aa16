//! The benchmarks' baselines (`bench` feature only: never in an installed vdifrec): a
//! receive-and-discard loop, the writer fed from memory, a plain lookup-table decode.

use super::errors::{arg_err, RecorderError};
use super::to_json;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Mutex;

/// Benchmark baseline: a plain recvmmsg-and-discard receiver on `bind:port`.
#[pyclass(module = "vdifrec._core", frozen)]
pub struct DiscardReceiver {
    inner: Mutex<crate::baseline::DiscardReceiver>,
    #[pyo3(get)]
    port: u16,
}

#[pymethods]
impl DiscardReceiver {
    #[new]
    #[pyo3(signature = (bind="127.0.0.1", port=0, rcvbuf=268435456, span=0))]
    fn new(bind: &str, port: u16, rcvbuf: usize, span: usize) -> PyResult<Self> {
        let r = crate::baseline::DiscardReceiver::start(
            crate::options::ip("bind", bind).map_err(arg_err)?,
            port,
            rcvbuf,
            span,
        )
        .map_err(|e| RecorderError::new_err(e.to_string()))?;
        let port = r.local.port();
        Ok(DiscardReceiver {
            inner: Mutex::new(r),
            port,
        })
    }

    fn received(&self) -> u64 {
        self.inner.lock().unwrap().received()
    }

    /// Stops; JSON with datagrams, bytes, kernel_drops, cpu_s, wall_s.
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
        let r = py.detach(|| self.inner.lock().unwrap().stop());
        to_json(&r)
    }
}

/// Benchmark probe: the writer alone, fed from memory; JSON with bytes, seconds, cpu_s, direct.
#[pyfunction]
#[pyo3(signature = (directory, total_bytes, frame_size=8224, direct=true))]
fn writer_throughput(
    py: Python<'_>,
    directory: std::path::PathBuf,
    total_bytes: u64,
    frame_size: usize,
    direct: bool,
) -> PyResult<String> {
    let r = py
        .detach(|| crate::baseline::writer_throughput(&directory, total_bytes, frame_size, direct))
        .map_err(RecorderError::new_err)?;
    to_json(&r)
}

/// The forwarder's baseline: `frames` frames sent to `host:port` with a plain sendmmsg loop
/// paced to `per_second`; JSON with frames, bytes, cpu_s, wall_s.
#[pyfunction]
#[pyo3(signature = (host, port, frames, frame_size=8224, per_second=125000.0))]
fn sendmmsg_loop(
    py: Python<'_>,
    host: &str,
    port: u16,
    frames: u64,
    frame_size: usize,
    per_second: f64,
) -> PyResult<String> {
    let to = std::net::SocketAddr::new(crate::options::ip("host", host).map_err(arg_err)?, port);
    let r = py
        .detach(|| crate::baseline::sendmmsg_loop(to, frames, frame_size, per_second))
        .map_err(|e| RecorderError::new_err(e.to_string()))?;
    to_json(&r)
}

/// The benchmark baseline: a plain lookup-table loop over bytes (2-bit, 4 values a byte), no
/// frames, no headers: the memory-bandwidth limit a decoder can approach.
#[pyfunction]
fn plain_lut_decode(
    py: Python<'_>,
    data: numpy::PyReadonlyArray1<'_, u8>,
    out: &Bound<'_, PyArray1<f32>>,
) -> PyResult<()> {
    let lut: Vec<[f32; 4]> = (0..256u32)
        .map(|b| {
            let lv = crate::vdif::decode::levels(2).expect("2-bit levels");
            [0, 1, 2, 3].map(|k| lv[(b >> (2 * k) & 3) as usize])
        })
        .collect();
    let src = data
        .as_slice()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut rw = out.readwrite();
    let dst = rw
        .as_slice_mut()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if dst.len() < 4 * src.len() {
        return Err(PyValueError::new_err(
            "out must hold 4 values per input byte",
        ));
    }
    py.detach(|| {
        for (b, o) in src.iter().zip(dst.chunks_exact_mut(4)) {
            o.copy_from_slice(&lut[*b as usize]);
        }
    });
    Ok(())
}

/// Benchmark probe: the scan writers alone, fed from memory, one scan over `disks`; JSON
/// with bytes, seconds, direct.
#[pyfunction]
#[pyo3(signature = (disks, total_bytes, format="vbs", chunk_size=268435456, writers=3, frame_size=8224))]
fn scan_writer_throughput(
    py: Python<'_>,
    disks: Vec<std::path::PathBuf>,
    total_bytes: u64,
    format: &str,
    chunk_size: u64,
    writers: usize,
    frame_size: usize,
) -> PyResult<String> {
    let format = crate::vdif::layout::Format::parse(format)
        .ok_or_else(|| RecorderError::new_err(format!("format {format:?}: file, vbs or mk6")))?;
    let r = py
        .detach(|| {
            crate::baseline::scan_writer_throughput(
                &disks,
                total_bytes,
                frame_size,
                format,
                chunk_size,
                writers,
            )
        })
        .map_err(RecorderError::new_err)?;
    to_json(&r)
}

/// Benchmark probe: the capture's own CPU time per frame on frames in memory (JSON: frames,
/// classify_ns, classify_and_account_ns).
#[pyfunction]
#[pyo3(signature = (frames=4000000, span=1073741824))]
fn capture_stage_costs(py: Python<'_>, frames: u64, span: usize) -> PyResult<String> {
    let r = py
        .detach(|| crate::baseline::capture_stage_costs(frames, span))
        .map_err(RecorderError::new_err)?;
    to_json(&r)
}

/// Registers the baselines on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DiscardReceiver>()?;
    m.add_function(wrap_pyfunction!(writer_throughput, m)?)?;
    m.add_function(wrap_pyfunction!(scan_writer_throughput, m)?)?;
    m.add_function(wrap_pyfunction!(capture_stage_costs, m)?)?;
    m.add_function(wrap_pyfunction!(plain_lut_decode, m)?)?;
    m.add_function(wrap_pyfunction!(sendmmsg_loop, m)?)?;
    Ok(())
}
