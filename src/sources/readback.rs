//! Reading a closed recording back frame by frame without disturbing a recording in progress.
//!
//! A verification pass that reads through the page cache evicts nothing useful but costs a
//! copy per byte and memory pressure at the worst moment (the writer uses O_DIRECT so that
//! the cache never balloons). Here the file is read with O_DIRECT in large aligned chunks
//! that hold whole frames; where the file system refuses O_DIRECT, buffered reads with
//! `POSIX_FADV_DONTNEED` behind them.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

const PAGE: usize = 4096;
/// About this many bytes per read.
const CHUNK_TARGET: usize = 8 << 20;
/// Beyond this, the least chunk holding whole frames *and* whole pages is too big to allocate
/// casually (odd frame sizes); read buffered instead.
const DIRECT_CHUNK_LIMIT: usize = 64 << 20;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A heap buffer whose start is page-aligned, as O_DIRECT needs.
struct AlignedBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuffer {
    fn new(len: usize) -> AlignedBuffer {
        let storage = vec![0u8; len + PAGE];
        let start = storage.as_ptr().align_offset(PAGE);
        AlignedBuffer {
            storage,
            start,
            len,
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Calls `frame(index, bytes)` for each frame of the file in order; a trailing piece shorter
/// than a frame is passed as it is (the caller decides what a short frame means). Returns
/// whether O_DIRECT was used.
pub fn for_each_frame(
    path: &Path,
    frame_size: usize,
    mut frame: impl FnMut(u64, &[u8]),
) -> io::Result<bool> {
    if frame_size == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "frame size 0"));
    }
    // The least length that is both whole frames and whole pages, repeated up to ~8 MiB.
    let unit = frame_size / gcd(frame_size, PAGE) * PAGE;
    let (file, direct, chunk) = if unit <= DIRECT_CHUNK_LIMIT {
        let chunk = unit * (CHUNK_TARGET / unit).max(1);
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => (f, true, chunk),
            Err(_) => (File::open(path)?, false, chunk),
        }
    } else {
        (
            File::open(path)?,
            false,
            frame_size * (CHUNK_TARGET / frame_size).max(1),
        )
    };
    let mut buf = AlignedBuffer::new(chunk);
    let mut offset = 0u64;
    let mut index = 0u64;
    loop {
        let got = read_full(&file, buf.as_mut(), offset)?;
        if got == 0 {
            break;
        }
        for piece in buf.as_mut()[..got].chunks(frame_size) {
            frame(index, piece);
            index += 1;
        }
        if !direct {
            // SAFETY: advice about our own descriptor's range just read.
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    offset as libc::off_t,
                    got as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
        }
        offset += got as u64;
        if got < chunk {
            break;
        }
    }
    Ok(direct)
}

/// Reads until `buf` is full or the file ends; with O_DIRECT a read is page-sized and the
/// last one returns what is left of the file.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled part of our buffer from our descriptor.
        let rc = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                (offset + got as u64) as libc::off_t,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc == 0 {
            break;
        }
        got += rc as usize;
        if got % PAGE != 0 {
            break; // a short, unaligned read: the end of the file
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("vdifrec-readback-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn frames_of(path: &Path, fs: usize) -> (Vec<Vec<u8>>, bool) {
        let mut out = Vec::new();
        let direct = for_each_frame(path, fs, |i, b| {
            assert_eq!(i as usize, out.len());
            out.push(b.to_vec());
        })
        .unwrap();
        (out, direct)
    }

    #[test]
    fn every_frame_comes_back_in_order_with_a_short_tail() {
        let dir = scratch("frames");
        for (fs, n, tail) in [
            (8224usize, 2000usize, 0usize),
            (8224, 131, 100),
            (5000, 3001, 7),
            (1, 5000, 0),
        ] {
            let path = dir.join(format!("r{fs}_{n}.vdif"));
            let bytes: Vec<u8> = (0..fs * n + tail)
                .map(|i| (i * 7 + i / 4099) as u8)
                .collect();
            std::fs::write(&path, &bytes).unwrap();
            let (frames, _) = frames_of(&path, fs);
            assert_eq!(frames.len(), n + usize::from(tail > 0));
            assert_eq!(frames.concat(), bytes);
            assert!(frames[..n].iter().all(|f| f.len() == fs));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_file_has_no_frames() {
        let dir = scratch("empty");
        let path = dir.join("empty.vdif");
        std::fs::write(&path, b"").unwrap();
        assert!(frames_of(&path, 8224).0.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
