//! What the disks hold, known once per process: the names at the top of every disk a command
//! has asked about (scan directories, scan files, Mark6 files) and the summaries vdifrec keeps
//! beside them (`<disk>/.vdifrec/`), so that a question about one scan (is this name taken,
//! where are its parts) costs the same on disks of 20,000 scans as on empty ones.
//!
//! A disk is read once, when first asked about, all new disks side by side (a thread each).
//! From then on the kernel tells what changes: every disk and its `.vdifrec` are watched with
//! inotify, and the events queued (by the recorder, jive5ab, m5copy, `rm`, anything) are
//! taken before each answer, so an answer is as current as a fresh read. Where inotify is not
//! to be had, a disk whose directory's modification time moved (or that was read within a
//! second of its last change, which a clock tick may hide) is read again before the answer.
//!
//! What a scan holds (its chunks, their sizes, its frames) is not kept: it is read from the
//! scan's own directories and files when that scan is asked about, so it is always as it is on
//! disk, at a cost set by that scan alone. Listings (`vdifrec scans`, the restart's search for
//! unclosed scans) read every disk afresh, each once, side by side.
//!
//! Memory: one entry per name, whatever the number of disks holding it (the name, and two
//! bits per disk: about 250 bytes a name at 36 disks, 5 MB for 20,000 scans); nothing per
//! chunk or block. A listing holds each disk's names and chunk numbers in a few buffers for
//! as long as it runs (about 60 MB for 20,000 scans on 36 disks), sized on the caller's thread
//! so that they leave nothing behind in the reading threads' allocator arenas.

mod holding;
mod listing;
mod names;
mod read;
mod watch;

pub use holding::Holding;
pub use listing::DiskListing;
pub use read::VbsDir;

use crate::vdif::layout;
use names::{Kind, NameTable};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime};
use watch::{Event, Watcher};

/// A disk that could not be read.
#[derive(Debug)]
pub struct DiskError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Which directory of a disk a watch is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Top,
    Notes,
}

struct Disk {
    root: PathBuf,
    /// The directory's device and inode when it was read: a disk mounted over it since (a
    /// FlexBuff disk mounted late, a Mark6 module swapped) is another disk.
    identity: Option<(u64, u64)>,
    /// The kernel reports every change to its top and its `.vdifrec` (each watched, or
    /// `.vdifrec` absent and its creation watched for).
    watched: bool,
    watches: Vec<i32>,
    /// The directories' modification times when last read, and when that was: how a disk with
    /// no watch is known to be current.
    top_time: Option<SystemTime>,
    notes_time: Option<SystemTime>,
    read_at: SystemTime,
}

/// The environment variable that, set to 0, has the catalogue go by directories' times.
pub const WATCH_VARIABLE: &str = "VDIFREC_CATALOGUE_WATCH";

/// A directory changed within this of being read may have changed again in the same tick of
/// its clock (coarse on some file systems): read it again rather than trust its time.
const RACY: Duration = Duration::from_secs(1);

fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

impl Disk {
    fn watched(&self) -> bool {
        self.watched
    }

    fn current_by_time(&self) -> bool {
        let fresh = |was: Option<SystemTime>, now: Option<SystemTime>| {
            was == now
                && was.is_none_or(|t| self.read_at.duration_since(t).is_ok_and(|age| age > RACY))
        };
        fresh(self.top_time, modified(&self.root))
            && fresh(
                self.notes_time,
                modified(&self.root.join(layout::SUMMARY_DIR)),
            )
    }
}

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

#[derive(Default)]
struct Registry {
    disks: Vec<Option<Disk>>,
    ids: HashMap<PathBuf, usize>,
    watches: HashMap<i32, (usize, Place)>,
    entries: NameTable,
    notes: NameTable,
    watcher: Option<Watcher>,
    started: bool,
    /// Disks' tops read, since the process started (a disk's first read, and every read again).
    reads: u64,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

/// What a disk's first read found, before it goes into the tables.
struct FirstRead {
    id: usize,
    top: std::io::Result<read::Names>,
    notes: read::Names,
}

impl Registry {
    fn watcher(&mut self) -> Option<&Watcher> {
        if !self.started {
            self.started = true;
            // `VDIFREC_CATALOGUE_WATCH=0`: disks whose changes the kernel does not see (a network
            // file system written from another host) are read again when their times move.
            let by_time = std::env::var_os(WATCH_VARIABLE).is_some_and(|v| v == "0");
            self.watcher = if by_time { None } else { Watcher::new() };
        }
        self.watcher.as_ref()
    }

    /// The registry's number for each of `disks`, reading (side by side) those not known or
    /// no longer current.
    fn ids(&mut self, disks: &[PathBuf]) -> Result<Vec<usize>, DiskError> {
        self.take_events();
        let mut ids = Vec::with_capacity(disks.len());
        let mut to_read = Vec::new();
        for d in disks {
            let root = d.canonicalize().map_err(|source| DiskError {
                path: d.clone(),
                source,
            })?;
            let known = self.ids.get(&root).copied();
            let id = match known {
                Some(id) if self.is_current(id) => id,
                Some(id) => {
                    self.forget(id);
                    self.begin(root)
                }
                None => self.begin(root),
            };
            if !self.is_read(id) && !to_read.contains(&id) {
                to_read.push(id);
            }
            ids.push(id);
        }
        self.read(&to_read, disks, &ids)?;
        Ok(ids)
    }

    fn is_current(&self, id: usize) -> bool {
        match &self.disks[id] {
            Some(d) => identity(&d.root) == d.identity && (d.watched() || d.current_by_time()),
            None => false,
        }
    }

    fn is_read(&self, id: usize) -> bool {
        self.disks[id]
            .as_ref()
            .is_some_and(|d| d.read_at != SystemTime::UNIX_EPOCH)
    }

    /// Takes a number for disk `root` and watches it (from before it is read, so that no change
    /// falls between the read and the watch).
    fn begin(&mut self, root: PathBuf) -> usize {
        let id = match self.disks.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.disks.push(None);
                self.disks.len() - 1
            }
        };
        let mut watches = Vec::new();
        let mut watched = false;
        let notes_dir = root.join(layout::SUMMARY_DIR);
        if let Some(w) = self.watcher() {
            let top = w.add(&root);
            let notes = top.and_then(|_| w.add(&notes_dir));
            // Watched whole: the top, and `.vdifrec` where there is one (else its creation,
            // seen at the top, is when it is watched).
            watched = top.is_some() && (notes.is_some() || !notes_dir.exists());
            if let Some(t) = top {
                watches.push(t);
                self.watches.insert(t, (id, Place::Top));
            }
            if let Some(n) = notes {
                watches.push(n);
                self.watches.insert(n, (id, Place::Notes));
            }
        }
        self.ids.insert(root.clone(), id);
        self.disks[id] = Some(Disk {
            identity: identity(&root),
            watched,
            top_time: modified(&root),
            notes_time: modified(&root.join(layout::SUMMARY_DIR)),
            root,
            watches,
            read_at: SystemTime::UNIX_EPOCH,
        });
        id
    }

    /// Reads the top and the notes of disks `to_read`, a thread each.
    fn read(
        &mut self,
        to_read: &[usize],
        given: &[PathBuf],
        ids: &[usize],
    ) -> Result<(), DiskError> {
        if to_read.is_empty() {
            return Ok(());
        }
        let roots: Vec<(usize, PathBuf)> = to_read
            .iter()
            .map(|&id| (id, self.disks[id].as_ref().expect("begun").root.clone()))
            .collect();
        let now = SystemTime::now();
        let found: Vec<FirstRead> = std::thread::scope(|s| {
            let jobs: Vec<_> = roots
                .iter()
                .map(|(id, root)| {
                    s.spawn(move || FirstRead {
                        id: *id,
                        top: read::names(root),
                        notes: read::names(&root.join(layout::SUMMARY_DIR)).unwrap_or_default(),
                    })
                })
                .collect();
            jobs.into_iter()
                .map(|j| j.join().expect("a disk reader does not panic"))
                .collect()
        });
        for f in found {
            let top = match f.top {
                Ok(t) => t,
                Err(source) => {
                    let at = ids.iter().position(|&i| i == f.id).expect("asked for");
                    self.forget(f.id);
                    return Err(DiskError {
                        path: given[at].clone(),
                        source,
                    });
                }
            };
            for (name, kind) in top.iter() {
                if name != layout::SUMMARY_DIR {
                    self.entries.set(name, f.id, kind);
                }
            }
            for (name, kind) in f.notes.iter() {
                self.notes.set(name, f.id, kind);
            }
            if let Some(d) = self.disks[f.id].as_mut() {
                d.read_at = now;
            }
            self.reads += 1;
        }
        Ok(())
    }

    /// Forgets a disk: its names, its watches, its number.
    fn forget(&mut self, id: usize) {
        let Some(d) = self.disks[id].take() else {
            return;
        };
        for w in &d.watches {
            self.watches.remove(w);
            if let Some(watcher) = &self.watcher {
                watcher.remove(*w);
            }
        }
        self.ids.remove(&d.root);
        self.entries.clear_disk(id);
        self.notes.clear_disk(id);
    }

    /// Applies what the kernel saw happen on the watched disks since the last answer.
    fn take_events(&mut self) {
        let Some(w) = &self.watcher else {
            return;
        };
        for e in w.drain() {
            match e {
                Event::Overflow => {
                    for id in 0..self.disks.len() {
                        self.forget(id);
                    }
                }
                Event::Gone { watch } => match self.watches.remove(&watch) {
                    Some((id, Place::Top)) => self.forget(id),
                    Some((id, Place::Notes)) => {
                        self.notes.clear_disk(id);
                        if let Some(d) = self.disks[id].as_mut() {
                            d.watches.retain(|x| *x != watch);
                        }
                    }
                    None => {}
                },
                Event::Added { watch, name } => self.seen(watch, &name),
                Event::Removed { watch, name } => self.seen(watch, &name),
            }
        }
    }

    /// Name `name` changed in the directory of `watch`: takes what it is now.
    fn seen(&mut self, watch: i32, name: &str) {
        let Some(&(id, place)) = self.watches.get(&watch) else {
            return;
        };
        let Some(root) = self.disks[id].as_ref().map(|d| d.root.clone()) else {
            return;
        };
        match place {
            Place::Top if name == layout::SUMMARY_DIR => {
                // Created or removed: watch the new one and read it, or forget the old.
                self.notes.clear_disk(id);
                let dir = root.join(layout::SUMMARY_DIR);
                if read::path_kind(&dir) == Some(Kind::Dir) {
                    let added = self.watcher.as_ref().and_then(|w| w.add(&dir));
                    if let Some(n) = added {
                        self.watches.insert(n, (id, Place::Notes));
                    }
                    if let Some(d) = self.disks[id].as_mut() {
                        d.watches.extend(added);
                        // Unwatched, its changes are found by its time (`current_by_time`).
                        d.watched &= added.is_some();
                        d.notes_time = modified(&dir);
                    }
                    for (n, kind) in read::names(&dir).unwrap_or_default().iter() {
                        self.notes.set(n, id, kind);
                    }
                }
            }
            Place::Top => match read::path_kind(&root.join(name)) {
                Some(kind) => self.entries.set(name, id, kind),
                None => self.entries.clear(name, id),
            },
            Place::Notes => match read::path_kind(&root.join(layout::SUMMARY_DIR).join(name)) {
                Some(kind) => self.notes.set(name, id, kind),
                None => self.notes.clear(name, id),
            },
        }
    }

    /// What the tables say of `name` on disk `id` (the vbs directory not yet read).
    fn holding_plan(&self, name: &str, id: usize, disk: &Path) -> (Holding, bool) {
        let mut h = Holding {
            disk: disk.to_path_buf(),
            ..Holding::default()
        };
        let prefix = format!("{name}.");
        for (n, kind) in self.entries.with_prefix(&prefix, id) {
            if kind == Kind::File {
                if let Some(number) = layout::file_part_number(n, name) {
                    h.file_parts.push((number, disk.join(n)));
                }
            }
        }
        h.file_parts.sort();
        let kind = self.entries.kind(name, id);
        if kind == Some(Kind::File) {
            h.mk6 = Some(layout::mk6_path(disk, name));
        }
        h.noted_summary = self
            .notes
            .kind(&format!("{name}.summary.json"), id)
            .is_some();
        h.noted_repair = self
            .notes
            .kind(&format!("{name}.repair.json"), id)
            .is_some();
        (h, kind == Some(Kind::Dir))
    }

    fn taken(&self, name: &str, id: usize) -> bool {
        self.entries.kind(name, id).is_some()
            || self
                .entries
                .with_prefix(&format!("{name}."), id)
                .any(|(n, _)| layout::file_part_number(n, name).is_some())
            || self
                .notes
                .kind(&format!("{name}.summary.json"), id)
                .is_some()
            || self
                .entries
                .with_prefix(&format!("{name}_ds"), id)
                .next()
                .is_some()
    }
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic elsewhere while holding it leaves tables that the next read of a disk mends.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// What each of `disks` holds of scan `name`, one `Holding` per disk in the order given (a
/// disk holding nothing of it gives an empty one), as the disks are now: the catalogue says
/// which disks hold a scan directory or file of that name, and only those are read.
pub fn holdings(name: &str, disks: &[PathBuf]) -> Result<Vec<Holding>, DiskError> {
    let plans: Vec<(Holding, bool)> = {
        let mut reg = registry();
        let ids = reg.ids(disks)?;
        ids.iter()
            .zip(disks)
            .map(|(&id, d)| reg.holding_plan(name, id, d))
            .collect()
    };
    plans
        .into_iter()
        .map(|(mut h, is_dir)| {
            if is_dir {
                h.vbs = read::vbs_dir(&h.disk, name).map_err(|source| DiskError {
                    path: layout::vbs_dir(&h.disk, name),
                    source,
                })?;
            }
            Ok(h)
        })
        .collect()
}

/// Whether scan name `name` is in use on any of `disks`: a scan directory or file of that
/// name, a single-file scan (any of its files), a summary of one, or a data stream of a split scan
/// (`<name>_ds<key>`). A disk that cannot be read takes no name.
pub fn name_taken(name: &str, disks: &[PathBuf]) -> bool {
    let mut reg = registry();
    // All the disks at once (those to be read are read side by side); a disk that cannot be
    // read is left out.
    let ids = match reg.ids(disks) {
        Ok(ids) => ids,
        Err(_) => disks
            .iter()
            .filter_map(|d| reg.ids(std::slice::from_ref(d)).ok())
            .flatten()
            .collect(),
    };
    ids.iter().any(|&id| reg.taken(name, id))
}

/// Tells the catalogue that the recorder made `name` at the top of `disk` (a scan's directory
/// or file), so that it is known at once whatever the kernel's events say.
pub fn made(disk: &Path, name: &str) {
    let Ok(root) = disk.canonicalize() else {
        return;
    };
    // Never waits: a writer must not stand behind a disk being read (the kernel's report of
    // the same name, or the directory's time, brings it in then).
    let mut reg = match REGISTRY.try_lock() {
        Ok(r) => r,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let Some(&id) = reg.ids.get(&root) else {
        return; // not read yet: it will be seen when it is
    };
    if let Some(kind) = read::path_kind(&root.join(name)) {
        reg.entries.set(name, id, kind);
    }
}

/// Every disk of `disks` read afresh, each once, side by side (a thread each); the disks also
/// join the catalogue, so that later questions about them need no walk.
pub fn list(disks: &[PathBuf]) -> Result<Vec<DiskListing>, DiskError> {
    // Each disk's buffers are sized here, on the caller's thread, from what the catalogue
    // holds: the readers fill them without growing them, so that nothing of the listing is
    // left in the allocator's arenas of threads that are gone. A disk the catalogue does not
    // hold yet is watched now and learnt from the listing itself: each disk is read once.
    let mut learn = Vec::new();
    let sized: Vec<DiskListing> = {
        let mut reg = registry();
        reg.take_events();
        let mut out = Vec::with_capacity(disks.len());
        for d in disks {
            let root = d.canonicalize().map_err(|source| DiskError {
                path: d.clone(),
                source,
            })?;
            let known = reg.ids.get(&root).copied();
            let id = match known {
                Some(id) if reg.is_current(id) && reg.is_read(id) => id,
                Some(id) => {
                    reg.forget(id);
                    reg.begin(root)
                }
                None => reg.begin(root),
            };
            if !reg.is_read(id) {
                learn.push((out.len(), id));
            }
            let (names, bytes) = reg.entries.on_disk(id);
            let (notes, note_bytes) = reg.notes.on_disk(id);
            out.push(DiskListing::sized(d, names, bytes, notes, note_bytes));
        }
        out
    };
    let listings: Vec<DiskListing> = std::thread::scope(|s| {
        let jobs: Vec<_> = sized
            .into_iter()
            .map(|mut l| {
                s.spawn(move || {
                    let disk = l.disk.clone();
                    l.read_into(&disk).map(|()| l)
                })
            })
            .collect();
        jobs.into_iter()
            .zip(disks)
            .map(|(j, d)| {
                j.join()
                    .expect("a disk reader does not panic")
                    .map_err(|source| DiskError {
                        path: d.clone(),
                        source,
                    })
            })
            .collect::<Result<_, _>>()
    })?;
    if !learn.is_empty() {
        let mut reg = registry();
        let now = SystemTime::now();
        for (at, id) in learn {
            if reg.disks[id]
                .as_ref()
                .is_none_or(|d| d.read_at != SystemTime::UNIX_EPOCH)
            {
                continue; // forgotten meanwhile, or read by another question
            }
            for (name, kind) in listings[at].top_names() {
                reg.entries.set(name, id, kind);
            }
            for name in listings[at].note_names() {
                reg.notes.set(name, id, Kind::File);
            }
            if let Some(d) = reg.disks[id].as_mut() {
                d.read_at = now;
            }
            reg.reads += 1;
        }
    }
    Ok(listings)
}

/// The scan names at the top of `disks` as the catalogue holds them, in order: names of scan
/// directories and Mark6 files, and single-file scans by their file's stem. For pages that
/// show the disks' contents a page at a time.
pub fn names(disks: &[PathBuf]) -> Result<Vec<String>, DiskError> {
    let mut reg = registry();
    let ids = reg.ids(disks)?;
    let out: BTreeSet<String> = reg
        .entries
        .names_on(&ids)
        .map(|n| match n.strip_suffix(".vdif") {
            Some(stem) => stem.split('.').next().unwrap_or(stem).to_owned(),
            None => n.to_owned(),
        })
        // Only what could be a scan's name (not `lost+found`, not a stray file's).
        .filter(|n| layout::scan_name_problem(n).is_none())
        .collect();
    Ok(out.into_iter().collect())
}

/// How much the catalogue holds: disks read, names at their tops, summaries noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Size {
    pub disks: usize,
    pub names: usize,
    pub notes: usize,
    /// Whether the kernel tells of changes (inotify) on every disk, or some are read again
    /// when their directories' times move.
    pub watched: bool,
    /// Disks' tops read since the process started: each disk once, and again only when the
    /// kernel lost track (or, unwatched, when it changed).
    pub reads: u64,
}

pub fn size() -> Size {
    let reg = registry();
    Size {
        disks: reg.disks.iter().flatten().count(),
        names: reg.entries.len(),
        notes: reg.notes.len(),
        watched: reg.disks.iter().flatten().all(|d| d.watched),
        reads: reg.reads,
    }
}

#[cfg(test)]
mod tests;
