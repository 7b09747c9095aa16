//! A scan's time window `[start, stop)` in VDIF time, to the frame: which frames a scan holds is
//! decided by their headers, never by when a command arrived.

use crate::vdif::time::VdifTime;

/// A point in the stream: (POSIX second, frame number within it).
pub type FramePoint = (i64, u32);

/// Where a frame lies relative to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Before,
    Inside,
    After,
}

/// `[start, stop)`; an open end holds everything on that side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub start: Option<FramePoint>,
    pub stop: Option<FramePoint>,
}

impl Window {
    /// The window of `start`/`stop` for a stream of `fps` frames per second per thread. A
    /// boundary inside a second needs the frame rate (the first frame at or after it).
    pub fn new(
        start: Option<VdifTime>,
        stop: Option<VdifTime>,
        fps: Option<u32>,
    ) -> Result<Window, (&'static str, String)> {
        let point = |name: &'static str,
                     t: VdifTime|
         -> Result<FramePoint, (&'static str, String)> {
            if t.fraction == 0.0 {
                return Ok((t.unix_seconds, 0));
            }
            let Some(fps) = fps.filter(|f| *f > 0) else {
                return Err((
                    name,
                    "a time within a second needs the frame rate: give fps, or wait until the stream has shown it".into(),
                ));
            };
            // The first frame that starts at or after the boundary (a tolerance for the
            // decimal fraction not being exact in binary).
            let frame = (t.fraction * fps as f64 - 1e-6).ceil().max(0.0) as u64;
            Ok(if frame >= fps as u64 {
                (t.unix_seconds + 1, 0)
            } else {
                (t.unix_seconds, frame as u32)
            })
        };
        let start = start.map(|t| point("start", t)).transpose()?;
        let stop = stop.map(|t| point("stop", t)).transpose()?;
        if let (Some(a), Some(b)) = (start, stop) {
            if b <= a {
                return Err(("stop", "the scan must stop after it starts".into()));
            }
        }
        Ok(Window { start, stop })
    }

    pub fn place(&self, p: FramePoint) -> Place {
        if self.start.is_some_and(|s| p < s) {
            Place::Before
        } else if self.stop.is_some_and(|s| p >= s) {
            Place::After
        } else {
            Place::Inside
        }
    }

    /// Whole seconds the window spans, when both ends are given (for the size a scan needs).
    pub fn seconds(&self, fps: u32) -> Option<f64> {
        let (a, b) = (self.start?, self.stop?);
        Some(frames_between(a, b, fps) as f64 / fps.max(1) as f64)
    }
}

/// Frames from `a` up to (not including) `b` on one thread at `fps`.
pub fn frames_between(a: FramePoint, b: FramePoint, fps: u32) -> i64 {
    (b.0 - a.0) * fps as i64 + b.1 as i64 - a.1 as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64, f: f64) -> VdifTime {
        VdifTime {
            unix_seconds: s,
            fraction: f,
        }
    }

    #[test]
    fn boundaries_fall_on_frames() {
        let w = Window::new(Some(t(100, 0.5)), Some(t(102, 0.0)), Some(1000)).unwrap();
        assert_eq!(w.start, Some((100, 500)));
        assert_eq!(w.place((100, 499)), Place::Before);
        assert_eq!(w.place((100, 500)), Place::Inside);
        assert_eq!(w.place((101, 999)), Place::Inside);
        assert_eq!(w.place((102, 0)), Place::After);
        assert_eq!(w.seconds(1000), Some(1.5));
        // 0.1 of 125000 frames is frame 12500 exactly, though 0.1 is not exact in binary.
        let w = Window::new(Some(t(5, 0.1)), None, Some(125_000)).unwrap();
        assert_eq!(w.start, Some((5, 12_500)));
        assert_eq!(w.place((9_999_999, 0)), Place::Inside);
    }

    #[test]
    fn impossible_windows_are_named() {
        assert_eq!(
            Window::new(Some(t(100, 0.5)), None, None).unwrap_err().0,
            "start"
        );
        assert_eq!(
            Window::new(Some(t(100, 0.0)), Some(t(100, 0.0)), None)
                .unwrap_err()
                .0,
            "stop"
        );
        assert_eq!(frames_between((1, 5), (3, 2), 10), 17);
    }
}
