//! Sizes and durations for humans: parsing `64M`, printing `256 MiB` and `1.25 ms`.

use std::time::Duration;

const UNITS: [(&str, u32); 5] = [("", 0), ("k", 10), ("m", 20), ("g", 30), ("t", 40)];

/// Parse a byte count: digits with an optional binary suffix K, M, G or T (also `KiB`, `KB`,
/// any case), e.g. `64M`, `1G`, `4096K`, `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad =
        || format!("invalid size '{s}': expected a byte count such as 64M, 1G, 4096K or 1048576");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let suffix = suffix.trim().to_ascii_lowercase();
    let unit = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    if suffix.ends_with("ib") && unit.is_empty() {
        return Err(bad());
    }
    let shift = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|&(_, sh)| sh)
        .ok_or_else(bad)?;
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size '{s}' is too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// `bytes` in the largest binary unit that keeps it at least 1: `512 B`, `4 KiB`, `1.5 MiB`.
pub fn human(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    while i + 1 < NAMES.len() && bytes >= 1u64 << (10 * (i + 1)) {
        i += 1;
    }
    let unit = 1u64 << (10 * i);
    let v = format!("{:.1}", bytes as f64 / unit as f64);
    format!("{} {}", v.strip_suffix(".0").unwrap_or(&v), NAMES[i])
}

/// A duration in µs below a millisecond, ms below ten seconds, else s.
pub fn duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1000 {
        format!("{us} µs")
    } else if us < 10_000_000 {
        format!("{:.2} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// `n` and a noun, in the singular for one: `1 symlink`, `2 symlinks`.
pub fn count(n: u64, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

/// Throughput of `bytes` in `d`, as `123 MiB/s`.
pub fn rate(bytes: u64, d: Duration) -> String {
    let secs = d.as_secs_f64().max(1e-9);
    format!("{:.0} MiB/s", bytes as f64 / secs / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096K"), Ok(4096 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size(" 8k "), Ok(8 << 10));
        assert_eq!(parse_size("100B"), Ok(100));
        for bad in ["", "M", "1X", "1.5G", "-1", "1 G B", "1iB", "0x10"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert!(
            parse_size("99999999999999999999")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_size("16777216T").unwrap_err().contains("too large"));
    }

    #[test]
    fn prints_sizes_and_durations() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(256 << 20), "256 MiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human((232 << 20) + 5), "232 MiB");
        assert_eq!(duration(Duration::from_micros(85)), "85 µs");
        assert_eq!(duration(Duration::from_micros(1250)), "1.25 ms");
        assert_eq!(duration(Duration::from_secs(12)), "12.00 s");
    }
}
