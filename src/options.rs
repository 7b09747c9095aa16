//! How the options a user gives become a configuration: one error that names the parameter,
//! and the readers every configuration shares (sizes, addresses, ranges, unknown names).
//!
//! Each configuration (`RecorderOptions`, `SendOptions`, `SignalSpec`, `CheckOptions`) is a
//! serde struct whose `Default` holds every default, read by Python as `vdifrec.defaults`,
//! and whose checks live next to it. Python passes the user's values through unchanged; the
//! command line only maps a parameter name in an error back to its flag (`ring` → `--ring`).

use crate::units::parse_size;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use thiserror::Error;

/// A value the user gave that cannot be used: which parameter, and what is allowed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{name}: {why}")]
pub struct ArgError {
    pub name: String,
    pub why: String,
}

impl ArgError {
    pub fn new(name: &str, why: impl Into<String>) -> ArgError {
        ArgError {
            name: name.to_string(),
            why: why.into(),
        }
    }
}

/// A byte count as people give it: a whole number, or text such as `"8GiB"`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct SizeVisitor;
        impl serde::de::Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size such as 1073741824 or \"1GiB\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                Ok(Size::Bytes(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                i64::try_from(v)
                    .map(Size::Bytes)
                    .map_err(|_| E::custom(format!("{v} bytes is more than any machine has")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Size, E> {
                Ok(Size::Text(v.to_string()))
            }
        }
        d.deserialize_any(SizeVisitor)
    }
}

impl Size {
    pub const fn bytes(n: u64) -> Size {
        Size::Bytes(n as i64)
    }

    /// The size in bytes; `name` is the parameter, for the error.
    pub fn get(&self, name: &str) -> Result<u64, ArgError> {
        match self {
            Size::Bytes(n) if *n >= 0 => Ok(*n as u64),
            Size::Bytes(n) => Err(ArgError::new(
                name,
                format!("{n} is negative: give a size such as 1073741824 or \"1GiB\""),
            )),
            Size::Text(t) => parse_size(name, t).map_err(|e| ArgError::new(name, e.why())),
        }
    }
}

/// Reads options from a JSON-like value (what Python passes): every name must be one of
/// `T`'s (a misspelt keyword is an error, not silently ignored), every value of the right
/// type; names left out take `T::default()`.
pub fn from_value<T: DeserializeOwned + Serialize + Default>(
    value: serde_json::Value,
) -> Result<T, ArgError> {
    let known = serde_json::to_value(T::default()).unwrap_or_default();
    if let (Some(given), Some(known)) = (value.as_object(), known.as_object()) {
        if let Some(name) = given.keys().find(|k| !known.contains_key(*k)) {
            let mut names: Vec<&str> = known.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(ArgError::new(
                name,
                format!("no such option; the options are {}", names.join(", ")),
            ));
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        // A nested option (`signal.fps`) is named as the user gave it: `fps`.
        let path = e.path().to_string();
        let name = path.rsplit('.').next().unwrap_or(&path).to_string();
        let why = e.into_inner().to_string();
        ArgError::new(
            &name,
            why.replace("i64", "a whole number")
                .replace("f64", "a number"),
        )
    })
}

/// Reads a whole number for a `deserialize_with` field, refusing anything outside
/// `low..=high` with a message that says what is allowed (not the Rust type it is kept in).
pub fn ranged<'de, D, T>(d: D, low: i128, high: i128, hint: &str) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    check_range::<T, D::Error>(i128::deserialize(d)?, low, high, hint)
}

/// `ranged`, for a field that may be left out (None).
pub fn ranged_option<'de, D, T>(
    d: D,
    low: i128,
    high: i128,
    hint: &str,
) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    Option::<i128>::deserialize(d)?
        .map(|v| check_range::<T, D::Error>(v, low, high, hint))
        .transpose()
}

fn check_range<T: TryFrom<i128>, E: serde::de::Error>(
    v: i128,
    low: i128,
    high: i128,
    hint: &str,
) -> Result<T, E> {
    if v < low || v > high {
        return Err(E::custom(format!(
            "{v} is out of range: give {low} to {high} ({hint})"
        )));
    }
    T::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
}

/// A whole number within `low..=high`.
pub fn in_range(name: &str, value: i64, low: i64, high: i64, hint: &str) -> Result<u64, ArgError> {
    if value < low || value > high {
        let hint = if hint.is_empty() {
            String::new()
        } else {
            format!(" ({hint})")
        };
        return Err(ArgError::new(
            name,
            format!("{value} is out of range: give {low}..{high}{hint}"),
        ));
    }
    Ok(value as u64)
}

/// An IP address such as `0.0.0.0`, `127.0.0.1` or `239.1.2.3`.
pub fn ip(name: &str, text: &str) -> Result<IpAddr, ArgError> {
    let t = text.trim();
    let t = if t == "localhost" { "127.0.0.1" } else { t };
    t.parse().map_err(|_| {
        ArgError::new(
            name,
            format!("{text:?} is not an IP address (e.g. 0.0.0.0, 127.0.0.1, 239.1.2.3)"),
        )
    })
}

/// `HOST:PORT`, or `PORT` / `:PORT` alone for localhost: a server never listens on the
/// network unless an address says so.
pub fn listen_address(name: &str, text: &str) -> Result<SocketAddr, ArgError> {
    let t = text.trim();
    let with_host = if t.parse::<u16>().is_ok() {
        format!("127.0.0.1:{t}")
    } else if let Some(port) = t.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else {
        t.replace("localhost", "127.0.0.1")
    };
    with_host.parse().map_err(|_| {
        ArgError::new(
            name,
            format!("{text:?} is not HOST:PORT (e.g. 127.0.0.1:8089, or 8089 for localhost)"),
        )
    })
}

/// Bytes of memory the machine can give now without swapping (`MemAvailable`).
pub fn memory_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Disk directories as given: each a directory or a glob such as `/mnt/disk*` (expanded,
/// sorted, directories only), each disk once (named twice, as itself and through a glob, it is
/// still one disk). A glob that matches nothing is an error naming `name`.
pub fn disk_dirs(name: &str, given: &[String]) -> Result<Vec<std::path::PathBuf>, ArgError> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    for g in given {
        if g.is_empty() {
            return Err(ArgError::new(name, "an empty path names no directory"));
        }
        let found: Vec<std::path::PathBuf> = if g.contains(['*', '?', '[']) {
            let paths = glob::glob(g)
                .map_err(|e| ArgError::new(name, format!("{g:?} is not a valid pattern: {e}")))?;
            let mut v: Vec<_> = paths
                .filter_map(Result::ok)
                .filter(|p| p.is_dir())
                .collect();
            v.sort();
            if v.is_empty() {
                return Err(ArgError::new(
                    name,
                    format!("{g:?} matches no directory: mount the disks, or check the pattern (quote it so the shell leaves it alone)"),
                ));
            }
            v
        } else {
            vec![std::path::PathBuf::from(g)]
        };
        for p in found {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Demo {
        port: i64,
        ring: Option<Size>,
    }

    #[test]
    fn unknown_names_and_wrong_types_name_the_parameter() {
        let e = from_value::<Demo>(serde_json::json!({"prot": 1})).unwrap_err();
        assert_eq!(e.name, "prot");
        assert!(e.why.contains("port, ring"), "{e}");
        let e = from_value::<Demo>(serde_json::json!({"port": "abc"})).unwrap_err();
        assert_eq!(e.name, "port");
        let d = from_value::<Demo>(serde_json::json!({"ring": "8GiB"})).unwrap();
        assert_eq!(d.ring.unwrap().get("ring").unwrap(), 8 << 30);
    }

    #[test]
    fn sizes_ranges_and_addresses() {
        assert!(Size::Bytes(-1).get("ring").is_err());
        assert_eq!(
            in_range("port", 99999, 0, 65535, "").unwrap_err().name,
            "port"
        );
        assert_eq!(
            listen_address("s", "8089").unwrap().to_string(),
            "127.0.0.1:8089"
        );
        assert!(ip("bind", "nonsense").is_err());
    }
}
