//! vdifrec: a lossless recorder and checker for 10 GbE VDIF streams (VLBI).
//!
//! The tree reads as the data path, and dependencies point down it. What each stage may use
//! besides itself, as said here, is what `STAGES_MAY_USE` in tests/test_layout.py checks:
//!
//! - [`vdif`]: the format, and reading it back from disk: headers, sample decoding, time, a
//!   file, a scan spread over disks (vbs, Mark6) and its gathering into one file. May use
//!   `options` and `units` only.
//! - [`record`]: the recording path: capture backends, classification, accounting, the ring,
//!   the writer, scans on several disks, the recorder that wires them, its statistics and
//!   status endpoint, the live forwarding of the stream. May use `vdif`, `options`, `units`,
//!   `affinity` and `endpoint`; never `analysis`,
//!   `sources` or `transfer`.
//! - [`analysis`]: what a scientist checks: spectra, fringes, tones, bit states, the file
//!   check. May use `vdif`, `record`, `options` and `units`; of `record` it uses only the
//!   accounting and classification (so that a file and a live recording are counted by the
//!   same code) and the live monitor's state (what the live analysis publishes).
//! - [`sources`]: the test sources: the paced sender, the synthetic signal, the read-back that
//!   compares a recording with what was sent. May use `vdif`, `options`, `units`, `affinity`
//!   and `endpoint`.
//! - [`transfer`]: shipping scans to the correlator (`vdifrec push` / `receive`) over parallel
//!   TCP streams. May use `vdif` (to read what it ships), `options` and `units`; never `record`:
//!   it ships what is on disk.
//! - [`doctor`]: host probes for `vdifrec doctor` (the disk write test), beside the stages:
//!   it checks the host, not a stream. May use `options` and `units` only.
//! - [`options`]: how user-given options become configurations (one error naming the
//!   parameter, sizes, addresses); may use `units`. [`units`]: byte sizes and rates as people
//!   write them. [`affinity`]: pinning threads to CPUs and the recorder's policy of which goes
//!   where, on plain CPU lists. [`endpoint`]: where a stream of frames is sent and in what
//!   framing (`udp://`, `udps://`, `tcp://HOST:PORT`), read alike for the sender and the
//!   forwarder; may use `options`. Below the stages; `units` and `affinity` use none of the
//!   crate's other modules.
//! - [`defaults`]: every option's default in one document, read from the types that own them
//!   (it sits above the stages it reads).
//!
//! The engine is plain Rust; the Python bindings live in `python/` behind the `python`
//! feature, so `cargo test` needs no Python. The benchmarks' baselines are compiled in only
//! with the `bench` feature (`make bench`): they never ship in the installed library.

pub mod affinity;
pub mod analysis;
pub mod defaults;
pub mod doctor;
pub mod endpoint;
pub mod options;
pub mod record;
pub mod sources;
pub mod transfer;
pub mod units;
pub mod vdif;

/// Baselines the benchmarks measure vdifrec against (a discard loop, `dd`-like writes).
#[cfg(feature = "bench")]
#[path = "../benches/baseline.rs"]
pub mod baseline;

#[cfg(feature = "python")]
mod python;
