//! Writing frames to a file: O_DIRECT where the file system allows it, positioned writes that
//! report how much got written when they fail, and the test aid that makes a disk fill or fail
//! after a given number of bytes. The continuous writer (`writer`) and the scan writers
//! (`scan`) both write through here.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How a disk is made to misbehave (test aid): after `after` bytes it is full (ENOSPC) or
/// failing (EIO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub after: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Full,
    Error,
}

impl Fault {
    /// `full@64MiB` or `error@1GB`.
    pub fn parse(text: &str) -> Result<Fault, String> {
        let (kind, size) = text
            .split_once('@')
            .ok_or_else(|| format!("{text:?}: write full@SIZE or error@SIZE"))?;
        let kind = match kind {
            "full" => FaultKind::Full,
            "error" => FaultKind::Error,
            other => return Err(format!("{other:?} is not a fault: full or error")),
        };
        let after = crate::options::Size::Text(size.into())
            .get("disk_faults")
            .map_err(|e| e.why)?;
        Ok(Fault { kind, after })
    }

    fn error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(match self.kind {
            FaultKind::Full => libc::ENOSPC,
            FaultKind::Error => libc::EIO,
        })
    }
}

/// Bytes a disk may still take before its fault strikes (None: no fault).
#[derive(Clone, Copy, Debug, Default)]
pub struct Budget {
    pub fault: Option<Fault>,
    /// Bytes written to the disk before this write.
    pub used: u64,
}

impl Budget {
    pub fn none() -> Budget {
        Budget::default()
    }

    /// How much of `len` bytes may be written now; Err once the fault strikes.
    fn allow(&self, len: usize, direct: bool) -> Result<usize, std::io::Error> {
        let Some(f) = self.fault else { return Ok(len) };
        let left = f.after.saturating_sub(self.used) as usize;
        // A full disk takes what fits (in whole blocks under O_DIRECT).
        let take = if direct {
            len.min(left) / 4096 * 4096
        } else {
            len.min(left)
        };
        if take == 0 {
            return Err(f.error());
        }
        Ok(take)
    }
}

/// A new file (never an existing one): O_DIRECT when asked and the file system allows it.
/// Returns the file, whether it is O_DIRECT, and what to tell the operator about it.
pub fn create_new(path: &Path, direct: bool) -> std::io::Result<(File, bool, String)> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    if direct {
        match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => return Ok((f, true, "disk: O_DIRECT writes".into())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let f = opts.open(path)?;
                return Ok((
                    f,
                    false,
                    format!(
                        "disk: the file system of {} does not allow O_DIRECT; buffered writes with early write-back",
                        path.parent().unwrap_or(Path::new(".")).display()
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((
        opts.open(path)?,
        false,
        "disk: buffered writes (O_DIRECT off)".into(),
    ))
}

pub fn set_direct(file: &File, on: bool) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: reading and setting the status flags of our own descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let new = if on {
            flags | libc::O_DIRECT
        } else {
            flags & !libc::O_DIRECT
        };
        if libc::fcntl(fd, libc::F_SETFL, new) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Reserves `len` bytes at `offset` without changing the file's size, so a crash leaves the
/// file as long as what was written. Failing only loses the preallocation.
pub fn preallocate(file: &File, offset: u64, len: u64) -> bool {
    // SAFETY: fallocate on our open file.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        ) == 0
    }
}

/// Writes all of `data` at `offset`. `direct` says whether the file is O_DIRECT now; a file
/// system that accepted O_DIRECT at open but refuses the writes is switched to buffered and
/// `direct` cleared. On failure returns how many bytes did get written.
pub fn write_all_at(
    file: &File,
    direct: &mut bool,
    data: &[u8],
    offset: u64,
    budget: Budget,
) -> Result<(), (u64, std::io::Error)> {
    let mut done = 0usize;
    while done < data.len() {
        let len = Budget {
            used: budget.used + done as u64,
            ..budget
        }
        .allow(data.len() - done, *direct)
        .map_err(|e| (done as u64, e))?;
        // SAFETY: writing from a valid slice to our own descriptor.
        let rc = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                data[done..].as_ptr() as *const libc::c_void,
                len,
                (offset + done as u64) as libc::off_t,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) if *direct => {
                    // Some file systems accept O_DIRECT at open and refuse the writes.
                    if set_direct(file, false).is_ok() {
                        *direct = false;
                        continue;
                    }
                    return Err((done as u64, e));
                }
                _ => return Err((done as u64, e)),
            }
        }
        if rc == 0 {
            return Err((done as u64, std::io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        done += rc as usize;
    }
    Ok(())
}

/// Writes the pieces one after the other from `offset` (buffered: the pieces need not be
/// aligned). On failure returns how many bytes did get written.
pub fn write_pieces_at(
    file: &File,
    pieces: &[&[u8]],
    offset: u64,
    budget: Budget,
) -> Result<(), (u64, std::io::Error)> {
    let mut done = 0u64;
    let mut direct = false;
    for p in pieces {
        let b = Budget {
            used: budget.used + done,
            ..budget
        };
        write_all_at(file, &mut direct, p, offset + done, b).map_err(|(n, e)| (done + n, e))?;
        done += p.len() as u64;
    }
    Ok(())
}

/// Starts write-back of `offset..offset+len` and waits for it, so an I/O error of the disk
/// shows up now, while the frames are still in the ring, and the pages can be dropped.
pub fn write_back(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: write-back requests and hints on our own descriptor.
    let rc = unsafe {
        libc::sync_file_range(
            fd,
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    unsafe {
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
    Ok(())
}

/// Gives back what was preallocated past `size`, the bytes written. Never makes the file
/// longer: zeros past what was written would read as frames after a crash, so a file shorter
/// than `size` (which cannot happen) is left as it is.
pub fn trim(file: &File, size: u64) {
    let fd = file.as_raw_fd();
    // SAFETY: fstat and ftruncate on our own descriptor, into a zeroed stat.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && (st.st_size as u64) < size {
            return;
        }
        libc::ftruncate(fd, size as libc::off_t);
    }
}

/// Syncs the file's data and what reading it back needs (its size): after a power loss, what
/// was written before is there.
pub fn sync(file: &File) -> std::io::Result<()> {
    // SAFETY: fdatasync on our own descriptor.
    if unsafe { libc::fdatasync(file.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Syncs a directory: the names created in it are there after a power loss (a new file's
/// own sync does not promise its name).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `path` whole or not at all, and durably: a temporary file beside it (`.part` added,
/// a name no reader takes for a scan's), synced, renamed over it, its directory synced. A
/// crash leaves the file as it was before, or as it is now, never a part of it.
pub fn write_whole(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut name = path.as_os_str().to_owned();
    name.push(".part");
    let tmp = std::path::PathBuf::from(name);
    let written = (|| {
        let file = File::create(&tmp)?;
        std::io::Write::write_all(&mut &file, data)?;
        sync(&file)?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Trims the file to `size` (what was written; the preallocation past it is given back) and
/// syncs its data.
pub fn finish(file: &File, size: u64) -> std::io::Result<()> {
    trim(file, size);
    sync(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_strike_where_asked() {
        let f = Fault::parse("full@1KiB").unwrap();
        assert_eq!(
            f,
            Fault {
                kind: FaultKind::Full,
                after: 1024
            }
        );
        assert!(Fault::parse("melt@1KiB").is_err());
        assert!(Fault::parse("full").is_err());
        let dir = std::env::temp_dir().join(format!("vdifrec-diskio-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (file, _, _) = create_new(&dir.join("x"), false).unwrap();
        let mut direct = false;
        let budget = Budget {
            fault: Some(Fault {
                kind: FaultKind::Error,
                after: 1500,
            }),
            used: 1000,
        };
        let (n, e) = write_all_at(&file, &mut direct, &[7u8; 800], 0, budget).unwrap_err();
        assert_eq!(n, 500);
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(std::fs::metadata(dir.join("x")).unwrap().len(), 500);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn finishing_gives_back_the_preallocation_and_never_extends() {
        let dir = std::env::temp_dir().join(format!("vdifrec-trim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (file, _, _) = create_new(&dir.join("x"), false).unwrap();
        // Preallocated ahead: the size stays what was written.
        preallocate(&file, 0, 1 << 20);
        let mut direct = false;
        write_all_at(&file, &mut direct, &[7u8; 1000], 0, Budget::none()).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1000);
        // Asked to finish at a size past what the file holds: it stays as it is, no zeros.
        finish(&file, 4000).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1000);
        finish(&file, 800).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 800);
        sync_dir(&dir).unwrap();
        // Written whole: the temporary is gone, the old content replaced.
        write_whole(&dir.join("s.json"), b"{}").unwrap();
        write_whole(&dir.join("s.json"), b"{\"a\": 1}").unwrap();
        assert_eq!(std::fs::read(dir.join("s.json")).unwrap(), b"{\"a\": 1}");
        assert!(!dir.join("s.json.part").exists());
        assert!(write_whole(&dir.join("nothing").join("s.json"), b"{}").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
