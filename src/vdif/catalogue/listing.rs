//! One disk read afresh for a listing: every name at its top, every vbs scan directory's
//! chunks, the summaries noted in `.vdifrec/`, packed into a few large buffers (a season's
//! disk is 20,000 scan directories; the disks are read side by side by threads of their own,
//! and small allocations by the thousand would stay spread over the allocator's arenas long
//! after the listing is gone).

use super::holding::Holding;
use super::names::Kind;
use super::read;
use super::read::VbsDir;
use crate::vdif::layout::{self, Format};
use std::path::{Path, PathBuf};

/// What one name at the top of the disk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    /// A directory: `chunks` of `DiskListing::chunks` from `first` are its vbs chunks.
    Dir {
        first: u32,
        chunks: u32,
        summary: bool,
        repair: bool,
    },
    /// A file, and whether it starts with the Mark6 sync word.
    File { mk6: bool },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    at: u32,
    len: u32,
    what: What,
}

pub struct DiskListing {
    pub disk: PathBuf,
    text: String,
    /// By name.
    entries: Vec<Entry>,
    chunks: Vec<u64>,
    /// The names in `.vdifrec/`: (start in `note_text`, length), by name.
    note_text: String,
    notes: Vec<(u32, u32)>,
}

impl DiskListing {
    /// A listing of `disk` not read yet, its buffers sized for `names` names of `bytes` bytes
    /// and `notes` summaries of `note_bytes` (with room for some more, and for one chunk a
    /// directory).
    pub fn sized(
        disk: &Path,
        names: usize,
        bytes: usize,
        notes: usize,
        note_bytes: usize,
    ) -> DiskListing {
        let room = |n: usize| n + n / 8 + 64;
        DiskListing {
            disk: disk.to_path_buf(),
            text: String::with_capacity(room(bytes)),
            entries: Vec::with_capacity(room(names)),
            chunks: Vec::with_capacity(room(names)),
            note_text: String::with_capacity(room(note_bytes)),
            notes: Vec::with_capacity(room(notes)),
        }
    }

    /// Reads the disk into this listing's buffers: every name at its top (each directory's
    /// chunks, each file's first bytes for the Mark6 sync word), and the names in `.vdifrec/`.
    pub fn read_into(&mut self, disk: &Path) -> std::io::Result<()> {
        for entry in std::fs::read_dir(disk)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let what = match read::entry_kind(&entry) {
                None => continue,
                Some(Kind::Dir) if name == layout::SUMMARY_DIR => continue,
                Some(Kind::Dir) => {
                    let first = self.chunks.len();
                    let Some((summary, repair)) = read::vbs_dir_into(disk, name, &mut self.chunks)?
                    else {
                        continue; // gone while the disk was read
                    };
                    What::Dir {
                        first: first as u32,
                        chunks: (self.chunks.len() - first) as u32,
                        summary,
                        repair,
                    }
                }
                Some(Kind::File) => What::File {
                    mk6: read::has_mk6_sync(&entry.path()),
                },
            };
            self.entries.push(Entry {
                at: self.text.len() as u32,
                len: name.len() as u32,
                what,
            });
            self.text.push_str(name);
        }
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| self.name(a).cmp(self.name(b)));
        self.entries = entries;
        let notes = disk.join(layout::SUMMARY_DIR);
        if let Ok(dir) = std::fs::read_dir(&notes) {
            for entry in dir.flatten() {
                if let Some(name) = entry.file_name().to_str() {
                    self.notes
                        .push((self.note_text.len() as u32, name.len() as u32));
                    self.note_text.push_str(name);
                }
            }
        }
        let mut notes = std::mem::take(&mut self.notes);
        notes.sort_unstable_by(|a, b| self.note(*a).cmp(self.note(*b)));
        self.notes = notes;
        Ok(())
    }

    /// Every name at the top, with what it is (as the catalogue holds them).
    pub fn top_names(&self) -> impl Iterator<Item = (&str, Kind)> + '_ {
        self.entries.iter().map(|e| {
            let kind = match e.what {
                What::Dir { .. } => Kind::Dir,
                What::File { .. } => Kind::File,
            };
            (self.name(e), kind)
        })
    }

    /// Every name in `.vdifrec/`.
    pub fn note_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.notes.iter().map(|n| self.note(*n))
    }

    fn note(&self, (at, len): (u32, u32)) -> &str {
        &self.note_text[at as usize..(at + len) as usize]
    }

    fn name(&self, e: &Entry) -> &str {
        &self.text[e.at as usize..(e.at + e.len) as usize]
    }

    /// The entries whose names start with `prefix`, in order.
    fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        let from = self.entries.partition_point(|e| self.name(e) < prefix);
        self.entries[from..]
            .iter()
            .take_while(move |e| self.name(e).starts_with(prefix))
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        let at = self.entries.partition_point(|e| self.name(e) < name);
        self.entries.get(at).filter(|e| self.name(e) == name)
    }

    fn noted(&self, name: &str) -> bool {
        self.notes
            .binary_search_by(|n| self.note(*n).cmp(name))
            .is_ok()
    }

    /// The scans this disk holds: a directory with a chunk in it is a vbs scan, a file that
    /// starts with the Mark6 sync word a Mark6 one, any other `.vdif` file (a part of) a
    /// single-file scan.
    pub fn scans(&self) -> impl Iterator<Item = (String, Format)> + '_ {
        self.entries.iter().filter_map(|e| {
            let name = self.name(e);
            match e.what {
                What::Dir { chunks, .. } if chunks > 0 => Some((name.to_owned(), Format::Vbs)),
                What::Dir { .. } => None,
                What::File { mk6: true } => Some((name.to_owned(), Format::Mk6)),
                What::File { mk6: false } => {
                    let stem = name.strip_suffix(".vdif")?;
                    // `<scan>.0001.vdif` is a part of `<scan>` (scan names hold no `.`).
                    let scan = stem.split('.').next().unwrap_or(stem);
                    let scan = match layout::file_part_number(name, scan) {
                        Some(_) => scan,
                        None => stem,
                    };
                    Some((scan.to_owned(), Format::File))
                }
            }
        })
    }

    /// What this disk holds of scan `name`, as `catalogue::holdings` gives it.
    pub fn holding(&self, name: &str) -> Holding {
        let prefix = format!("{name}.");
        let mut file_parts: Vec<(u64, PathBuf)> = self
            .with_prefix(&prefix)
            .filter(|e| matches!(e.what, What::File { .. }))
            .filter_map(|e| {
                let n = self.name(e);
                Some((layout::file_part_number(n, name)?, self.disk.join(n)))
            })
            .collect();
        file_parts.sort();
        let entry = self.entry(name);
        Holding {
            disk: self.disk.clone(),
            file_parts,
            vbs: entry.and_then(|e| match e.what {
                What::Dir {
                    first,
                    chunks,
                    summary,
                    repair,
                } => Some(VbsDir {
                    chunks: self.chunks[first as usize..(first + chunks) as usize].to_vec(),
                    summary,
                    repair,
                }),
                What::File { .. } => None,
            }),
            mk6: entry
                .filter(|e| matches!(e.what, What::File { .. }))
                .map(|_| layout::mk6_path(&self.disk, name)),
            noted_summary: self.noted(&format!("{name}.summary.json")),
            noted_repair: self.noted(&format!("{name}.repair.json")),
        }
    }
}
