//! The recording path: datagrams in, frames on disk, every one counted.
//!
//! `capture/` receives datagrams (one file per backend, and `open` that picks one) straight
//! into the `ring`; `classify` decides what each datagram is and `accounting` counts frames per
//! VDIF second and thread; the `writer` moves the ring to one file or a directory, and `scan/`
//! cuts scans out of the ring onto several disks (in `diskio`'s way of writing). The
//! `recorder` validates its `config`, checks where the output goes (`target`), sets these up
//! and wires them together. The threads share only `shared` (flags, counters, the ring) and
//! publish `stats`; `status` serves those snapshots over HTTP without ever blocking the capture,
//! with how full the disks are (`diskspace`, asked of their file systems by the status thread),
//! the `live` monitor's looks, the `latency` stamps and, when a schedule drives the
//! recording, the `observing` document its script hands over. At the stop the run's `summary` adds up
//! what each part reports.
//!
//! Uses `vdif` (and the small `options`, `units`, `affinity`); never `analysis`, `sources` or
//! `transfer`: a recorder at a station runs without them (the live monitor is handed its
//! analysis by whoever starts it).

pub mod accounting;
pub mod capture;
pub mod classify;
pub mod config;
pub mod diskio;
pub mod diskspace;
pub mod forward;
pub mod latency;
pub mod live;
pub mod observing;
pub mod recorder;
pub mod ring;
pub mod scan;
pub mod shared;
pub mod stats;
pub mod status;
pub mod summary;
pub mod target;
pub mod writer;
