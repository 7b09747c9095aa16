//! `Header`: every field of a VDIF header, by name, with checked setters.

use super::errors::header_err;
use crate::vdif::header::Header as CoreHeader;
use pyo3::prelude::*;

/// A VDIF frame header.
#[pyclass(module = "vdifrec._core", name = "Header", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct PyHeader {
    pub(crate) inner: CoreHeader,
}

#[pymethods]
impl PyHeader {
    #[new]
    #[pyo3(signature = (*, edv=Some(0), frame_size=8224, nchan=1, bits=2, complex=false,
        seconds=0, ref_epoch=0, frame_nr=0, thread_id=0, station_id=0, invalid=false,
        version=1, sample_rate=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        edv: Option<u32>,
        frame_size: usize,
        nchan: u32,
        bits: u32,
        complex: bool,
        seconds: u32,
        ref_epoch: u32,
        frame_nr: u32,
        thread_id: u32,
        station_id: u32,
        invalid: bool,
        version: u32,
        sample_rate: Option<f64>,
    ) -> PyResult<Self> {
        use crate::vdif::header::field;
        let mut h = CoreHeader::new(edv, frame_size, nchan, bits, complex).map_err(header_err)?;
        for (f, v) in [
            (field::SECONDS, seconds),
            (field::REF_EPOCH, ref_epoch),
            (field::FRAME_NR, frame_nr),
            (field::THREAD_ID, thread_id),
            (field::STATION_ID, station_id),
            (field::INVALID, invalid as u32),
            (field::VERSION, version),
        ] {
            h.set(f, v).map_err(header_err)?;
        }
        if let Some(sr) = sample_rate {
            h.set_sample_rate_hz(sr).map_err(header_err)?;
        }
        Ok(PyHeader { inner: h })
    }

    /// Parses a header from the start of `data` (16 or 32 bytes); `verify` checks it.
    #[staticmethod]
    #[pyo3(signature = (data, verify=true))]
    fn from_bytes(data: &[u8], verify: bool) -> PyResult<Self> {
        let h = if verify {
            CoreHeader::parse(data)
        } else {
            CoreHeader::parse_unchecked(data)
        }
        .map_err(header_err)?;
        Ok(PyHeader { inner: h })
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.inner.to_bytes())
    }

    fn validate(&self) -> PyResult<()> {
        self.inner.validate().map_err(header_err)
    }

    /// Raw field value by name (see `keys()`).
    fn __getitem__(&self, name: &str) -> PyResult<u32> {
        let f = self
            .inner
            .field_by_name(name)
            .map_err(|e| pyo3::exceptions::PyKeyError::new_err(e.to_string()))?;
        Ok(self.inner.get(f))
    }

    fn __setitem__(&mut self, name: &str, value: u32) -> PyResult<()> {
        let f = self
            .inner
            .field_by_name(name)
            .map_err(|e| pyo3::exceptions::PyKeyError::new_err(e.to_string()))?;
        self.inner.set(f, value).map_err(header_err)
    }

    /// Names of the fields this header's EDV defines.
    fn keys(&self) -> Vec<&'static str> {
        self.inner.fields().iter().map(|f| f.name).collect()
    }

    #[getter]
    fn words(&self) -> Vec<u32> {
        self.inner.words().to_vec()
    }
    #[getter]
    fn invalid(&self) -> bool {
        self.inner.is_invalid()
    }
    #[getter]
    fn legacy(&self) -> bool {
        self.inner.is_legacy()
    }
    #[getter]
    fn edv(&self) -> Option<u32> {
        self.inner.edv()
    }
    #[getter]
    fn seconds(&self) -> u32 {
        self.inner.seconds()
    }
    #[getter]
    fn ref_epoch(&self) -> u32 {
        self.inner.ref_epoch()
    }
    #[getter]
    fn frame_nr(&self) -> u32 {
        self.inner.frame_nr()
    }
    #[getter]
    fn version(&self) -> u32 {
        self.inner.version()
    }
    #[getter]
    fn nchan(&self) -> u32 {
        self.inner.nchan()
    }
    #[getter]
    fn bits(&self) -> u32 {
        self.inner.bits()
    }
    #[getter]
    fn complex(&self) -> bool {
        self.inner.is_complex()
    }
    #[getter]
    fn thread_id(&self) -> u32 {
        self.inner.thread_id()
    }
    #[getter]
    fn station_id(&self) -> u32 {
        self.inner.station_id()
    }
    #[getter]
    fn station(&self) -> String {
        self.inner.station_name()
    }
    #[getter]
    fn frame_size(&self) -> usize {
        self.inner.frame_size()
    }
    #[getter]
    fn header_size(&self) -> usize {
        self.inner.header_size()
    }
    #[getter]
    fn payload_size(&self) -> usize {
        self.inner.payload_size()
    }
    #[getter]
    fn samples_per_frame(&self) -> usize {
        self.inner.samples_per_frame()
    }
    /// Sample rate per channel in Hz from an EDV 1/3 header, else None.
    #[getter]
    fn sample_rate(&self) -> Option<f64> {
        self.inner.sample_rate_hz()
    }
    #[getter]
    fn validity_mask(&self) -> Option<u64> {
        self.inner.validity_mask()
    }

    /// Seconds since 1970 (POSIX, UTC) of the frame's start; `frame_rate` in frames per second
    /// is needed for a non-zero frame number unless the header carries the sample rate.
    #[pyo3(signature = (frame_rate=None))]
    fn unix_time(&self, frame_rate: Option<f64>) -> PyResult<(i64, f64)> {
        let t = self.inner.time(frame_rate).map_err(header_err)?;
        Ok((t.unix_seconds, t.fraction))
    }

    fn __repr__(&self) -> String {
        let h = &self.inner;
        format!(
            "<Header edv={} seconds={} ref_epoch={} frame_nr={} thread_id={} frame_size={} nchan={} bits={} complex={} invalid={} station={}>",
            h.edv().map_or("legacy".into(), |e| e.to_string()),
            h.seconds(),
            h.ref_epoch(),
            h.frame_nr(),
            h.thread_id(),
            h.frame_size(),
            h.nchan(),
            h.bits(),
            py_bool(h.is_complex()),
            py_bool(h.is_invalid()),
            h.station_name()
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}
