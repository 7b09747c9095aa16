//! How many TCP streams a push uses when asked for `auto`: a pure function of what was
//! measured with each count tried, so that it can be tested on recorded traces.
//!
//! One long TCP connection gets a fraction of a long, fast path (its window, its loss
//! recovery); several share the path better, but each costs CPU (interrupts, context
//! switches, copies), and past the point where a host's CPU is saturated more streams only
//! slow everything down. So: start with one; add while the aggregate rate still rises by more
//! than `min_gain` and neither end's CPU is saturated; double instead of adding one while the
//! rate grows in proportion to the streams (a path far from full); when adding did not pay
//! (or pushed a CPU to saturation, or bought a few percent at a much higher cost in context
//! switches per byte), go back to the count before and settle.

use super::cpu::CpuLoad;

/// What one stream count achieved over a measuring window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trial {
    pub streams: usize,
    /// Aggregate bytes per second received.
    pub rate: f64,
    /// This end's CPU (the sender's).
    pub local: CpuLoad,
    /// The other end's, as it reported it (None when it did not).
    pub remote: Option<CpuLoad>,
}

impl Trial {
    /// The busier end's CPU use.
    fn busy(&self) -> f64 {
        self.local.busy.max(self.remote.map_or(0.0, |r| r.busy))
    }

    /// Context switches and interrupts of both ends per byte moved.
    fn switches_per_byte(&self) -> f64 {
        let of = |l: &CpuLoad| l.switches_per_s + l.interrupts_per_s;
        (of(&self.local) + self.remote.as_ref().map_or(0.0, of)) / self.rate.max(1.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoLimits {
    pub max_streams: usize,
    /// A stream is worth adding while it raises the rate by more than this fraction.
    pub min_gain: f64,
    /// An end whose CPU is busier than this fraction of all its cores is saturated.
    pub saturated: f64,
}

impl Default for AutoLimits {
    fn default() -> AutoLimits {
        AutoLimits {
            max_streams: 32,
            min_gain: 0.03,
            saturated: 0.90,
        }
    }
}

/// What to do after the trials so far.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Try(usize),
    Settle { streams: usize, reason: String },
}

fn percent(x: f64) -> String {
    format!("{:.0} %", 100.0 * x)
}

/// The next stream count to try, or the count to keep and why (`streams 6: 7 gave +1 % at
/// 92 % CPU`). `trials` are in the order tried, each count once.
pub fn next_step(trials: &[Trial], limits: &AutoLimits) -> Next {
    let Some(last) = trials.last() else {
        return Next::Try(1);
    };
    let n = last.streams;
    let busy = last.busy();
    let grow = |next: usize| {
        if n >= limits.max_streams {
            Next::Settle {
                streams: n,
                reason: format!(
                    "streams {n}: the most allowed (max_streams), at {} CPU",
                    percent(busy)
                ),
            }
        } else {
            Next::Try(next.min(limits.max_streams))
        }
    };
    let Some(prev) = trials.len().checked_sub(2).map(|i| &trials[i]) else {
        if busy >= limits.saturated {
            return Next::Settle {
                streams: n,
                reason: format!(
                    "streams {n}: CPU at {} with {n}: the host, not the path, is the limit",
                    percent(busy)
                ),
            };
        }
        return grow(n + 1);
    };
    let gain = last.rate / prev.rate.max(1.0) - 1.0;
    let p = prev.streams;
    let back = |why: String| Next::Settle {
        streams: p,
        reason: format!("streams {p}: {n} gave {:+.0} % {why}", 100.0 * gain),
    };
    if busy >= limits.saturated {
        // Saturated now: keep the step only if it clearly paid.
        return if gain > limits.min_gain {
            Next::Settle {
                streams: n,
                reason: format!(
                    "streams {n}: {:+.0} % over {p}, and CPU now at {}",
                    100.0 * gain,
                    percent(busy)
                ),
            }
        } else {
            back(format!("at {} CPU", percent(busy)))
        };
    }
    if gain <= limits.min_gain {
        return back(format!("at {} CPU", percent(busy)));
    }
    // A few percent bought with much more kernel work per byte is not worth it.
    let cost = last.switches_per_byte() / prev.switches_per_byte().max(f64::MIN_POSITIVE);
    if gain < 2.0 * limits.min_gain && prev.switches_per_byte() > 0.0 && cost > 1.5 {
        return back(format!(
            "at {:.1}x the interrupts and context switches per byte",
            cost
        ));
    }
    // In proportion to the streams (75 % of it or more): the path is far from full.
    let proportional = n as f64 / p as f64 - 1.0;
    if gain >= 0.75 * proportional {
        grow(2 * n)
    } else {
        grow(n + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: f64) -> CpuLoad {
        CpuLoad {
            busy,
            interrupts_per_s: 10_000.0,
            switches_per_s: 20_000.0,
        }
    }

    /// Runs the decision against `rate_of(streams) -> (bytes/s, busy)` as a path would
    /// answer, returning the counts tried and the settlement.
    fn drive(rate_of: impl Fn(usize) -> (f64, f64), limits: AutoLimits) -> (Vec<usize>, Next) {
        let mut trials = Vec::new();
        loop {
            match next_step(&trials, &limits) {
                Next::Try(s) => {
                    assert!(trials.len() < 40, "never settles");
                    let (rate, busy) = rate_of(s);
                    trials.push(Trial {
                        streams: s,
                        rate,
                        local: load(busy),
                        remote: Some(load(busy / 2.0)),
                    });
                }
                settled => return (trials.iter().map(|t| t.streams).collect(), settled),
            }
        }
    }

    #[test]
    fn a_path_capped_per_stream_gets_streams_until_the_aggregate_cap() {
        // 4 MB/s per connection (a bounded window on a long path), 24 MB/s in all.
        let (tried, next) = drive(
            |s| ((4e6 * s as f64).min(24e6), 0.05),
            AutoLimits::default(),
        );
        assert_eq!(tried, vec![1, 2, 4, 8, 9]);
        let Next::Settle { streams, reason } = next else {
            panic!()
        };
        assert_eq!(streams, 8);
        assert_eq!(reason, "streams 8: 9 gave +0 % at 5 % CPU");
    }

    #[test]
    fn rising_but_sub_linear_is_followed_one_stream_at_a_time() {
        // Nearly in proportion at first (doubled), then each stream adds less.
        let rates = [0.0, 100e6, 180e6, 240e6, 280e6, 300e6, 305e6, 306e6];
        let (tried, next) = drive(|s| (rates[s.min(7)], 0.3), AutoLimits::default());
        assert_eq!(tried, vec![1, 2, 4, 5, 6]);
        assert_eq!(
            next,
            Next::Settle {
                streams: 5,
                reason: "streams 5: 6 gave +2 % at 30 % CPU".into()
            }
        );
    }

    #[test]
    fn a_cpu_bound_host_stays_at_one_stream() {
        // Loopback on a small host: one stream already keeps the CPU busy.
        let (tried, next) = drive(|_| (1.5e9, 0.97), AutoLimits::default());
        assert_eq!(tried, vec![1]);
        let Next::Settle { streams, reason } = next else {
            panic!()
        };
        assert_eq!(streams, 1);
        assert!(reason.contains("CPU at 97 %"), "{reason}");
    }

    #[test]
    fn saturating_the_cpu_keeps_the_step_only_when_it_paid() {
        // The third stream saturates the CPU and gains little: back to two.
        let (tried, next) = drive(
            |s| match s {
                1 => (400e6, 0.4),
                2 => (650e6, 0.7),
                _ => (656e6, 0.95),
            },
            AutoLimits::default(),
        );
        assert_eq!(tried, vec![1, 2, 3]);
        assert_eq!(
            next,
            Next::Settle {
                streams: 2,
                reason: "streams 2: 3 gave +1 % at 95 % CPU".into()
            }
        );
        // Saturating but with a real gain: kept, and no more added.
        let (_, next) = drive(
            |s| match s {
                1 => (400e6, 0.4),
                2 => (650e6, 0.7),
                _ => (900e6, 0.93),
            },
            AutoLimits::default(),
        );
        assert!(matches!(next, Next::Settle { streams: 3, .. }), "{next:?}");
    }

    #[test]
    fn adding_that_hurts_is_undone() {
        let (tried, next) = drive(
            |s| match s {
                1 => (300e6, 0.2),
                2 => (500e6, 0.3),
                _ => (450e6, 0.4),
            },
            AutoLimits::default(),
        );
        assert_eq!(tried, vec![1, 2, 3]);
        assert_eq!(
            next,
            Next::Settle {
                streams: 2,
                reason: "streams 2: 3 gave -10 % at 40 % CPU".into()
            }
        );
    }

    #[test]
    fn a_small_gain_at_a_much_higher_kernel_cost_is_refused() {
        let limits = AutoLimits::default();
        let t = |streams: usize, rate: f64, switches: f64| Trial {
            streams,
            rate,
            local: CpuLoad {
                busy: 0.5,
                interrupts_per_s: 0.0,
                switches_per_s: switches,
            },
            remote: None,
        };
        let trials = [t(2, 500e6, 50e3), t(3, 520e6, 120e3)];
        let Next::Settle { streams, reason } = next_step(&trials, &limits) else {
            panic!()
        };
        assert_eq!(streams, 2);
        assert!(reason.contains("2.3x the interrupts"), "{reason}");
    }

    #[test]
    fn never_more_than_the_limit() {
        let limits = AutoLimits {
            max_streams: 6,
            ..AutoLimits::default()
        };
        let (tried, next) = drive(|s| (10e6 * s as f64, 0.05), limits);
        assert_eq!(tried, vec![1, 2, 4, 6]);
        assert!(matches!(next, Next::Settle { streams: 6, .. }), "{next:?}");
    }
}
