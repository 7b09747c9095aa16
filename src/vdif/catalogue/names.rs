//! The names at the top of the disks, each held once for all disks: a season of scans on 36
//! disks is 20,000 names, not 720,000, and a name's entry says on which disks it is a
//! directory and on which a file.

use std::collections::BTreeMap;
use std::ops::Bound;

/// A set of disk numbers (`Registry`'s own numbering), one bit each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskBits(Vec<u64>);

impl DiskBits {
    pub fn insert(&mut self, disk: usize) {
        let (word, bit) = (disk / 64, disk % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    pub fn remove(&mut self, disk: usize) {
        if let Some(w) = self.0.get_mut(disk / 64) {
            *w &= !(1 << (disk % 64));
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    pub fn contains(&self, disk: usize) -> bool {
        self.0
            .get(disk / 64)
            .is_some_and(|w| w & (1 << (disk % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Where one name is: the disks it is a directory on, and those it is anything else on (a
/// file; links are not taken).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Presence {
    pub dirs: DiskBits,
    pub files: DiskBits,
}

/// What one name is on one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// Names, in order (so that `<scan>.*` and `<scan>_ds*` are a range), with where each is.
#[derive(Debug, Default)]
pub struct NameTable {
    names: BTreeMap<Box<str>, Presence>,
}

impl NameTable {
    pub fn set(&mut self, name: &str, disk: usize, kind: Kind) {
        let p = match self.names.get_mut(name) {
            Some(p) => p,
            None => self.names.entry(name.into()).or_default(),
        };
        match kind {
            Kind::Dir => {
                p.files.remove(disk);
                p.dirs.insert(disk);
            }
            Kind::File => {
                p.dirs.remove(disk);
                p.files.insert(disk);
            }
        }
    }

    pub fn clear(&mut self, name: &str, disk: usize) {
        if let Some(p) = self.names.get_mut(name) {
            p.dirs.remove(disk);
            p.files.remove(disk);
            if p.dirs.is_empty() && p.files.is_empty() {
                self.names.remove(name);
            }
        }
    }

    /// Forgets everything of one disk (before it is read again, or once it is gone).
    pub fn clear_disk(&mut self, disk: usize) {
        self.names.retain(|_, p| {
            p.dirs.remove(disk);
            p.files.remove(disk);
            !(p.dirs.is_empty() && p.files.is_empty())
        });
    }

    pub fn kind(&self, name: &str, disk: usize) -> Option<Kind> {
        let p = self.names.get(name)?;
        if p.dirs.contains(disk) {
            Some(Kind::Dir)
        } else if p.files.contains(disk) {
            Some(Kind::File)
        } else {
            None
        }
    }

    /// The names starting with `prefix` that are on `disk`, in order.
    pub fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
        disk: usize,
    ) -> impl Iterator<Item = (&'a str, Kind)> + 'a {
        self.names
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(n, _)| n.starts_with(prefix))
            .filter_map(move |(n, p)| {
                let kind = if p.dirs.contains(disk) {
                    Kind::Dir
                } else if p.files.contains(disk) {
                    Kind::File
                } else {
                    return None;
                };
                Some((&**n, kind))
            })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// How many names are on `disk`, and their bytes.
    pub fn on_disk(&self, disk: usize) -> (usize, usize) {
        self.names
            .iter()
            .filter(|(_, p)| p.dirs.contains(disk) || p.files.contains(disk))
            .fold((0, 0), |(n, b), (name, _)| (n + 1, b + name.len()))
    }

    /// The names on any of `disks`, in order, from `from` on (for paging).
    pub fn names_on<'a>(&'a self, disks: &'a [usize]) -> impl Iterator<Item = &'a str> + 'a {
        self.names
            .iter()
            .filter(move |(_, p)| {
                disks
                    .iter()
                    .any(|d| p.dirs.contains(*d) || p.files.contains(*d))
            })
            .map(|(n, _)| &**n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_once_with_their_disks() {
        let mut t = NameTable::default();
        t.set("s1", 0, Kind::Dir);
        t.set("s1", 70, Kind::Dir);
        t.set("s1.vdif", 3, Kind::File);
        t.set("s1_ds1", 3, Kind::Dir);
        t.set("s2", 0, Kind::File);
        assert_eq!(t.len(), 4);
        assert_eq!(t.kind("s1", 70), Some(Kind::Dir));
        assert_eq!(t.kind("s1", 1), None);
        let on3: Vec<_> = t.with_prefix("s1", 3).collect();
        assert_eq!(on3, vec![("s1.vdif", Kind::File), ("s1_ds1", Kind::Dir)]);
        t.clear_disk(70);
        assert_eq!(t.kind("s1", 70), None);
        assert_eq!(t.kind("s1", 0), Some(Kind::Dir));
        t.clear("s1", 0);
        assert_eq!(t.kind("s1", 0), None);
        assert_eq!(t.len(), 3);
        assert_eq!(t.names_on(&[0]).collect::<Vec<_>>(), vec!["s2"]);
    }
}
