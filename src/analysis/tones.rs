//! Test tones: local maxima of a spectrum well above its noise floor.

use serde::Serialize;

/// A tone found in a spectrum.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tone {
    /// Spectral channel of the peak, refined between channels (parabolic fit).
    pub channel: f64,
    /// Power at the peak over the median (the noise floor).
    pub power_ratio: f64,
}

/// Local maxima more than `threshold` times the median power, strongest first.
pub fn find_tones(power: &[f64], threshold: f64) -> Vec<Tone> {
    if power.len() < 3 {
        return Vec::new();
    }
    let mut sorted: Vec<f64> = power.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let floor = sorted[sorted.len() / 2].max(f64::MIN_POSITIVE);
    let mut tones: Vec<Tone> = (0..power.len())
        .filter(|&k| {
            let p = power[k];
            p > threshold * floor
                && (k == 0 || p >= power[k - 1])
                && (k + 1 == power.len() || p > power[k + 1])
        })
        .map(|k| {
            // Parabola through the peak and its neighbours.
            let offset = if k > 0 && k + 1 < power.len() {
                let (a, b, c) = (power[k - 1], power[k], power[k + 1]);
                let d = a - 2.0 * b + c;
                if d.abs() > 0.0 {
                    (0.5 * (a - c) / d).clamp(-0.5, 0.5)
                } else {
                    0.0
                }
            } else {
                0.0
            };
            Tone {
                channel: k as f64 + offset,
                power_ratio: power[k] / floor,
            }
        })
        .collect();
    tones.sort_by(|a, b| b.power_ratio.partial_cmp(&a.power_ratio).unwrap());
    tones
}
