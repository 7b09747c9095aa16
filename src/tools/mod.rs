//! Sources and helpers around a recording: a paced VDIF sender (a FILA10G stand-in), the
//! synthetic signal generator it and `vdifrec generate` share, read-back of written files,
//! the gathering of a scan spread over disks into one file, and the disk write test of
//! `vdifrec doctor`.
//!
//! Uses `vdif` (and `units`, `affinity`); never `record` or `analysis`.

pub mod disk_probe;
pub mod gather;
pub mod generate;
pub mod readback;
pub mod sender;
