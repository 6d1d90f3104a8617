//! Two value syntaxes Nova accepts in its configuration and extra specs, read the way Nova reads
//! them: CPU specs (`"0-5,^3,8"`, `parse_cpu_spec`) and sizes with units (`"1GB"`, `"2048"`,
//! oslo's `string_to_bytes` in IEC units).
//!
//! In: text from a configuration file or a flavor's extra specs. Out: a CPU set, or a size in
//! KiB, or a message saying what was wrong (the caller names the key).

use std::collections::BTreeSet;

use crate::echo::quoted;
use crate::probes::CpuSet;

/// Highest CPU id accepted in a spec: Nova has no limit, but a range such as `0-4294967295`
/// would allocate gigabytes; the kernel's NR_CPUS tops out at 8192.
pub const MAX_CPU_ID: u32 = 65_535;

fn cpu_id(text: &str, rule: &str, what: &str) -> Result<u32, String> {
    let v: i64 = text
        .trim()
        .parse()
        .map_err(|_| format!("invalid {what} expression {}", quoted(rule)))?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= MAX_CPU_ID)
        .ok_or_else(|| format!("CPU {v} in {} is outside 0-{MAX_CPU_ID}", quoted(rule)))
}

/// Nova's `parse_cpu_spec`: comma-separated CPU numbers and ranges, `^N` (or `^N-M`) excluding
/// CPUs named elsewhere in the spec; empty items are skipped, so `""` is the empty set.
pub fn parse_cpu_spec(spec: &str) -> Result<CpuSet, String> {
    let mut take = BTreeSet::new();
    let mut reject = BTreeSet::new();
    for rule in spec.split(',') {
        let rule = rule.trim();
        if rule.is_empty() {
            continue;
        }
        let (excluded, body) = match rule.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, rule),
        };
        let (lo, hi) = match body.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu_id(a, rule, "range")?, cpu_id(b, rule, "range")?);
                if a > b {
                    return Err(format!("invalid range expression {}", quoted(rule)));
                }
                (a, b)
            }
            None => {
                let what = if excluded { "exclusion" } else { "inclusion" };
                let v = cpu_id(body, rule, what)?;
                (v, v)
            }
        };
        let target = if excluded { &mut reject } else { &mut take };
        target.extend(lo..=hi);
    }
    Ok(CpuSet::from_ids(take.difference(&reject).copied()))
}

/// The power of 1024 of each unit prefix oslo knows (`K`/`Ki` = 1 ... `Q`/`Qi` = 10).
fn prefix_exponent(prefix: &str) -> Option<u32> {
    let p = prefix.strip_suffix('i').unwrap_or(prefix);
    Some(match p {
        "k" | "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        "E" => 6,
        "Z" => 7,
        "Y" => 8,
        "R" => 9,
        "Q" => 10,
        _ => return None,
    })
}

/// oslo's `string_to_bytes(text, 'IEC', return_int=True)`: a number, an optional prefix
/// (`K`, `Ki`, `M`, `Mi`... powers of 1024; lower-case `k` is not IEC) and `B` (bytes) or `b`/`bit`
/// (bits), rounded up to whole bytes. `None` when oslo would raise.
pub fn string_to_bytes(text: &str) -> Option<f64> {
    let (number_end, _) = text.char_indices().find(|(i, c)| {
        !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '-' || *c == '+')))
    })?;
    let (number, unit) = text.split_at(number_end);
    // oslo's number: an optional sign, digits, at most one dot, digits after it.
    let digits = number.trim_start_matches(['-', '+']);
    if digits.is_empty()
        || digits.ends_with('.')
        || digits.matches('.').count() > 1
        || digits.len() + 1 < number.len()
    {
        return None;
    }
    let magnitude: f64 = number.parse().ok()?;
    let (prefix, bits) = if let Some(p) = unit.strip_suffix("bit") {
        (p, true)
    } else if let Some(p) = unit.strip_suffix('b') {
        (p, true)
    } else if let Some(p) = unit.strip_suffix('B') {
        (p, false)
    } else {
        return None;
    };
    let exponent = match prefix {
        "" => 0,
        p if p.starts_with('k') => return None,
        p => prefix_exponent(p)?,
    };
    let mut bytes = magnitude * 1024f64.powi(exponent as i32);
    if bits {
        bytes /= 8.0;
    }
    Some(bytes.ceil())
}

/// A size in KiB as Nova reads page sizes and `reserved_huge_pages` sizes: digits alone are KiB,
/// else oslo's units divided by 1024 and truncated to an integer (Nova stores it in an integer
/// field). `Err` says what is accepted.
pub fn size_kib(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|_| format!("{} is too large", quoted(t)));
    }
    let bytes = string_to_bytes(t).ok_or_else(|| {
        format!(
            "{} is not a size: expected KiB as digits (\"2048\") or a number with a unit (\"2MB\", \"1GiB\")",
            quoted(t)
        )
    })?;
    let kib = (bytes / 1024.0).trunc();
    if !kib.is_finite() || kib.abs() > i64::MAX as f64 / 2.0 {
        return Err(format!("{} is too large", quoted(t)));
    }
    Ok(kib as i64)
}

/// `CUSTOM_` followed by at least one of `A-Z`, `0-9`, `_`; 255 characters at most (Placement's
/// rule for custom classes and traits).
pub fn is_custom_name(name: &str) -> bool {
    name.len() <= 255
        && name.len() > "CUSTOM_".len()
        && name.starts_with("CUSTOM_")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> Vec<u32> {
        parse_cpu_spec(s).unwrap().iter().collect()
    }

    #[test]
    fn cpu_specs_read_as_nova_reads_them() {
        assert_eq!(set("1-4,^3,6"), vec![1, 2, 4, 6]);
        assert_eq!(set(" 0 , 2-3 ,,"), vec![0, 2, 3]);
        assert_eq!(set("0-7,^2-5"), vec![0, 1, 6, 7]);
        assert_eq!(set("^0,0-1"), vec![1]);
        assert_eq!(set(""), Vec::<u32>::new());
        assert!(parse_cpu_spec("3-1")
            .unwrap_err()
            .contains("invalid range expression \"3-1\""));
        assert!(parse_cpu_spec("a")
            .unwrap_err()
            .contains("invalid inclusion expression"));
        assert!(parse_cpu_spec("^x")
            .unwrap_err()
            .contains("invalid exclusion expression"));
        assert!(parse_cpu_spec("0-4294967295")
            .unwrap_err()
            .contains("outside 0-65535"));
    }

    #[test]
    fn sizes_follow_oslo_iec_units() {
        assert_eq!(size_kib("2048"), Ok(2048));
        assert_eq!(size_kib("2MB"), Ok(2048));
        assert_eq!(size_kib("2MiB"), Ok(2048));
        assert_eq!(size_kib("1GB"), Ok(1_048_576));
        assert_eq!(size_kib("3MB"), Ok(3072));
        assert_eq!(size_kib("4KB"), Ok(4));
        assert_eq!(size_kib("8Mb"), Ok(1024));
        assert_eq!(size_kib("1.5GB"), Ok(1_572_864));
        // Truncated as Nova's integer field does.
        assert_eq!(size_kib("100B"), Ok(0));
        assert!(size_kib("2M").is_err());
        assert!(size_kib("2kB").is_err());
        assert!(size_kib("huge").is_err());
        assert!(size_kib("").is_err());
        assert!(size_kib("1..5GB").is_err());
    }
}
