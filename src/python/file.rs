//! `FileReader` (behind `vdifrec.open`): a memory-mapped VDIF file, or a scan on several
//! disks, read and decoded in parallel, its spectra and fringes, its frames as a zero-copy array; and the decoding of
//! frames from anywhere (a live view).

use super::errors::{decode_err, file_err, scan_err, spectrum_err};
use super::fringe::{fringe_tuple, sums_tuple, FringeTuple, SumsTuple};
use super::header::PyHeader;
use super::scan::format_arg;
use super::spectrum::power_array;
use crate::analysis::fringe::{cross_sums_of, fringe_of};
use crate::analysis::fringe_search::Search;
use crate::analysis::spectrum::{spectra_of, FrameSource};
use crate::vdif::decode::{DecodeError, Decoder};
use crate::vdif::file::VdifFile;
use crate::vdif::scan::open_scan;
use crate::vdif::torn::TornPiece;
use numpy::ndarray::ArrayView2;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Memory-mapped VDIF file (wrapped by `vdifrec.open`).
#[pyclass(module = "vdifrec._core", frozen)]
pub struct FileReader {
    file: VdifFile,
    /// What was left out as not whole frames: a scan's torn pieces, a file's partial last
    /// frame.
    torn: Vec<TornPiece>,
}

#[pymethods]
impl FileReader {
    #[new]
    #[pyo3(signature = (path, sample_rate=None))]
    fn new(py: Python<'_>, path: std::path::PathBuf, sample_rate: Option<f64>) -> PyResult<Self> {
        let file = py
            .detach(|| VdifFile::open(&path, sample_rate))
            .map_err(file_err)?;
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        let torn = TornPiece::file_tail(&path, len, file.info().frame_size)
            .into_iter()
            .collect();
        Ok(FileReader { file, torn })
    }

    /// Scan `name` on `disks`, its parts in order (`format`: file, vbs, mk6; None detects it),
    /// each to its last whole frame. A scan with a missing part raises GapError.
    #[staticmethod]
    #[pyo3(signature = (name, disks, format=None, sample_rate=None))]
    fn scan(
        py: Python<'_>,
        name: &str,
        disks: Vec<std::path::PathBuf>,
        format: Option<&str>,
        sample_rate: Option<f64>,
    ) -> PyResult<Self> {
        let format = format_arg(format)?;
        let (file, torn) = py
            .detach(|| open_scan(name, &disks, format, sample_rate))
            .map_err(scan_err)?;
        Ok(FileReader { file, torn })
    }

    /// The torn pieces left out, as JSON text (a list; empty when nothing was torn).
    fn torn(&self) -> PyResult<String> {
        super::to_json(&self.torn)
    }

    #[getter]
    fn header0(&self) -> PyHeader {
        PyHeader {
            inner: self.file.info().header0,
        }
    }
    #[getter]
    fn thread_ids(&self) -> Vec<u32> {
        self.file.info().thread_ids.clone()
    }
    #[getter]
    fn samples_per_frame(&self) -> usize {
        self.file.info().samples_per_frame
    }
    #[getter]
    fn sample_rate(&self) -> f64 {
        self.file.info().sample_rate
    }
    #[getter]
    fn sample_rate_source(&self) -> &'static str {
        self.file.info().sample_rate_source
    }
    #[getter]
    fn frame_rate(&self) -> f64 {
        self.file.info().frame_rate
    }
    #[getter]
    fn n_samples(&self) -> usize {
        self.file.info().n_samples()
    }
    #[getter]
    fn n_frames(&self) -> usize {
        self.file.info().n_frames
    }
    #[getter]
    fn frame_size(&self) -> usize {
        self.file.info().frame_size
    }
    #[getter]
    fn values_per_sample(&self) -> usize {
        self.file.info().values_per_sample()
    }

    /// Decodes `count` samples from `start` into the float32 array `out` (flat, C order).
    fn read_into(
        &self,
        py: Python<'_>,
        start: usize,
        count: usize,
        out: &Bound<'_, PyArray1<f32>>,
    ) -> PyResult<()> {
        let mut rw = out.readwrite();
        let slice = rw
            .as_slice_mut()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        py.detach(|| self.file.read_parallel(start, count, slice))
            .map_err(file_err)
    }

    /// Spectra of every input from sample `start`: (power (inputs, nfft), segments).
    #[pyo3(signature = (nfft, start=0, nint=None))]
    fn spectrum<'py>(
        &self,
        py: Python<'py>,
        nfft: usize,
        start: usize,
        nint: Option<u64>,
    ) -> PyResult<(Bound<'py, PyArray2<f64>>, u64)> {
        let header = self.file.info().header0;
        let acc = py
            .detach(|| spectra_of(&self.file, &header, nfft, start, nint))
            .map_err(spectrum_err)?;
        Ok((power_array(py, &acc)?, acc.segments()))
    }

    /// Fringe between input `ia` of this file and input `ib` of `other` (or of this file).
    #[pyo3(signature = (other, ia, ib, nfft, start=0, nint=None, exclude_tones=false, max_lag=None))]
    #[allow(clippy::too_many_arguments)]
    fn cross<'py>(
        &self,
        py: Python<'py>,
        other: Option<PyRef<'py, FileReader>>,
        ia: usize,
        ib: usize,
        nfft: usize,
        start: usize,
        nint: Option<u64>,
        exclude_tones: bool,
        max_lag: Option<usize>,
    ) -> PyResult<FringeTuple<'py>> {
        let a = (&self.file, self.file.info().header0);
        let b = other.as_ref().map(|o| (&o.file, o.file.info().header0));
        let search = Search {
            exclude_tones,
            max_lag,
        };
        let f = py
            .detach(|| {
                fringe_of(
                    (a.0 as &dyn FrameSource, &a.1),
                    b.as_ref().map(|(f, h)| (*f as &dyn FrameSource, h)),
                    ia,
                    ib,
                    nfft,
                    start,
                    nint,
                    &search,
                )
            })
            .map_err(spectrum_err)?;
        fringe_tuple(py, f)
    }

    /// The cross and auto spectra of input `ia` of this file from sample `start_a` and input
    /// `ib` of `other` from sample `start_b`, over at most `nint` FFTs: a stretch of a fringe
    /// search (`fringe_of_parts`).
    #[pyo3(signature = (other, ia, ib, nfft, start_a, start_b, nint=None))]
    #[allow(clippy::too_many_arguments)]
    fn cross_sums<'py>(
        &self,
        py: Python<'py>,
        other: PyRef<'py, FileReader>,
        ia: usize,
        ib: usize,
        nfft: usize,
        start_a: usize,
        start_b: usize,
        nint: Option<u64>,
    ) -> PyResult<SumsTuple<'py>> {
        let a = (&self.file as &dyn FrameSource, &self.file.info().header0);
        let hb = other.file.info().header0;
        let b = (&other.file as &dyn FrameSource, &hb);
        let acc = py
            .detach(|| cross_sums_of(a, Some(b), ia, ib, nfft, (start_a, start_b), nint))
            .map_err(spectrum_err)?;
        Ok(sums_tuple(py, acc.sums()))
    }

    /// Drops this process's resident pages of the mapped data; they stay in the page cache.
    fn release_pages(&self) -> PyResult<()> {
        self.file.release_pages().map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", self.file.path().display()))
        })
    }

    /// Each part's whole frames (one part for a file; chunks or blocks for a scan) as
    /// read-only (n_frames, frame_size) uint8 arrays over the memory maps themselves; each
    /// array keeps this reader (and the maps) alive.
    fn frame_parts<'py>(slf: Bound<'py, Self>) -> Vec<Bound<'py, PyArray2<u8>>> {
        let reader = slf.get();
        let fs = reader.file.info().frame_size;
        reader
            .file
            .frame_parts()
            .map(|bytes| {
                // SAFETY: the maps live as long as `slf`, which becomes each array's base
                // object; they are never remapped.
                unsafe {
                    readonly_view(bytes.as_ptr(), bytes.len() / fs, fs, slf.clone().into_any())
                }
            })
            .collect()
    }
}

/// A read-only NumPy view of `rows × cols` bytes at `ptr`, kept alive by `owner`.
///
/// # Safety
/// The memory must stay valid and unmoved for as long as `owner` lives.
pub(crate) unsafe fn readonly_view<'py>(
    ptr: *const u8,
    rows: usize,
    cols: usize,
    owner: Bound<'py, PyAny>,
) -> Bound<'py, PyArray2<u8>> {
    unsafe {
        let view = ArrayView2::from_shape_ptr((rows, cols), ptr);
        let array = PyArray2::borrow_from_array(&view, owner);
        drop(array.readwrite().make_nonwriteable());
        array
    }
}

/// Decodes the payloads of frames (rows of uint8, one frame each, all of one thread layout)
/// into `out` (float32, flat): values of frame 0, then frame 1, ...
#[pyfunction]
pub fn decode_payloads(
    py: Python<'_>,
    frames: PyReadonlyArray2<'_, u8>,
    header_size: usize,
    bits: u32,
    out: &Bound<'_, PyArray1<f32>>,
) -> PyResult<()> {
    let decoder = Decoder::new(bits).map_err(decode_err)?;
    let frames = frames.as_array();
    let (n, fs) = (frames.shape()[0], frames.shape()[1]);
    let payload = fs.checked_sub(header_size).ok_or_else(|| {
        PyValueError::new_err(format!(
            "frames of {fs} bytes are shorter than the {header_size}-byte header"
        ))
    })?;
    let per = decoder.values_in(payload);
    let mut rw = out.readwrite();
    let dst = rw
        .as_slice_mut()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if dst.len() < n * per {
        return Err(decode_err(DecodeError::OutputTooSmall {
            needed: n * per,
            got: dst.len(),
        }));
    }
    let rows: Vec<&[u8]> = frames
        .rows()
        .into_iter()
        .map(|r| {
            r.to_slice()
                .ok_or_else(|| PyValueError::new_err("frames must be C-contiguous rows"))
        })
        .collect::<PyResult<_>>()?;
    py.detach(|| {
        for (i, row) in rows.iter().enumerate() {
            decoder.decode(&row[header_size..], &mut dst[i * per..(i + 1) * per])?;
        }
        Ok(())
    })
    .map_err(decode_err)
}
