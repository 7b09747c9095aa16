//! A VDIF stream turned into another, frame by frame: what `vdifrec convert` writes and the live
//! forwarder sends.
//!
//! - `threads=` keeps the frames of the listed thread IDs only.
//! - `channels=` corner-turns (`vdif::cornerturn`): each frame of C channels becomes one
//!   single-channel frame per listed channel, of 1/C of the payload, with the same seconds
//!   and frame number. Its header is the input's words 0–3 with one channel, the new frame
//!   length and its own thread ID; the EDV is 0 and words 4–7 are zero (single-channel
//!   threads, EDV 0: an EDV 1/3/4 field such as the sample rate or the validity mask
//!   described the whole frame); a legacy header stays legacy.
//! - `payload=N` re-frames (`vdif::reframe`): each frame (after any corner turn) of payload Q
//!   becomes k = Q/N frames of N bytes, frame number f becoming f·k + i, so the frame rate is
//!   k times the input's.
//!
//! Thread IDs of single-channel frames: channel c of input thread t becomes thread t·C + c,
//! the numbering jive5ab gives the threads it splits a VDIF stream into, so that a correlator
//! set up for jive5ab's corner-turned streams finds each channel where it expects it. Where
//! only some channels are kept, each keeps the thread ID it has in a full split (jive5ab's
//! channel extractor renumbers them by their place in its list instead): a correlator's setup
//! then names the same channel by the same thread whatever was split off. A thread ID holds
//! 10 bits: a stream whose t·C + c would pass 1023 is refused.

use super::cornerturn::CornerTurn;
use super::header::{field, Header};
use super::reframe;
use crate::options::ArgError;

/// What to do to a stream: each part None leaves that aspect as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransformSpec {
    /// Thread IDs to keep.
    pub threads: Option<Vec<u32>>,
    /// Channels to corner-turn into single-channel threads.
    pub channels: Option<Vec<u32>>,
    /// Payload bytes of each output frame.
    pub payload: Option<usize>,
}

/// Values a list may hold, so that "0-4294967295" is refused rather than counted out.
const MOST_INDICES: usize = 65_536;

/// An example list, for messages.
const EXAMPLE: &str = "0-3,7";

impl TransformSpec {
    /// Whether the spec changes nothing.
    pub fn is_identity(&self) -> bool {
        self.threads.is_none() && self.channels.is_none() && self.payload.is_none()
    }

    /// The checks that need no stream (lists not empty, without repeats; thread IDs VDIF can
    /// hold): `build` makes them too, and a caller makes them first to name a bad option
    /// before it opens anything.
    pub fn check(&self) -> Result<(), ArgError> {
        for (name, list) in [("threads", &self.threads), ("channels", &self.channels)] {
            if let Some(list) = list {
                index_list(name, list.iter().map(|&v| i64::from(v)))?;
            }
        }
        let most = field::THREAD_ID.max();
        if let Some(t) = self.threads.iter().flatten().find(|&&t| t > most) {
            return Err(ArgError::new(
                "threads",
                format!("{t} is not a VDIF thread ID: they go from 0 to {most}"),
            ));
        }
        Ok(())
    }

    /// Checks the spec against the stream's first frame header; errors name the option
    /// (ArgError "threads"/"channels"/"payload") and the fix.
    pub fn build(&self, first: &Header) -> Result<Transform, ArgError> {
        self.check()?;
        let layout = Layout::of(first);
        let payload = first.payload_size();
        // Channels go out in ascending order, however listed (`check` refused repeats).
        let split = match &self.channels {
            None => None,
            Some(channels) => {
                let mut channels = channels.clone();
                channels.sort_unstable();
                Some(Split::new(&channels, &layout, payload)?)
            }
        };
        let (q, out_nchan) = match split {
            Some(_) => (payload / layout.nchan as usize, 1),
            None => (payload, layout.nchan),
        };
        let unit = reframe::unit_bytes(out_nchan, layout.width());
        let pieces = match self.payload {
            None => 1,
            Some(n) => reframe::pieces(n, q, unit).map_err(|why| ArgError::new("payload", why))?,
        };
        let transform = Transform {
            threads: self.threads.clone().map(|mut t| {
                t.sort_unstable();
                t
            }),
            layout,
            split,
            pieces,
            out_payload: q / pieces,
            out_frame_size: first.header_size() + q / pieces,
        };
        // The first frame's thread, or every thread asked for, must have room for its channels.
        for &t in self.threads.as_deref().unwrap_or(&[first.thread_id()]) {
            transform.out_threads(t)?;
        }
        Ok(transform)
    }
}

/// Parses "0-3,7" style lists (ArgError naming `name`): numbers and inclusive ranges,
/// separated by commas; returned sorted, each once.
pub fn parse_index_list(name: &str, text: &str) -> Result<Vec<u32>, ArgError> {
    let bad = |why: String| ArgError::new(name, why);
    let number = |s: &str| {
        s.trim().parse::<u32>().map_err(|_| {
            let within = if s.trim() == text.trim() {
                String::new()
            } else {
                format!(" in {text:?}")
            };
            bad(format!(
                "{:?}{within} is not a whole number from 0: give numbers and ranges such as {EXAMPLE}",
                s.trim()
            ))
        })
    };
    let mut values: Vec<i64> = Vec::new();
    for item in text.split(',') {
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(item)?, number(item)?),
        };
        if a > b {
            return Err(bad(format!(
                "{:?}: a range runs upwards, such as {b}-{a}",
                item.trim()
            )));
        }
        if (b - a) as usize >= MOST_INDICES || values.len() + (b - a) as usize >= MOST_INDICES {
            return Err(bad(format!(
                "{text:?} lists more than {MOST_INDICES} numbers: give those of the stream"
            )));
        }
        values.extend((a..=b).map(i64::from));
    }
    index_list(name, values)
}

/// A list given as numbers (Python's `[0, 1, 2]`): each from 0, each once; returned sorted.
pub fn index_list(name: &str, values: impl IntoIterator<Item = i64>) -> Result<Vec<u32>, ArgError> {
    let mut out = Vec::new();
    for v in values {
        let ok = u32::try_from(v).map_err(|_| {
            ArgError::new(
                name,
                format!("{v} is not an index: give numbers from 0, such as {EXAMPLE}"),
            )
        })?;
        out.push(ok);
        if out.len() > MOST_INDICES {
            return Err(ArgError::new(
                name,
                format!("more than {MOST_INDICES} numbers: give those of the stream"),
            ));
        }
    }
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0] == w[1]) {
        return Err(ArgError::new(
            name,
            format!("{} is listed twice: give each once", w[0]),
        ));
    }
    if out.is_empty() {
        return Err(ArgError::new(
            name,
            format!("the list is empty: give at least one, such as {EXAMPLE}"),
        ));
    }
    Ok(out)
}

/// A payload size as given (a whole number that may be negative, from Python or the
/// command line): bytes of payload, at least 1 (`build` checks the rest against the stream).
pub fn payload_arg(value: i64) -> Result<usize, ArgError> {
    usize::try_from(value)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            ArgError::new(
                "payload",
                format!("{value} bytes cannot be a frame's payload: give a positive multiple of 8 that divides the stream's"),
            )
        })
}

/// What every frame of the stream must be like, from its first header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    nchan: u32,
    bits: u32,
    complex: bool,
    legacy: bool,
    frame_size: usize,
}

impl Layout {
    fn of(h: &Header) -> Layout {
        Layout {
            nchan: h.nchan(),
            bits: h.bits(),
            complex: h.is_complex(),
            legacy: h.is_legacy(),
            frame_size: h.frame_size(),
        }
    }

    /// Bits of one channel's sample (both parts of a complex one).
    fn width(&self) -> u32 {
        self.bits * if self.complex { 2 } else { 1 }
    }

    fn describe(&self) -> String {
        format!(
            "{} channel{} of {}-bit {}samples, {}-byte frames{}",
            self.nchan,
            if self.nchan == 1 { "" } else { "s" },
            self.bits,
            if self.complex { "complex " } else { "" },
            self.frame_size,
            if self.legacy { ", legacy headers" } else { "" },
        )
    }
}

/// The corner turn of `channels=`: the kernel, and the channels in output order.
#[derive(Clone)]
struct Split {
    turn: CornerTurn,
    channels: Vec<u32>,
}

impl Split {
    fn new(channels: &[u32], layout: &Layout, payload: usize) -> Result<Split, ArgError> {
        let bad = |why: String| ArgError::new("channels", why);
        let nchan = layout.nchan;
        if let Some(c) = channels.iter().find(|&&c| c >= nchan) {
            return Err(bad(format!(
                "the stream has {nchan} channel{}, numbered 0 to {}: there is no channel {c}",
                if nchan == 1 { "" } else { "s" },
                nchan - 1
            )));
        }
        if payload % (8 * nchan as usize) != 0 {
            return Err(bad(format!(
                "the {payload}-byte payload of {nchan} channels does not split into single-channel frames: {payload}/{nchan} is not a whole number of 8-byte units, as VDIF frames are"
            )));
        }
        let turn = CornerTurn::new(nchan, layout.bits, layout.complex, channels).map_err(bad)?;
        Ok(Split {
            turn,
            channels: channels.to_vec(),
        })
    }
}

/// A checked `TransformSpec`, ready for the frames of one stream.
#[derive(Clone)]
pub struct Transform {
    /// Thread IDs kept, sorted (None: all).
    threads: Option<Vec<u32>>,
    layout: Layout,
    split: Option<Split>,
    /// Frames each (turned) frame is cut into.
    pieces: usize,
    out_payload: usize,
    out_frame_size: usize,
}

impl Transform {
    /// Whether a frame of this thread is forwarded at all (threads= filter).
    pub fn wants(&self, thread_id: u32) -> bool {
        self.threads
            .as_ref()
            .is_none_or(|t| t.binary_search(&thread_id).is_ok())
    }

    /// Appends the output frames made from one input frame (whole frame, header included) to
    /// `out`; returns how many. A frame whose channel count/bits/frame size differs from the
    /// stream it was built for is refused (Err with a short reason), never panics.
    pub fn apply(&mut self, frame: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let start = out.len();
        out.resize(start + self.fan_out() * self.out_frame_size, 0);
        let written = self.apply_to_slice(frame, &mut out[start..]);
        out.truncate(start + written.as_ref().map_or(0, |n| n * self.out_frame_size));
        written
    }

    /// As `apply`, the output frames written at the start of `out`, which holds at least
    /// `fan_out() × out_frame_size()` bytes (Err otherwise; what lies past the frames written
    /// is left as it was, and on Err nothing is to be read from it).
    pub fn apply_to_slice(&mut self, frame: &[u8], out: &mut [u8]) -> Result<usize, String> {
        let h = Header::parse_unchecked(frame).map_err(|e| e.to_string())?;
        let layout = Layout::of(&h);
        if layout != self.layout {
            return Err(format!(
                "a frame of thread {} has {}, not the {} of the stream",
                h.thread_id(),
                layout.describe(),
                self.layout.describe()
            ));
        }
        if frame.len() != layout.frame_size {
            return Err(format!(
                "{} bytes given for a frame whose header says {}",
                frame.len(),
                layout.frame_size
            ));
        }
        if !self.wants(h.thread_id()) {
            return Ok(0);
        }
        let needed = self.fan_out() * self.out_frame_size;
        if out.len() < needed {
            return Err(format!(
                "{} bytes of room for {needed} bytes of output",
                out.len()
            ));
        }
        self.write(&h, &frame[h.header_size()..], &mut out[..needed])
    }

    pub fn out_frame_size(&self) -> usize {
        self.out_frame_size
    }

    /// Output frames per input frame
    pub fn fan_out(&self) -> usize {
        self.pieces * self.split.as_ref().map_or(1, |s| s.channels.len())
    }

    /// The thread IDs the frames of input thread `thread` go out with (in the order `apply`
    /// writes them): an ArgError naming `channels` where one would not fit VDIF's 10 bits.
    pub fn out_threads(&self, thread: u32) -> Result<Vec<u32>, ArgError> {
        let Some(split) = &self.split else {
            return Ok(vec![thread]);
        };
        split
            .channels
            .iter()
            .map(|&c| channel_thread(thread, self.layout.nchan, c))
            .collect::<Result<_, _>>()
            .map_err(|why| ArgError::new("channels", why))
    }

    /// Writes the output of one frame (`h` its header): piece i of channel j (in the order
    /// listed) is frame i·channels + j, so the frames of one time stay together.
    fn write(&self, h: &Header, payload: &[u8], dst: &mut [u8]) -> Result<usize, String> {
        let (ofs, k, n) = (self.out_frame_size, self.pieces, self.fan_out());
        let hs = h.header_size();
        match &self.split {
            None => {
                for (i, piece) in payload.chunks_exact(self.out_payload).enumerate() {
                    let frame = &mut dst[i * ofs..(i + 1) * ofs];
                    reframe::piece_header(h, k, i, ofs)?.write_to(frame);
                    frame[hs..].copy_from_slice(piece);
                }
            }
            Some(split) => {
                let m = split.channels.len();
                for (j, &c) in split.channels.iter().enumerate() {
                    let one = channel_header(h, self.layout.nchan, c)?;
                    for i in 0..k {
                        reframe::piece_header(&one, k, i, ofs)?
                            .write_to(&mut dst[(i * m + j) * ofs..]);
                    }
                }
                // The input bytes that make piece i of every channel.
                let span = self.out_payload * self.layout.nchan as usize;
                for (i, input) in payload.chunks_exact(span).enumerate() {
                    split.turn.run(input, &mut dst[i * m * ofs + hs..], ofs);
                }
            }
        }
        Ok(n)
    }
}

/// Channel `c` of thread `thread` of a stream of `nchan` channels, as a single-channel thread.
fn channel_thread(thread: u32, nchan: u32, c: u32) -> Result<u32, String> {
    let id = thread as u64 * nchan as u64 + c as u64;
    let most = field::THREAD_ID.max();
    if id > most as u64 {
        return Err(format!(
            "channel {c} of thread {thread} would be thread {id} (thread × {nchan} + channel, as jive5ab numbers them), but VDIF's thread IDs go to {most}: keep fewer threads or channels"
        ));
    }
    Ok(id as u32)
}

/// The header of channel `c`'s frame made from a frame of `nchan` channels (frame length and
/// number are the re-framer's to set): words 0–3 as they were with one channel and the
/// channel's thread, EDV 0 with words 4–7 zero (legacy: no words 4–7).
fn channel_header(h: &Header, nchan: u32, c: u32) -> Result<Header, String> {
    let thread = channel_thread(h.thread_id(), nchan, c)?;
    let mut words = [0u32; 8];
    words[..4].copy_from_slice(&h.words()[..4]);
    let mut one = Header::from_words(words);
    one.set(field::LOG2_NCHAN, 0)
        .and_then(|()| one.set(field::THREAD_ID, thread))
        .map_err(|e| e.to_string())?;
    Ok(one)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A frame: EDV 3 (sample rate and sync set), `nchan` x `bits`, thread `thread`, frame
    /// number `fnr`, payload bytes counting up from `seed`.
    fn frame(nchan: u32, bits: u32, payload: usize, thread: u32, fnr: u32, seed: u8) -> Vec<u8> {
        let mut h = Header::new(Some(3), 32 + payload, nchan, bits, false).unwrap();
        h.set(field::THREAD_ID, thread).unwrap();
        h.set(field::FRAME_NR, fnr).unwrap();
        h.set(field::SECONDS, 1234).unwrap();
        h.set(field::REF_EPOCH, 53).unwrap();
        h.set(field::STATION_ID, 0x4b76).unwrap();
        h.set_sample_rate_hz(64e6).unwrap();
        let mut f = h.to_bytes();
        f.extend((0..payload).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed)));
        f
    }

    fn spec(
        threads: Option<&str>,
        channels: Option<&str>,
        payload: Option<usize>,
    ) -> TransformSpec {
        TransformSpec {
            threads: threads.map(|t| parse_index_list("threads", t).unwrap()),
            channels: channels.map(|c| parse_index_list("channels", c).unwrap()),
            payload,
        }
    }

    fn headers(out: &[u8], size: usize) -> Vec<Header> {
        out.chunks_exact(size)
            .map(|f| Header::parse(f).unwrap())
            .collect()
    }

    #[test]
    fn lists_read_as_people_write_them() {
        assert_eq!(
            parse_index_list("channels", "0-3,7").unwrap(),
            [0, 1, 2, 3, 7]
        );
        assert_eq!(
            parse_index_list("channels", " 9, 2 - 4 ").unwrap(),
            [2, 3, 4, 9]
        );
        for (bad, says) in [
            ("", "not a whole number"),
            ("1,,2", "not a whole number"),
            ("-1", "not a whole number"),
            ("3-1", "runs upwards, such as 1-3"),
            ("1,1", "listed twice"),
            ("x", "such as 0-3,7"),
            ("0-4294967295", "more than 65536"),
        ] {
            let e = parse_index_list("threads", bad).unwrap_err();
            assert_eq!(e.name, "threads");
            assert!(e.why.contains(says), "{bad:?}: {e}");
        }
        assert!(index_list("channels", [-1])
            .unwrap_err()
            .why
            .contains("from 0"));
        assert!(index_list("channels", [])
            .unwrap_err()
            .why
            .contains("empty"));
        assert!(payload_arg(0).is_err() && payload_arg(-8).is_err());
        assert_eq!(payload_arg(1024).unwrap(), 1024);
    }

    #[test]
    fn identity_and_thread_filter_copy_frames_unchanged() {
        let f0 = frame(4, 2, 8192, 0, 5, 1);
        let f1 = frame(4, 2, 8192, 1, 5, 2);
        let h = Header::parse(&f0).unwrap();
        assert!(TransformSpec::default().is_identity());
        let mut t = TransformSpec::default().build(&h).unwrap();
        let mut out = Vec::new();
        assert_eq!(t.apply(&f0, &mut out), Ok(1));
        assert_eq!(out, f0);
        let mut t = spec(Some("1"), None, None).build(&h).unwrap();
        assert!(!t.wants(0) && t.wants(1));
        out.clear();
        assert_eq!(t.apply(&f0, &mut out), Ok(0));
        assert_eq!(t.apply(&f1, &mut out), Ok(1));
        assert_eq!(out, f1);
        assert_eq!((t.fan_out(), t.out_frame_size()), (1, 8224));
    }

    #[test]
    fn channels_become_single_channel_threads() {
        let f = frame(16, 2, 8192, 2, 77, 3);
        let h = Header::parse(&f).unwrap();
        let mut t = spec(None, Some("0,5,15"), None).build(&h).unwrap();
        assert_eq!((t.fan_out(), t.out_frame_size()), (3, 32 + 512));
        let mut out = vec![0xee]; // what is there already stays
        assert_eq!(t.apply(&f, &mut out), Ok(3));
        assert_eq!(out[0], 0xee);
        let hs = headers(&out[1..], 544);
        for (h1, c) in hs.iter().zip([0u32, 5, 15]) {
            assert_eq!(h1.thread_id(), 2 * 16 + c);
            assert_eq!((h1.nchan(), h1.bits(), h1.frame_size()), (1, 2, 544));
            assert_eq!(
                (h1.seconds(), h1.frame_nr(), h1.ref_epoch()),
                (1234, 77, 53)
            );
            assert_eq!(h1.edv(), Some(0));
            assert_eq!(&h1.words()[4..], &[0, 0, 0, 0]);
            assert_eq!(h1.station_id(), 0x4b76);
        }
        assert_eq!(t.out_threads(2).unwrap(), [32, 37, 47]);
    }

    #[test]
    fn legacy_headers_stay_legacy() {
        let mut h = Header::new(None, 16 + 4096, 4, 2, false).unwrap();
        h.set(field::THREAD_ID, 1).unwrap();
        let mut f = h.to_bytes();
        f.extend(vec![0x1b; 4096]); // every sample time: channels 0, 1, 2, 3 hold 3, 2, 1, 0
        let mut t = spec(None, Some("0-3"), Some(256)).build(&h).unwrap();
        assert_eq!((t.fan_out(), t.out_frame_size()), (16, 16 + 256));
        let mut out = Vec::new();
        assert_eq!(t.apply(&f, &mut out), Ok(16));
        for (n, frame) in out.chunks_exact(272).enumerate() {
            let h1 = Header::parse(frame).unwrap();
            assert!(h1.is_legacy());
            let (i, c) = (n / 4, n % 4);
            assert_eq!(
                (h1.thread_id() as usize, h1.frame_nr() as usize),
                (4 + c, i)
            );
            // Channel c's 2-bit samples are all 3 - c: bytes of four equal samples.
            let byte = [0xff, 0xaa, 0x55, 0x00][c];
            assert!(frame[16..].iter().all(|&b| b == byte), "channel {c}");
        }
    }

    #[test]
    fn reframing_cuts_payloads_and_counts_frames_faster() {
        let f = frame(4, 2, 8192, 0, 3, 9);
        let h = Header::parse(&f).unwrap();
        let mut t = spec(None, None, Some(2048)).build(&h).unwrap();
        let mut out = Vec::new();
        assert_eq!(t.apply(&f, &mut out), Ok(4));
        for (i, piece) in out.chunks_exact(32 + 2048).enumerate() {
            let p = Header::parse(piece).unwrap();
            assert_eq!(
                (p.frame_nr() as usize, p.nchan(), p.edv()),
                (12 + i, 4, Some(3))
            );
            assert_eq!(p.sample_rate_hz(), Some(64e6));
            assert_eq!(&piece[32..], &f[32 + 2048 * i..32 + 2048 * (i + 1)]);
        }
    }

    #[test]
    fn errors_name_the_option_and_the_fix() {
        let h = Header::parse(&frame(16, 2, 8192, 0, 0, 0)).unwrap();
        let e = spec(None, Some("16"), None).build(&h).err().unwrap();
        assert_eq!(e.name, "channels");
        assert!(e.why.contains("the stream has 16 channels"), "{e}");
        let e = spec(None, Some("0"), Some(1000)).build(&h).err().unwrap();
        assert_eq!(e.name, "payload");
        assert!(e.why.contains("such as 256, 512"), "{e}");
        let e = spec(Some("1024"), None, None).build(&h).err().unwrap();
        assert!(e.name == "threads" && e.why.contains("0 to 1023"), "{e}");
        let e = spec(Some("64"), Some("0-15"), None)
            .build(&h)
            .err()
            .unwrap();
        assert!(e.name == "channels" && e.why.contains("thread 1024"), "{e}");
        // A payload of 16 channels that 1/16 of is not whole 8-byte units.
        let h = Header::parse(&frame(16, 2, 8128, 0, 0, 0)).unwrap();
        let e = spec(None, Some("0"), None).build(&h).err().unwrap();
        assert!(
            e.name == "channels" && e.why.contains("8-byte units"),
            "{e}"
        );
        // 16 channels of 8 bits: a piece holds whole sample times of 16 bytes.
        let h = Header::parse(&frame(16, 8, 8192, 0, 0, 0)).unwrap();
        let e = spec(None, None, Some(8)).build(&h).err().unwrap();
        assert!(e.why.contains("whole sample times, 16 bytes"), "{e}");
        let mut h = Header::new(Some(0), 8224, 4, 2, true).unwrap();
        h.set(field::BITS_MINUS_ONE, 31).unwrap();
        let e = spec(None, Some("0"), None).build(&h).err().unwrap();
        assert!(e.why.contains("complex"), "{e}");
    }

    #[test]
    fn frames_unlike_the_stream_are_refused_without_output() {
        let f = frame(16, 2, 8192, 0, 0, 0);
        let mut t = spec(None, Some("0-15"), None)
            .build(&Header::parse(&f).unwrap())
            .unwrap();
        let mut out = vec![1, 2, 3];
        for other in [
            frame(8, 2, 8192, 0, 0, 0),
            frame(16, 4, 8192, 0, 0, 0),
            frame(16, 2, 4096, 0, 0, 0),
        ] {
            let e = t.apply(&other, &mut out).unwrap_err();
            assert!(
                e.contains("not the 16 channels of 2-bit samples, 8224-byte frames"),
                "{e}"
            );
        }
        assert!(t
            .apply(&f[..100], &mut out)
            .unwrap_err()
            .contains("100 bytes given"));
        assert!(t.apply(&f[..10], &mut out).is_err());
        // A later thread whose single-channel threads pass 1023: refused, nothing written.
        let e = t
            .apply(&frame(16, 2, 8192, 64, 0, 0), &mut out)
            .unwrap_err();
        assert!(e.contains("1023"), "{e}");
        // A frame number that would pass the 24-bit field once counted 256 times as fast.
        let mut t = spec(None, None, Some(32))
            .build(&Header::parse(&f).unwrap())
            .unwrap();
        let e = t
            .apply(&frame(16, 2, 8192, 0, 70_000, 0), &mut out)
            .unwrap_err();
        assert!(e.contains("larger payload"), "{e}");
        assert_eq!(out, [1, 2, 3]);
    }

    proptest! {
        #[test]
        fn turned_and_cut_frames_hold_the_channels_in_time_order(
            log2_c in 1u32..6, log2_b in 0u32..4, words_per_chan in 1usize..5, cut in 0usize..3, thread in 0u32..4, seed in any::<u8>(),
        ) {
            let (nchan, bits) = (1u32 << log2_c, 1u32 << log2_b);
            let q = 8 * words_per_chan * (1 << cut); // bytes per channel
            let f = frame(nchan, bits, q * nchan as usize, thread, 11, seed);
            let h = Header::parse(&f).unwrap();
            let k = 1usize << cut;
            let n = q / k;
            let mut t = spec(None, Some(&format!("0-{}", nchan - 1)), Some(n)).build(&h).unwrap();
            let mut out = Vec::new();
            prop_assert_eq!(t.apply(&f, &mut out), Ok(k * nchan as usize));
            // Each channel's pieces, joined in frame-number order, are its corner turn whole.
            let whole = CornerTurn::new(nchan, bits, false, &(0..nchan).collect::<Vec<_>>()).unwrap();
            let mut want = vec![0u8; q * nchan as usize];
            whole.run(&f[32..], &mut want, q);
            for c in 0..nchan as usize {
                let mut got = Vec::new();
                for i in 0..k {
                    let frame = &out[(i * nchan as usize + c) * (32 + n)..][..32 + n];
                    let p = Header::parse(frame).unwrap();
                    prop_assert_eq!(p.frame_nr() as usize, 11 * k + i);
                    prop_assert_eq!(p.thread_id(), thread * nchan + c as u32);
                    got.extend_from_slice(&frame[32..]);
                }
                prop_assert_eq!(&got[..], &want[c * q..(c + 1) * q]);
            }
        }
    }
}
