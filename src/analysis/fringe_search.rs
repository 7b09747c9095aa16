//! The fringe search: from summed cross and auto spectra (`CrossSums`, which
//! `fringe::CrossAccumulator` accumulates) to the fringe (delay, fringe rate, amplitude, phase,
//! SNR).
//!
//! The lag function of a stretch of time is `lag[τ] = Σ_k C[k] e^{-2πi k τ / L}` over the
//! spectral channels `k` the spectrum has (positive frequencies for real data, so the lag
//! function is complex and its phase is the fringe phase), normalised by
//! `sqrt(Σ Pa · Σ Pb)`. Given several stretches in time order, their lag functions are
//! Fourier transformed across the stretches too: the peak of that delay × rate map follows a
//! fringe whose phase turns during the scan (a clock rate, an unmodelled geometry) that a
//! single sum would wash out. One stretch gives the plain lag function.
//!
//! Strong tones (phase-cal, test tones) are common to both stations and would show as a flat
//! lag function: their spectral channels are left out when `Search::exclude_tones` says so.

use crate::analysis::spectrum::SpectrumError;
use realfft::num_complex::Complex;
use rustfft::FftPlanner;
use serde::Serialize;

/// The cross spectrum (a × conj(b)) and both autospectra summed over `segments` FFTs, per
/// spectral channel in the FFT's order, as `fringe::CrossAccumulator` makes them. Sums of two
/// stretches of time add.
#[derive(Clone, Debug)]
pub struct CrossSums {
    pub cross: Vec<Complex<f64>>,
    pub pa: Vec<f64>,
    pub pb: Vec<f64>,
    pub segments: u64,
}

impl CrossSums {
    pub fn new(nfft: usize) -> CrossSums {
        CrossSums {
            cross: vec![Complex::default(); nfft],
            pa: vec![0.0; nfft],
            pb: vec![0.0; nfft],
            segments: 0,
        }
    }

    /// Adds one FFT segment: the spectra of a and b.
    pub(crate) fn add(&mut self, a: &[Complex<f32>], b: &[Complex<f32>]) {
        for k in 0..self.cross.len() {
            let (x, y) = (a[k], b[k]);
            let c = x * y.conj();
            self.cross[k] += Complex::new(c.re as f64, c.im as f64);
            self.pa[k] += x.norm_sqr() as f64;
            self.pb[k] += y.norm_sqr() as f64;
        }
        self.segments += 1;
    }

    pub(crate) fn merge(&mut self, p: &CrossSums) {
        for k in 0..self.cross.len() {
            self.cross[k] += p.cross[k];
            self.pa[k] += p.pa[k];
            self.pb[k] += p.pb[k];
        }
        self.segments += p.segments;
    }
}

/// How to search.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// Leave out the spectral channels where either autospectrum holds a tone.
    pub exclude_tones: bool,
    /// The largest |lag| searched, in samples (the whole lag function when None).
    pub max_lag: Option<usize>,
}

/// The result of a fringe search.
#[derive(Clone, Debug, Serialize)]
pub struct Fringe {
    /// Lag of b behind a at the peak, in samples (`b[n] ≈ a[n − delay_samples]`).
    pub delay_samples: i64,
    /// Normalised correlation coefficient at the peak, corrected for the part of each FFT
    /// segment that the lag pushes out of it.
    pub amplitude: f64,
    /// Phase of the complex lag function at the peak, radians.
    pub phase: f64,
    /// Peak amplitude over the rms of the delay (× rate) map away from the peak.
    pub snr: f64,
    /// Fringe rate at the peak: turns of the fringe phase (that of a × conj(b), as `phase`)
    /// per stretch of time; 0 for one stretch.
    pub rate_per_part: f64,
    /// Lags −nfft..nfft−1 (real data) or −nfft/2..nfft/2−1 (complex), and |lag function| at
    /// the fringe rate found.
    pub lags: Vec<i64>,
    pub lag_amplitude: Vec<f64>,
    /// Normalised cross spectrum, re and im per channel (ascending frequency).
    pub cross_spectrum: Vec<(f64, f64)>,
    /// Spectral channels left out as tones (ascending-frequency index, as `cross_spectrum`).
    pub excluded: Vec<usize>,
    pub segments: u64,
}

/// Lags this close to the peak are the peak's own: the SNR's noise is measured beyond them.
const PEAK_HALF_WIDTH: i64 = 8;
/// Channels around each one whose median is its noise floor, in the tone search.
const FLOOR_WINDOW: usize = 65;

/// The fringe in `parts`, stretches of time in order, all of one `nfft`.
pub fn fringe_search(
    parts: &[CrossSums],
    complex: bool,
    search: &Search,
) -> Result<Fringe, SpectrumError> {
    let nfft = parts.first().map_or(0, |p| p.cross.len());
    let segments: u64 = parts.iter().map(|p| p.segments).sum();
    if nfft == 0 || segments == 0 {
        return Err(SpectrumError::TooShort { got: 0, needed: 1 });
    }
    if parts.iter().any(|p| p.cross.len() != nfft) {
        return Err(SpectrumError::Layout(
            "the stretches of a fringe search must share nfft".into(),
        ));
    }
    let l = if complex { nfft } else { 2 * nfft };
    // The whole time: what the tone search, the normalisation and the cross spectrum see.
    let mut total = CrossSums::new(nfft);
    for p in parts {
        total.merge(p);
    }
    let (pa, pb) = (&total.pa, &total.pb);
    let excluded = if search.exclude_tones {
        tone_channels(pa, pb, segments, complex)
    } else {
        vec![false; nfft]
    };
    let kept = |k: &usize| !excluded[*k];
    let norm = ((0..nfft).filter(kept).map(|k| pa[k]).sum::<f64>()
        * (0..nfft).filter(kept).map(|k| pb[k]).sum::<f64>())
    .sqrt()
    .max(f64::MIN_POSITIVE);

    // Each stretch's lag function, lag index in FFT order.
    let mut planner = FftPlanner::<f64>::new();
    let lag_fft = planner.plan_fft_forward(l);
    let lag_parts: Vec<Vec<Complex<f64>>> = parts
        .iter()
        .map(|p| {
            let mut buf = vec![Complex::default(); l];
            for k in (0..nfft).filter(kept) {
                buf[k] = p.cross[k];
            }
            lag_fft.process(&mut buf);
            buf
        })
        .collect();

    // Across stretches: zero-padded 4× so that a rate between bins loses little.
    let rates = if parts.len() == 1 {
        1
    } else {
        (4 * parts.len()).next_power_of_two()
    };
    let rate_fft = planner.plan_fft_forward(rates);
    let half = (l / 2) as i64;
    let lags: Vec<i64> = (-half..half).collect();
    let reach = search.max_lag.map_or(half, |m| (m as i64).min(half));
    // map[lag][rate]
    let map: Vec<Vec<Complex<f64>>> = lags
        .iter()
        .map(|&t| {
            let at = t.rem_euclid(l as i64) as usize;
            let mut col = vec![Complex::default(); rates];
            for (c, part) in col.iter_mut().zip(&lag_parts) {
                *c = part[at] / norm;
            }
            rate_fft.process(&mut col);
            col
        })
        .collect();
    let (mut peak_lag, mut peak_rate, mut peak_amp) = (0usize, 0usize, -1.0f64);
    for (i, &t) in lags.iter().enumerate() {
        if t.abs() > reach {
            continue;
        }
        for (r, v) in map[i].iter().enumerate() {
            if v.norm() > peak_amp {
                (peak_lag, peak_rate, peak_amp) = (i, r, v.norm());
            }
        }
    }
    let tau = lags[peak_lag];
    // A lag τ leaves only L − |τ| samples of each segment overlapping.
    let overlap = 1.0 - tau.unsigned_abs() as f64 / l as f64;
    let (mut off_sum, mut off_n) = (0.0f64, 0usize);
    for (i, &t) in lags.iter().enumerate() {
        if (t - tau).abs() > PEAK_HALF_WIDTH {
            off_sum += map[i].iter().map(|v| v.norm_sqr()).sum::<f64>();
            off_n += rates;
        }
    }
    let rms = (off_sum / off_n.max(1) as f64).sqrt();
    let signed_rate = if peak_rate < rates / 2 {
        peak_rate as f64
    } else {
        peak_rate as f64 - rates as f64
    };

    let cross = &total.cross;
    let mut spectrum: Vec<(f64, f64)> = (0..nfft)
        .map(|k| {
            let d = (pa[k] * pb[k]).sqrt().max(f64::MIN_POSITIVE);
            (cross[k].re / d, cross[k].im / d)
        })
        .collect();
    let mut excluded_ascending: Vec<usize> = (0..nfft)
        .filter(|&k| excluded[k])
        .map(|k| ascending_index(k, nfft, complex))
        .collect();
    excluded_ascending.sort_unstable();
    if complex {
        spectrum.rotate_left(nfft / 2);
    }
    let peak = map[peak_lag][peak_rate];
    Ok(Fringe {
        delay_samples: tau,
        amplitude: peak_amp / overlap.max(1e-9),
        phase: peak.arg(),
        snr: if rms > 0.0 {
            peak_amp / rms
        } else {
            f64::INFINITY
        },
        rate_per_part: signed_rate / rates as f64,
        lags,
        lag_amplitude: map.iter().map(|row| row[peak_rate].norm()).collect(),
        cross_spectrum: spectrum,
        excluded: excluded_ascending,
        segments,
    })
}

/// Where FFT channel `k` sits in ascending frequency: complex spectra keep the negative
/// frequencies in their upper half.
fn ascending_index(k: usize, nfft: usize, complex: bool) -> usize {
    if complex {
        (k + nfft / 2) % nfft
    } else {
        k
    }
}

/// Spectral channels (FFT order) where either autospectrum stands above its local noise floor
/// (the median of the channels around it, so that a bandpass's slope is no tone) by more than
/// noise averaged over `ffts` FFTs could: each channel's power has a relative scatter of
/// 1/sqrt(ffts), so the bar is 8 of those, and never below 1.5 times the floor.
pub fn tone_channels(pa: &[f64], pb: &[f64], ffts: u64, complex: bool) -> Vec<bool> {
    let nfft = pa.len();
    let bar = 1.0 + (8.0 / (ffts.max(1) as f64).sqrt()).max(0.5);
    let mut out = vec![false; nfft];
    for power in [pa, pb] {
        let ascending: Vec<f64> = (0..nfft)
            .map(|i| power[fft_index(i, nfft, complex)])
            .collect();
        for (i, floor) in local_medians(&ascending, FLOOR_WINDOW)
            .into_iter()
            .enumerate()
        {
            if ascending[i] > bar * floor {
                out[fft_index(i, nfft, complex)] = true;
            }
        }
    }
    out
}

fn fft_index(i: usize, nfft: usize, complex: bool) -> usize {
    if complex {
        (i + nfft - nfft / 2) % nfft
    } else {
        i
    }
}

/// The median of the `window` values around each one (fewer at the ends).
fn local_medians(x: &[f64], window: usize) -> Vec<f64> {
    let half = window / 2;
    let mut buf = Vec::with_capacity(window);
    (0..x.len())
        .map(|i| {
            let (lo, hi) = (i.saturating_sub(half), (i + half + 1).min(x.len()));
            buf.clear();
            buf.extend_from_slice(&x[lo..hi]);
            let mid = buf.len() / 2;
            *buf.select_nth_unstable_by(mid, |a, b| a.total_cmp(b)).1
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fringe::CrossAccumulator;
    use crate::analysis::spectrum::test_noise as noise;

    /// Complex noise: a common part and each station's own, b behind a by `delay` samples
    /// and turning by `turns` of phase over the whole of it.
    fn stations(n: usize, rho: f32, delay: usize, turns: f64) -> (Vec<f32>, Vec<f32>) {
        let common = noise(2 * (n + delay), 1);
        let (own_a, own_b) = (noise(2 * n, 2), noise(2 * n, 3));
        let (w, v) = (rho.sqrt(), (1.0 - rho).sqrt());
        let mut a = vec![0.0; 2 * n];
        let mut b = vec![0.0; 2 * n];
        for i in 0..n {
            let s = Complex::new(common[2 * (i + delay)], common[2 * (i + delay) + 1]);
            let x = s * w + Complex::new(own_a[2 * i], own_a[2 * i + 1]) * v;
            (a[2 * i], a[2 * i + 1]) = (x.re, x.im);
            let s = Complex::new(common[2 * i], common[2 * i + 1]);
            let turn = Complex::from_polar(
                1.0,
                (2.0 * std::f64::consts::PI * turns * i as f64 / n as f64) as f32,
            );
            let y = s * turn * w + Complex::new(own_b[2 * i], own_b[2 * i + 1]) * v;
            (b[2 * i], b[2 * i + 1]) = (y.re, y.im);
        }
        (a, b)
    }

    fn parts_of(a: &[f32], b: &[f32], nfft: usize, count: usize) -> Vec<CrossSums> {
        let n = a.len() / 2;
        (0..count)
            .map(|k| {
                let (lo, hi) = (2 * k * n / count, 2 * (k + 1) * n / count);
                let mut acc = CrossAccumulator::new(nfft, true).unwrap();
                acc.add(&a[lo..hi], 0, 2, &b[lo..hi], 0, 2, (hi - lo) / 2);
                acc.sums().clone()
            })
            .collect()
    }

    #[test]
    fn a_turning_phase_is_found_by_the_rate_search_and_washes_out_without_it() {
        let (n, nfft, turns) = (1 << 18, 256, 3.0);
        let (a, b) = stations(n, 0.3, 21, turns);
        let search = Search::default();
        let whole = fringe_search(&parts_of(&a, &b, nfft, 1), true, &search).unwrap();
        let parted = fringe_search(&parts_of(&a, &b, nfft, 16), true, &search).unwrap();
        assert_eq!(parted.delay_samples, 21);
        // b's phase turning forward turns a × conj(b) back.
        assert!(
            (parted.rate_per_part * 16.0 + turns).abs() < 0.2,
            "{}",
            parted.rate_per_part
        );
        assert!(
            (parted.amplitude - 0.3).abs() < 0.03,
            "{}",
            parted.amplitude
        );
        assert!(parted.snr > 20.0, "{}", parted.snr);
        // Three turns over the sum cancel the fringe.
        assert!(whole.amplitude < 0.05, "{}", whole.amplitude);
    }

    #[test]
    fn max_lag_limits_the_search() {
        let (a, b) = stations(1 << 16, 0.3, 40, 0.0);
        let parts = parts_of(&a, &b, 256, 1);
        let found = fringe_search(&parts, true, &Search::default()).unwrap();
        assert_eq!(found.delay_samples, 40);
        let near = Search {
            max_lag: Some(20),
            ..Search::default()
        };
        let limited = fringe_search(&parts, true, &near).unwrap();
        assert!(limited.delay_samples.abs() <= 20);
        assert!(limited.snr < 7.0, "{}", limited.snr);
    }

    #[test]
    fn a_common_tone_is_left_out_and_its_false_fringe_with_it() {
        // Uncorrelated noise plus one tone common to both: the tone alone makes a flat,
        // strong lag function.
        let (n, nfft) = (1 << 17, 512usize);
        let (mut a, mut b) = (noise(n, 5), noise(n, 6));
        // At the centre of channel 205 of the 0..nfft half band.
        let f = 205.0 / (2 * nfft) as f64;
        for i in 0..n {
            let t = (2.0 * std::f64::consts::PI * f * i as f64).cos() as f32;
            a[i] += t;
            b[i] += t;
        }
        let mut acc = CrossAccumulator::new(nfft, false).unwrap();
        acc.add(&a, 0, 1, &b, 0, 1, n);
        let kept = acc.fringe(&Search::default()).unwrap();
        assert!(kept.amplitude > 0.2 && kept.excluded.is_empty());
        let tones_out = Search {
            exclude_tones: true,
            ..Search::default()
        };
        let f = acc.fringe(&tones_out).unwrap();
        assert!(f.excluded.contains(&205), "{:?}", f.excluded);
        assert!(f.excluded.len() < 8, "{:?}", f.excluded);
        assert!(f.amplitude < 0.02, "{}", f.amplitude);
        assert!(f.snr < 7.0, "{}", f.snr);
    }

    #[test]
    fn noise_alone_marks_no_channel_as_a_tone() {
        let (n, nfft) = (1 << 16, 512usize);
        let (a, b) = (noise(n, 7), noise(n, 8));
        let mut acc = CrossAccumulator::new(nfft, false).unwrap();
        acc.add(&a, 0, 1, &b, 0, 1, n);
        let s = acc.sums();
        assert!(!tone_channels(&s.pa, &s.pb, s.segments, false).contains(&true));
    }
}
