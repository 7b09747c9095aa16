//! VDIF time: reference epochs (half-years since 2000) and UTC formatting.
//!
//! The seconds field counts elapsed (SI) seconds since the reference epoch, so a leap second
//! inside that span moves the UTC label by one, as baseband (astropy) reads it. Recorders
//! normally use the current epoch, and leap seconds fall at the epochs' boundaries, so for live
//! data the two readings agree; they differ for old epochs (baseband's ARO sample uses the 2000
//! epoch in 2016, four leap seconds later). Accounting keys seconds by epoch start + seconds,
//! without leap seconds, so that every VDIF second stays distinct.

/// Seconds since 1970-01-01 of a reference epoch: `epoch` half-years after 2000-01-01.
pub fn epoch_start_unix(epoch: u32) -> i64 {
    let year = 2000 + (epoch / 2) as i64;
    let month = if epoch % 2 == 0 { 1 } else { 7 };
    days_from_civil(year, month, 1) * 86_400
}

/// POSIX times of the UTC midnights that followed a leap second, since 2000.
const LEAP_SECONDS_AFTER_2000: [i64; 5] = [
    1_136_073_600, // 2006-01-01
    1_230_768_000, // 2009-01-01
    1_341_100_800, // 2012-07-01
    1_435_708_800, // 2015-07-01
    1_483_228_800, // 2017-01-01
];

/// POSIX seconds of the UTC label of `seconds` elapsed SI seconds after reference epoch `epoch`.
pub fn utc_unix(epoch: u32, seconds: u32) -> i64 {
    let start = epoch_start_unix(epoch);
    let naive = start + seconds as i64;
    // Each leap second between the epoch and the instant takes one second off the label.
    let mut t = naive;
    for _ in 0..3 {
        let leaps = LEAP_SECONDS_AFTER_2000
            .iter()
            .filter(|&&l| l > start && l <= t)
            .count() as i64;
        t = naive - leaps;
    }
    t
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Calendar date of a day count since 1970-01-01: (year, month, day).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Broken-down UTC time of a whole second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub day_of_year: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Utc {
    pub fn from_unix(unix_seconds: i64) -> Utc {
        let days = unix_seconds.div_euclid(86_400);
        let secs = unix_seconds.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        let day_of_year = (days - days_from_civil(year, 1, 1) + 1) as u32;
        Utc {
            year,
            month,
            day,
            day_of_year,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
        }
    }

    /// `2017y298d02h17m30s`: the original recorder's file-name form.
    pub fn file_stamp(&self) -> String {
        format!(
            "{:04}y{:03}d{:02}h{:02}m{:02}s",
            self.year, self.day_of_year, self.hour, self.minute, self.second
        )
    }

    /// `2014y287doy 02:48:58`: the form vdiftimeUDP prints.
    pub fn doy_stamp(&self) -> String {
        format!(
            "{:04}y{:03}doy {:02}:{:02}:{:02}",
            self.year, self.day_of_year, self.hour, self.minute, self.second
        )
    }

    /// ISO 8601, `2014-06-16T05:56:07`.
    pub fn iso(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// A point in VDIF time: whole POSIX seconds plus a fraction in [0, 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VdifTime {
    pub unix_seconds: i64,
    pub fraction: f64,
}

impl VdifTime {
    pub fn as_f64(&self) -> f64 {
        self.unix_seconds as f64 + self.fraction
    }

    pub fn utc(&self) -> Utc {
        Utc::from_unix(self.unix_seconds)
    }

    /// ISO 8601 with nanoseconds, `2014-06-16T05:56:07.000000000`.
    pub fn iso(&self) -> String {
        let ns = (self.fraction * 1e9).round().min(999_999_999.0) as u64;
        format!("{}.{:09}", self.utc().iso(), ns)
    }
}

/// Reference epoch (half-years since 2000) that contains `unix_seconds`, and the seconds since it.
pub fn epoch_and_seconds(unix_seconds: i64) -> (u32, u32) {
    let utc = Utc::from_unix(unix_seconds);
    let epoch = ((utc.year - 2000) * 2 + if utc.month >= 7 { 1 } else { 0 }).clamp(0, 63) as u32;
    let seconds = (unix_seconds - epoch_start_unix(epoch)).max(0) as u32;
    (epoch, seconds)
}

/// Parses a time as operators write it: ISO 8601 UTC (`2026-11-30T22:48:47.5`, optional `Z`),
/// VLBI day-of-year (`2026y334d22h48m47.5s`, as jive5ab and the Field System write it), VDIF
/// time as reference epoch and seconds since it (`53:13271327.5`), or POSIX seconds
/// (`1796078927.5`). The fraction is kept apart from the whole seconds so that frame
/// boundaries are exact.
pub fn parse_utc(text: &str) -> Result<VdifTime, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a UTC time: write 2026-11-30T22:48:47.5, 2026y334d22h48m47.5s, VDIF time EPOCH:SECONDS (53:13271327.5) or POSIX seconds"
        )
    };
    let split_fraction = |s: &str| -> Result<(i64, f64), String> {
        let (whole, frac) = match s.split_once('.') {
            Some((w, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
                (w, format!("0.{f}").parse::<f64>().map_err(|_| bad())?)
            }
            Some(_) => return Err(bad()),
            None => (s, 0.0),
        };
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok((whole.parse().map_err(|_| bad())?, frac))
    };
    let number = |s: &str| -> Result<i64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let in_range = |v: i64, lo: i64, hi: i64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(bad())
        }
    };
    if let Some((date, clock)) = t.split_once('T') {
        let clock = clock.strip_suffix('Z').unwrap_or(clock);
        let d: Vec<&str> = date.split('-').collect();
        let c: Vec<&str> = clock.split(':').collect();
        if d.len() != 3 || c.len() != 3 {
            return Err(bad());
        }
        let (y, m, day) = (
            number(d[0])?,
            in_range(number(d[1])?, 1, 12)?,
            in_range(number(d[2])?, 1, 31)?,
        );
        let (h, mi) = (
            in_range(number(c[0])?, 0, 23)?,
            in_range(number(c[1])?, 0, 59)?,
        );
        let (s, frac) = split_fraction(c[2])?;
        let s = in_range(s, 0, 60)?;
        let days = days_from_civil(y, m as u32, day as u32);
        return Ok(VdifTime {
            unix_seconds: days * 86_400 + h * 3600 + mi * 60 + s,
            fraction: frac,
        });
    }
    if let Some(rest) = t.strip_suffix('s').filter(|r| r.contains('y')) {
        let (y, rest) = rest.split_once('y').ok_or_else(bad)?;
        let (doy, rest) = rest.split_once('d').ok_or_else(bad)?;
        let (h, rest) = rest.split_once('h').ok_or_else(bad)?;
        let (mi, s) = rest.split_once('m').ok_or_else(bad)?;
        let (y, doy) = (number(y)?, in_range(number(doy)?, 1, 366)?);
        let (h, mi) = (in_range(number(h)?, 0, 23)?, in_range(number(mi)?, 0, 59)?);
        let (s, frac) = split_fraction(s)?;
        let s = in_range(s, 0, 60)?;
        let days = days_from_civil(y, 1, 1) + doy - 1;
        return Ok(VdifTime {
            unix_seconds: days * 86_400 + h * 3600 + mi * 60 + s,
            fraction: frac,
        });
    }
    if let Some((epoch, secs)) = t.split_once(':') {
        // VDIF time: reference epoch (half-years since 2000) and seconds since it.
        let epoch = in_range(number(epoch)?, 0, 63)?;
        let (secs, frac) = split_fraction(secs)?;
        let secs = in_range(secs, 0, (1 << 30) - 1)?;
        return Ok(VdifTime {
            unix_seconds: utc_unix(epoch as u32, secs as u32),
            fraction: frac,
        });
    }
    let (s, frac) = split_fraction(t)?;
    Ok(VdifTime {
        unix_seconds: s,
        fraction: frac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_start_on_the_half_year() {
        assert_eq!(epoch_start_unix(0), 946_684_800); // 2000-01-01
        assert_eq!(epoch_start_unix(1), 962_409_600); // 2000-07-01
        assert_eq!(epoch_start_unix(35), 1_498_867_200); // 2017-07-01
    }

    #[test]
    fn original_recording_name() {
        // 2017 day 298 (25 October) 02:17:30 UTC, from the original system's summary.
        let t = days_from_civil(2017, 10, 25) * 86_400 + 2 * 3600 + 17 * 60 + 30;
        assert_eq!(Utc::from_unix(t).file_stamp(), "2017y298d02h17m30s");
        let (epoch, secs) = epoch_and_seconds(t);
        assert_eq!(epoch, 35);
        assert_eq!(epoch_start_unix(epoch) + secs as i64, t);
    }

    #[test]
    fn leap_seconds_since_the_epoch_count() {
        // baseband's ARO CHIME sample: epoch 0, 2016-04-22T08:45:31 UTC after 4 leap seconds.
        let t = days_from_civil(2016, 4, 22) * 86_400 + 8 * 3600 + 45 * 60 + 31;
        let seconds = (t - epoch_start_unix(0) + 4) as u32;
        assert_eq!(utc_unix(0, seconds), t);
        // Within a current epoch nothing changes.
        assert_eq!(utc_unix(52, 1000), epoch_start_unix(52) + 1000);
    }

    #[test]
    fn civil_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn utc_times_in_the_three_forms_operators_write() {
        let want = days_from_civil(2026, 11, 30) * 86_400 + 22 * 3600 + 48 * 60 + 47;
        for text in [
            "2026-11-30T22:48:47",
            "2026-11-30T22:48:47Z",
            "2026y334d22h48m47s",
        ] {
            let t = parse_utc(text).unwrap();
            assert_eq!((t.unix_seconds, t.fraction), (want, 0.0), "{text}");
        }
        let t = parse_utc("2026y334d22h48m47.25s").unwrap();
        assert_eq!((t.unix_seconds, t.fraction), (want, 0.25));
        let t = parse_utc(&format!("{want}.5")).unwrap();
        assert_eq!((t.unix_seconds, t.fraction), (want, 0.5));
        let (epoch, secs) = epoch_and_seconds(want);
        let t = parse_utc(&format!("{epoch}:{secs}.25")).unwrap();
        assert_eq!((t.unix_seconds, t.fraction), (want, 0.25));
        assert!(parse_utc("64:5").is_err());
        for bad in [
            "",
            "soon",
            "2026-13-01T00:00:00",
            "2026y334d25h00m00s",
            "1.2.3",
            "-5",
        ] {
            assert!(parse_utc(bad).is_err(), "{bad}");
        }
    }
}
