//! Is this datagram (or this stretch of a file) a frame of the stream?
//!
//! The stream's layout is fixed by its first valid frame (or by the user): frame size, legacy
//! or not, EDV, version, channels, bits, complex. A frame that disagrees on any of them is not
//! part of the stream and is counted as malformed, by kind, and never written. Everything else
//! about a frame (thread, time, invalid flag, station) may vary and is the accounting's business.

use crate::vdif::header::{field, Header, SYNC_WORD};
use serde::Serialize;

/// Why a datagram or a stretch of file is not a frame of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Malformed {
    /// Shorter than offset + frame size (an empty datagram, a port scan, a fragment).
    TooShort,
    /// Longer than offset + frame size (the kernel flags it MSG_TRUNC).
    TooLong,
    /// Frame length field disagrees with the stream's frame size.
    BadFrameLength,
    /// Legacy (16-byte) header in a stream of 32-byte headers, or the reverse.
    LegacyMismatch,
    /// Version, channels, bits, complex flag or EDV differ from the stream's.
    FormatMismatch,
    /// EDV 1/3/4 header without the 0xACABFEED sync word.
    BadSync,
    /// An IP fragment of a datagram to our port (afpacket, pfring): raise the MTU to fit a
    /// whole frame (9000 for 8224-byte frames).
    Fragmented,
}

impl Malformed {
    pub const ALL: [Malformed; 7] = [
        Malformed::TooShort,
        Malformed::TooLong,
        Malformed::BadFrameLength,
        Malformed::LegacyMismatch,
        Malformed::FormatMismatch,
        Malformed::BadSync,
        Malformed::Fragmented,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Malformed::TooShort => "too_short",
            Malformed::TooLong => "too_long",
            Malformed::BadFrameLength => "bad_frame_length",
            Malformed::LegacyMismatch => "legacy_mismatch",
            Malformed::FormatMismatch => "format_mismatch",
            Malformed::BadSync => "bad_sync",
            Malformed::Fragmented => "fragmented",
        }
    }

    pub fn index(&self) -> usize {
        *self as usize
    }
}

/// Counts of malformed datagrams by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MalformedCounts(pub [u64; 7]);

impl MalformedCounts {
    pub fn add(&mut self, kind: Malformed) {
        self.0[kind.index()] += 1;
    }
    /// Sets a count kept elsewhere (by a backend).
    pub fn set(&mut self, kind: Malformed, n: u64) {
        self.0[kind.index()] = n;
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    pub fn get(&self, kind: Malformed) -> u64 {
        self.0[kind.index()]
    }
    /// (kind name, count) for every kind.
    pub fn by_kind(&self) -> Vec<(&'static str, u64)> {
        Malformed::ALL
            .iter()
            .map(|k| (k.name(), self.get(*k)))
            .collect()
    }
}

impl std::ops::AddAssign for MalformedCounts {
    /// Counts of several streams together.
    fn add_assign(&mut self, o: MalformedCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

impl Serialize for MalformedCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Malformed::ALL.len()))?;
        for (k, v) in self.by_kind() {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// The layout every frame of a stream shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StreamFormat {
    pub frame_size: usize,
    pub legacy: bool,
    pub edv: Option<u32>,
    pub version: u32,
    pub nchan: u32,
    pub bits: u32,
    pub complex: bool,
}

impl StreamFormat {
    pub fn of(h: &Header) -> StreamFormat {
        StreamFormat {
            frame_size: h.frame_size(),
            legacy: h.is_legacy(),
            edv: h.edv(),
            version: h.version(),
            nchan: h.nchan(),
            bits: h.bits(),
            complex: h.is_complex(),
        }
    }

    /// Header size of the stream's frames.
    pub fn header_size(&self) -> usize {
        if self.legacy {
            16
        } else {
            32
        }
    }

    /// Classifies exactly one frame's bytes (the caller has stripped any offset).
    #[inline]
    pub fn classify(&self, frame: &[u8]) -> Result<Header, Malformed> {
        self.classify_parts(frame.len(), frame)
    }

    /// Classifies a frame of `len` bytes whose header is at the start of `header` (which may
    /// be a byte-swapped copy, for senders that write big-endian headers).
    #[inline]
    pub fn classify_parts(&self, len: usize, header: &[u8]) -> Result<Header, Malformed> {
        if len < self.frame_size {
            return Err(Malformed::TooShort);
        }
        if len > self.frame_size {
            return Err(Malformed::TooLong);
        }
        let h = Header::parse_unchecked(header).map_err(|_| Malformed::TooShort)?;
        self.check_header(&h)?;
        Ok(h)
    }

    /// Checks a header against the stream's layout.
    #[inline]
    pub fn check_header(&self, h: &Header) -> Result<(), Malformed> {
        if h.is_legacy() != self.legacy {
            return Err(Malformed::LegacyMismatch);
        }
        if h.frame_size() != self.frame_size {
            return Err(Malformed::BadFrameLength);
        }
        if h.edv() != self.edv
            || h.version() != self.version
            || h.nchan() != self.nchan
            || h.bits() != self.bits
            || h.is_complex() != self.complex
        {
            return Err(Malformed::FormatMismatch);
        }
        if matches!(self.edv, Some(1 | 3 | 4)) && h.get(field::SYNC) != SYNC_WORD {
            return Err(Malformed::BadSync);
        }
        Ok(())
    }
}

impl StreamFormat {
    /// The verdict on one received datagram, `len` bytes in all (its `offset` leading bytes
    /// included), `truncated` when it was longer than the buffer given to the kernel; `frame`
    /// holds the bytes after the offset as received.
    pub fn classify_datagram(
        &self,
        len: usize,
        truncated: bool,
        offset: usize,
        frame: &[u8],
        big_endian: bool,
    ) -> Result<Header, Malformed> {
        if truncated || len > offset + self.frame_size {
            return Err(Malformed::TooLong);
        }
        if len < offset + self.frame_size || frame.len() < self.frame_size {
            return Err(Malformed::TooShort);
        }
        let frame = &frame[..self.frame_size];
        if big_endian {
            self.classify_parts(self.frame_size, &swapped_header(frame))
        } else {
            self.classify(frame)
        }
    }
}

/// Learns the stream's layout from a datagram (see `StreamFormat::classify_datagram` for the
/// arguments); `want_size` is the frame size the user gave, if any. The error says why the
/// datagram cannot be the stream's first frame.
pub fn learn_datagram(
    len: usize,
    truncated: bool,
    offset: usize,
    frame: &[u8],
    big_endian: bool,
    want_size: Option<usize>,
) -> Result<(StreamFormat, Header), Malformed> {
    if truncated {
        return Err(Malformed::TooLong);
    }
    if len < offset + 16 || frame.len() < len - offset {
        return Err(Malformed::TooShort);
    }
    let frame = &frame[..len - offset];
    let header_bytes = if big_endian {
        swapped_header(frame)
    } else {
        let mut h = [0u8; 32];
        let n = frame.len().min(32);
        h[..n].copy_from_slice(&frame[..n]);
        h
    };
    let format = learn_format_parts(frame.len(), &header_bytes[..frame.len().min(32)])
        .filter(|f| want_size.is_none_or(|fs| fs == f.frame_size))
        .ok_or(Malformed::BadFrameLength)?;
    let header = Header::parse_unchecked(&header_bytes).map_err(|_| Malformed::TooShort)?;
    Ok((format, header))
}

/// The first 32 bytes of `frame` with every 32-bit word byte-swapped (big-endian headers).
pub fn swapped_header(frame: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let n = frame.len().min(32) / 4 * 4;
    for (dst, src) in out[..n].chunks_exact_mut(4).zip(frame[..n].chunks_exact(4)) {
        dst.copy_from_slice(&[src[3], src[2], src[1], src[0]]);
    }
    out
}

/// Learns a stream's layout from a datagram that may be its first frame: a header whose frame
/// length matches the datagram length and that validates.
pub fn learn_format(frame: &[u8]) -> Option<StreamFormat> {
    learn_format_parts(frame.len(), frame)
}

/// `learn_format` for a frame of `len` bytes whose header is at the start of `header`.
pub fn learn_format_parts(len: usize, header: &[u8]) -> Option<StreamFormat> {
    let h = Header::parse_unchecked(header).ok()?;
    if h.frame_size() != len || h.frame_size() <= h.header_size() {
        return None;
    }
    // A sender may leave junk in the unused words of EDV 0; everything else must validate.
    match h.validate() {
        Ok(()) | Err(crate::vdif::HeaderError::NonZeroExtendedWords { .. }) => {
            Some(StreamFormat::of(&h))
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(edv: Option<u32>, size: usize, nchan: u32, bits: u32) -> Vec<u8> {
        let h = Header::new(edv, size, nchan, bits, false).unwrap();
        let mut f = vec![0u8; size];
        h.write_to(&mut f);
        f
    }

    #[test]
    fn every_kind_is_told_apart() {
        let good = frame(Some(0), 8224, 4, 2);
        let fmt = learn_format(&good).unwrap();
        assert!(fmt.classify(&good).is_ok());
        assert_eq!(fmt.classify(&good[..100]), Err(Malformed::TooShort));
        assert_eq!(fmt.classify(&[]), Err(Malformed::TooShort));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(fmt.classify(&long), Err(Malformed::TooLong));
        let mut f = good.clone();
        f[8] = 0x05; // frame length 1029 units
        assert_eq!(fmt.classify(&f), Err(Malformed::BadFrameLength));
        assert_eq!(
            fmt.classify(&frame(None, 8224, 4, 2)),
            Err(Malformed::LegacyMismatch)
        );
        assert_eq!(
            fmt.classify(&frame(Some(0), 8224, 8, 2)),
            Err(Malformed::FormatMismatch)
        );
        let edv3 = frame(Some(3), 8224, 4, 2);
        let fmt3 = learn_format(&edv3).unwrap();
        let mut f = edv3.clone();
        f[20] ^= 1;
        assert_eq!(fmt3.classify(&f), Err(Malformed::BadSync));
        // Random bytes almost never pass; an all-zero datagram claims frame length 0.
        assert_eq!(
            fmt.classify(&vec![0u8; 8224]),
            Err(Malformed::BadFrameLength)
        );
        assert!(learn_format(&good[..8216]).is_none());
    }

    #[test]
    fn big_endian_headers_classify_after_swapping() {
        let good = frame(Some(0), 8224, 4, 2);
        let mut be = good.clone();
        let swapped = swapped_header(&good);
        be[..32].copy_from_slice(&swapped);
        assert!(learn_format(&be).is_none());
        let fmt = learn_format_parts(be.len(), &swapped_header(&be)).unwrap();
        assert!(fmt.classify_parts(be.len(), &swapped_header(&be)).is_ok());
    }
}
