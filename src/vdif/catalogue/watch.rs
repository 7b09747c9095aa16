//! inotify, read without blocking: the kernel queues an event for every name created,
//! removed or renamed in a watched directory by any program, before that program's call
//! returns, so that draining the queue before an answer is as good as reading the directory
//! again, at the cost of one `read` when nothing changed.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What happened in a watched directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// `name` appeared (created, or renamed into the directory).
    Added { watch: i32, name: String },
    /// `name` went (removed, or renamed away).
    Removed { watch: i32, name: String },
    /// The directory itself went or moved, or the kernel stopped watching it.
    Gone { watch: i32 },
    /// The kernel's queue overflowed: events were lost, every watched directory must be read
    /// again.
    Overflow,
}

pub struct Watcher {
    fd: i32,
}

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

impl Watcher {
    /// None where the kernel offers no inotify instance (a limit reached, a sandbox).
    pub fn new() -> Option<Watcher> {
        // SAFETY: no pointers; the fd is owned by the Watcher and closed on drop.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        (fd >= 0).then_some(Watcher { fd })
    }

    /// Watches `dir`; None where it cannot (not a directory, the watch limit reached).
    pub fn add(&self, dir: &Path) -> Option<i32> {
        let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd, c.as_ptr(), MASK) };
        (wd >= 0).then_some(wd)
    }

    pub fn remove(&self, watch: i32) {
        // SAFETY: plain call on our own fd; an unknown watch is an error we need not see.
        unsafe { libc::inotify_rm_watch(self.fd, watch) };
    }

    /// Every event queued so far, in order.
    pub fn drain(&self) -> Vec<Event> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break; // EAGAIN: nothing more queued
            }
            parse(&buf[..n as usize], &mut out);
        }
        out
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// Reads `struct inotify_event`s (wd, mask, cookie, len, then `len` bytes of NUL-padded name).
fn parse(mut b: &[u8], out: &mut Vec<Event>) {
    const HEAD: usize = 16;
    while b.len() >= HEAD {
        let word = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let watch = word(0) as i32;
        let mask = word(4);
        let len = word(12) as usize;
        let Some(raw) = b.get(HEAD..HEAD + len) else {
            break;
        };
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        let name = String::from_utf8_lossy(&raw[..end]).into_owned();
        b = &b[HEAD + len..];
        if mask & libc::IN_Q_OVERFLOW != 0 {
            out.push(Event::Overflow);
        } else if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
            out.push(Event::Gone { watch });
        } else if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
            out.push(Event::Added { watch, name });
        } else if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
            out.push(Event::Removed { watch, name });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_what_another_program_does_to_a_directory() {
        let Some(w) = Watcher::new() else {
            return; // no inotify here: the catalogue reads directories' times instead
        };
        let dir = std::env::temp_dir().join(format!("vdifrec-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let wd = w.add(&dir).unwrap();
        assert!(w.drain().is_empty());
        std::fs::create_dir(dir.join("s1")).unwrap();
        std::fs::write(dir.join("s2.vdif"), b"x").unwrap();
        std::fs::rename(dir.join("s2.vdif"), dir.join("s3.vdif")).unwrap();
        std::fs::remove_dir(dir.join("s1")).unwrap();
        let added = |n: &str| Event::Added {
            watch: wd,
            name: n.into(),
        };
        let removed = |n: &str| Event::Removed {
            watch: wd,
            name: n.into(),
        };
        assert_eq!(
            w.drain(),
            vec![
                added("s1"),
                added("s2.vdif"),
                removed("s2.vdif"),
                added("s3.vdif"),
                removed("s1")
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(w.drain().contains(&Event::Gone { watch: wd }));
    }
}
