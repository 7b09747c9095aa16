//! Sizes and rates as people write them: `8GiB`, `512MiB`, `1.5GB`, `125000`.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{name}: {}", self.why())]
pub struct SizeError {
    pub name: String,
    pub text: String,
}

impl SizeError {
    /// What is wrong and how to write a size, without the parameter's name.
    pub fn why(&self) -> String {
        format!("cannot read {:?} as a size; write bytes (8589934592) or a number with a unit: KiB, MiB, GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000), e.g. \"8GiB\"", self.text)
    }
}

/// `"1.5 GiB"` → (1.5, "GiB"): the number (digits, `.`, `_` separators) and the unit after it.
fn number_and_unit(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.replace('_', "").parse().ok()?, unit.trim()))
}

/// Parses a byte size; `name` is the argument's name, for the error.
pub fn parse_size(name: &str, text: &str) -> Result<u64, SizeError> {
    let err = || SizeError {
        name: name.to_string(),
        text: text.to_string(),
    };
    let (num, unit) = number_and_unit(text).ok_or_else(err)?;
    let mult: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "k" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        "Ki" | "KiB" | "K" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "Ti" | "TiB" => 1024.0f64.powi(4),
        _ => return Err(err()),
    };
    let bytes = num * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// A data rate that cannot be read; `name` is the argument's name.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{name}: cannot read {text:?} as a rate; write bits per second with bps, kbps, Mbps, Gbps (\"4Gbps\") or bytes per second with B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s (\"500MB/s\")")]
pub struct RateError {
    pub name: String,
    pub text: String,
}

/// Parses a data rate into bytes per second: `4Gbps` (bits, powers of 1000) or `500MB/s`,
/// `400MiB/s` (bytes). A bare number is refused: bits or bytes is too easy to mistake.
pub fn parse_rate(name: &str, text: &str) -> Result<f64, RateError> {
    let err = || RateError {
        name: name.to_string(),
        text: text.to_string(),
    };
    let (num, unit) = number_and_unit(text).ok_or_else(err)?;
    let bytes_per_s = if let Some(bits) = unit
        .strip_suffix("bps")
        .or_else(|| unit.strip_suffix("bit/s"))
    {
        let mult = match bits {
            "" => 1.0,
            "k" | "K" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            _ => return Err(err()),
        };
        num * mult / 8.0
    } else if let Some(bytes) = unit.strip_suffix("/s") {
        let mult = match bytes {
            "B" => 1.0,
            "kB" | "KB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0f64.powi(3),
            _ => return Err(err()),
        };
        num * mult
    } else {
        return Err(err());
    };
    if !bytes_per_s.is_finite() || bytes_per_s <= 0.0 {
        return Err(err());
    }
    Ok(bytes_per_s)
}

/// Formats a byte count with a binary unit, `1.00 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_bits_and_bytes() {
        assert_eq!(parse_rate("rate", "4Gbps").unwrap(), 5e8);
        assert_eq!(parse_rate("rate", "8.224 Gbit/s").unwrap(), 1.028e9);
        assert_eq!(parse_rate("rate", "500MB/s").unwrap(), 5e8);
        assert_eq!(parse_rate("rate", "1MiB/s").unwrap(), 1048576.0);
        for bad in ["4", "4G", "fast", "0Gbps", "-1MB/s", "4Gb/s", "4 GiBps"] {
            let e = parse_rate("rate", bad).unwrap_err().to_string();
            assert!(e.starts_with("rate: cannot read"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("ring", "8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_size("ring", "512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("ring", "1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("ring", "4096").unwrap(), 4096);
        let e = parse_size("ring", "8 gigs").unwrap_err().to_string();
        assert!(e.starts_with("ring: cannot read \"8 gigs\""), "{e}");
        assert!(parse_size("ring", "-3").is_err());
        assert!(parse_size("ring", "0.5").is_err());
        assert_eq!(format_size(1 << 30), "1.00 GiB");
    }
}
