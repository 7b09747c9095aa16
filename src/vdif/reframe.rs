//! Re-framing: a frame's payload cut into k frames of a smaller payload, the rule behind
//! `payload=` (`vdif::transform`).
//!
//! The pieces keep the frame's order and its header, but for two fields: the frame length,
//! and the frame number, which counts k times as fast — frame f becomes frames f·k to
//! f·k + k − 1 of the same second — so that a reader learns the new frame rate (k times the
//! old) from the numbers as it learns any other. A piece holds whole sample times, so that
//! every frame starts at a sample of every channel, and whole 8-byte units, as VDIF frames do.

use super::header::{field, Header};

/// The payload sizes that cut `payload` bytes into whole frames of whole samples: multiples
/// of `unit` bytes (8, or one sample time of every channel where that is more) that divide it.
pub fn valid_sizes(payload: usize, unit: usize) -> impl Iterator<Item = usize> {
    (1..=payload / unit.max(1))
        .map(move |n| n * unit)
        .filter(move |n| payload % n == 0)
}

/// The bytes a piece must be a multiple of: 8, or the bytes of one sample time of `nchan`
/// channels of `width` bits (both parts of a complex sample) where that is more.
pub fn unit_bytes(nchan: u32, width: u32) -> usize {
    (nchan as usize * width as usize).div_ceil(8).max(8)
}

/// How many frames of `size` payload bytes each `payload`-byte frame becomes: an error, in
/// words, when `size` does not cut it into whole frames of whole samples (it names the valid
/// sizes nearest `size`).
pub fn pieces(size: usize, payload: usize, unit: usize) -> Result<usize, String> {
    let whole = size > 0 && size % unit == 0 && payload % size == 0;
    if whole {
        return Ok(payload / size);
    }
    let valid: Vec<usize> = valid_sizes(payload, unit).collect();
    // Two on either side of the size asked for.
    let at = valid.partition_point(|&n| n < size);
    let near: Vec<String> = valid[at.saturating_sub(2)..]
        .iter()
        .filter(|&&n| n != size)
        .take(4)
        .map(|n| n.to_string())
        .collect();
    let why = if size == 0 || size % unit != 0 {
        if unit == 8 {
            "VDIF frames are whole 8-byte units".to_string()
        } else {
            format!("a frame holds whole sample times, {unit} bytes each")
        }
    } else if size > payload {
        format!("that is more than the {payload} bytes each frame holds")
    } else {
        format!("it does not divide the {payload}-byte payload")
    };
    Err(format!(
        "{size} bytes cannot be a frame's payload: {why}; give a multiple of {unit} that divides {payload}, such as {}",
        near.join(", ")
    ))
}

/// The header of piece `i` of the `k` cut from the frame whose header is `h`: frame number
/// f·k + i, and a frame of `frame_size` bytes (header included). An error when that number
/// does not fit VDIF's 24-bit field.
pub fn piece_header(h: &Header, k: usize, i: usize, frame_size: usize) -> Result<Header, String> {
    let number = h.frame_nr() as u64 * k as u64 + i as u64;
    if number > field::FRAME_NR.max() as u64 {
        return Err(format!(
            "frame {} cut into {k} becomes frame {number}, beyond the largest frame number VDIF holds ({}): the stream would have more than {} frames a second; give a larger payload",
            h.frame_nr(),
            field::FRAME_NR.max(),
            field::FRAME_NR.max() as u64 + 1
        ));
    }
    let mut out = *h;
    out.set(field::FRAME_NR, number as u32)
        .and_then(|()| out.set_frame_size(frame_size))
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_cut_whole_frames() {
        assert_eq!(pieces(1024, 8192, 8), Ok(8));
        assert_eq!(pieces(8192, 8192, 8), Ok(1));
        let e = pieces(1000, 8192, 8).unwrap_err();
        assert!(e.contains("such as 256, 512, 1024, 2048"), "{e}");
        let e = pieces(12, 8192, 8).unwrap_err();
        assert!(e.contains("whole 8-byte units"), "{e}");
        let e = pieces(16384, 8192, 8).unwrap_err();
        assert!(
            e.contains("more than the 8192 bytes") && e.contains("4096, 8192"),
            "{e}"
        );
        // 16 channels of 8 bits: a sample time is 16 bytes.
        assert_eq!(unit_bytes(16, 8), 16);
        assert_eq!(unit_bytes(4, 2), 8);
        assert!(pieces(24, 96, 16).is_err());
        assert_eq!(valid_sizes(96, 16).collect::<Vec<_>>(), [16, 32, 48, 96]);
    }

    #[test]
    fn pieces_count_frames_k_times_as_fast() {
        let mut h = Header::new(Some(3), 32 + 8192, 1, 2, false).unwrap();
        h.set(field::FRAME_NR, 7).unwrap();
        let p = piece_header(&h, 4, 3, 32 + 2048).unwrap();
        assert_eq!(p.frame_nr(), 31);
        assert_eq!(p.frame_size(), 32 + 2048);
        assert_eq!(p.edv(), Some(3));
        assert!(p.validate().is_ok());
        h.set(field::FRAME_NR, 125_000).unwrap();
        let e = piece_header(&h, 256, 0, 64).unwrap_err();
        assert!(e.contains("larger payload"), "{e}");
    }
}
