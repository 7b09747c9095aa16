//! Bit-state statistics: how often each quantisation state occurs, per input (m5bstate).

/// Counts of each quantisation state per input, straight from payload bytes.
///
/// `payloads` are the payloads of whole frames of one thread layout; the counts come back as
/// `nchan × 2^bits` (complex data: real and imaginary parts counted together).
pub fn bit_states(payloads: &[&[u8]], bits: u32, nchan: usize, complex: bool) -> Vec<u64> {
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
        let c = bit_states(&[&payload], 2, 4, false);
        assert_eq!(&c[0..4], &[2, 0, 0, 1]); // channel 0: codes 0, 0, 3
        assert_eq!(&c[4..8], &[1, 1, 0, 1]); // channel 1: codes 1, 0, 3
        assert_eq!(c.iter().sum::<u64>(), 12);
        // 2-bit, 1 channel: four time samples per byte, all of channel 0.
        let c = bit_states(&[&payload], 2, 1, false);
        assert_eq!(c, vec![5, 1, 1, 5]);
    }
}
