//! CPU sets and the kernel's two ways of writing them: cpulists (`0-3,8`) and cpumaps
//! (`00000000,0000ff0f`, 32-bit hex words, most significant first).
//!
//! In: cpulist and cpumap text as the kernel writes it (whitespace and trailing NULs ignored), or
//! CPU ids. Out: a [`CpuSet`], or a message saying what was wrong and where; a [`CpuSet`] prints
//! and serializes back as a cpulist.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Serialize, Serializer};

/// Highest CPU id accepted from a file. The kernel's NR_CPUS tops out at 8192; this leaves room
/// while keeping a garbage range such as `0-4294967295` from allocating gigabytes.
pub const MAX_CPU_ID: u32 = 65_535;

/// A set of logical CPU ids. Serializes as a cpulist string (`"0-3,8"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// The empty set.
    pub fn new() -> CpuSet {
        CpuSet::default()
    }

    /// Parses a cpulist such as `0-3,8,10-11` (whitespace and trailing NULs ignored; an empty
    /// string is the empty set). The error says what was wrong and where.
    pub fn parse_list(s: &str) -> Result<CpuSet, String> {
        let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        let mut set = BTreeSet::new();
        if s.is_empty() {
            return Ok(CpuSet(set));
        }
        for part in s.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (parse_id(a, part)?, parse_id(b, part)?),
                None => {
                    let v = parse_id(part, part)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("range {part:?} runs backwards"));
            }
            set.extend(lo..=hi);
        }
        Ok(CpuSet(set))
    }

    /// Parses a cpumap (comma-separated 32-bit hex words, most significant word first).
    pub fn parse_map(s: &str) -> Result<CpuSet, String> {
        let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        let mut set = BTreeSet::new();
        if s.is_empty() {
            return Ok(CpuSet(set));
        }
        let words: Vec<&str> = s.split(',').collect();
        let nwords = words.len();
        if nwords > (MAX_CPU_ID as usize + 1) / 32 {
            return Err(format!(
                "cpumap has {nwords} words, more than any kernel writes"
            ));
        }
        for (i, word) in words.iter().enumerate() {
            let word = word.trim();
            if word.is_empty() || word.len() > 8 {
                return Err(format!("cpumap word {word:?} is not 1-8 hex digits"));
            }
            let bits = u32::from_str_radix(word, 16)
                .map_err(|_| format!("cpumap word {word:?} is not hex"))?;
            let base = ((nwords - 1 - i) * 32) as u32;
            for b in 0..32 {
                if bits & (1 << b) != 0 {
                    set.insert(base + b);
                }
            }
        }
        Ok(CpuSet(set))
    }

    /// Builds a set from ids.
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> CpuSet {
        CpuSet(ids.into_iter().collect())
    }

    /// Takes `cpu` out; whether it was there.
    pub fn remove(&mut self, cpu: u32) -> bool {
        self.0.remove(&cpu)
    }

    /// True if `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// Adds a CPU.
    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    /// True if the two sets share a CPU.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        let (small, big) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.iter().any(|c| big.contains(c))
    }

    /// True if every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// The CPUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    /// The CPUs in both.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }
}

fn parse_id(s: &str, part: &str) -> Result<u32, String> {
    let s = s.trim();
    let v: u32 = s
        .parse()
        .map_err(|_| format!("{part:?} is not a CPU number or range like 0-3"))?;
    if v > MAX_CPU_ID {
        return Err(format!("CPU {v} in {part:?} is above {MAX_CPU_ID}"));
    }
    Ok(v)
}

impl fmt::Display for CpuSet {
    /// Writes the kernel's cpulist form, with ranges for runs of two or more.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CpuSet, D::Error> {
        let s = String::deserialize(d)?;
        CpuSet::parse_list(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_lists() {
        let s = CpuSet::parse_list("0-3,8,10-11\n").unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse_list("").unwrap().to_string(), "");
        assert_eq!(CpuSet::parse_list("5\n\0").unwrap().to_string(), "5");
    }

    #[test]
    fn rejects_garbage_lists() {
        assert!(CpuSet::parse_list("0-x").is_err());
        assert!(CpuSet::parse_list("3-1").is_err());
        assert!(CpuSet::parse_list("0-4294967295").is_err());
        assert!(CpuSet::parse_list(",").is_err());
    }

    #[test]
    fn parses_cpumaps_most_significant_word_first() {
        let s = CpuSet::parse_map("00000001,0000000f\n").unwrap();
        assert_eq!(s.to_string(), "0-3,32");
        assert_eq!(CpuSet::parse_map("00000000,00000000").unwrap().len(), 0);
        assert!(CpuSet::parse_map("zz").is_err());
        assert!(CpuSet::parse_map("123456789").is_err());
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse_list("0-3").unwrap();
        let b = CpuSet::parse_list("3-5").unwrap();
        assert!(a.intersects(&b));
        assert_eq!(a.difference(&b).to_string(), "0-2");
        assert_eq!(a.intersection(&b).to_string(), "3");
        assert!(CpuSet::parse_list("1,2").unwrap().is_subset(&a));
    }
}
