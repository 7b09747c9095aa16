//! Pacing a destination: at most `rate` bytes per second on the wire, or at least `ipd`
//! between datagrams (jive5ab's inter-packet delay), in small bursts.
//!
//! Datagrams go in batches (one system call each); a batch is kept to about `BURST` of the
//! paced rate, so that a path or a receiver with small buffers sees an even stream. A pacer
//! that falls behind (the stream paused, the destination was down) does not catch up in a
//! burst: it starts again from now.

use crate::record::forward::destination::Pacing;
use std::time::{Duration, Instant};

/// Longest burst at the paced rate.
const BURST: Duration = Duration::from_micros(100);
/// Further behind than this, the pacer starts again from now.
const SLACK: Duration = Duration::from_millis(5);

pub struct Pacer {
    pacing: Pacing,
    /// When the next datagram is due.
    due: Instant,
}

impl Pacer {
    pub fn new(pacing: Pacing) -> Pacer {
        Pacer {
            pacing,
            due: Instant::now(),
        }
    }

    pub fn is_free(&self) -> bool {
        self.pacing == Pacing::Free
    }

    /// Most datagrams of `bytes` each for the next batch.
    pub fn batch(&self, bytes: usize, most: usize) -> usize {
        let per = match self.pacing {
            Pacing::Free => return most,
            Pacing::Rate(r) => bytes as f64 / r,
            Pacing::Gap(g) => g.as_secs_f64(),
        };
        ((BURST.as_secs_f64() / per) as usize).clamp(1, most)
    }

    /// Waits until the next batch is due, but no longer than `most` (the caller checks its
    /// stop flag and comes back).
    pub fn wait(&mut self, most: Duration) {
        if self.is_free() {
            return;
        }
        let now = Instant::now();
        if self.due + SLACK < now {
            self.due = now;
        }
        let until = self.due.min(now + most);
        while Instant::now() < until {
            let left = until - Instant::now();
            if left > Duration::from_micros(200) {
                std::thread::sleep(left - Duration::from_micros(100));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// `datagrams` of `bytes` in all went: the next is due that much later.
    pub fn sent(&mut self, datagrams: usize, bytes: usize) {
        let took = match self.pacing {
            Pacing::Free => return,
            Pacing::Rate(r) => bytes as f64 / r,
            Pacing::Gap(g) => g.as_secs_f64() * datagrams as f64,
        };
        self.due += Duration::from_secs_f64(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_short_bursts_of_the_paced_rate() {
        // 8 Gbit/s is 1 GB/s: 100 us is 100 kB, 12 frames of 8224 bytes.
        let p = Pacer::new(Pacing::Rate(1e9));
        assert_eq!(p.batch(8224, 64), 12);
        let p = Pacer::new(Pacing::Gap(Duration::from_micros(10)));
        assert_eq!(p.batch(8224, 64), 10);
        let p = Pacer::new(Pacing::Gap(Duration::from_millis(1)));
        assert_eq!(p.batch(8224, 64), 1);
        assert_eq!(Pacer::new(Pacing::Free).batch(8224, 64), 64);
    }

    #[test]
    fn a_rate_cap_holds_over_many_batches() {
        // 40 MB/s for 1000 datagrams of 4000 bytes: 100 ms.
        let mut p = Pacer::new(Pacing::Rate(40e6));
        let t0 = Instant::now();
        let mut sent = 0;
        while sent < 1000 {
            p.wait(Duration::from_millis(50));
            let n = p.batch(4000, 64).min(1000 - sent);
            p.sent(n, n * 4000);
            sent += n;
        }
        let took = t0.elapsed().as_secs_f64();
        // The last batch is due at 100 ms less one batch; allow a slow host its scheduling.
        assert!(took > 0.095, "{took}");
    }
}
