//! The VDIF format: headers, sample decoding, files.

pub mod decode;
pub mod file;
pub mod frames;
pub mod header;
pub mod layout;
pub mod scan;
pub mod time;

pub use decode::{DecodeError, Decoder};
pub use file::{FileError, StreamInfo, VdifFile};
pub use header::{field, Field, Header, HeaderError};
pub use time::{Utc, VdifTime};
