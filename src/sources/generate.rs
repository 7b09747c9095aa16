//! A synthetic FILA10G-like VDIF source: Gaussian noise plus a test tone, quantised at the
//! optimal thresholds, with valid headers. `vdifrec generate` writes it to a file and the
//! sender streams it.
//!
//! Each input (a channel of a thread) carries
//! `x = sqrt(rho) * s[n - i * delay] + sqrt(1 - rho) * w_i[n] + A cos(2 pi f n)`, where `s` is
//! noise common to all inputs and `w_i` is the input's own noise, both of unit variance.
//! Two inputs are then correlated by `rho` at a lag of `delay` samples per input index (a
//! fringe to find), and every input shows the tone at `f`.
//!
//! Several stations: with a sky seed, `s` is the sky, a function of time alone (the same
//! noise at the same VDIF time in every file made with that sky seed, whatever its start),
//! every input of the station sees it `delay` samples late, and `seed` is the station's own
//! noise. Two stations are then correlated by `sqrt(rho_a rho_b)` at the difference of their
//! delays, even when their recordings start at different times.

use crate::vdif::header::{check_fps, check_frame_size, field, Header, HeaderError};
use crate::vdif::time::{epoch_and_seconds, utc_unix};
use serde::{Deserialize, Serialize};
use std::io::Write;
use thiserror::Error;

pub use crate::vdif::decode::TWO_BIT_THRESHOLD_SIGMA;

#[derive(Debug, Error)]
pub enum GenerateError {
    #[error("tone_mhz: {tone_mhz} MHz lies outside the band 0-{band_mhz} MHz (sample rate {sample_rate_mhz} MHz per channel): give a tone inside the band")]
    ToneOutsideBand {
        tone_mhz: f64,
        band_mhz: f64,
        sample_rate_mhz: f64,
    },
    #[error("{name}: {value} is out of range: {why}")]
    BadArgument {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error("{name}: {why}")]
    Invalid { name: &'static str, why: String },
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// What to generate: the synthetic signal's settings, shared by `vdifrec generate`, the
/// sender and the recording check. `Default` is the one place each default is written
/// (Python reads it as `vdifrec.defaults["signal"]`); `template` checks every value.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalSpec {
    /// Frame size in bytes, header included.
    #[serde(deserialize_with = "setting::frame_size")]
    pub frame_size: usize,
    /// Frames per second per thread.
    #[serde(deserialize_with = "setting::fps")]
    pub fps: u32,
    #[serde(deserialize_with = "setting::nchan")]
    pub nchan: u32,
    #[serde(deserialize_with = "setting::bits")]
    pub bits: u32,
    #[serde(deserialize_with = "setting::threads")]
    pub threads: u32,
    /// Tone frequency in MHz within the band (None: 0.390625 of the band, 200 MHz of 512).
    pub tone_mhz: Option<f64>,
    /// Tone amplitude relative to the noise's standard deviation.
    pub tone_amplitude: f64,
    /// Correlation coefficient of the common noise between inputs, 0..1.
    pub correlation: f64,
    /// Lag of the common noise per input index, in samples.
    #[serde(deserialize_with = "setting::delay")]
    pub delay: usize,
    #[serde(deserialize_with = "setting::seed")]
    pub seed: u64,
    /// Seed of the sky: the common noise as a function of time, shared by every station
    /// generated with it (None: the common noise belongs to this file, from `seed`).
    #[serde(deserialize_with = "setting::sky_seed")]
    pub sky_seed: Option<u64>,
    #[serde(deserialize_with = "setting::station")]
    pub station: u16,
    /// Extended data version of the headers: 0, or 1/3 (which also carry the sample rate).
    #[serde(deserialize_with = "setting::edv")]
    pub edv: u32,
    /// Reference epoch (half-years since 2000) of the first frame (None: now).
    #[serde(deserialize_with = "setting::ref_epoch")]
    pub ref_epoch: Option<u32>,
    /// VDIF seconds of the first frame (None: now).
    #[serde(deserialize_with = "setting::start_second")]
    pub start_second: Option<u32>,
}

/// Longest lag of the common noise, in samples per input: far beyond any fringe search.
pub const MAX_DELAY: usize = 1 << 20;

/// How each whole-number setting is read: its range, said in the error. The finer rules
/// (a frame size in 8-byte units, bits a power of two, ...) are `SignalSpec::template`'s.
mod setting {
    use crate::options::{ranged, ranged_option};
    use crate::vdif::header::{check_fps, frame_size_from};
    use serde::Deserializer;

    type R<T, E> = Result<T, E>;
    // The frame size and rate follow the format's one rule for each.
    pub fn frame_size<'de, D: Deserializer<'de>>(d: D) -> R<usize, D::Error> {
        by_rule(d, frame_size_from)
    }
    pub fn fps<'de, D: Deserializer<'de>>(d: D) -> R<u32, D::Error> {
        by_rule(d, check_fps)
    }
    fn by_rule<'de, D: Deserializer<'de>, T>(
        d: D,
        rule: fn(i64) -> Result<T, String>,
    ) -> R<T, D::Error> {
        use serde::de::Error;
        let v = <i128 as serde::Deserialize>::deserialize(d)?;
        let v = i64::try_from(v).map_err(|_| D::Error::custom(format!("{v} is out of range")))?;
        rule(v).map_err(D::Error::custom)
    }
    pub fn nchan<'de, D: Deserializer<'de>>(d: D) -> R<u32, D::Error> {
        ranged(d, 1, 1 << 16, "channels, a power of two")
    }
    pub fn bits<'de, D: Deserializer<'de>>(d: D) -> R<u32, D::Error> {
        ranged(d, 1, 8, "bits per sample: 1, 2, 4 or 8")
    }
    pub fn threads<'de, D: Deserializer<'de>>(d: D) -> R<u32, D::Error> {
        ranged(d, 1, 1024, "VDIF threads")
    }
    pub fn delay<'de, D: Deserializer<'de>>(d: D) -> R<usize, D::Error> {
        ranged(d, 0, super::MAX_DELAY as i128, "samples of lag per input")
    }
    pub fn seed<'de, D: Deserializer<'de>>(d: D) -> R<u64, D::Error> {
        ranged(d, 0, u64::MAX as i128, "any whole number")
    }
    pub fn sky_seed<'de, D: Deserializer<'de>>(d: D) -> R<Option<u64>, D::Error> {
        ranged_option(d, 0, u64::MAX as i128, "any whole number")
    }
    /// A station as a number (0 to 65535) or as VDIF's two-character code (`Kv`).
    pub fn station<'de, D: Deserializer<'de>>(d: D) -> R<u16, D::Error> {
        use serde::de::Error;
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(i64),
            Text(String),
        }
        let bad = |t: &str| {
            D::Error::custom(format!(
                "{t:?} is not a station: give a whole number 0 to 65535 or a two-character code such as Kv"
            ))
        };
        let v = match <Given as serde::Deserialize>::deserialize(d)? {
            Given::Number(v) => v,
            Given::Text(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
                t.parse().map_err(|_| bad(&t))?
            }
            Given::Text(t) => {
                return crate::vdif::header::station_code(&t).ok_or_else(|| bad(&t));
            }
        };
        u16::try_from(v).map_err(|_| {
            D::Error::custom(format!(
                "{v} is out of range: give 0 to 65535 (a 16-bit station id) or a two-character code such as Kv"
            ))
        })
    }
    pub fn edv<'de, D: Deserializer<'de>>(d: D) -> R<u32, D::Error> {
        ranged(d, 0, 3, "the generator writes EDV 0, 1 or 3")
    }
    pub fn ref_epoch<'de, D: Deserializer<'de>>(d: D) -> R<Option<u32>, D::Error> {
        ranged_option(d, 0, 63, "half-years since 2000, a 6-bit field")
    }
    pub fn start_second<'de, D: Deserializer<'de>>(d: D) -> R<Option<u32>, D::Error> {
        ranged_option(
            d,
            0,
            (1 << 30) - 1,
            "seconds from the reference epoch, a 30-bit field",
        )
    }
}

impl Default for SignalSpec {
    fn default() -> Self {
        SignalSpec {
            frame_size: 8224,
            fps: 125_000,
            nchan: 4,
            bits: 2,
            threads: 1,
            tone_mhz: None,
            tone_amplitude: 0.3,
            correlation: 0.0,
            delay: 0,
            seed: 1,
            sky_seed: None,
            station: 0,
            edv: 0,
            ref_epoch: None,
            start_second: None,
        }
    }
}

/// Where the default tone sits in any band: 200 MHz of the reference 512 MHz.
pub const DEFAULT_TONE_FRACTION: f64 = 200.0 / 512.0;

impl SignalSpec {
    /// The header of frame 0, thread 0, at the start time.
    pub fn template(&self) -> Result<Header, GenerateError> {
        if !matches!(self.edv, 0 | 1 | 3) {
            return Err(bad("edv", self.edv, "the generator writes EDV 0, 1 or 3"));
        }
        check_frame_size(self.frame_size).map_err(|why| GenerateError::Invalid {
            name: "frame_size",
            why,
        })?;
        if !matches!(self.bits, 1 | 2 | 4 | 8) {
            return Err(bad(
                "bits",
                self.bits,
                "the generator writes 1, 2, 4 or 8 bits",
            ));
        }
        if !self.nchan.is_power_of_two() || self.nchan > 1 << 16 {
            return Err(bad(
                "nchan",
                self.nchan,
                "a power of two, 1 to 65536 channels",
            ));
        }
        let mut h = Header::new(
            Some(self.edv),
            self.frame_size,
            self.nchan,
            self.bits,
            false,
        )?;
        if h.samples_per_frame() == 0
            || h.payload_size() * 8 % (self.bits * self.nchan) as usize != 0
        {
            return Err(bad(
                "frame_size",
                self.frame_size,
                "the payload must hold a whole number of samples of all channels",
            ));
        }
        check_fps(self.fps as i64).map_err(|why| GenerateError::Invalid { name: "fps", why })?;
        if self.threads == 0 || self.threads > 1024 {
            return Err(bad("threads", self.threads, "1 to 1024 threads"));
        }
        if self.delay > MAX_DELAY {
            return Err(bad(
                "delay",
                self.delay,
                "0 to 1048576 samples of lag per input",
            ));
        }
        if !(0.0..=1.0).contains(&self.correlation) {
            return Err(bad("correlation", self.correlation, "0 to 1"));
        }
        if !(0.0..=100.0).contains(&self.tone_amplitude) {
            return Err(bad(
                "tone_amplitude",
                self.tone_amplitude,
                "0 to 100 noise sigmas",
            ));
        }
        h.set(field::STATION_ID, self.station as u32)?;
        if self.edv != 0 {
            h.set_sample_rate_hz(self.sample_rate())?;
        }
        let (epoch, seconds) = self.start_at(unix_now());
        h.set(field::REF_EPOCH, epoch)?;
        h.set(field::SECONDS, seconds)?;
        self.tone_fraction()?;
        Ok(h)
    }

    /// Reference epoch and seconds of the first frame: as given, the rest taken from the
    /// POSIX second `now`.
    pub fn start_at(&self, now: i64) -> (u32, u32) {
        let (epoch, seconds) = epoch_and_seconds(now);
        (
            self.ref_epoch.unwrap_or(epoch),
            self.start_second.unwrap_or(seconds),
        )
    }

    /// The same signal, starting at `(ref_epoch, seconds)`.
    pub fn starting(&self, (ref_epoch, seconds): (u32, u32)) -> SignalSpec {
        SignalSpec {
            ref_epoch: Some(ref_epoch),
            start_second: Some(seconds),
            ..self.clone()
        }
    }

    pub fn samples_per_frame(&self) -> usize {
        (self.frame_size - 32) * 8 / (self.bits * self.nchan) as usize
    }

    /// Samples per second per channel.
    pub fn sample_rate(&self) -> f64 {
        self.fps as f64 * self.samples_per_frame() as f64
    }

    /// Tone frequency as a fraction of the sample rate (cycles per sample).
    pub fn tone_fraction(&self) -> Result<f64, GenerateError> {
        let band_mhz = self.sample_rate() / 2e6;
        match self.tone_mhz {
            None => Ok(DEFAULT_TONE_FRACTION / 2.0),
            Some(t) if t > 0.0 && t < band_mhz => Ok(t / band_mhz / 2.0),
            Some(t) => Err(GenerateError::ToneOutsideBand {
                tone_mhz: t,
                band_mhz,
                sample_rate_mhz: self.sample_rate() / 1e6,
            }),
        }
    }
}

/// POSIX seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn bad(name: &'static str, value: impl ToString, why: &str) -> GenerateError {
    GenerateError::BadArgument {
        name,
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// xoshiro256++: fast, good-quality random bits.
#[derive(Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 spreads the seed over the state.
        let mut z = seed;
        let mut s = [0u64; 4];
        for w in &mut s {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            *w = x ^ (x >> 31);
        }
        Rng(s)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }
}

/// Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
#[allow(clippy::excessive_precision)] // the published coefficients, kept as printed
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.383577518672690e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let plow = 0.02425;
    if p < plow {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - plow {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -inverse_normal_cdf(1.0 - p)
    }
}

/// Bits of uniform randomness per Gaussian value: the inverse CDF is tabulated at 2^16 points.
const NORMAL_TABLE_BITS: u32 = 16;
/// Points per cycle of the tone's cosine table.
const COS_TABLE: usize = 4096;

/// Makes payloads frame set by frame set.
pub struct Synth {
    spec: SignalSpec,
    normal: Vec<f32>,
    cos: Vec<f32>,
    rng: Rng,
    /// Common noise, newest last; keeps the lags every input needs.
    common: Vec<f32>,
    max_lag: usize,
    /// The shared sky, when the spec has a sky seed (then `common` holds this frame's part).
    sky: Option<Sky>,
    tone_step: f64,
    tone_phase: f64,
    values: Vec<f32>,
    quantiser: Quantiser,
    samples_done: u64,
}

#[derive(Clone, Copy)]
enum Quantiser {
    One,
    Two { threshold: f32 },
    Four,
    Eight,
}

impl Synth {
    pub fn new(spec: &SignalSpec) -> Result<Synth, GenerateError> {
        spec.template()?;
        let n = 1usize << NORMAL_TABLE_BITS;
        let normal = (0..n)
            .map(|i| inverse_normal_cdf((i as f64 + 0.5) / n as f64) as f32)
            .collect();
        let cos = (0..COS_TABLE)
            .map(|i| (2.0 * std::f64::consts::PI * i as f64 / COS_TABLE as f64).cos() as f32)
            .collect();
        let inputs = (spec.threads * spec.nchan) as usize;
        let sky = spec.sky_seed.map(|seed| Sky::new(seed, spec));
        // Under a sky every input sees it at the station's one delay (the sky does the lag).
        let max_lag = if sky.is_some() {
            0
        } else {
            spec.delay * inputs.saturating_sub(1)
        };
        let sigma_total = (1.0 + spec.tone_amplitude.powi(2) / 2.0).sqrt();
        let quantiser = match spec.bits {
            1 => Quantiser::One,
            2 => Quantiser::Two {
                threshold: (TWO_BIT_THRESHOLD_SIGMA * sigma_total) as f32,
            },
            4 => Quantiser::Four,
            _ => Quantiser::Eight,
        };
        Ok(Synth {
            spec: spec.clone(),
            normal,
            cos,
            rng: Rng::new(spec.seed),
            common: vec![0.0; max_lag],
            max_lag,
            sky,
            tone_step: spec.tone_fraction()?,
            tone_phase: 0.0,
            values: Vec::new(),
            quantiser,
            samples_done: 0,
        })
    }

    #[inline]
    fn gaussian(normal: &[f32], bits: u64) -> f32 {
        normal[(bits & ((1 << NORMAL_TABLE_BITS) - 1)) as usize]
    }

    /// Fills one payload per thread for the next frame set: `payloads[t]` for thread `t`.
    pub fn next_frameset(&mut self, payloads: &mut [&mut [u8]]) {
        let spec = &self.spec;
        let spf = spec.samples_per_frame();
        let nchan = spec.nchan as usize;
        let rho = spec.correlation as f32;
        let (a, b) = (rho.sqrt(), (1.0 - rho).sqrt());
        if let (true, Some(sky)) = (rho > 0.0, self.sky.as_mut()) {
            sky.next_samples(spf, &self.normal, &mut self.common);
        } else if rho > 0.0 {
            // Extend the common noise by one frame of samples, keeping `max_lag` behind.
            let excess = self.common.len() - self.max_lag;
            self.common.drain(..excess);
            while self.common.len() < self.max_lag + spf {
                let r = self.rng.next_u64();
                for k in 0..4 {
                    self.common
                        .push(Self::gaussian(&self.normal, r >> (16 * k)));
                }
            }
            self.common.truncate(self.max_lag + spf);
        }
        // Tone phase for each sample of the frame, shared by all inputs.
        let amp = spec.tone_amplitude as f32;
        let mut tone = Vec::with_capacity(spf);
        for _ in 0..spf {
            let idx = (self.tone_phase * COS_TABLE as f64) as usize % COS_TABLE;
            tone.push(amp * self.cos[idx]);
            self.tone_phase = (self.tone_phase + self.tone_step).fract();
        }
        self.values.resize(spf * nchan, 0.0);
        for (t, payload) in payloads.iter_mut().enumerate() {
            let mut bits_left = 0;
            let mut r = 0u64;
            for (s, tone_s) in tone.iter().enumerate() {
                for c in 0..nchan {
                    if bits_left == 0 {
                        r = self.rng.next_u64();
                        bits_left = 4;
                    }
                    let own = Self::gaussian(&self.normal, r);
                    r >>= 16;
                    bits_left -= 1;
                    let mut x = b * own + tone_s;
                    if rho > 0.0 {
                        let lag = if self.sky.is_some() {
                            0
                        } else {
                            self.spec.delay * (t * nchan + c)
                        };
                        x += a * self.common[self.max_lag + s - lag];
                    }
                    self.values[s * nchan + c] = x;
                }
            }
            quantise_pack(self.quantiser, &self.values, payload);
        }
        self.samples_done += spf as u64;
    }
}

/// Samples of the sky per block: each block is drawn from its own seed, so that a station
/// starting at any time makes its stretch without the ones before it.
const SKY_BLOCK: u64 = 1 << 14;

/// The sky's noise as a function of time: sample `n` counts from the POSIX epoch at the
/// stream's sample rate, and a station sees sample `n − delay` at its own sample `n`.
struct Sky {
    seed: u64,
    /// The next absolute sample the station needs (its delay already taken off).
    next: u64,
    block: Option<u64>,
    samples: Vec<f32>,
}

impl Sky {
    fn new(seed: u64, spec: &SignalSpec) -> Sky {
        let (epoch, seconds) = spec.start_at(unix_now());
        let start = utc_unix(epoch, seconds).max(0) as u64;
        let rate = spec.fps as u64 * spec.samples_per_frame() as u64;
        Sky {
            seed,
            next: start * rate - spec.delay as u64,
            block: None,
            samples: Vec::with_capacity(SKY_BLOCK as usize),
        }
    }

    /// Replaces `out` with the sky's next `count` samples.
    fn next_samples(&mut self, count: usize, normal: &[f32], out: &mut Vec<f32>) {
        out.clear();
        while out.len() < count {
            let (block, within) = (self.next / SKY_BLOCK, (self.next % SKY_BLOCK) as usize);
            if self.block != Some(block) {
                let mut rng = Rng::new(self.seed ^ block.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                self.samples.clear();
                while self.samples.len() < SKY_BLOCK as usize {
                    let r = rng.next_u64();
                    for k in 0..4 {
                        self.samples.push(Synth::gaussian(normal, r >> (16 * k)));
                    }
                }
                self.block = Some(block);
            }
            let take = (count - out.len()).min(SKY_BLOCK as usize - within);
            out.extend_from_slice(&self.samples[within..within + take]);
            self.next += take as u64;
        }
    }
}

/// Quantises values (unit-variance noise) and packs them LSB first.
fn quantise_pack(q: Quantiser, values: &[f32], out: &mut [u8]) {
    match q {
        Quantiser::One => pack::<1>(values, out, |x| (x > 0.0) as u8),
        Quantiser::Two { threshold } => pack::<2>(values, out, |x| {
            (x > -threshold) as u8 + (x > 0.0) as u8 + (x > threshold) as u8
        }),
        Quantiser::Four => pack::<4>(values, out, |x| {
            (x * crate::vdif::decode::FOUR_BIT_SCALE + 8.5).clamp(0.0, 15.0) as u8
        }),
        Quantiser::Eight => pack::<8>(values, out, |x| {
            (x * crate::vdif::decode::EIGHT_BIT_SCALE + 127.5)
                .round()
                .clamp(0.0, 255.0) as u8
        }),
    }
}

#[inline]
fn pack<const BITS: usize>(values: &[f32], out: &mut [u8], code: impl Fn(f32) -> u8) {
    let per_byte = 8 / BITS;
    for (byte, chunk) in out.iter_mut().zip(values.chunks(per_byte)) {
        let mut b = 0u8;
        for (k, x) in chunk.iter().enumerate() {
            b |= code(*x) << (k * BITS);
        }
        *byte = b;
    }
}

/// Header of frame `index` (frame sets counted from the start) of `thread`.
pub fn frame_header(template: &Header, fps: u32, index: u64, thread: u32) -> Header {
    let mut h = *template;
    let first = template.seconds() as u64 * fps as u64 + template.frame_nr() as u64;
    let k = first + index;
    // Values come from a valid template and in-range arithmetic; seconds wrap at 30 bits.
    let _ = h.set(
        field::SECONDS,
        ((k / fps as u64) & field::SECONDS.max() as u64) as u32,
    );
    let _ = h.set(field::FRAME_NR, (k % fps as u64) as u32);
    let _ = h.set(field::THREAD_ID, thread);
    h
}

/// Writes `frame_sets` frame sets (one frame per thread each) to `out`.
pub fn write_frames(
    spec: &SignalSpec,
    frame_sets: u64,
    out: &mut impl Write,
    path_for_errors: &str,
) -> Result<Header, GenerateError> {
    // One start for the headers and the sky, even across a second's edge.
    let spec = &spec.starting(spec.start_at(unix_now()));
    let template = spec.template()?;
    let mut synth = Synth::new(spec)?;
    let fs = spec.frame_size;
    let threads = spec.threads as usize;
    let mut buf = vec![0u8; fs * threads];
    for k in 0..frame_sets {
        {
            let mut payloads: Vec<&mut [u8]> = buf.chunks_mut(fs).map(|f| &mut f[32..]).collect();
            synth.next_frameset(&mut payloads);
        }
        for t in 0..threads {
            frame_header(&template, spec.fps, k, t as u32).write_to(&mut buf[t * fs..]);
        }
        out.write_all(&buf).map_err(|source| GenerateError::Write {
            path: path_for_errors.to_string(),
            source,
        })?;
    }
    Ok(template)
}

/// What `vdifrec generate` is asked for: how long, and the signal. `Default` holds the
/// defaults (Python: `vdifrec.defaults["generate"]`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerateOptions {
    /// Seconds of data: `seconds × fps` frame sets.
    pub seconds: f64,
    pub signal: SignalSpec,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            seconds: 1.0,
            signal: SignalSpec::default(),
        }
    }
}

/// Writes a synthetic recording to `path` (refusing to start on a bad option); returns the
/// header of its first frame.
pub fn write_file(path: &std::path::Path, o: &GenerateOptions) -> Result<Header, GenerateError> {
    // A day of the reference stream is 88 TB: more is a mistake, not a test file.
    if !(o.seconds.is_finite() && o.seconds > 0.0 && o.seconds <= 86_400.0) {
        return Err(GenerateError::Invalid {
            name: "seconds",
            why: format!(
                "{} is not a positive duration in seconds: give more than 0, at most 86400",
                o.seconds
            ),
        });
    }
    // Every option is checked before the file is created.
    o.signal.template()?;
    let frame_sets = (o.seconds * o.signal.fps as f64).round().max(1.0) as u64;
    let shown = path.display().to_string();
    let write_err = |source| GenerateError::Write {
        path: shown.clone(),
        source,
    };
    let file = std::fs::File::create(path).map_err(write_err)?;
    let mut w = std::io::BufWriter::with_capacity(4 << 20, file);
    let h = write_frames(&o.signal, frame_sets, &mut w, &shown)?;
    w.flush().map_err(write_err)?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdif::decode::Decoder;

    #[test]
    fn default_tone_sits_at_200_of_512_mhz() {
        let spec = SignalSpec::default();
        assert_eq!(spec.samples_per_frame(), 8192);
        assert_eq!(spec.sample_rate(), 1.024e9);
        assert!((spec.tone_fraction().unwrap() * spec.sample_rate() - 200e6).abs() < 1.0);
        let off = SignalSpec {
            tone_mhz: Some(600.0),
            ..Default::default()
        };
        let err = off.template().unwrap_err().to_string();
        assert!(err.contains("outside the band 0-512 MHz"), "{err}");
    }

    #[test]
    fn two_bit_states_follow_the_thresholds() {
        let spec = SignalSpec {
            fps: 100,
            tone_amplitude: 0.0,
            ref_epoch: Some(40),
            start_second: Some(0),
            ..Default::default()
        };
        let mut synth = Synth::new(&spec).unwrap();
        let mut payload = vec![0u8; 8192];
        let mut counts = [0u64; 4];
        for _ in 0..20 {
            synth.next_frameset(&mut [&mut payload[..]]);
            for b in &payload {
                for k in 0..4 {
                    counts[(b >> (2 * k) & 3) as usize] += 1;
                }
            }
        }
        let total: u64 = counts.iter().sum();
        let expect_outer = crate::analysis::bstate::normal_cdf(-TWO_BIT_THRESHOLD_SIGMA);
        for (state, c) in counts.iter().enumerate() {
            let frac = *c as f64 / total as f64;
            let want = if state == 0 || state == 3 {
                expect_outer
            } else {
                0.5 - expect_outer
            };
            assert!(
                (frac - want).abs() < 0.003,
                "state {state}: {frac} vs {want}"
            );
        }
    }

    #[test]
    fn correlated_inputs_show_their_lag() {
        let spec = SignalSpec {
            frame_size: 32 + 4096,
            fps: 100,
            nchan: 2,
            bits: 8,
            tone_amplitude: 0.0,
            correlation: 0.5,
            delay: 3,
            ref_epoch: Some(40),
            start_second: Some(0),
            ..Default::default()
        };
        let mut synth = Synth::new(&spec).unwrap();
        let d = Decoder::new(8).unwrap();
        let mut payload = vec![0u8; 4096];
        let mut x = Vec::new();
        for _ in 0..50 {
            synth.next_frameset(&mut [&mut payload[..]]);
            let mut v = vec![0f32; 4096];
            d.decode(&payload, &mut v).unwrap();
            x.extend(v);
        }
        let n = x.len() / 2;
        let corr = |lag: usize| -> f64 {
            (lag..n)
                .map(|i| x[2 * i] as f64 * x[2 * (i - lag) + 1] as f64)
                .sum::<f64>()
                / (n - lag) as f64
        };
        // Channel 1 lags channel 0 by 3 samples: x0[n] matches x1[n + 3].
        let c_best = (0..8)
            .map(|l| {
                (0..n - l)
                    .map(|i| x[2 * (i + l) + 1] as f64 * x[2 * i] as f64)
                    .sum::<f64>()
                    / (n - l) as f64
            })
            .collect::<Vec<_>>();
        let best = c_best
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.partial_cmp(b.1).unwrap())
            .unwrap()
            .0;
        assert_eq!(best, 3, "{c_best:?}");
        assert!((c_best[3] - 0.5).abs() < 0.05, "{}", c_best[3]);
        assert!(corr(0).abs() < 0.05);
    }

    /// The decoded samples of `seconds` of a one-channel 8-bit station.
    fn station(seed: u64, start_second: u32, delay: usize, seconds: u32) -> Vec<f32> {
        let spec = SignalSpec {
            frame_size: 32 + 4096,
            fps: 16,
            nchan: 1,
            bits: 8,
            tone_amplitude: 0.0,
            correlation: 0.5,
            delay,
            seed,
            sky_seed: Some(77),
            ref_epoch: Some(40),
            start_second: Some(start_second),
            ..Default::default()
        };
        let mut synth = Synth::new(&spec).unwrap();
        let d = Decoder::new(8).unwrap();
        let mut payload = vec![0u8; 4096];
        let mut x = Vec::new();
        for _ in 0..16 * seconds {
            synth.next_frameset(&mut [&mut payload[..]]);
            let mut v = vec![0f32; 4096];
            d.decode(&payload, &mut v).unwrap();
            x.extend(v);
        }
        x
    }

    #[test]
    fn stations_under_one_sky_correlate_at_their_delays_whatever_their_start() {
        // Station a from second 10 for 2 s; b from second 11, its own noise, 5 samples late.
        let a = station(1, 10, 0, 2);
        let b = station(2, 11, 5, 1);
        let a = &a[a.len() / 2..];
        let corr = |lag: usize| -> f64 {
            let n = b.len() - lag;
            (0..n).map(|i| a[i] as f64 * b[i + lag] as f64).sum::<f64>() / n as f64
        };
        let by_lag: Vec<f64> = (0..8).map(corr).collect();
        assert!((by_lag[5] - 0.5).abs() < 0.03, "{by_lag:?}");
        for (lag, c) in by_lag.iter().enumerate().filter(|(l, _)| *l != 5) {
            assert!(c.abs() < 0.03, "lag {lag}: {c}");
        }
        // The same sky and seed give the same bytes; another seed, other own noise.
        assert_eq!(station(2, 11, 5, 1), b);
        let other = station(3, 11, 5, 1);
        let same: f64 = other
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64) * (*y as f64))
            .sum::<f64>()
            / b.len() as f64;
        assert!((same - 0.5).abs() < 0.03, "{same}");
    }

    #[test]
    fn normal_helpers_agree() {
        for p in [0.001, 0.02, 0.3, 0.5, 0.9, 0.999] {
            assert!((crate::analysis::bstate::normal_cdf(inverse_normal_cdf(p)) - p).abs() < 1e-6);
        }
        assert!((crate::analysis::bstate::normal_cdf(-1.0) - 0.158_655_25).abs() < 1e-7);
    }
}
