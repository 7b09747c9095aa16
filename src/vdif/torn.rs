//! Torn pieces: what a recorder killed mid-write (power lost, `kill -9`) leaves at the end of
//! the files it was writing, and how readers read past it.
//!
//! A writer adds frames at a file's end, so whatever it was writing when it stopped lies there:
//! part of a frame after a vbs chunk's or a `file` part's whole frames, a Mark6 block whose
//! header claims more bytes than the file holds, or part of a Mark6 block (or file) header. The
//! frames before it are the observation, and are read; the torn bytes never are. Each torn
//! piece is reported (file, byte, bytes, part) so that nothing is left out silently, and
//! `vdif::repair` cuts it away so that every reader, jive5ab's included, sees whole frames only.
//!
//! A scan with several writers (one per disk) can have a torn piece at the end of every file
//! being written when the recorder stopped, so torn pieces also lie in the middle of a scan
//! (chunks 11, 12 and 13 of three writers). The frames after a torn tail and before the next
//! part were never written: readers see them as absent (the next part's frames follow at once),
//! a gap in VDIF time that `check` counts as lost frames and the torn piece explains.
//!
//! Anything that is not whole frames anywhere but at a file's end (a Mark6 block in the middle
//! of its file that is not whole frames, a part whose frames change size) is no torn piece but
//! a broken file, an error as before (`vdif::scan::ScanError`).

use super::stamp::Stamp;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What kind of write was cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TornKind {
    /// A file of 0 bytes (or a Mark6 file of its header alone): created, nothing written.
    Empty,
    /// Part of a frame after the whole frames of a vbs chunk or a `file` part.
    PartialFrame,
    /// A Mark6 block whose header claims more bytes than the file holds.
    BlockPastEnd,
    /// Fewer than 8 bytes at a Mark6 file's end: part of a block header.
    PartialBlockHeader,
    /// A Mark6 file shorter than its 20-byte header.
    PartialFileHeader,
}

/// Bytes at the end of a file that are not whole frames, and never read as data.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TornPiece {
    pub path: PathBuf,
    /// The chunk, block or file part the bytes belong to; None where that is not known (part
    /// of a Mark6 block header or file header).
    pub part: Option<u64>,
    pub kind: TornKind,
    /// File byte where the torn bytes start.
    pub offset: u64,
    /// Torn bytes, to the file's end (0 for an empty file, or a Mark6 block cut on a frame
    /// boundary, whose header alone is wrong). A Mark6 block left with no whole frame is torn
    /// from its header on.
    pub bytes: u64,
    /// Whole frames of the same part before the torn bytes: they are read.
    pub frames: u64,
    /// The last frame before the torn piece and the first after it (None: none, or not known;
    /// `before` None at the end of the scan): the VDIF time it leaves out.
    pub after: Option<Stamp>,
    pub before: Option<Stamp>,
    /// The piece in words, as listings and reports print it.
    pub description: String,
}

/// `1234567` as `1,234,567`: byte counts in messages are read by eye.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How the whole frames of `bytes` bytes end: (bytes of whole frames, bytes left over). With
/// no frame size known (no part holds a whole frame) nothing is whole.
pub fn whole_frames(bytes: u64, frame_size: usize) -> (u64, u64) {
    if frame_size == 0 {
        return (0, bytes);
    }
    let whole = bytes / frame_size as u64 * frame_size as u64;
    (whole, bytes - whole)
}

impl TornPiece {
    /// The piece's name and place: `chunk 13 of /d1/s/s.00000013`, or the file alone where the
    /// part is not known.
    pub fn place(&self, what: &str) -> String {
        match self.part {
            Some(n) => format!("{what} {n} of {}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }

    /// Fills `description` from the other fields; `what` is the part's word (chunk, block,
    /// file), `claimed` a torn Mark6 block's size as its header gives it.
    pub fn describe(&mut self, what: &str, claimed: Option<u64>) {
        let place = self.place(what);
        let at = grouped(self.offset);
        let bytes = grouped(self.bytes);
        let kept = match self.frames {
            0 => "no whole frame".to_string(),
            1 => "1 whole frame".to_string(),
            n => format!("{} whole frames", grouped(n)),
        };
        let mut text = match self.kind {
            TornKind::Empty if self.offset > 0 => format!(
                "{place} holds its {}-byte Mark6 file header alone: created, no block written",
                self.offset
            ),
            TornKind::Empty => format!("{place} is empty: created, nothing written"),
            TornKind::PartialFrame => format!(
                "{place}: {bytes} bytes from byte {at} are part of a frame, after {kept} (torn: \
                 the writer stopped in the middle of it)"
            ),
            TornKind::BlockPastEnd => {
                let claims = format!(
                    "{place}: its header claims {} bytes",
                    grouped(claimed.unwrap_or(0))
                );
                let rest = match (self.frames, self.bytes) {
                    (0, _) => format!(
                        "the file holds no whole frame of it: {bytes} bytes from byte {at}, \
                         its header on"
                    ),
                    (_, 0) => format!("the file holds {kept} of it and ends there"),
                    _ => format!(
                        "the file holds {kept} of it, then {bytes} bytes of a frame from byte \
                         {at}"
                    ),
                };
                format!("{claims}, {rest} (torn: the writer stopped in the middle of the block)")
            }
            TornKind::PartialBlockHeader => format!(
                "{place}: {bytes} bytes from byte {at} are part of a Mark6 block header (torn: \
                 the writer stopped as it began a block)"
            ),
            TornKind::PartialFileHeader => format!(
                "{place}: {bytes} bytes, part of the 20-byte Mark6 file header (torn: the \
                 writer stopped as it began the file)"
            ),
        };
        match (&self.after, &self.before) {
            (Some(a), Some(b)) => text.push_str(&format!(
                "; no frames after {} until {}",
                a.describe(),
                b.describe()
            )),
            (Some(a), None) => text.push_str(&format!("; the scan ends with {}", a.describe())),
            (None, Some(b)) => text.push_str(&format!(
                "; no frames before {} (the start of the scan)",
                b.describe()
            )),
            (None, None) => {}
        }
        self.description = text;
    }

    /// The part of a plain VDIF file (not a scan) after its last whole frame, if any: what
    /// `vdifrec.open(path)` leaves out of a recording cut short.
    pub fn file_tail(path: &Path, file_bytes: u64, frame_size: usize) -> Option<TornPiece> {
        let (whole, rest) = whole_frames(file_bytes, frame_size);
        if rest == 0 {
            return None;
        }
        let mut piece = TornPiece {
            path: path.to_path_buf(),
            part: None,
            kind: TornKind::PartialFrame,
            offset: whole,
            bytes: rest,
            frames: whole / frame_size as u64,
            after: None,
            before: None,
            description: String::new(),
        };
        piece.describe("file", None);
        Some(piece)
    }
}

/// The pieces in one line, as `vdifrec scans` prints them under a scan:
/// `1 piece, 4,076 bytes (chunk 13 of /d1/s/s.00000013)`.
pub fn summary_line(pieces: &[TornPiece], what: &str) -> String {
    let bytes: u64 = pieces.iter().map(|p| p.bytes).sum();
    format!(
        "{} piece{}, {} bytes ({})",
        pieces.len(),
        if pieces.len() == 1 { "" } else { "s" },
        grouped(bytes),
        pieces
            .iter()
            .map(|p| p.place(what))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_for_the_eye() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(4076), "4,076");
        assert_eq!(grouped(32_256_000), "32,256,000");
        assert_eq!(grouped(1_000_000_000), "1,000,000,000");
    }

    #[test]
    fn whole_frames_and_the_rest() {
        // The chunk: 32,260,096 bytes of 8224-byte frames.
        assert_eq!(whole_frames(32_260_096, 8224), (32_254_528, 5_568));
        assert_eq!(whole_frames(8224 * 3, 8224), (8224 * 3, 0));
        assert_eq!(whole_frames(100, 8224), (0, 100));
        assert_eq!(whole_frames(100, 0), (0, 100));
    }

    #[test]
    fn a_file_cut_short_names_its_tail() {
        let p = TornPiece::file_tail(Path::new("/d/x.vdif"), 3 * 1056 + 7, 1056).unwrap();
        assert_eq!((p.offset, p.bytes, p.frames), (3168, 7, 3));
        assert!(
            p.description.starts_with(
                "/d/x.vdif: 7 bytes from byte 3,168 are part of a frame, after 3 whole frames"
            ),
            "{}",
            p.description
        );
        assert!(TornPiece::file_tail(Path::new("/d/x.vdif"), 3 * 1056, 1056).is_none());
        assert_eq!(
            summary_line(&[p.clone(), p], "file"),
            "2 pieces, 14 bytes (/d/x.vdif, /d/x.vdif)"
        );
    }
}
