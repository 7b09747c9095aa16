//! Spectrum and fringe checks: autospectra, bit-state statistics, cross-correlation, tones.
//!
//! Autospectra follow mark5access' m5spec: `nfft` frequency channels across the band, from
//! an FFT of `2 nfft` real samples (or `nfft` complex samples), |X|² averaged over the FFTs,
//! no window. FFT plans are made once and buffers reused; work is split over the CPUs by
//! segments, and callers feed the data in chunks, so a 10 GB file needs constant memory.
//!
//! Samples arrive laid out as a reader returns them: (time, input, value), where an input is
//! a channel of a thread and a value is one real number (two for complex data: re, im).

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};
use serde::Serialize;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum SpectrumError {
    #[error("nfft must be a positive number of frequency channels, got {0}")]
    BadNfft(usize),
    #[error("the data hold {got} samples per input, fewer than one FFT of {needed}: give a smaller nfft or more data")]
    TooShort { got: usize, needed: usize },
    #[error("sample layout: {0}")]
    Layout(String),
}

/// FFT plans, made once and shared by the workers.
#[derive(Clone)]
struct Plans {
    nfft: usize,
    complex: bool,
    /// Real data, one input: real-to-complex FFT of 2 nfft samples.
    real: Arc<dyn RealToComplex<f32>>,
    /// Complex data: nfft points. Real data, two inputs packed as re and im: 2 nfft points.
    cplx: Arc<dyn Fft<f32>>,
}

impl Plans {
    fn new(nfft: usize, complex: bool) -> Plans {
        let cplx_len = if complex { nfft } else { 2 * nfft };
        Plans {
            nfft,
            complex,
            real: RealFftPlanner::new().plan_fft_forward(2 * nfft),
            cplx: FftPlanner::new().plan_fft_forward(cplx_len),
        }
    }

    /// Samples per segment.
    fn seg_len(&self) -> usize {
        if self.complex {
            self.nfft
        } else {
            2 * self.nfft
        }
    }
}

/// Per-worker buffers. After a transform, `a` (and for a pair, `b`) hold the `nfft` bins.
struct Work {
    plans: Plans,
    real_in: Vec<f32>,
    z: Vec<Complex<f32>>,
    a: Vec<Complex<f32>>,
    b: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
}

impl Work {
    fn new(plans: &Plans) -> Work {
        let nfft = plans.nfft;
        let scratch = plans
            .cplx
            .get_inplace_scratch_len()
            .max(plans.real.get_scratch_len());
        Work {
            plans: plans.clone(),
            real_in: plans.real.make_input_vec(),
            z: vec![Complex::default(); plans.cplx.len()],
            a: vec![Complex::default(); nfft + 1],
            b: vec![Complex::default(); nfft],
            scratch: vec![Complex::default(); scratch],
        }
    }

    /// One input of a segment (`x` starts at the segment; `col` is the input's first value
    /// in a row of `row` values): its bins go to `a`.
    fn one(&mut self, x: &[f32], col: usize, row: usize) {
        let n = self.plans.seg_len();
        if self.plans.complex {
            let re = x[col..].iter().step_by(row);
            let im = x[col + 1..].iter().step_by(row);
            for ((z, &r), &i) in self.z[..n].iter_mut().zip(re).zip(im) {
                *z = Complex::new(r, i);
            }
            self.plans
                .cplx
                .process_with_scratch(&mut self.z, &mut self.scratch);
            self.a[..n].copy_from_slice(&self.z);
        } else {
            for (v, &r) in self.real_in.iter_mut().zip(x[col..].iter().step_by(row)) {
                *v = r;
            }
            self.plans
                .real
                .process_with_scratch(&mut self.real_in, &mut self.a, &mut self.scratch)
                .expect("buffers sized by the plan");
        }
    }

    /// Power of two real inputs packed as re and im of `z` (already filled): FFT in place,
    /// separate and add |X_a|², |X_b|² to the sums (the spectrum's fused path).
    /// (Single-precision sums: the caller flushes them into double precision every few
    /// dozen segments, so rounding stays near 1e-7 relative.)
    fn pair_power(
        plans: &Plans,
        z: &mut [Complex<f32>],
        scratch: &mut [Complex<f32>],
        sum_a: &mut [f32],
        sum_b: &mut [f32],
    ) {
        plans.cplx.process_with_scratch(z, scratch);
        let (l, nfft) = (z.len(), plans.nfft);
        // |(z1 + z2)/2|² and |(z1 − z2)/2i|², z2 the conjugate of the mirrored bin L − k.
        sum_a[0] += z[0].re * z[0].re;
        sum_b[0] += z[0].im * z[0].im;
        let lower = &z[1..nfft];
        let mirror = z[l - nfft + 1..].iter().rev();
        for (((z1, z2), a), b) in lower
            .iter()
            .zip(mirror)
            .zip(&mut sum_a[1..nfft])
            .zip(&mut sum_b[1..nfft])
        {
            // z1 + conj(z2) and z1 − conj(z2), written out so the loop vectorises.
            let (sr, si) = (z1.re + z2.re, z1.im - z2.im);
            let (dr, di) = (z1.re - z2.re, z1.im + z2.im);
            *a += 0.25 * (sr * sr + si * si);
            *b += 0.25 * (dr * dr + di * di);
        }
    }

    /// Two real inputs of a segment at once: packed as the real and imaginary parts of one
    /// complex FFT, then separated (X_a = (Z_k + Z*_{L-k})/2, X_b = (Z_k − Z*_{L-k})/2i).
    /// Their bins go to `a` and `b`.
    fn pair(&mut self, x: &[f32], col_a: usize, col_b: usize, row: usize) {
        let l = self.plans.seg_len();
        if col_b == col_a + 1 && col_a % 2 == 0 && row % 2 == 0 {
            // Neighbouring inputs are already a (re, im) pair in memory: one 8-byte move each.
            // SAFETY: Complex<f32> is two f32 (repr(C), align 4); the length is halved.
            let xc: &[Complex<f32>] = unsafe {
                std::slice::from_raw_parts(x.as_ptr() as *const Complex<f32>, x.len() / 2)
            };
            for (z, c) in self.z[..l]
                .iter_mut()
                .zip(xc[col_a / 2..].iter().step_by(row / 2))
            {
                *z = *c;
            }
        } else {
            let xa = x[col_a..].iter().step_by(row);
            let xb = x[col_b..].iter().step_by(row);
            for ((z, &ra), &rb) in self.z[..l].iter_mut().zip(xa).zip(xb) {
                *z = Complex::new(ra, rb);
            }
        }
        self.plans
            .cplx
            .process_with_scratch(&mut self.z, &mut self.scratch);
        let (z, nfft) = (&self.z, self.plans.nfft);
        // X_a = (z1 + conj(z2)) / 2, X_b = (z1 − conj(z2)) / 2i with z2 the mirrored bin L − k;
        // bin 0 pairs with itself.
        self.a[0] = Complex::new(z[0].re, 0.0);
        self.b[0] = Complex::new(z[0].im, 0.0);
        let mirror = z[l - nfft + 1..].iter().rev();
        for (((z1, z2), a), b) in z[1..nfft]
            .iter()
            .zip(mirror)
            .zip(&mut self.a[1..nfft])
            .zip(&mut self.b[1..nfft])
        {
            *a = Complex::new(0.5 * (z1.re + z2.re), 0.5 * (z1.im - z2.im));
            *b = Complex::new(0.5 * (z1.im + z2.im), -0.5 * (z1.re - z2.re));
        }
    }
}

/// Splits `segments` over the available CPUs and runs `job(first, count)` on each part,
/// returning the parts' results in order.
fn parallel<R: Send>(segments: usize, job: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Below a few segments per worker, threads cost more than they bring.
    let workers = cpus.min(segments / 8).max(1);
    if workers == 1 {
        return vec![job(0, segments)];
    }
    let per = segments.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let job = &job;
                let first = w * per;
                let count = per.min(segments.saturating_sub(first));
                s.spawn(move || job(first, count))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("spectrum worker"))
            .collect()
    })
}

/// Frames of a VDIF stream by thread and frame set, decoded a segment at a time.
pub trait FrameSource: Sync {
    /// Frame sets (one frame per thread) available.
    fn sets(&self) -> usize;
    /// Threads (columns of the thread axis).
    fn threads(&self) -> usize;
    /// Payload of thread column `t` in frame set `k` and whether it is flagged invalid; None
    /// when that frame is missing.
    fn frame(&self, t: usize, k: usize) -> Option<(&[u8], bool)>;
}

/// How a frame source's payloads decode.
pub struct FrameLayout {
    pub spf: usize,
    pub nchan: usize,
    pub complex: bool,
    pub decoder: crate::vdif::Decoder,
    /// For real data whose bytes each hold whole pairs of neighbouring channels (1, 2 or 4
    /// bits, an even number of channels filling whole bytes): each byte's channel pairs as
    /// complex numbers, ready for a packed two-channel FFT.
    pair_lut: Option<PairLut>,
}

struct PairLut {
    /// Pairs per byte.
    per_byte: usize,
    /// Bytes per sample of one thread.
    bytes_per_sample: usize,
    table: Vec<Complex<f32>>,
}

impl FrameLayout {
    pub fn new(
        spf: usize,
        nchan: usize,
        bits: u32,
        complex: bool,
    ) -> Result<FrameLayout, crate::vdif::DecodeError> {
        let decoder = crate::vdif::Decoder::new(bits)?;
        let vpb = (8 / bits) as usize;
        let pair_lut = (!complex && nchan % 2 == 0 && bits <= 4 && nchan * bits as usize >= 8)
            .then(|| {
                let levels = crate::vdif::decode::levels(bits).expect("checked by the decoder");
                let mask = (1u32 << bits) - 1;
                let mut table = Vec::with_capacity(256 * vpb / 2);
                for b in 0..256u32 {
                    let v = |k: usize| levels[((b >> (k as u32 * bits)) & mask) as usize];
                    for m in 0..vpb / 2 {
                        table.push(Complex::new(v(2 * m), v(2 * m + 1)));
                    }
                }
                PairLut {
                    per_byte: vpb / 2,
                    bytes_per_sample: nchan * bits as usize / 8,
                    table,
                }
            });
        Ok(FrameLayout {
            spf,
            nchan,
            complex,
            decoder,
            pair_lut,
        })
    }

    /// Decodes samples `start..start + len` straight into one complex buffer per pair of
    /// neighbouring channels (`zs[thread * nchan / 2 + c / 2]`), when the layout allows it.
    fn decode_pairs(
        &self,
        src: &dyn FrameSource,
        start: usize,
        len: usize,
        zs: &mut [Vec<Complex<f32>>],
    ) -> bool {
        let Some(lut) = &self.pair_lut else {
            return false;
        };
        let npairs = self.nchan / 2;
        for t in 0..src.threads() {
            let mut done = 0;
            while done < len {
                let sample = start + done;
                let (k, within) = (sample / self.spf, sample % self.spf);
                let n = (self.spf - within).min(len - done);
                let frame = src.frame(t, k).filter(|(_, invalid)| !invalid);
                if let (Some((payload, _)), 1, 2) = (frame, lut.bytes_per_sample, lut.per_byte) {
                    // The reference format (2 bits, 4 channels): each byte is one sample, two
                    // pairs; one table entry of two complex numbers per byte.
                    let (za, zb) = zs[t * npairs..].split_at_mut(1);
                    let (za, zb) = (&mut za[0][done..done + n], &mut zb[0][done..done + n]);
                    let bytes = &payload[within..within + n];
                    for ((a, b), &byte) in za.iter_mut().zip(zb.iter_mut()).zip(bytes) {
                        let i = byte as usize * 2;
                        *a = lut.table[i];
                        *b = lut.table[i + 1];
                    }
                    done += n;
                    continue;
                }
                for j in 0..lut.bytes_per_sample {
                    for m in 0..lut.per_byte {
                        let z = &mut zs[t * npairs + j * lut.per_byte + m][done..done + n];
                        match frame {
                            Some((payload, _)) => {
                                let bytes = payload[within * lut.bytes_per_sample..]
                                    .iter()
                                    .skip(j)
                                    .step_by(lut.bytes_per_sample);
                                for (zz, &b) in z.iter_mut().zip(bytes) {
                                    *zz = lut.table[b as usize * lut.per_byte + m];
                                }
                            }
                            None => z.fill(Complex::default()),
                        }
                    }
                }
                done += n;
            }
        }
        true
    }
    /// Values per sample of one thread.
    fn values(&self) -> usize {
        self.nchan * if self.complex { 2 } else { 1 }
    }

    /// Decodes samples `start..start + len` of every thread into `buf`, laid out (time,
    /// thread, channel, value); missing and invalid frames read as zeros.
    pub fn decode(&self, src: &dyn FrameSource, start: usize, len: usize, buf: &mut Vec<f32>) {
        let vals = self.values();
        let threads = src.threads();
        let row = threads * vals;
        buf.resize(len * row, 0.0);
        let mut tmp = Vec::new();
        for t in 0..threads {
            let mut done = 0;
            while done < len {
                let sample = start + done;
                let (k, within) = (sample / self.spf, sample % self.spf);
                let n = (self.spf - within).min(len - done);
                match src.frame(t, k) {
                    Some((payload, false)) if threads == 1 => {
                        let dst = &mut buf[done * vals..(done + n) * vals];
                        if self
                            .decoder
                            .decode_range(payload, within * vals, dst)
                            .is_err()
                        {
                            dst.fill(0.0);
                        }
                    }
                    Some((payload, false)) => {
                        tmp.resize(n * vals, 0.0);
                        if self
                            .decoder
                            .decode_range(payload, within * vals, &mut tmp)
                            .is_err()
                        {
                            tmp.fill(0.0);
                        }
                        for (i, v) in tmp.chunks_exact(vals).enumerate() {
                            let at = (done + i) * row + t * vals;
                            buf[at..at + vals].copy_from_slice(v);
                        }
                    }
                    _ => {
                        for i in 0..n {
                            let at = (done + i) * row + t * vals;
                            buf[at..at + vals].fill(0.0);
                        }
                    }
                }
                done += n;
            }
        }
    }
}

impl FrameSource for crate::vdif::VdifFile {
    fn sets(&self) -> usize {
        self.info().n_framesets
    }
    fn threads(&self) -> usize {
        self.info().thread_ids.len()
    }
    fn frame(&self, t: usize, k: usize) -> Option<(&[u8], bool)> {
        let info = self.info();
        let (fs, n) = (info.frame_size, info.thread_ids.len());
        let data = self.frame_bytes();
        let set = k * n * fs;
        let want = info.thread_ids[t];
        let hs = info.header0.header_size();
        // Files usually hold threads in order: look at position t first.
        let order = std::iter::once(t).chain((0..n).filter(move |&j| j != t));
        for j in order {
            let frame = data.get(set + j * fs..set + (j + 1) * fs)?;
            if let Ok(h) = crate::vdif::Header::parse_unchecked(frame) {
                if h.thread_id() == want {
                    return Some((&frame[hs..], h.is_invalid()));
                }
            }
        }
        None
    }
}

/// Whole frames given as rows (a live view, or any array of frames), grouped by thread.
pub struct FrameRows<'a> {
    /// Per thread, in order: (payload, invalid).
    pub rows: Vec<Vec<(&'a [u8], bool)>>,
}

impl<'a> FrameRows<'a> {
    /// Groups `frames` (whole frames, in arrival order) by thread id, sorted.
    pub fn new(frames: &[&'a [u8]], header_size: usize) -> (FrameRows<'a>, Vec<u32>) {
        let mut by_thread: std::collections::BTreeMap<u32, Vec<(&'a [u8], bool)>> =
            Default::default();
        for f in frames {
            if let Ok(h) = crate::vdif::Header::parse_unchecked(f) {
                by_thread
                    .entry(h.thread_id())
                    .or_default()
                    .push((&f[header_size.min(f.len())..], h.is_invalid()));
            }
        }
        let ids = by_thread.keys().copied().collect();
        (
            FrameRows {
                rows: by_thread.into_values().collect(),
            },
            ids,
        )
    }
}

impl FrameSource for FrameRows<'_> {
    fn sets(&self) -> usize {
        self.rows.iter().map(|r| r.len()).min().unwrap_or(0)
    }
    fn threads(&self) -> usize {
        self.rows.len()
    }
    fn frame(&self, t: usize, k: usize) -> Option<(&[u8], bool)> {
        self.rows.get(t)?.get(k).copied()
    }
}

/// Where the segments' samples come from.
#[derive(Clone, Copy)]
enum Segments<'a> {
    /// Decoded samples (time, input, value), segment after segment.
    Samples(&'a [f32]),
    /// Frames decoded segment by segment, from a sample offset.
    Frames(&'a dyn FrameSource, &'a FrameLayout, usize),
}

/// Averaged power spectra of every input.
pub struct SpectrumAccumulator {
    nfft: usize,
    inputs: usize,
    complex: bool,
    plans: Plans,
    /// inputs × nfft sums of |X|².
    sum: Vec<f64>,
    segments: u64,
}

impl SpectrumAccumulator {
    pub fn new(nfft: usize, inputs: usize, complex: bool) -> Result<Self, SpectrumError> {
        if nfft == 0 || nfft > 1 << 24 {
            return Err(SpectrumError::BadNfft(nfft));
        }
        if inputs == 0 {
            return Err(SpectrumError::Layout("no inputs".into()));
        }
        Ok(SpectrumAccumulator {
            nfft,
            inputs,
            complex,
            plans: Plans::new(nfft, complex),
            sum: vec![0.0; inputs * nfft],
            segments: 0,
        })
    }

    /// Samples (per input) in one FFT.
    pub fn segment_len(&self) -> usize {
        self.plans.seg_len()
    }

    /// Adds the whole segments among the first `n_samples` samples of `x` (layout: time,
    /// input, value); returns how many samples were used (a multiple of the segment length).
    pub fn add(&mut self, x: &[f32], n_samples: usize, max_segments: Option<u64>) -> usize {
        let vals = if self.complex { 2 } else { 1 };
        let row = self.inputs * vals;
        let seg = self.segment_len();
        let mut segments = (n_samples / seg).min(x.len() / row / seg);
        if let Some(m) = max_segments {
            segments = segments.min(m.saturating_sub(self.segments) as usize);
        }
        if segments == 0 {
            return 0;
        }
        self.accumulate(segments, Segments::Samples(x));
        segments * seg
    }

    /// Adds the segments `start_segment..` of a frame source (decoded segment by segment into
    /// a small buffer, so the FFTs read from cache); returns the segments added.
    pub fn add_frames(
        &mut self,
        src: &dyn FrameSource,
        layout: &FrameLayout,
        start_sample: usize,
        max_segments: Option<u64>,
    ) -> u64 {
        let seg = self.segment_len();
        let available = (src.sets() * layout.spf).saturating_sub(start_sample) / seg;
        let mut segments = available;
        if let Some(m) = max_segments {
            segments = segments.min(m.saturating_sub(self.segments) as usize);
        }
        if segments == 0 {
            return 0;
        }
        self.accumulate(segments, Segments::Frames(src, layout, start_sample));
        segments as u64
    }

    /// Runs the FFTs of `segments` segments over the CPUs.
    fn accumulate(&mut self, segments: usize, from: Segments<'_>) {
        let vals = if self.complex { 2 } else { 1 };
        let row = self.inputs * vals;
        let seg = self.segment_len();
        let (nfft, inputs, plans, complex) = (self.nfft, self.inputs, &self.plans, self.complex);
        let parts = parallel(segments, |first, count| {
            let mut work = Work::new(plans);
            let mut sum = vec![0.0f64; inputs * nfft];
            let mut buf = vec![0.0f32; seg * row];
            let add = |acc: &mut [f64], bins: &[Complex<f32>]| {
                for (a, c) in acc.iter_mut().zip(bins) {
                    *a += c.norm_sqr() as f64;
                }
            };
            let mut zs = vec![vec![Complex::<f32>::default(); seg]; inputs / 2];
            let mut sum32 = vec![0.0f32; inputs * nfft];
            let mut in_block = 0;
            for s in first..first + count {
                if let Segments::Frames(src, layout, start) = from {
                    // Bytes straight into packed channel pairs, no intermediate floats.
                    if layout.decode_pairs(src, start + s * seg, seg, &mut zs) {
                        for (m, z) in zs.iter_mut().enumerate() {
                            let (lo, hi) = sum32.split_at_mut((2 * m + 1) * nfft);
                            Work::pair_power(
                                plans,
                                z,
                                &mut work.scratch,
                                &mut lo[2 * m * nfft..],
                                &mut hi[..nfft],
                            );
                        }
                        in_block += 1;
                        if in_block == 32 || s + 1 == first + count {
                            for (d, f) in sum.iter_mut().zip(sum32.iter_mut()) {
                                *d += *f as f64;
                                *f = 0.0;
                            }
                            in_block = 0;
                        }
                        continue;
                    }
                }
                let seg_x: &[f32] = match from {
                    Segments::Samples(x) => &x[s * seg * row..(s + 1) * seg * row],
                    Segments::Frames(src, layout, start) => {
                        layout.decode(src, start + s * seg, seg, &mut buf);
                        &buf
                    }
                };
                let mut i = 0;
                // Real inputs two at a time through one complex FFT; a lone one alone.
                while !complex && i + 1 < inputs {
                    work.pair(seg_x, i, i + 1, row);
                    add(&mut sum[i * nfft..(i + 1) * nfft], &work.a[..nfft]);
                    add(&mut sum[(i + 1) * nfft..(i + 2) * nfft], &work.b[..nfft]);
                    i += 2;
                }
                while i < inputs {
                    work.one(seg_x, i * vals, row);
                    add(&mut sum[i * nfft..(i + 1) * nfft], &work.a[..nfft]);
                    i += 1;
                }
            }
            sum
        });
        for part in parts {
            for (a, p) in self.sum.iter_mut().zip(part) {
                *a += p;
            }
        }
        self.segments += segments as u64;
    }

    pub fn segments(&self) -> u64 {
        self.segments
    }

    /// Mean |X|² per input and channel, inputs × nfft, ascending frequency: for real data
    /// channel k is k·fs/(2 nfft); for complex data (k − nfft/2)·fs/nfft.
    pub fn power(&self) -> Vec<f64> {
        let n = self.segments.max(1) as f64;
        let mut out: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        if self.complex {
            for row in out.chunks_mut(self.nfft) {
                row.rotate_left(self.nfft / 2);
            }
        }
        out
    }
}

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

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = crate::generate::Rng::new(seed);
        (0..n)
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                crate::generate::inverse_normal_cdf(u.clamp(1e-12, 1.0 - 1e-12)) as f32
            })
            .collect()
    }

    #[test]
    fn tone_lands_in_its_channel() {
        let nfft = 256;
        let n = 2 * nfft * 64;
        let f = 37.0 / (2.0 * nfft as f64); // channel 37
        let mut x = noise(n, 3);
        for (i, v) in x.iter_mut().enumerate() {
            *v += (2.0 * std::f64::consts::PI * f * i as f64).cos() as f32;
        }
        let mut acc = SpectrumAccumulator::new(nfft, 1, false).unwrap();
        assert_eq!(acc.add(&x, n, None), n);
        let p = acc.power();
        let tones = find_tones(&p, 10.0);
        assert!((tones[0].channel - 37.0).abs() < 0.1, "{tones:?}");
        assert!(tones[0].power_ratio > 50.0);
    }

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
