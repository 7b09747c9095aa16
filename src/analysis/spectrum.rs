//! Autospectra, and the machinery the other analyses share (FFT plans, workers, frame layouts).
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
pub(crate) struct Plans {
    nfft: usize,
    complex: bool,
    /// Real data, one input: real-to-complex FFT of 2 nfft samples.
    real: Arc<dyn RealToComplex<f32>>,
    /// Complex data: nfft points. Real data, two inputs packed as re and im: 2 nfft points.
    cplx: Arc<dyn Fft<f32>>,
}

impl Plans {
    pub(crate) fn new(nfft: usize, complex: bool) -> Plans {
        let cplx_len = if complex { nfft } else { 2 * nfft };
        Plans {
            nfft,
            complex,
            real: RealFftPlanner::new().plan_fft_forward(2 * nfft),
            cplx: FftPlanner::new().plan_fft_forward(cplx_len),
        }
    }

    /// Samples per segment.
    pub(crate) fn seg_len(&self) -> usize {
        if self.complex {
            self.nfft
        } else {
            2 * self.nfft
        }
    }
}

/// Per-worker buffers. After a transform, `a` (and for a pair, `b`) hold the `nfft` bins.
pub(crate) struct Work {
    plans: Plans,
    real_in: Vec<f32>,
    z: Vec<Complex<f32>>,
    /// The spectra of the last one or two inputs transformed.
    pub(crate) a: Vec<Complex<f32>>,
    pub(crate) b: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
}

impl Work {
    pub(crate) fn new(plans: &Plans) -> Work {
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
    pub(crate) fn one(&mut self, x: &[f32], col: usize, row: usize) {
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
    pub(crate) fn pair_power(
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
    pub(crate) fn pair(&mut self, x: &[f32], col_a: usize, col_b: usize, row: usize) {
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

thread_local! {
    /// Threads an analysis started on this thread may use (0: every CPU).
    static THREADS_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Limits the analyses started on the calling thread to `threads` threads (0: every CPU).
/// A caller that already runs one analysis per CPU (a Dask worker's tasks) sets 1, so that
/// each does not start as many threads again and oversubscribe the CPUs.
pub fn set_threads_here(threads: usize) {
    THREADS_HERE.with(|t| t.set(threads));
}

/// The calling thread's limit (see `set_threads_here`).
pub fn threads_here() -> usize {
    THREADS_HERE.with(|t| t.get())
}

/// Splits `segments` over the available CPUs and runs `job(first, count)` on each part,
/// returning the parts' results in order.
pub(crate) fn parallel<R: Send>(segments: usize, job: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
    let cpus = match THREADS_HERE.with(|t| t.get()) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
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

/// Autospectra of every input (thread × channel) of the frames of `src`, laid out as `header`
/// says, from sample `start`, of at most `nint` FFTs (all there are by default).
pub fn spectra_of(
    src: &dyn FrameSource,
    header: &crate::vdif::Header,
    nfft: usize,
    start: usize,
    nint: Option<u64>,
) -> Result<SpectrumAccumulator, SpectrumError> {
    let layout = FrameLayout::of(header)?;
    let mut acc = SpectrumAccumulator::new(nfft, src.threads() * layout.nchan, layout.complex)?;
    acc.add_frames(src, &layout, start, nint);
    Ok(acc)
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
    /// The layout of frames with this header.
    pub fn of(h: &crate::vdif::Header) -> Result<FrameLayout, SpectrumError> {
        FrameLayout::new(
            h.samples_per_frame(),
            h.nchan() as usize,
            h.bits(),
            h.is_complex(),
        )
        .map_err(|e| SpectrumError::Layout(e.to_string()))
    }

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
    pub(crate) fn values(&self) -> usize {
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
        let n = info.thread_ids.len();
        let set = k * n;
        let want = info.thread_ids[t];
        let hs = info.header0.header_size();
        // Files usually hold threads in order: look at position t first.
        let order = std::iter::once(t).chain((0..n).filter(move |&j| j != t));
        for j in order {
            if set + j >= info.n_frames {
                return None;
            }
            // The inherent `VdifFile::frame` (frame k of the stream), not this trait's.
            let frame = crate::vdif::VdifFile::frame(self, set + j);
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

    /// Inputs (threads × channels) summed separately.
    pub fn inputs(&self) -> usize {
        self.inputs
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

/// Gaussian noise of unit variance, for the analysis tests.
#[cfg(test)]
pub(crate) fn test_noise(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = crate::sources::generate::Rng::new(seed);
    (0..n)
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            crate::sources::generate::inverse_normal_cdf(u.clamp(1e-12, 1.0 - 1e-12)) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tones::find_tones;

    #[test]
    fn tone_lands_in_its_channel() {
        let nfft = 256;
        let n = 2 * nfft * 64;
        let f = 37.0 / (2.0 * nfft as f64); // channel 37
        let mut x = test_noise(n, 3);
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
}
