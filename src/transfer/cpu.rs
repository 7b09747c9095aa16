//! The host's CPU state from `/proc/stat`: cumulative busy and total time, interrupts and
//! context switches. Each end of a transfer reads its own; the stream count is chosen from
//! the rates between two readings.

use serde::{Deserialize, Serialize};

/// Cumulative counters since boot (clock ticks for the times).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCounters {
    pub busy: u64,
    pub total: u64,
    pub interrupts: u64,
    pub switches: u64,
}

/// The CPU use between two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuLoad {
    /// Fraction of all cores' time busy, 0..1.
    pub busy: f64,
    pub interrupts_per_s: f64,
    pub switches_per_s: f64,
}

impl CpuCounters {
    /// Now, or zeros where `/proc/stat` cannot be read (the load then reads as idle).
    pub fn read() -> CpuCounters {
        std::fs::read_to_string("/proc/stat")
            .map(|t| CpuCounters::parse(&t))
            .unwrap_or_default()
    }

    /// From the text of `/proc/stat`: the `cpu` line (user nice system idle iowait irq
    /// softirq steal ...; idle and iowait are not busy), `intr` (its first number, the total)
    /// and `ctxt`.
    pub fn parse(text: &str) -> CpuCounters {
        let mut c = CpuCounters::default();
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let numbers = |f: std::str::SplitAsciiWhitespace| -> Vec<u64> {
                f.map_while(|x| x.parse().ok()).collect()
            };
            match fields.next() {
                Some("cpu") => {
                    // Guest time is already counted in user; count the first eight columns.
                    let v = numbers(fields);
                    let total: u64 = v.iter().take(8).sum();
                    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                    c.total = total;
                    c.busy = total.saturating_sub(idle);
                }
                Some("intr") => c.interrupts = numbers(fields).first().copied().unwrap_or(0),
                Some("ctxt") => c.switches = numbers(fields).first().copied().unwrap_or(0),
                _ => {}
            }
        }
        c
    }

    /// The load from `earlier` to `self`, over `seconds`.
    pub fn since(&self, earlier: &CpuCounters, seconds: f64) -> CpuLoad {
        let total = self.total.saturating_sub(earlier.total);
        let per_s = |a: u64, b: u64| {
            if seconds > 0.0 {
                a.saturating_sub(b) as f64 / seconds
            } else {
                0.0
            }
        };
        CpuLoad {
            busy: if total > 0 {
                self.busy.saturating_sub(earlier.busy) as f64 / total as f64
            } else {
                0.0
            },
            interrupts_per_s: per_s(self.interrupts, earlier.interrupts),
            switches_per_s: per_s(self.switches, earlier.switches),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_stat() {
        let a = CpuCounters::parse(
            "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\nintr 1000 5 6\nctxt 2000\nbtime 1\n",
        );
        assert_eq!(
            a,
            CpuCounters {
                busy: 150,
                total: 1000,
                interrupts: 1000,
                switches: 2000
            }
        );
        let b = CpuCounters {
            busy: 240,
            total: 1100,
            interrupts: 3000,
            switches: 6000,
        };
        let l = b.since(&a, 2.0);
        assert!((l.busy - 0.9).abs() < 1e-12);
        assert_eq!((l.interrupts_per_s, l.switches_per_s), (1000.0, 2000.0));
        // This host's own counters move forward.
        let now = CpuCounters::read();
        assert!(now.total > 0 && now.switches > 0);
    }
}
