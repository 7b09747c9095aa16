//! Test sources: what stands in for a station's digital back end when there is none at hand.
//! A paced VDIF `sender` (a FILA10G stand-in), the synthetic signal `generate` makes for it and
//! for `vdifrec generate` (noise, a tone, a fringe to find), and the `readback` that compares a
//! recording with what was sent without disturbing a recording in progress.
//!
//! Uses `vdif` (and `options`, `affinity`); never `record` or `analysis`, which they are
//! used to test. The tests of every stage may use them (`#[cfg(test)]`).

pub mod generate;
pub mod readback;
pub mod sender;
