//! vdifrec: a lossless recorder and checker for 10 GbE VDIF streams (VLBI).
//!
//! The engine is plain Rust; the Python bindings live in `python.rs` behind the `python`
//! feature, so `cargo test` needs no Python.

pub mod accounting;
pub mod affinity;
pub mod baseline;
pub mod capture;
pub mod check;
pub mod classify;
pub mod generate;
pub mod readback;
pub mod recorder;
pub mod ring;
pub mod sender;
pub mod spectrum;
pub mod stats;
pub mod status;
pub mod units;
pub mod vdif;
pub mod writer;

#[cfg(feature = "python")]
mod python;
