//! The VDIF format and what reads it back from disk: headers (`header`, `time`), sample
//! decoding (`decode`), a VDIF file (`file`, `frames`), the on-disk layouts of scans (`layout`:
//! file, FlexBuff vbs, Mark6), a scan spread over disks read as one stream (`scan`, its frames named by `stamp`), what a
//! writer stopped mid-write leaves at a file's end (`torn`) and its cutting away (`repair`),
//! and that stream written back into one file (`gather`); a stream turned into another
//! (`transform`: threads kept, channels corner-turned by `cornerturn`, frames cut by
//! `reframe`) and written to a file (`convert`).
//!
//! The bottom of the tree: of the rest of the crate it uses only `options` (the error that
//! names a bad parameter), so everything above reads frames the same way.

pub mod catalogue;
pub mod convert;
pub mod cornerturn;
pub mod decode;
pub mod file;
pub mod frames;
pub mod gather;
pub mod header;
pub mod layout;
pub mod reframe;
pub mod repair;
pub mod scan;
pub mod stamp;
pub mod time;
pub mod torn;
pub mod transform;

pub use decode::{DecodeError, Decoder};
pub use file::{FileError, StreamInfo, VdifFile};
pub use header::{field, Field, Header, HeaderError};
pub use time::{Utc, VdifTime};
