//! Table-driven decoding of VDIF payloads into `f32`.
//!
//! Every byte of a payload maps, through one 256-entry table, to the 8/bits values it holds
//! (least-significant bits first, as VDIF packs them). Decoding is then a copy per byte with
//! no branch per sample. Levels are baseband's, so its output and ours compare bit for bit.

use thiserror::Error;

/// Upper 2-bit level for a lower level of 1 (mark5access' optimal value, as baseband uses).
pub const OPTIMAL_2BIT_HIGH: f32 = 3.316505;
/// 2-bit thresholds at ±t·σ with t of the optimal (Max) quantiser for Gaussian input: what a
/// well-set sampler uses, and so what bit-state statistics are compared with.
pub const TWO_BIT_THRESHOLD_SIGMA: f64 = 0.9816;
/// 4-bit values v decode to (v − 8) / 2.95.
pub const FOUR_BIT_SCALE: f32 = 2.95;
/// 8-bit values v decode to (v − 127.5) / 35.5.
pub const EIGHT_BIT_SCALE: f32 = 35.5;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("{0} bits per sample cannot be decoded: vdifrec decodes 1, 2, 4 and 8 bits")]
    UnsupportedBits(u32),
    #[error("nchan: a frame holds at least one channel")]
    NoChannel,
    #[error("output holds {got} values but {needed} are needed")]
    OutputTooSmall { needed: usize, got: usize },
    #[error("values {first}..{end} lie outside a payload of {available} values")]
    OutOfRange {
        first: usize,
        end: usize,
        available: usize,
    },
}

/// The value of each quantisation level for a bit width.
pub fn levels(bits: u32) -> Result<Vec<f32>, DecodeError> {
    Ok(match bits {
        1 => vec![-1.0, 1.0],
        2 => vec![-OPTIMAL_2BIT_HIGH, -1.0, 1.0, OPTIMAL_2BIT_HIGH],
        4 => (0..16).map(|v| (v as f32 - 8.0) / FOUR_BIT_SCALE).collect(),
        8 => (0..256)
            .map(|v| (v as f32 - 127.5) / EIGHT_BIT_SCALE)
            .collect(),
        other => return Err(DecodeError::UnsupportedBits(other)),
    })
}

/// Decoder for one bit width: a byte-indexed table of the values each byte holds.
#[derive(Clone, Debug)]
pub struct Decoder {
    bits: u32,
    values_per_byte: usize,
    /// `table[byte * values_per_byte + k]` is the k-th value (LSB first) in `byte`.
    table: Box<[f32]>,
}

impl Decoder {
    pub fn new(bits: u32) -> Result<Decoder, DecodeError> {
        let lv = levels(bits)?;
        let per_byte = (8 / bits) as usize;
        let mask = (1u32 << bits) - 1;
        let mut table = vec![0f32; 256 * per_byte];
        for byte in 0..256u32 {
            for k in 0..per_byte {
                let code = (byte >> (k as u32 * bits)) & mask;
                table[byte as usize * per_byte + k] = lv[code as usize];
            }
        }
        Ok(Decoder {
            bits,
            values_per_byte: per_byte,
            table: table.into_boxed_slice(),
        })
    }

    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Number of values a payload of `bytes` holds.
    pub fn values_in(&self, bytes: usize) -> usize {
        bytes * self.values_per_byte
    }

    /// Decodes every value of `payload` into the start of `out`.
    pub fn decode(&self, payload: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
        let needed = self.values_in(payload.len());
        if out.len() < needed {
            return Err(DecodeError::OutputTooSmall {
                needed,
                got: out.len(),
            });
        }
        match self.values_per_byte {
            1 => decode_bytes::<1>(&self.table, payload, &mut out[..needed]),
            2 => decode_bytes::<2>(&self.table, payload, &mut out[..needed]),
            4 => decode_bytes::<4>(&self.table, payload, &mut out[..needed]),
            _ => decode_bytes::<8>(&self.table, payload, &mut out[..needed]),
        }
        Ok(())
    }

    /// Decodes values `first..first + out.len()` of `payload` (value = one real number; a
    /// complex sample is two values, a multi-channel sample `nchan` values).
    pub fn decode_range(
        &self,
        payload: &[u8],
        first: usize,
        out: &mut [f32],
    ) -> Result<(), DecodeError> {
        let available = self.values_in(payload.len());
        let end = first + out.len();
        if end > available {
            return Err(DecodeError::OutOfRange {
                first,
                end,
                available,
            });
        }
        let vpb = self.values_per_byte;
        let (first_byte, skip) = (first / vpb, first % vpb);
        let mut done = 0;
        // A partial leading byte, then whole bytes, then a partial trailing byte.
        if skip != 0 {
            let entry = &self.table[payload[first_byte] as usize * vpb..][..vpb];
            let n = (vpb - skip).min(out.len());
            out[..n].copy_from_slice(&entry[skip..skip + n]);
            done = n;
        }
        let whole_start = first_byte + usize::from(skip != 0);
        let whole = (out.len() - done) / vpb;
        self.decode(
            &payload[whole_start..whole_start + whole],
            &mut out[done..done + whole * vpb],
        )?;
        done += whole * vpb;
        if done < out.len() {
            let byte = payload[whole_start + whole];
            let entry = &self.table[byte as usize * vpb..][..vpb];
            let n = out.len() - done;
            out[done..].copy_from_slice(&entry[..n]);
        }
        Ok(())
    }
}

/// The inner loop: one table row copied per payload byte. `N` is a constant so the copy is a
/// fixed-size move the compiler turns into one or two vector stores.
#[inline]
fn decode_bytes<const N: usize>(table: &[f32], payload: &[u8], out: &mut [f32]) {
    for (byte, dst) in payload.iter().zip(out.chunks_exact_mut(N)) {
        let row: &[f32; N] = table[*byte as usize * N..][..N].try_into().unwrap();
        dst.copy_from_slice(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_bit_bytes_unpack_lsb_first() {
        // baseband's documented example: 0b10100101 holds -1, -1, 1, 1.
        let d = Decoder::new(2).unwrap();
        let mut out = [0f32; 4];
        d.decode(&[0b1010_0101], &mut out).unwrap();
        assert_eq!(out, [-1.0, -1.0, 1.0, 1.0]);
        d.decode(&[0b0001_1011], &mut out).unwrap();
        assert_eq!(out, [OPTIMAL_2BIT_HIGH, 1.0, -1.0, -OPTIMAL_2BIT_HIGH]);
    }

    #[test]
    fn levels_match_baseband_conventions() {
        assert_eq!(levels(1).unwrap(), vec![-1.0, 1.0]);
        let l4 = levels(4).unwrap();
        assert_eq!(l4[8], 0.0);
        assert_eq!(l4[0], -8.0 / 2.95f32);
        let l8 = levels(8).unwrap();
        assert_eq!(l8[0], -127.5 / 35.5f32);
        assert_eq!(l8[255], 127.5 / 35.5f32);
        assert_eq!(levels(3), Err(DecodeError::UnsupportedBits(3)));
    }

    #[test]
    fn ranges_agree_with_whole_decode() {
        let payload: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for bits in [1, 2, 4, 8] {
            let d = Decoder::new(bits).unwrap();
            let mut all = vec![0f32; d.values_in(payload.len())];
            d.decode(&payload, &mut all).unwrap();
            for first in [0, 1, 3, 5, 7, 8, 13] {
                for n in [0, 1, 2, 5, 9, 17, 30] {
                    if first + n > all.len() {
                        continue;
                    }
                    let mut part = vec![0f32; n];
                    d.decode_range(&payload, first, &mut part).unwrap();
                    assert_eq!(
                        part,
                        all[first..first + n],
                        "bits {bits} first {first} n {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_small_output() {
        let d = Decoder::new(2).unwrap();
        let mut out = [0f32; 3];
        assert_eq!(
            d.decode(&[0], &mut out),
            Err(DecodeError::OutputTooSmall { needed: 4, got: 3 })
        );
    }
}
