//! Shipping scans to the correlator: `push` at the station, `receive` at the correlator.
//!
//! A transfer moves one item (a file, or a scan as one file or as a `vbs` directory) in
//! blocks over several TCP connections that take blocks from one queue. The receiver checks
//! each block's xxh3-128 before it writes it at its offset of a preallocated partial copy,
//! notes it in a manifest once it is on disk (so that a cut connection, a killed process or a
//! reboot resumes with only the blocks missing), reads the whole copy back at the end, and
//! only then gives it its name. How many connections is chosen from measured throughput and
//! both hosts' CPU use (`streams`). Both ends prove that they hold a shared token
//! (`auth`), the receiver in few places for handshakes that no one host can hold all of
//! (`handshakes`); a push asks again, after a pause, what may pass (a busy receiver, a
//! refused or dropped connection: `retry`). The receiver writes only names it accepts
//! (`names`) below its directory.
//!
//! A stage of its own beside `record`: it runs after (or while) scans are recorded and reads
//! them from disk with `vdif::scan`, so it uses `vdif`, `options` and `units`, never `record`.

pub mod auth;
pub mod blocks;
pub mod cpu;
pub mod handshakes;
pub mod items;
pub mod manifest;
pub mod names;
pub mod pacing;
pub mod push;
pub mod receive;
pub mod retry;
pub mod streams;
pub mod wire;

use crate::options::ArgError;
use crate::vdif::scan::ScanError;
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TransferError {
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The transfer could not be done (cannot connect, refused, a source changed).
    #[error("{0}")]
    Failed(String),
}

/// Raises this process's limit of open files to the most it may have: a receiver of a vbs
/// scan keeps two descriptors per chunk file open while the scan is received.
pub fn raise_open_files_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

impl TransferError {
    fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TransferError + '_ {
        move |source| TransferError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
