//! Fringes: the cross-correlation of two inputs (FX: cross spectrum over the FFTs, then the
//! lag function), its peak lag, amplitude, phase and SNR.

use crate::analysis::spectrum::{parallel, FrameLayout, FrameSource, Plans, SpectrumError, Work};
use realfft::num_complex::Complex;
use rustfft::FftPlanner;
use serde::Serialize;

/// Cross-correlation of two streams: cross spectrum and autospectra, summed over FFTs.
pub struct CrossAccumulator {
    nfft: usize,
    complex: bool,
    plans: Plans,
    cross: Vec<Complex<f64>>,
    power_a: Vec<f64>,
    power_b: Vec<f64>,
    segments: u64,
}

/// A worker's share of the cross and auto spectra.
struct CrossSums {
    cross: Vec<Complex<f64>>,
    pa: Vec<f64>,
    pb: Vec<f64>,
}

impl CrossSums {
    fn new(nfft: usize) -> CrossSums {
        CrossSums {
            cross: vec![Complex::default(); nfft],
            pa: vec![0.0; nfft],
            pb: vec![0.0; nfft],
        }
    }

    fn add(&mut self, a: &[Complex<f32>], b: &[Complex<f32>]) {
        for k in 0..self.cross.len() {
            let (x, y) = (a[k], b[k]);
            let c = x * y.conj();
            self.cross[k] += Complex::new(c.re as f64, c.im as f64);
            self.pa[k] += x.norm_sqr() as f64;
            self.pb[k] += y.norm_sqr() as f64;
        }
    }
}

/// The fringe between input `ia` of `a` and input `ib` of `b` (or of `a` itself), each a
/// frame source and the header that lays its frames out, from sample `start`, over at most
/// `nint` FFTs.
#[allow(clippy::too_many_arguments)]
pub fn fringe_of(
    a: (&dyn FrameSource, &crate::vdif::Header),
    b: Option<(&dyn FrameSource, &crate::vdif::Header)>,
    ia: usize,
    ib: usize,
    nfft: usize,
    start: usize,
    nint: Option<u64>,
) -> Result<Fringe, SpectrumError> {
    let la = FrameLayout::of(a.1)?;
    let lb = b.map(|(_, h)| FrameLayout::of(h)).transpose()?;
    let mut acc = CrossAccumulator::new(nfft, la.complex)?;
    let other = b.zip(lb.as_ref()).map(|((src, _), l)| (src, l, ib));
    acc.add_frames((a.0, &la, ia), other, ib, start, nint);
    acc.fringe()
}

/// The result of a fringe search.
#[derive(Clone, Debug, Serialize)]
pub struct Fringe {
    /// Lag of b behind a at the peak, in samples (b[n] ≈ a[n − delay_samples]).
    pub delay_samples: i64,
    /// Normalised correlation coefficient at the peak, corrected for the part of each FFT
    /// segment that the lag pushes out of it.
    pub amplitude: f64,
    /// Phase of the complex lag function at the peak, radians.
    pub phase: f64,
    /// Peak amplitude over the rms of the lag function away from the peak.
    pub snr: f64,
    /// Lags −nfft..nfft−1 (real data) or −nfft/2..nfft/2−1 (complex), and |lag function|.
    pub lags: Vec<i64>,
    pub lag_amplitude: Vec<f64>,
    /// Normalised cross spectrum, re and im per channel (ascending frequency).
    pub cross_spectrum: Vec<(f64, f64)>,
    pub segments: u64,
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
            cross: vec![Complex::default(); nfft],
            power_a: vec![0.0; nfft],
            power_b: vec![0.0; nfft],
            segments: 0,
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
        for p in parts {
            self.merge(p);
        }
        self.segments += segments as u64;
        segments * seg
    }

    /// Adds segments of input `ia` of source a and input `ib` of source b (an input is a
    /// value column: thread × nchan + channel), from `start_sample`; returns segments added.
    #[allow(clippy::too_many_arguments)]
    pub fn add_frames(
        &mut self,
        a: (&dyn FrameSource, &FrameLayout, usize),
        b: Option<(&dyn FrameSource, &FrameLayout, usize)>,
        ib_same: usize,
        start_sample: usize,
        max_segments: Option<u64>,
    ) -> u64 {
        let seg = self.segment_len();
        let (sa, la, ia) = a;
        let mut segments = (sa.sets() * la.spf).saturating_sub(start_sample) / seg;
        if let Some((sb, lb, _)) = b {
            segments = segments.min((sb.sets() * lb.spf).saturating_sub(start_sample) / seg);
        }
        if let Some(m) = max_segments {
            segments = segments.min(m.saturating_sub(self.segments) as usize);
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
                let at = start_sample + s * seg;
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
                        lb.decode(sb, at, seg, &mut buf_b);
                        let row_b = sb.threads() * lb.values();
                        wa.one(&buf_a, ia * vals, row_a);
                        wb.one(&buf_b, ib * vals, row_b);
                        acc.add(&wa.a, &wb.a);
                    }
                }
            }
            acc
        });
        for p in parts {
            self.merge(p);
        }
        self.segments += segments as u64;
        segments as u64
    }

    fn merge(&mut self, p: CrossSums) {
        for k in 0..self.nfft {
            self.cross[k] += p.cross[k];
            self.power_a[k] += p.pa[k];
            self.power_b[k] += p.pb[k];
        }
    }

    /// The lag function, its peak and the fringe parameters.
    pub fn fringe(&self) -> Result<Fringe, SpectrumError> {
        if self.segments == 0 {
            return Err(SpectrumError::TooShort {
                got: 0,
                needed: self.segment_len(),
            });
        }
        let nfft = self.nfft;
        let l = self.segment_len();
        let norm = (self.power_a.iter().sum::<f64>() * self.power_b.iter().sum::<f64>()).sqrt();
        // lag[τ] = Σ_k C[k] e^{-2πi k τ / L}: positive τ when b lags a. Only the channels the
        // spectrum has (positive frequencies for real data) take part, so the lag function is
        // complex and its phase is the fringe phase.
        let mut buf: Vec<Complex<f64>> = vec![Complex::default(); l];
        buf[..nfft].copy_from_slice(&self.cross);
        let fft = FftPlanner::<f64>::new().plan_fft_forward(l);
        fft.process(&mut buf);
        let half = (l / 2) as i64;
        let lags: Vec<i64> = (-half..half).collect();
        let lag_c: Vec<Complex<f64>> = lags
            .iter()
            .map(|&t| buf[t.rem_euclid(l as i64) as usize] / norm)
            .collect();
        let amp: Vec<f64> = lag_c.iter().map(|c| c.norm()).collect();
        let (peak, _) = amp
            .iter()
            .enumerate()
            .max_by(|x, y| x.1.partial_cmp(y.1).unwrap())
            .expect("non-empty");
        let tau = lags[peak];
        // A lag τ leaves only L − |τ| samples of each segment overlapping.
        let overlap = 1.0 - tau.unsigned_abs() as f64 / l as f64;
        let amplitude = amp[peak] / overlap.max(1e-9);
        // Noise: rms of the lag function away from the peak (beyond ±8 lags).
        let off: Vec<f64> = amp
            .iter()
            .enumerate()
            .filter(|(i, _)| (*i as i64 - peak as i64).abs() > 8)
            .map(|(_, a)| *a)
            .collect();
        let rms = (off.iter().map(|a| a * a).sum::<f64>() / off.len().max(1) as f64).sqrt();
        let mut spectrum: Vec<(f64, f64)> = self
            .cross
            .iter()
            .zip(self.power_a.iter().zip(&self.power_b))
            .map(|(c, (a, b))| {
                let d = (a * b).sqrt().max(f64::MIN_POSITIVE);
                (c.re / d, c.im / d)
            })
            .collect();
        if self.complex {
            spectrum.rotate_left(nfft / 2);
        }
        Ok(Fringe {
            delay_samples: tau,
            amplitude,
            phase: lag_c[peak].arg(),
            snr: if rms > 0.0 {
                amp[peak] / rms
            } else {
                f64::INFINITY
            },
            lags,
            lag_amplitude: amp,
            cross_spectrum: spectrum,
            segments: self.segments,
        })
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
        let f = acc.fringe().unwrap();
        assert_eq!(f.delay_samples, delay as i64);
        assert!((f.amplitude - 0.3).abs() < 0.02, "{}", f.amplitude);
        assert!(f.snr > 20.0, "{}", f.snr);
        assert!(f.phase.abs() < 0.1, "{}", f.phase);
    }
}
