//! The blocks of a transfer: each destination file cut into `block_size` pieces (the last
//! one shorter), numbered across the files in order. A block never spans two files, so each
//! is one `pwrite` at the receiver.

use super::wire::{self, BlockIndex, FileEntry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where block `index` lies: file `file`, bytes `offset..offset + len` of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSpan {
    pub file: usize,
    pub offset: u64,
    pub len: u64,
}

#[derive(Clone, Debug)]
pub struct BlockMap {
    block_size: u64,
    /// The first block of each file, and one past the last block of the last file.
    first: Vec<BlockIndex>,
    sizes: Vec<u64>,
}

impl BlockMap {
    pub fn new(files: &[FileEntry], block_size: u64) -> BlockMap {
        let mut first = Vec::with_capacity(files.len() + 1);
        let mut n = 0;
        for f in files {
            first.push(n);
            n += f.size.div_ceil(block_size);
        }
        first.push(n);
        BlockMap {
            block_size,
            first,
            sizes: files.iter().map(|f| f.size).collect(),
        }
    }

    pub fn count(&self) -> BlockIndex {
        *self.first.last().unwrap_or(&0)
    }

    pub fn span(&self, index: BlockIndex) -> Option<BlockSpan> {
        if index >= self.count() {
            return None;
        }
        // The last file whose first block is at or before `index` (empty files hold none).
        let file = self.first.partition_point(|&f| f <= index) - 1;
        let offset = (index - self.first[file]) * self.block_size;
        Some(BlockSpan {
            file,
            offset,
            len: (self.sizes[file] - offset).min(self.block_size),
        })
    }

    pub fn total_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// The xxh3-128 of every block, read by a few threads: each makes its reader with
    /// `reader()` and fills a block with `read(reader, span, bytes)`.
    pub fn digests<R, E: Send>(
        &self,
        reader: impl Fn() -> R + Sync,
        read: impl Fn(&mut R, BlockSpan, &mut [u8]) -> Result<(), E> + Sync,
    ) -> Result<Vec<u128>, E> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        let next = AtomicU64::new(0);
        let out = Mutex::new(vec![0u128; self.count() as usize]);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<(), E> {
                        let mut r = reader();
                        let mut buf = vec![0u8; self.block_size as usize];
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(span) = self.span(i) else {
                                return Ok(());
                            };
                            let b = &mut buf[..span.len as usize];
                            read(&mut r, span, b)?;
                            out.lock().unwrap()[i as usize] = wire::digest(b);
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().expect("digest thread"))
        })?;
        Ok(out.into_inner().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_each_file_exactly_once() {
        let files: Vec<FileEntry> = [10u64, 0, 8, 3]
            .iter()
            .map(|&size| FileEntry {
                name: String::new(),
                size,
            })
            .collect();
        let m = BlockMap::new(&files, 4);
        // 3 blocks, none for the empty file, 2, 1.
        assert_eq!(m.count(), 6);
        let spans: Vec<(usize, u64, u64)> = (0..m.count())
            .map(|i| m.span(i).map(|s| (s.file, s.offset, s.len)).unwrap())
            .collect();
        assert_eq!(
            spans,
            vec![
                (0, 0, 4),
                (0, 4, 4),
                (0, 8, 2),
                (2, 0, 4),
                (2, 4, 4),
                (3, 0, 3)
            ]
        );
        assert_eq!(m.span(6), None);
        assert_eq!(m.total_bytes(), 21);
    }
}
