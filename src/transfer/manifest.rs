//! The receiver's record of a partial copy, beside it: first the offer it is a copy of, then
//! one line per block known to be on disk with its checksum. A line is appended only after
//! the block's bytes were flushed (`fdatasync`), so after a crash or a reboot every block the
//! manifest lists is there; a block written but not yet listed is simply sent again.

use super::wire::{hex128, parse_hex128, BlockIndex, Offer};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

#[derive(Serialize, Deserialize)]
struct Head {
    vdifrec_partial_copy: Offer,
}

#[derive(Serialize, Deserialize)]
struct Line {
    block: BlockIndex,
    digest: String,
}

pub struct Manifest {
    file: File,
}

/// What a manifest says: the offer it belongs to and the blocks on disk with their checksums.
pub type Contents = (Offer, Vec<(BlockIndex, u128)>);

impl Manifest {
    /// A new manifest for `offer` (replacing any), flushed before it is used.
    pub fn create(path: &Path, offer: &Offer) -> std::io::Result<Manifest> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags_nofollow()
            .open(path)?;
        let head = serde_json::to_string(&Head {
            vdifrec_partial_copy: offer.clone(),
        })
        .map_err(std::io::Error::other)?;
        writeln!(file, "{head}")?;
        file.sync_all()?;
        Ok(Manifest { file })
    }

    /// An existing manifest, to append to.
    pub fn reopen(path: &Path) -> std::io::Result<Manifest> {
        let file = OpenOptions::new()
            .append(true)
            .custom_flags_nofollow()
            .open(path)?;
        Ok(Manifest { file })
    }

    /// What `path` holds; None when it is absent or not a manifest. A last line cut short by
    /// a crash is ignored (that block is sent again).
    pub fn load(path: &Path) -> std::io::Result<Option<Contents>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut lines = text.lines();
        let Some(Ok(head)) = lines.next().map(serde_json::from_str::<Head>) else {
            return Ok(None);
        };
        let blocks = lines
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
            .filter_map(|l| Some((l.block, parse_hex128(&l.digest)?)))
            .collect();
        Ok(Some((head.vdifrec_partial_copy, blocks)))
    }

    /// Notes blocks as on disk (their data already flushed), and flushes the note.
    pub fn append(&mut self, blocks: &[(BlockIndex, u128)]) -> std::io::Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for &(block, d) in blocks {
            let line = serde_json::to_string(&Line {
                block,
                digest: hex128(d),
            })
            .map_err(std::io::Error::other)?;
            text.push_str(&line);
            text.push('\n');
        }
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }
}

/// `O_NOFOLLOW`: the receiver never writes through a link someone left in its directory.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NOFOLLOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::wire::{FileEntry, Shape};

    #[test]
    fn survives_a_torn_last_line() {
        let dir = std::env::temp_dir().join(format!("vdifrec-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(".x.vdifrec-manifest");
        let offer = Offer {
            name: "x".into(),
            shape: Shape::File,
            files: vec![FileEntry {
                name: String::new(),
                size: 10,
            }],
            block_size: 4,
            sources: vec![],
        };
        Manifest::create(&p, &offer)
            .unwrap()
            .append(&[(0, 7), (2, 9)])
            .unwrap();
        Manifest::reopen(&p).unwrap().append(&[(1, 8)]).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"block\":3,\"dig").unwrap();
        let (o, blocks) = Manifest::load(&p).unwrap().unwrap();
        assert_eq!(o, offer);
        assert_eq!(blocks, vec![(0, 7), (2, 9), (1, 8)]);
        assert!(Manifest::load(&dir.join("absent")).unwrap().is_none());
        std::fs::write(&p, "not json\n").unwrap();
        assert!(Manifest::load(&p).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
