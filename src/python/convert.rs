//! A stream turned into another (`vdif::convert`, `vdif::transform`): `convert` writes a file
//! or a scan into a new file; `corner_turn` turns frames held in memory (the way in of the
//! benchmark and the tests).

use super::errors::{arg_err, convert_err, ArgumentError};
use super::scan::format_arg;
use crate::vdif::convert::{convert as convert_stream, convert_frames_into, output_bytes, Input};
use crate::vdif::transform::{index_list, parse_index_list, payload_arg, TransformSpec};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use std::path::PathBuf;

/// A list of threads or channels as given: text such as "0-3,7", or a list of numbers.
fn index_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u32>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let list = if let Ok(text) = value.extract::<String>() {
        parse_index_list(name, &text)
    } else {
        let numbers: Vec<i64> = value.extract().map_err(|_| {
            ArgumentError::new_err(format!(
                "{name}: give whole numbers (a list) or text such as \"0-3,7\""
            ))
        })?;
        index_list(name, numbers)
    };
    list.map(Some).map_err(arg_err)
}

/// Writes `path` (a file; with `disks`, a scan's name) through threads/channels/payload into
/// the new file `out`; the report as a dict.
#[pyfunction]
#[pyo3(signature = (path, out, threads=None, channels=None, payload=None, disks=None, format=None, force=false))]
#[allow(clippy::too_many_arguments)]
pub fn convert<'py>(
    py: Python<'py>,
    path: String,
    out: PathBuf,
    threads: Option<&Bound<'py, PyAny>>,
    channels: Option<&Bound<'py, PyAny>>,
    payload: Option<i64>,
    disks: Option<Vec<PathBuf>>,
    format: Option<&str>,
    force: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = TransformSpec {
        threads: index_arg("threads", threads)?,
        channels: index_arg("channels", channels)?,
        payload: payload.map(payload_arg).transpose().map_err(arg_err)?,
    };
    let format = format_arg(format)?;
    let file = PathBuf::from(&path);
    let source = match &disks {
        Some(disks) => Input::Scan {
            name: &path,
            disks,
            format,
        },
        None => Input::File(&file),
    };
    let report = py
        .detach(|| convert_stream(source, &out, &spec, force))
        .map_err(convert_err)?;
    pythonize::pythonize(py, &report).map_err(|e| ArgumentError::new_err(e.to_string()))
}

/// The single-channel frames of `channels` made from `frames` (whole frames, n × frame size):
/// the output frames as one uint8 array, new or `out` (exactly the output's size: a buffer
/// used again, as a converter or forwarder uses its own, costs neither allocation nor the
/// zeroing of fresh memory).
#[pyfunction]
#[pyo3(signature = (frames, channels, out=None))]
pub fn corner_turn<'py>(
    py: Python<'py>,
    frames: PyReadonlyArray1<'py, u8>,
    channels: Vec<i64>,
    out: Option<Bound<'py, PyArray1<u8>>>,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let spec = TransformSpec {
        channels: Some(index_list("channels", channels).map_err(arg_err)?),
        ..Default::default()
    };
    let data = frames.as_slice().map_err(|_| {
        ArgumentError::new_err("frames: give a contiguous uint8 array of whole frames")
    })?;
    let needed = output_bytes(&spec, data).map_err(convert_err)?;
    // NumPy's own allocation where none is given: it gives large arrays huge pages, where a
    // Vec of 68 MB costs more in page faults than the corner turn itself.
    let out = out.unwrap_or_else(|| PyArray1::zeros(py, needed, false));
    {
        let mut rw = out.try_readwrite().map_err(|_| {
            ArgumentError::new_err("out: give a writable array that no other view is writing")
        })?;
        let dst = rw
            .as_slice_mut()
            .map_err(|_| ArgumentError::new_err("out: give a contiguous uint8 array"))?;
        if dst.len() != needed {
            return Err(ArgumentError::new_err(format!(
                "out: {} bytes, but the output is {needed}",
                dst.len()
            )));
        }
        py.detach(|| convert_frames_into(&spec, data, dst))
            .map_err(convert_err)?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(corner_turn, m)?)?;
    Ok(())
}
