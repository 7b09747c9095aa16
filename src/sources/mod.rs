//! Test sources: what stands in for a station's digital back end when there is none at hand.
//! A paced VDIF `sender` (a FILA10G stand-in, or the `replay` of a recording at its own rate)
//! over the framings of `link` (UDP, UDP with packet sequence numbers, TCP), the synthetic
//! signal `generate` makes for it and for `vdifrec generate` (noise, a tone, a fringe to find),
//! and the `readback` that compares a recording with what was sent without disturbing a
//! recording in progress.
//!
//! Uses `vdif` (and `options`, `units`, `affinity`); never `record` or `analysis`, which they are
//! used to test. The tests of every stage may use them (`#[cfg(test)]`).

pub mod generate;
pub mod link;
pub mod readback;
pub mod replay;
pub mod sender;
