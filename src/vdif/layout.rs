//! How a scan lies on disk, in the layouts correlators read (described for users in
//! `docs/reference/formats/layouts.md`): names, the Mark6 headers, and the rules for scan
//! names. The writer (`record::scan`) and the readers (`vdif::scan`) both use these and nothing
//! else, so the two can never disagree.
//!
//! - `file`: `<disk>/<scan>.vdif`, the frames in order; a scan rotated by size goes on in
//!   `<disk>/<scan>.0001.vdif`, `<disk>/<scan>.0002.vdif`, … (a `.` is never in a scan name, so
//!   a part can never be taken for another scan).
//! - `vbs` (FlexBuff): `<disk>/<scan>/<scan>.NNNNNNNN`, chunks of whole frames numbered 0, 1, …
//!   across the scan whichever disk holds them; the stream is the chunks concatenated in order.
//! - `mk6` (Mark6 scatter-gather): `<disk>/<scan>`, a 20-byte file header, then blocks each with
//!   an 8-byte header (block number, size); blocks numbered 0, 1, … across all disks.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Longest scan name (jive5ab keeps names short; file systems take far more).
pub const MAX_SCAN_NAME: usize = 64;
/// Mark6 file header sync word (on disk `66 66 ed fe`).
pub const MK6_SYNC: u32 = 0xfeed_6666;
/// Mark6 scatter-gather version with 8-byte block headers.
pub const MK6_VERSION: i32 = 2;
pub const MK6_FILE_HEADER_BYTES: usize = 20;
pub const MK6_BLOCK_HEADER_BYTES: usize = 8;
/// Mark6's packet_format for VDIF.
pub const MK6_PACKET_FORMAT_VDIF: i32 = 0;
/// Digits of a vbs chunk number.
const VBS_DIGITS: usize = 8;

/// The on-disk layout of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One file per scan on one disk.
    File,
    /// FlexBuff chunks spread over the disks.
    Vbs,
    /// Mark6 scatter-gather: one file per disk, numbered blocks.
    Mk6,
}

impl Format {
    pub const NAMES: &'static str = "file, vbs or mk6";

    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "file" => Some(Format::File),
            "vbs" => Some(Format::Vbs),
            "mk6" => Some(Format::Mk6),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::File => "file",
            Format::Vbs => "vbs",
            Format::Mk6 => "mk6",
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("{0} bytes are too few for a Mark6 header")]
    Short(usize),
    #[error("not a Mark6 scatter-gather file: sync word {0:#010x}, expected 0xfeed6666")]
    Sync(u32),
    #[error("Mark6 scatter-gather version {0}; only version 2 (8-byte block headers) is read")]
    Version(i32),
    #[error("Mark6 {what} {value} is impossible")]
    Field { what: &'static str, value: i64 },
}

/// Why a scan name cannot be used, or None. Names become directory and file names that
/// jive5ab parses (`^.+/[^/.]+\.([0-9]{8})$`), so only letters, digits, `_` and `-`.
pub fn scan_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a scan needs a name".into());
    }
    if name.len() > MAX_SCAN_NAME {
        return Some(format!(
            "{:?} has {} characters; at most {MAX_SCAN_NAME}",
            name,
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Some(format!(
            "{name:?} holds {c:?}; use letters, digits, '_' and '-' only (no '.', no path separators)"
        ));
    }
    None
}

/// jive5ab's suffix for the `k`-th repeat of a scan name (k from 1): `a`, `b`, …, `z`, `aa`, ….
pub fn repeat_suffix(mut k: usize) -> String {
    let mut s = Vec::new();
    while k > 0 {
        k -= 1;
        s.push(b'a' + (k % 26) as u8);
        k /= 26;
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

/// Digits (at least) of a rotated file's part number.
const FILE_PART_DIGITS: usize = 4;

/// `<disk>/<scan>.vdif`: a `file` scan, or its first part when rotated by size.
pub fn file_path(disk: &Path, scan: &str) -> PathBuf {
    file_part_path(disk, scan, 0)
}

/// Part `number` of a `file` scan: `<disk>/<scan>.vdif` for the first, `<disk>/<scan>.0001.vdif`
/// and on for the files a size rotation starts.
pub fn file_part_path(disk: &Path, scan: &str, number: u64) -> PathBuf {
    match number {
        0 => disk.join(format!("{scan}.vdif")),
        n => disk.join(format!("{scan}.{n:0FILE_PART_DIGITS$}.vdif")),
    }
}

/// The part number of a `file` scan's file named `<scan>.vdif` (0) or `<scan>.NNNN.vdif`, or
/// None for any other name.
pub fn file_part_number(file_name: &str, scan: &str) -> Option<u64> {
    let rest = file_name.strip_prefix(scan)?.strip_suffix(".vdif")?;
    if rest.is_empty() {
        return Some(0);
    }
    let digits = rest.strip_prefix('.')?;
    if digits.len() < FILE_PART_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// `<disk>/<scan>`: the vbs scan directory.
pub fn vbs_dir(disk: &Path, scan: &str) -> PathBuf {
    disk.join(scan)
}

/// `<disk>/<scan>/<scan>.NNNNNNNN`.
pub fn vbs_chunk_path(disk: &Path, scan: &str, number: u64) -> PathBuf {
    vbs_dir(disk, scan).join(format!("{scan}.{number:0VBS_DIGITS$}"))
}

/// The chunk number of a vbs chunk file named `<scan>.NNNNNNNN`, or None for any other name.
pub fn vbs_chunk_number(file_name: &str, scan: &str) -> Option<u64> {
    let digits = file_name.strip_prefix(scan)?.strip_prefix('.')?;
    if digits.len() != VBS_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `<disk>/<scan>`: the Mark6 file of one disk.
pub fn mk6_path(disk: &Path, scan: &str) -> PathBuf {
    disk.join(scan)
}

/// Where vdifrec keeps the summaries of `file` and `mk6` scans on a disk: a directory of its
/// own, so that a glob of a scan's files (`mk6gather '<disk>/<scan>*'`) and jive5ab's listing of
/// a Mark6 disk see only the scan's data.
pub const SUMMARY_DIR: &str = ".vdifrec";

/// The JSON summary written beside a scan: inside the vbs directory (its name matches no
/// chunk), in `<disk>/.vdifrec/` for the other formats.
pub fn summary_path(disk: &Path, scan: &str, format: Format) -> PathBuf {
    match format {
        Format::Vbs => vbs_dir(disk, scan).join(format!("{scan}.summary.json")),
        Format::File | Format::Mk6 => disk.join(SUMMARY_DIR).join(format!("{scan}.summary.json")),
    }
}

/// The report `vdifrec scans --repair` leaves beside a scan it cut back to whole frames, where
/// the summary would be: with the summary, it marks a scan as closed (see `vdif::scan`).
pub fn repair_path(disk: &Path, scan: &str, format: Format) -> PathBuf {
    match format {
        Format::Vbs => vbs_dir(disk, scan).join(format!("{scan}.repair.json")),
        Format::File | Format::Mk6 => disk.join(SUMMARY_DIR).join(format!("{scan}.repair.json")),
    }
}

/// The Mark6 file header: sync, version, block size (largest block including its 8-byte
/// header), packet format, packet size (whole frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mk6FileHeader {
    pub block_size: u32,
    pub packet_format: i32,
    pub packet_size: u32,
}

impl Mk6FileHeader {
    pub fn vdif(block_size: u32, frame_size: u32) -> Mk6FileHeader {
        Mk6FileHeader {
            block_size,
            packet_format: MK6_PACKET_FORMAT_VDIF,
            packet_size: frame_size,
        }
    }

    pub fn to_bytes(&self) -> [u8; MK6_FILE_HEADER_BYTES] {
        let mut b = [0u8; MK6_FILE_HEADER_BYTES];
        b[0..4].copy_from_slice(&MK6_SYNC.to_le_bytes());
        b[4..8].copy_from_slice(&MK6_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&(self.block_size as i32).to_le_bytes());
        b[12..16].copy_from_slice(&self.packet_format.to_le_bytes());
        b[16..20].copy_from_slice(&(self.packet_size as i32).to_le_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Result<Mk6FileHeader, LayoutError> {
        if b.len() < MK6_FILE_HEADER_BYTES {
            return Err(LayoutError::Short(b.len()));
        }
        let word = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let sync = word(0) as u32;
        if sync != MK6_SYNC {
            return Err(LayoutError::Sync(sync));
        }
        if word(4) != MK6_VERSION {
            return Err(LayoutError::Version(word(4)));
        }
        let positive = |what: &'static str, v: i32| {
            if v > 0 {
                Ok(v as u32)
            } else {
                Err(LayoutError::Field {
                    what,
                    value: v as i64,
                })
            }
        };
        let block_size = positive("block_size", word(8))?;
        let packet_size = positive("packet_size", word(16))?;
        if block_size as usize <= MK6_BLOCK_HEADER_BYTES {
            return Err(LayoutError::Field {
                what: "block_size",
                value: block_size as i64,
            });
        }
        Ok(Mk6FileHeader {
            block_size,
            packet_format: word(12),
            packet_size,
        })
    }
}

/// A Mark6 write-block header: the block's number in the scan and its size including these
/// 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mk6BlockHeader {
    pub blocknum: u32,
    pub wb_size: u32,
}

impl Mk6BlockHeader {
    pub fn to_bytes(&self) -> [u8; MK6_BLOCK_HEADER_BYTES] {
        let mut b = [0u8; MK6_BLOCK_HEADER_BYTES];
        b[0..4].copy_from_slice(&(self.blocknum as i32).to_le_bytes());
        b[4..8].copy_from_slice(&(self.wb_size as i32).to_le_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Result<Mk6BlockHeader, LayoutError> {
        if b.len() < MK6_BLOCK_HEADER_BYTES {
            return Err(LayoutError::Short(b.len()));
        }
        let blocknum = i32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        let wb_size = i32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
        if blocknum < 0 {
            return Err(LayoutError::Field {
                what: "blocknum",
                value: blocknum as i64,
            });
        }
        if wb_size <= MK6_BLOCK_HEADER_BYTES as i32 {
            return Err(LayoutError::Field {
                what: "wb_size",
                value: wb_size as i64,
            });
        }
        Ok(Mk6BlockHeader {
            blocknum: blocknum as u32,
            wb_size: wb_size as u32,
        })
    }

    /// Bytes of frames the block carries.
    pub fn payload(&self) -> usize {
        self.wb_size as usize - MK6_BLOCK_HEADER_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_file_parts_never_look_like_another_scan() {
        let d = Path::new("/d0");
        assert_eq!(file_part_path(d, "s1", 0), Path::new("/d0/s1.vdif"));
        assert_eq!(file_part_path(d, "s1", 3), Path::new("/d0/s1.0003.vdif"));
        assert_eq!(
            file_part_path(d, "s1", 12345),
            Path::new("/d0/s1.12345.vdif")
        );
        assert_eq!(file_part_number("s1.vdif", "s1"), Some(0));
        assert_eq!(file_part_number("s1.0003.vdif", "s1"), Some(3));
        assert_eq!(file_part_number("s1.12345.vdif", "s1"), Some(12345));
        // Another scan's file, a short or zero number, other names: not parts of s1.
        assert_eq!(file_part_number("s1_0001.vdif", "s1"), None);
        assert_eq!(file_part_number("s1a.vdif", "s1"), None);
        assert_eq!(file_part_number("s1.001.vdif", "s1"), None);
        assert_eq!(file_part_number("s1.0000.vdif", "s1"), None);
        assert_eq!(file_part_number("s1.0001.vdif.tmp", "s1"), None);
        assert_eq!(file_part_number("s1.summary.json", "s1"), None);
    }

    #[test]
    fn vbs_names_are_jive5ab_s() {
        let p = vbs_chunk_path(Path::new("/m1"), "kvn_scan1", 12);
        assert_eq!(p, PathBuf::from("/m1/kvn_scan1/kvn_scan1.00000012"));
        assert_eq!(
            vbs_chunk_number("kvn_scan1.00000012", "kvn_scan1"),
            Some(12)
        );
        assert_eq!(vbs_chunk_number("kvn_scan1.0000012", "kvn_scan1"), None);
        assert_eq!(
            vbs_chunk_number("kvn_scan1.summary.json", "kvn_scan1"),
            None
        );
        assert_eq!(vbs_chunk_number("kvn_scan2.00000012", "kvn_scan1"), None);
    }

    #[test]
    fn mk6_headers_match_the_reference_byte_for_byte() {
        let h = Mk6FileHeader::vdif(8 + 1024 * 8224, 8224);
        let b = h.to_bytes();
        assert_eq!(&b[0..4], &[0x66, 0x66, 0xed, 0xfe]);
        assert_eq!(&b[4..8], &2i32.to_le_bytes());
        assert_eq!(&b[8..12], &(8 + 1024 * 8224i32).to_le_bytes());
        assert_eq!(&b[12..16], &0i32.to_le_bytes());
        assert_eq!(&b[16..20], &8224i32.to_le_bytes());
        assert_eq!(Mk6FileHeader::parse(&b), Ok(h));
        let block = Mk6BlockHeader {
            blocknum: 7,
            wb_size: 8 + 8224,
        };
        assert_eq!(block.to_bytes(), [7, 0, 0, 0, 0x28, 0x20, 0, 0]);
        assert_eq!(Mk6BlockHeader::parse(&block.to_bytes()), Ok(block));
        assert_eq!(block.payload(), 8224);
        let mut bad = b;
        bad[0] = 0;
        assert!(matches!(
            Mk6FileHeader::parse(&bad),
            Err(LayoutError::Sync(_))
        ));
    }

    #[test]
    fn scan_names() {
        assert_eq!(scan_name_problem("kvn_scan-1"), None);
        for bad in ["", "a.b", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(scan_name_problem(bad).is_some(), "{bad:?}");
        }
        assert!(scan_name_problem(&"x".repeat(64)).is_none());
        let s: Vec<String> = [1, 2, 26, 27, 28].map(repeat_suffix).to_vec();
        assert_eq!(s, ["a", "b", "z", "aa", "ab"]);
    }
}
