//! Fringes: the cross-correlation of two inputs (FX). This module sums the cross spectrum and
//! both autospectra over FFTs into `CrossSums`; `fringe_search` turns such sums into the lag
//! function and its peak (delay, amplitude, phase, SNR). The sums are the search's input, so
//! they are defined there and this module uses the search, never the other way round.

use crate::analysis::fringe_search::{fringe_search, Search};
pub use crate::analysis::fringe_search::{CrossSums, Fringe};
use crate::analysis::spectrum::{parallel, FrameLayout, FrameSource, Plans, SpectrumError, Work};

/// Cross-correlation of two streams: cross spectrum and autospectra, summed over FFTs.
pub struct CrossAccumulator {
    nfft: usize,
    complex: bool,
    plans: Plans,
    sums: CrossSums,
}

/// The cross and auto spectra of input `ia` of `a` from sample `start.0` and input `ib` of
/// `b` from sample `start.1` (or of `a` itself, both from `start.0`), each source with the
/// header that lays its frames out, over at most `nint` FFTs.
#[allow(clippy::too_many_arguments)]
pub fn cross_sums_of(
    a: (&dyn FrameSource, &crate::vdif::Header),
    b: Option<(&dyn FrameSource, &crate::vdif::Header)>,
    ia: usize,
    ib: usize,
    nfft: usize,
    start: (usize, usize),
    nint: Option<u64>,
) -> Result<CrossAccumulator, SpectrumError> {
    let la = FrameLayout::of(a.1)?;
    let lb = b.map(|(_, h)| FrameLayout::of(h)).transpose()?;
    let mut acc = CrossAccumulator::new(nfft, la.complex)?;
    let other = b.zip(lb.as_ref()).map(|((src, _), l)| (src, l, ib));
    acc.add_frames((a.0, &la, ia), other, ib, start, nint);
    Ok(acc)
}

/// The fringe between input `ia` of `a` and input `ib` of `b` (or of `a` itself), from
/// sample `start` of each, over at most `nint` FFTs.
#[allow(clippy::too_many_arguments)]
pub fn fringe_of(
    a: (&dyn FrameSource, &crate::vdif::Header),
    b: Option<(&dyn FrameSource, &crate::vdif::Header)>,
    ia: usize,
    ib: usize,
    nfft: usize,
    start: usize,
    nint: Option<u64>,
    search: &Search,
) -> Result<Fringe, SpectrumError> {
    cross_sums_of(a, b, ia, ib, nfft, (start, start), nint)?.fringe(search)
}

impl CrossAccumulator {
    pub fn new(nfft: usize, complex: bool) -> Result<Self, SpectrumError> {
        if !(2..=1 << 24).contains(&nfft) {
            return Err(SpectrumError::BadNfft(nfft));
        }
        Ok(CrossAccumulator {
            nfft,
            complex,
            plans: Plans::new(nfft, complex),
            sums: CrossSums::new(nfft),
        })
    }

    pub fn segment_len(&self) -> usize {
        self.plans.seg_len()
    }

    /// Adds whole segments of two streams: sample `n` of a is at `a[a_off + n * a_row]` (and
    /// its imaginary part one further for complex data); likewise b. Returns samples used.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        a: &[f32],
        a_off: usize,
        a_row: usize,
        b: &[f32],
        b_off: usize,
        b_row: usize,
        n_samples: usize,
    ) -> usize {
        let seg = self.segment_len();
        let vals = if self.complex { 2 } else { 1 };
        let fits = |x: &[f32], off: usize, row: usize| {
            if x.len() < off + vals {
                0
            } else {
                (x.len() - off - vals) / row + 1
            }
        };
        let n = n_samples
            .min(fits(a, a_off, a_row))
            .min(fits(b, b_off, b_row));
        let segments = n / seg;
        if segments == 0 {
            return 0;
        }
        let (nfft, plans, complex) = (self.nfft, &self.plans, self.complex);
        let same = std::ptr::eq(a.as_ptr(), b.as_ptr()) && a_row == b_row && a.len() == b.len();
        let parts = parallel(segments, |first, count| {
            let mut wa = Work::new(plans);
            let mut wb = Work::new(plans);
            let mut acc = CrossSums::new(nfft);
            for s in first..first + count {
                let xa = &a[a_off - a_off % a_row + s * seg * a_row..];
                let xb = &b[b_off - b_off % b_row + s * seg * b_row..];
                let (ca, cb) = (a_off % a_row, b_off % b_row);
                if same && !complex {
                    // Two real inputs of one stream: one packed complex FFT gives both.
                    wa.pair(xa, ca, cb, a_row);
                    acc.add(&wa.a, &wa.b);
                } else {
                    wa.one(xa, ca, a_row);
                    wb.one(xb, cb, b_row);
                    acc.add(&wa.a, &wb.a);
                }
            }
            acc
        });
        for p in &parts {
            self.sums.merge(p);
        }
        segments * seg
    }

    /// Adds segments of input `ia` of source a from sample `start.0` and input `ib` of source
    /// b from sample `start.1` (an input is a value column: thread × nchan + channel), or of
    /// inputs `ia` and `ib_same` of a alone from `start.0`; returns segments added.
    #[allow(clippy::too_many_arguments)]
    pub fn add_frames(
        &mut self,
        a: (&dyn FrameSource, &FrameLayout, usize),
        b: Option<(&dyn FrameSource, &FrameLayout, usize)>,
        ib_same: usize,
        start: (usize, usize),
        max_segments: Option<u64>,
    ) -> u64 {
        let seg = self.segment_len();
        let (sa, la, ia) = a;
        let mut segments = (sa.sets() * la.spf).saturating_sub(start.0) / seg;
        if let Some((sb, lb, _)) = b {
            segments = segments.min((sb.sets() * lb.spf).saturating_sub(start.1) / seg);
        }
        if let Some(m) = max_segments {
            segments = segments.min(m.saturating_sub(self.sums.segments) as usize);
        }
        if segments == 0 {
            return 0;
        }
        let vals = if self.complex { 2 } else { 1 };
        let row_a = sa.threads() * la.values();
        let (nfft, plans, complex) = (self.nfft, &self.plans, self.complex);
        let parts = parallel(segments, |first, count| {
            let mut wa = Work::new(plans);
            let mut wb = Work::new(plans);
            let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
            let mut acc = CrossSums::new(nfft);
            for s in first..first + count {
                let at = start.0 + s * seg;
                la.decode(sa, at, seg, &mut buf_a);
                match b {
                    None if !complex => {
                        wa.pair(&buf_a, ia * vals, ib_same * vals, row_a);
                        acc.add(&wa.a, &wa.b);
                    }
                    None => {
                        wa.one(&buf_a, ia * vals, row_a);
                        wb.one(&buf_a, ib_same * vals, row_a);
                        acc.add(&wa.a, &wb.a);
                    }
                    Some((sb, lb, ib)) => {
                        lb.decode(sb, start.1 + s * seg, seg, &mut buf_b);
                        let row_b = sb.threads() * lb.values();
                        wa.one(&buf_a, ia * vals, row_a);
                        wb.one(&buf_b, ib * vals, row_b);
                        acc.add(&wa.a, &wb.a);
                    }
                }
            }
            acc
        });
        for p in &parts {
            self.sums.merge(p);
        }
        segments as u64
    }

    /// The sums so far.
    pub fn sums(&self) -> &CrossSums {
        &self.sums
    }

    pub fn complex(&self) -> bool {
        self.complex
    }

    /// The fringe of everything added, found as `search` says.
    pub fn fringe(&self, search: &Search) -> Result<Fringe, SpectrumError> {
        fringe_search(std::slice::from_ref(&self.sums), self.complex, search)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::spectrum::test_noise as noise;

    #[test]
    fn delay_and_correlation_are_recovered() {
        let (n, rho, delay) = (1 << 18, 0.3f32, 17usize);
        let common = noise(n + delay, 1);
        let (na, nb) = (noise(n, 2), noise(n, 3));
        let (a_w, b_w) = (rho.sqrt(), (1.0 - rho).sqrt());
        let a: Vec<f32> = (0..n)
            .map(|i| a_w * common[i + delay] + b_w * na[i])
            .collect();
        // b lags a by `delay` samples.
        let b: Vec<f32> = (0..n).map(|i| a_w * common[i] + b_w * nb[i]).collect();
        let mut acc = CrossAccumulator::new(512, false).unwrap();
        acc.add(&a, 0, 1, &b, 0, 1, n);
        let f = acc.fringe(&Search::default()).unwrap();
        assert_eq!(f.delay_samples, delay as i64);
        assert!((f.amplitude - 0.3).abs() < 0.02, "{}", f.amplitude);
        assert!(f.snr > 20.0, "{}", f.snr);
        assert!(f.phase.abs() < 0.1, "{}", f.phase);
    }
}
