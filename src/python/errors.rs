//! The exceptions vdifrec raises, and the one place each core error becomes one. They
//! subclass Python's builtins, so `except ValueError` catches a bad argument and `except
//! OSError` a file that cannot be opened.

use crate::analysis::check::CheckError;
use crate::analysis::spectrum::SpectrumError;
use crate::options::ArgError;
use crate::record::capture::open::OpenError;
use crate::record::capture::udp::UdpError;
use crate::record::recorder::{RecordError, ScanCommandError};
use crate::record::ring::RingError;
use crate::sources::generate::GenerateError;
use crate::sources::replay::ReplayError;
use crate::sources::sender::SendError;
use crate::transfer::TransferError as CoreTransferError;
use crate::vdif::convert::ConvertError;
use crate::vdif::decode::DecodeError;
use crate::vdif::file::FileError;
use crate::vdif::gather::GatherError;
use crate::vdif::header::HeaderError as CoreHeaderError;
use crate::vdif::repair::RepairError;
use crate::vdif::scan::ScanError;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyOSError, PyValueError,
};
use pyo3::prelude::*;

create_exception!(
    vdifrec,
    ArgumentError,
    PyValueError,
    "An option's value cannot be used. The message starts with the option's name (`ring: ...`)."
);
create_exception!(
    vdifrec,
    HeaderError,
    PyValueError,
    "A VDIF header is malformed or a field value does not fit."
);
create_exception!(
    vdifrec,
    FormatError,
    PyValueError,
    "A file is not readable as the VDIF stream it claims to be."
);
create_exception!(
    vdifrec,
    GapError,
    FormatError,
    "A scan lacks parts (vbs chunks, Mark6 blocks) between its first and its last; the message names them and the VDIF time they leave out."
);

create_exception!(
    vdifrec,
    RecorderError,
    pyo3::exceptions::PyRuntimeError,
    "The recorder could not start or failed."
);
create_exception!(
    vdifrec,
    PortInUseError,
    RecorderError,
    "The UDP port is taken by another program."
);
create_exception!(
    vdifrec,
    OutputError,
    RecorderError,
    "The recording cannot be written where asked (exists, no directory, not writable)."
);
create_exception!(
    vdifrec,
    SenderError,
    pyo3::exceptions::PyRuntimeError,
    "The sender could not start or failed."
);
create_exception!(
    vdifrec,
    TransferError,
    pyo3::exceptions::PyRuntimeError,
    "A push or receive could not be done (nobody listening, a wrong token, a refused or failed item)."
);
create_exception!(
    vdifrec,
    StaleViewError,
    RecorderError,
    "A view of the ring fell behind the capture: frames it showed were overwritten while it was used (views yield to the recording unless held). The message says how far behind."
);

/// A bad option: an `ArgumentError` whose message starts with the parameter's name.
pub fn arg_err(e: ArgError) -> PyErr {
    ArgumentError::new_err(e.to_string())
}

pub fn record_err(e: RecordError) -> PyErr {
    use crate::record::capture::{afpacket::AfPacketError, pfring::PfRingError};
    match e {
        RecordError::BadArgument(a) => arg_err(a),
        RecordError::Backend(OpenError::AfPacket(AfPacketError::NoInterface))
        | RecordError::Backend(OpenError::PfRing(PfRingError::NoInterface)) => {
            PyValueError::new_err(e.to_string())
        }
        RecordError::Backend(OpenError::Udp(UdpError::PortInUse { .. })) => {
            PortInUseError::new_err(e.to_string())
        }
        RecordError::Status { ref source, .. }
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            PortInUseError::new_err(e.to_string())
        }
        // An address that is not this host's is a bad option, as a malformed one is.
        RecordError::Backend(OpenError::Udp(UdpError::NotLocal { .. })) => {
            ArgumentError::new_err(e.to_string())
        }
        RecordError::Status { ref source, .. }
            if source.kind() == std::io::ErrorKind::AddrNotAvailable =>
        {
            ArgumentError::new_err(e.to_string())
        }
        RecordError::Target(_) => OutputError::new_err(e.to_string()),
        _ => RecorderError::new_err(e.to_string()),
    }
}

pub fn scan_command_err(e: ScanCommandError) -> PyErr {
    match e {
        // Bad names and times are bad arguments: ValueError, named.
        ScanCommandError::BadName(_)
        | ScanCommandError::BadTime { .. }
        | ScanCommandError::NoDisks => ArgumentError::new_err(e.to_string()),
        _ => RecorderError::new_err(e.to_string()),
    }
}

pub fn send_err(e: SendError) -> PyErr {
    match e {
        SendError::Option(a) => arg_err(a),
        // A scan to replay: as `vdifrec.open` raises for it (not found, a gap, ...).
        SendError::Replay(ReplayError::Scan(s)) => scan_err(s),
        // A setting the generator refuses, a file an option names that cannot be read or
        // written, a recording whose rate must be given: a bad option too.
        SendError::Generate(_) | SendError::Replay(_) | SendError::RecordSent { .. } => {
            ArgumentError::new_err(e.to_string())
        }
        // A connection refused ("to: nobody accepts ...") is the sender failing to start.
        _ => SenderError::new_err(e.to_string()),
    }
}

pub fn header_err(e: CoreHeaderError) -> PyErr {
    HeaderError::new_err(e.to_string())
}

pub fn io_err(e: &std::io::Error, msg: String, path: &std::path::Path) -> PyErr {
    PyOSError::new_err((
        e.raw_os_error().unwrap_or(0),
        msg,
        path.display().to_string(),
    ))
}

pub fn file_err(e: FileError) -> PyErr {
    match &e {
        FileError::Open { path, source } => io_err(source, e.to_string(), path),
        FileError::BadSampleRate(_) => PyValueError::new_err(e.to_string()),
        _ => FormatError::new_err(e.to_string()),
    }
}

pub fn decode_err(e: DecodeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub fn generate_err(e: GenerateError) -> PyErr {
    match &e {
        GenerateError::Write { source, path } => {
            io_err(source, e.to_string(), std::path::Path::new(path))
        }
        _ => ArgumentError::new_err(e.to_string()),
    }
}

pub fn check_err(e: CheckError) -> PyErr {
    match e {
        CheckError::Io {
            ref path,
            ref source,
        } => io_err(source, e.to_string(), path),
        CheckError::NoFrame { .. } => FormatError::new_err(e.to_string()),
        CheckError::BadArgument(a) => arg_err(a),
        CheckError::Scan(s) => scan_err(s),
    }
}

pub fn transfer_err(e: CoreTransferError) -> PyErr {
    match e {
        CoreTransferError::BadArgument(a) => arg_err(a),
        CoreTransferError::Scan(s) => scan_err(s),
        CoreTransferError::Io {
            ref path,
            ref source,
        } => io_err(source, e.to_string(), path),
        CoreTransferError::Failed(_) => TransferError::new_err(e.to_string()),
    }
}

pub fn scan_err(e: ScanError) -> PyErr {
    match e {
        ScanError::Io {
            ref path,
            ref source,
        } => io_err(source, e.to_string(), path),
        ScanError::NotFound { .. } => PyFileNotFoundError::new_err(e.to_string()),
        ScanError::NoDisks
        | ScanError::NotADirectory(_)
        | ScanError::Ambiguous { .. }
        | ScanError::Pattern { .. } => ArgumentError::new_err(e.to_string()),
        ScanError::Gaps { .. } => GapError::new_err(e.to_string()),
        ScanError::File(f) => file_err(f),
        _ => FormatError::new_err(e.to_string()),
    }
}

pub fn repair_err(e: RepairError) -> PyErr {
    match e {
        RepairError::Scan(s) => scan_err(s),
        RepairError::Io {
            ref path,
            ref source,
        } => io_err(source, e.to_string(), path),
        RepairError::Changed { .. } => FormatError::new_err(e.to_string()),
    }
}

pub fn gather_err(e: GatherError) -> PyErr {
    match e {
        GatherError::Scan(s) => scan_err(s),
        GatherError::Exists(_) => PyFileExistsError::new_err(e.to_string()),
        GatherError::Write {
            ref path,
            ref source,
        } => io_err(source, e.to_string(), path),
        GatherError::Read { .. } => PyOSError::new_err(e.to_string()),
    }
}

pub fn convert_err(e: ConvertError) -> PyErr {
    match e {
        ConvertError::BadArgument(a) => arg_err(a),
        ConvertError::File(f) => file_err(f),
        ConvertError::Scan(s) => scan_err(s),
        ConvertError::Exists(_) => PyFileExistsError::new_err(e.to_string()),
        ConvertError::Frame { .. } => FormatError::new_err(e.to_string()),
        ConvertError::Create {
            ref path,
            ref source,
        }
        | ConvertError::Write {
            ref path,
            ref source,
            ..
        } => io_err(source, e.to_string(), path),
    }
}

pub fn spectrum_err(e: SpectrumError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub fn ring_err(e: RingError) -> PyErr {
    match e {
        RingError::NotInRing { .. } | RingError::ViewTooLarge { .. } => {
            PyIndexError::new_err(e.to_string())
        }
        RingError::ViewOverHalf { .. } => ArgumentError::new_err(e.to_string()),
        _ => RecorderError::new_err(e.to_string()),
    }
}

pub fn json_err(e: serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("cannot serialise report: {e}"))
}

/// Registers the exceptions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("HeaderError", py.get_type::<HeaderError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("GapError", py.get_type::<GapError>())?;
    m.add("RecorderError", py.get_type::<RecorderError>())?;
    m.add("PortInUseError", py.get_type::<PortInUseError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("SenderError", py.get_type::<SenderError>())?;
    m.add("TransferError", py.get_type::<TransferError>())?;
    m.add("StaleViewError", py.get_type::<StaleViewError>())?;
    Ok(())
}
