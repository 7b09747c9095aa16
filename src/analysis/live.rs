//! The live monitor's analysis: what the recorder's low-priority monitor thread computes on
//! its view of the newest frames, with the same functions a scientist calls from Python
//! (`spectra_of`, `bit_states`, `find_tones`). Handed to the recorder as an `Analyser`: the
//! record stage never calls analysis itself.

use crate::analysis::bstate::{bit_states, normal_cdf, two_bit_state_fractions};
use crate::analysis::spectrum::{set_threads_here, spectra_of, FrameLayout, FrameRows};
use crate::analysis::tones::find_tones;
use crate::record::live::{Analyser, LiveBits, LiveReport, LiveSpectrum, LiveTone};
use crate::vdif::decode::{levels, TWO_BIT_THRESHOLD_SIGMA};
use crate::vdif::Header;
use std::sync::Arc;

/// A tone stands this many times above the median power (`vdifrec.find_tones`' default).
pub const TONE_THRESHOLD: f64 = 10.0;
/// Tones reported per (thread, channel) at most, strongest first.
const TONES_PER_CHANNEL: usize = 4;

/// The analysis for `LiveMonitor::start`.
pub fn analyser() -> Analyser {
    Arc::new(|frames: &[&[u8]], nfft: usize, fps: u32| {
        // One thread: the monitor must not spread over the CPUs the recording needs.
        set_threads_here(1);
        analyse(frames, nfft, fps)
    })
}

/// Expected state fractions for Gaussian noise at the optimal levels (as `vdifrec.bstate`).
fn expected_fractions(bits: u32) -> Option<Vec<f64>> {
    if bits == 2 {
        return Some(two_bit_state_fractions(TWO_BIT_THRESHOLD_SIGMA).to_vec());
    }
    let lv = levels(bits).ok()?;
    let mut edges = vec![f64::NEG_INFINITY];
    edges.extend(lv.windows(2).map(|w| f64::from(w[0] + w[1]) / 2.0));
    edges.push(f64::INFINITY);
    Some(
        edges
            .windows(2)
            .map(|e| normal_cdf(e[1]) - normal_cdf(e[0]))
            .collect(),
    )
}

/// Spectra, bit statistics and tones of every (thread, channel) of `frames` (whole frames in
/// arrival order, one stream). `fps` (per thread) gives the sample rate when the header does
/// not.
pub fn analyse(frames: &[&[u8]], nfft: usize, fps: u32) -> Result<LiveReport, String> {
    let first = frames.first().ok_or("no frames to analyse")?;
    let h = Header::parse_unchecked(first).map_err(|e| e.to_string())?;
    let layout = FrameLayout::of(&h).map_err(|e| e.to_string())?;
    let (src, ids) = FrameRows::new(frames, h.header_size());
    let segment = if layout.complex { nfft } else { 2 * nfft };
    let sets = src.rows.iter().map(|r| r.len()).min().unwrap_or(0);
    if sets * layout.spf < segment {
        return Err(format!(
            "{sets} frames per thread hold fewer samples than one FFT of {segment}: give a larger live_fraction (--live-fraction) or a smaller live_nfft (--live-nfft)"
        ));
    }
    let acc = spectra_of(&src, &h, nfft, 0, None).map_err(|e| e.to_string())?;
    let power = acc.power();
    let sample_rate = h
        .sample_rate_hz()
        .or((fps > 0).then(|| f64::from(fps) * layout.spf as f64));
    let bandwidth = sample_rate.map(|r| if layout.complex { r } else { r / 2.0 });
    let nchan = layout.nchan;
    let mut report = LiveReport {
        nfft,
        bits: h.bits(),
        complex: layout.complex,
        sample_rate_hz: sample_rate,
        bandwidth_hz: bandwidth,
        ..LiveReport::default()
    };
    let expected = expected_fractions(h.bits());
    for (t, &thread) in ids.iter().enumerate() {
        let payloads: Vec<&[u8]> = src.rows[t].iter().map(|(p, _)| *p).collect();
        let counts =
            bit_states(&payloads, h.bits(), nchan, layout.complex).map_err(|e| e.to_string())?;
        let states = 1usize << h.bits();
        for c in 0..nchan {
            let row = &power[(t * nchan + c) * nfft..(t * nchan + c + 1) * nfft];
            report.spectra.push(LiveSpectrum {
                thread,
                channel: c as u32,
                power: row.iter().map(|p| *p as f32).collect(),
            });
            let tones = find_tones(row, TONE_THRESHOLD);
            report
                .tones
                .extend(tones.iter().take(TONES_PER_CHANNEL).map(|tone| LiveTone {
                    thread,
                    channel: c as u32,
                    frequency: bandwidth.map_or(tone.channel, |bw| tone.channel * bw / nfft as f64),
                    power_ratio: tone.power_ratio,
                }));
            let n = &counts[c * states..(c + 1) * states];
            let total = n.iter().sum::<u64>().max(1) as f64;
            let fractions: Vec<f64> = n.iter().map(|k| *k as f64 / total).collect();
            let deviation_pp = expected.as_ref().map(|e| {
                fractions
                    .iter()
                    .zip(e)
                    .map(|(f, x)| (f - x).abs() * 100.0)
                    .fold(0.0, f64::max)
            });
            report.bit_states.push(LiveBits {
                thread,
                channel: c as u32,
                fractions,
                expected: expected.clone(),
                deviation_pp,
            });
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::generate::{write_frames, SignalSpec};

    #[test]
    fn the_generator_tone_and_bit_states_are_found() {
        let spec = SignalSpec {
            fps: 1000,
            nchan: 4,
            threads: 2,
            tone_mhz: Some(1.0),
            ..SignalSpec::default()
        };
        let mut bytes = Vec::new();
        write_frames(&spec, 64, &mut bytes, "memory").unwrap();
        let frames: Vec<&[u8]> = bytes.chunks_exact(spec.frame_size).collect();
        let r = analyse(&frames, 1024, spec.fps).unwrap();
        assert_eq!(r.spectra.len(), 8);
        assert_eq!(r.bit_states.len(), 8);
        let bw = r.bandwidth_hz.unwrap();
        for t in [0, 1] {
            for c in 0..4 {
                let strongest = r
                    .tones
                    .iter()
                    .find(|x| x.thread == t && x.channel == c)
                    .expect("a tone in every channel");
                assert!(
                    (strongest.frequency - 1e6).abs() <= bw / 1024.0,
                    "{strongest:?}"
                );
            }
        }
        for b in &r.bit_states {
            assert!(b.deviation_pp.unwrap() < 0.5, "{b:?}");
        }
    }
}
