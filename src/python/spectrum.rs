//! Power spectra (`analysis::spectrum`): the accumulator behind `vdifrec.spectrum`, the spectra
//! of whole frames of a live view, the tones in a spectrum (`analysis::tones`), and how many
//! threads the analyses of this thread may start.

use super::errors::{header_err, spectrum_err};
use crate::analysis::spectrum::{spectra_of, FrameRows, SpectrumAccumulator};
use crate::vdif::header::Header as CoreHeader;
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A float32 array's samples, which must lie in one piece (the accumulators read them in place).
pub(crate) fn flat<'a>(a: &'a numpy::PyReadonlyArray1<'_, f32>) -> PyResult<&'a [f32]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err("samples must be a C-contiguous float32 array"))
}

/// Averaged power spectra (wrapped by `vdifrec.spectrum`).
#[pyclass(module = "vdifrec._core", name = "SpectrumAccumulator")]
pub struct PySpectrumAccumulator {
    inner: SpectrumAccumulator,
    inputs: usize,
    nfft: usize,
}

#[pymethods]
impl PySpectrumAccumulator {
    #[new]
    fn new(nfft: usize, inputs: usize, complex: bool) -> PyResult<Self> {
        let inner = SpectrumAccumulator::new(nfft, inputs, complex).map_err(spectrum_err)?;
        Ok(PySpectrumAccumulator {
            inner,
            inputs,
            nfft,
        })
    }

    #[getter]
    fn segment_len(&self) -> usize {
        self.inner.segment_len()
    }

    #[getter]
    fn segments(&self) -> u64 {
        self.inner.segments()
    }

    /// Adds the whole FFT segments among `n_samples` samples of `x` (flat float32, layout
    /// time, input, value); returns the samples used.
    #[pyo3(signature = (x, n_samples, max_segments=None))]
    fn add(
        &mut self,
        py: Python<'_>,
        x: numpy::PyReadonlyArray1<'_, f32>,
        n_samples: usize,
        max_segments: Option<u64>,
    ) -> PyResult<usize> {
        let data = flat(&x)?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.add(data, n_samples, max_segments)))
    }

    /// Mean power, shape (inputs, nfft), ascending frequency.
    fn power<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let p = self.inner.power();
        let arr = numpy::ndarray::Array2::from_shape_vec((self.inputs, self.nfft), p)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(numpy::IntoPyArray::into_pyarray(arr, py))
    }
}

pub(crate) fn power_array<'py>(
    py: Python<'py>,
    acc: &SpectrumAccumulator,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let shape = (acc.inputs(), acc.power().len() / acc.inputs().max(1));
    let arr = numpy::ndarray::Array2::from_shape_vec(shape, acc.power())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(arr, py))
}

/// Groups rows of whole frames by thread: the frame source, the thread ids and the header.
pub(crate) fn frame_rows<'a>(
    rows: &'a [&'a [u8]],
) -> PyResult<(FrameRows<'a>, Vec<u32>, CoreHeader)> {
    let first = rows
        .first()
        .ok_or_else(|| PyValueError::new_err("frames is empty: nothing to analyse"))?;
    let h = CoreHeader::parse_unchecked(first).map_err(header_err)?;
    let (src, ids) = FrameRows::new(rows, h.header_size());
    Ok((src, ids, h))
}

pub(crate) fn rows_of<'a>(frames: &'a PyReadonlyArray2<'_, u8>) -> PyResult<Vec<&'a [u8]>> {
    use numpy::PyUntypedArrayMethods;
    let fs = frames.shape()[1].max(1);
    let data = frames.as_slice().map_err(|_| {
        PyValueError::new_err("frames must be a C-contiguous (n, frame_size) array")
    })?;
    Ok(data.chunks_exact(fs).collect())
}

/// Spectra of whole frames (a live view): (power (inputs, nfft), segments, thread ids).
#[pyfunction]
#[pyo3(signature = (frames, nfft, nint=None))]
fn spectrum_frames<'py>(
    py: Python<'py>,
    frames: PyReadonlyArray2<'_, u8>,
    nfft: usize,
    nint: Option<u64>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, u64, Vec<u32>)> {
    let rows = rows_of(&frames)?;
    let (src, ids, h) = frame_rows(&rows)?;
    let acc = py
        .detach(|| spectra_of(&src, &h, nfft, 0, nint))
        .map_err(spectrum_err)?;
    Ok((power_array(py, &acc)?, acc.segments(), ids))
}

/// Limits the analyses this thread starts to `threads` threads (0: every CPU); returns the
/// limit it had.
#[pyfunction]
fn set_analysis_threads(threads: usize) -> usize {
    let before = crate::analysis::spectrum::threads_here();
    crate::analysis::spectrum::set_threads_here(threads);
    before
}

/// Tones in one spectrum: [(channel (fractional), power over the median)], strongest first.
#[pyfunction]
fn find_tones(
    power: numpy::PyReadonlyArray1<'_, f64>,
    threshold: f64,
) -> PyResult<Vec<(f64, f64)>> {
    let p = power
        .as_slice()
        .map_err(|_| PyValueError::new_err("power must be a contiguous float64 array"))?;
    Ok(crate::analysis::tones::find_tones(p, threshold)
        .into_iter()
        .map(|t| (t.channel, t.power_ratio))
        .collect())
}

/// Registers the spectrum classes and functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySpectrumAccumulator>()?;
    m.add_function(wrap_pyfunction!(spectrum_frames, m)?)?;
    m.add_function(wrap_pyfunction!(set_analysis_threads, m)?)?;
    m.add_function(wrap_pyfunction!(find_tones, m)?)?;
    Ok(())
}
