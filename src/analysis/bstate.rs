//! Bit-state statistics: how often each quantisation state occurs, per input (m5bstate).

use crate::vdif::decode::DecodeError;

/// Counts of each quantisation state per input, straight from payload bytes.
///
/// `payloads` are the payloads of whole frames of one thread layout; the counts come back as
/// `nchan × 2^bits` (complex data: real and imaginary parts counted together). Bits other
/// than 1, 2, 4 or 8, or no channel, are refused.
pub fn bit_states(
    payloads: &[&[u8]],
    bits: u32,
    nchan: usize,
    complex: bool,
) -> Result<Vec<u64>, DecodeError> {
    if !matches!(bits, 1 | 2 | 4 | 8) {
        return Err(DecodeError::UnsupportedBits(bits));
    }
    if nchan == 0 {
        return Err(DecodeError::NoChannel);
    }
    Ok(count_states(payloads, bits, nchan, complex))
}

/// Expected fractions of the four 2-bit states for Gaussian input quantised at
/// ±`threshold_sigma` σ: Φ(−t), Φ(0) − Φ(−t), the same, Φ(−t).
pub fn two_bit_state_fractions(threshold_sigma: f64) -> [f64; 4] {
    let outer = normal_cdf(-threshold_sigma);
    [outer, 0.5 - outer, 0.5 - outer, outer]
}

/// Standard normal CDF (for the expected bit-state fractions).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Complementary error function (W. J. Cody's rational approximations via erfc of Numerical
/// Recipes' Chebyshev fit; relative error < 1.2e-7, ample for state fractions).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

fn count_states(payloads: &[&[u8]], bits: u32, nchan: usize, complex: bool) -> Vec<u64> {
    let levels = 1usize << bits;
    let vpb = (8 / bits) as usize;
    let vals = if complex { 2 } else { 1 };
    // Values per time sample, and bytes per time sample (at least one).
    let per_sample = nchan * vals;
    let period = (per_sample / vpb).max(1);
    // A byte histogram per byte position within a sample: one increment per byte.
    let mut hist = vec![0u64; period * 256];
    for p in payloads {
        for (i, b) in p.iter().enumerate() {
            hist[(i % period) * 256 + *b as usize] += 1;
        }
    }
    let mut counts = vec![0u64; nchan * levels];
    let mask = (levels - 1) as u32;
    for pos in 0..period {
        for byte in 0..256usize {
            let n = hist[pos * 256 + byte];
            if n == 0 {
                continue;
            }
            for k in 0..vpb {
                let value = pos * vpb + k;
                let chan = (value / vals) % nchan;
                let code = (byte as u32 >> (k as u32 * bits)) & mask;
                counts[chan * levels + code as usize] += n;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_states_count_every_value() {
        // 2-bit, 4 channels: one byte is one time sample, channel k in bits 2k..2k+1.
        let payload = [0b11_10_01_00u8, 0b00_00_00_00, 0b11_11_11_11];
        let c = bit_states(&[&payload], 2, 4, false).unwrap();
        assert_eq!(&c[0..4], &[2, 0, 0, 1]); // channel 0: codes 0, 0, 3
        assert_eq!(&c[4..8], &[1, 1, 0, 1]); // channel 1: codes 1, 0, 3
        assert_eq!(c.iter().sum::<u64>(), 12);
        // 2-bit, 1 channel: four time samples per byte, all of channel 0.
        let c = bit_states(&[&payload], 2, 1, false).unwrap();
        assert_eq!(c, vec![5, 1, 1, 5]);
    }
}
