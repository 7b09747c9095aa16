//! What a scientist checks in a recording: spectra (m5spec's way), fringes between inputs
//! (`fringe` sums the cross spectra, `fringe_search` finds the fringe in the sums), test tones,
//! bit-state statistics, the whole-file integrity check, and the analysis the recorder's live
//! monitor runs (`live`).
//!
//! Uses `vdif` for frames and samples, and `record::accounting` / `record::classify` for the
//! check, so that a file and a live recording are counted by the same code. The record stage
//! never uses this one (its live monitor is handed `live::analyser()` by whoever starts it).
//! Only the tests use `sources` (the generator makes their signals).

pub mod bstate;
pub mod check;
pub mod fringe;
pub mod fringe_search;
pub mod live;
pub mod spectrum;
pub mod tones;
