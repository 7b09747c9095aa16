//! The catalogue against what was put on the disks: randomly made disks (file, vbs and mk6
//! scans, missing chunks, torn ends, unclosed scans, data streams, names that differ only by
//! jive5ab's suffix), changed behind the catalogue's back between questions.

use crate::vdif::layout::{self, Format, Mk6BlockHeader, Mk6FileHeader};
use crate::vdif::scan::tests::{stream_of, FS};
use crate::vdif::scan::{find_scans, ScanLayout, ScanSummary};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Names as a station makes them: repeats with jive5ab's suffix, a split scan's data streams.
const NAMES: [&str; 8] = ["s1", "s1a", "s1b", "s1_ds1", "s1_ds2", "s2", "s2a", "s10"];

#[derive(Clone, Debug)]
struct Part {
    frames: usize,
    disk: usize,
    /// False: the part was lost (a disk not given, a chunk deleted).
    present: bool,
}

#[derive(Clone, Debug)]
struct Model {
    name: String,
    format: Format,
    parts: Vec<Part>,
    /// Bytes of a frame cut short at the end of the last present part (file and vbs).
    torn: usize,
    closed: bool,
}

fn format_of(k: u8) -> Format {
    [Format::File, Format::Vbs, Format::Mk6][k as usize % 3]
}

prop_compose! {
    fn part(disks: usize)(frames in 1usize..40, disk in 0..disks, present in prop::bool::weighted(0.85)) -> Part {
        Part { frames, disk, present }
    }
}

prop_compose! {
    fn scan(disks: usize)(
        f in 0u8..3,
        parts in prop::collection::vec(part(disks), 1..6),
        torn in prop_oneof![Just(0usize), 1usize..FS],
        closed in any::<bool>(),
    ) -> (Format, Vec<Part>, usize, bool) {
        (format_of(f), parts, torn, closed)
    }
}

fn models(disks: usize) -> impl Strategy<Value = Vec<Model>> {
    prop::collection::vec(prop::option::of(scan(disks)), NAMES.len()).prop_map(|v| {
        v.into_iter()
            .zip(NAMES)
            .filter_map(|(s, name)| {
                let (format, mut parts, mut torn, closed) = s?;
                if format == Format::File {
                    // One file per disk at most: a rotated scan's parts, all on the first disk.
                    let disk = parts[0].disk;
                    for p in &mut parts {
                        p.disk = disk;
                    }
                }
                if format == Format::Mk6 {
                    torn = 0;
                }
                if !parts.iter().any(|p| p.present) {
                    parts[0].present = true;
                }
                Some(Model {
                    name: name.to_string(),
                    format,
                    parts,
                    torn,
                    closed,
                })
            })
            .collect()
    })
}

static CASE: AtomicUsize = AtomicUsize::new(0);

struct Disks {
    root: PathBuf,
    disks: Vec<PathBuf>,
}

impl Disks {
    fn new(n: usize) -> Disks {
        let root = std::env::temp_dir().join(format!(
            "vdifrec-catalogue-{}-{}",
            std::process::id(),
            CASE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let disks: Vec<PathBuf> = (0..n).map(|i| root.join(format!("m{i}"))).collect();
        for d in &disks {
            std::fs::create_dir_all(d).unwrap();
        }
        Disks { root, disks }
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Lays scan `m` out on the disks as a recorder (or a crash of one) would.
fn write(d: &Disks, m: &Model) {
    let total: usize = m.parts.iter().map(|p| p.frames).sum();
    let data = stream_of(total.div_ceil(2) as u64);
    let last_present = m.parts.iter().rposition(|p| p.present).unwrap();
    let mut at = 0;
    let mut mk6: Vec<Option<Vec<u8>>> = vec![None; d.disks.len()];
    for (n, p) in m.parts.iter().enumerate() {
        let mut bytes = data[at * FS..(at + p.frames) * FS].to_vec();
        at += p.frames;
        if !p.present {
            continue;
        }
        if n == last_present {
            bytes.extend(std::iter::repeat_n(0xa5u8, m.torn));
        }
        let disk = &d.disks[p.disk];
        match m.format {
            Format::Vbs => {
                let path = layout::vbs_chunk_path(disk, &m.name, n as u64);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, bytes).unwrap();
            }
            Format::File => {
                std::fs::write(layout::file_part_path(disk, &m.name, n as u64), bytes).unwrap();
            }
            Format::Mk6 => {
                let f = mk6[p.disk].get_or_insert_with(|| {
                    Mk6FileHeader::vdif((8 + 40 * FS) as u32, FS as u32)
                        .to_bytes()
                        .to_vec()
                });
                let h = Mk6BlockHeader {
                    blocknum: n as u32,
                    wb_size: (8 + bytes.len()) as u32,
                };
                f.extend(h.to_bytes());
                f.extend(bytes);
            }
        }
    }
    for (i, f) in mk6.iter().enumerate() {
        if let Some(f) = f {
            std::fs::write(layout::mk6_path(&d.disks[i], &m.name), f).unwrap();
        }
    }
    if m.closed {
        let disk = &d.disks[m.parts[last_present].disk];
        let summary = match m.format {
            Format::File => {
                let files: Vec<_> = (0..m.parts.len())
                    .map(|n| {
                        let p = layout::file_part_path(disk, &m.name, n as u64);
                        serde_json::json!({ "path": p })
                    })
                    .collect();
                serde_json::json!({ "name": m.name, "files": files })
            }
            _ => serde_json::json!({ "name": m.name, "chunks": m.parts.len() }),
        };
        let path = layout::summary_path(disk, &m.name, m.format);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, summary.to_string()).unwrap();
    }
}

/// Removes scan `m` from the disks, as `rm -r` would.
fn delete(d: &Disks, m: &Model) {
    for disk in &d.disks {
        let _ = std::fs::remove_dir_all(layout::vbs_dir(disk, &m.name));
        let _ = std::fs::remove_file(layout::mk6_path(disk, &m.name));
        for n in 0..m.parts.len() {
            let _ = std::fs::remove_file(layout::file_part_path(disk, &m.name, n as u64));
        }
        let _ = std::fs::remove_file(layout::summary_path(disk, &m.name, m.format));
    }
}

/// What a listing must say of scan `m`, worked out from how it was laid out alone.
fn expected(d: &Disks, m: &Model) -> serde_json::Value {
    let present: Vec<usize> = (0..m.parts.len()).filter(|&n| m.parts[n].present).collect();
    let top = *present.last().unwrap();
    let known = if m.closed { m.parts.len() } else { top + 1 };
    let missing: Vec<usize> = (0..known).filter(|n| !present.contains(n)).collect();
    let mut disks: Vec<&Path> = present
        .iter()
        .map(|&n| d.disks[m.parts[n].disk].as_path())
        .collect();
    disks.sort();
    disks.dedup();
    let frames: usize = present.iter().map(|&n| m.parts[n].frames).sum();
    serde_json::json!({
        "name": m.name,
        "format": m.format.name(),
        "disks": disks,
        "chunks": present.len(),
        "missing": missing,
        "bytes": frames * FS,
        "torn_bytes": m.torn,
        "closed": m.closed,
        "frame_size": FS,
        "error": null,
    })
}

fn fields(s: &ScanSummary) -> serde_json::Value {
    let v = serde_json::to_value(s).unwrap();
    let keep = [
        "name",
        "format",
        "disks",
        "chunks",
        "missing",
        "bytes",
        "torn_bytes",
        "closed",
        "frame_size",
        "error",
    ];
    keep.iter().map(|k| (k.to_string(), v[k].clone())).collect()
}

/// The listing (a fresh walk) against the model, and every scan as the catalogue finds it
/// against the listing, field for field; names in use as the catalogue says against the model.
fn check(d: &Disks, scans: &[Model]) -> Result<(), TestCaseError> {
    let listed = find_scans(&d.disks).unwrap();
    let mut want: Vec<serde_json::Value> = scans.iter().map(|m| expected(d, m)).collect();
    want.sort_by_key(|v| v["name"].as_str().unwrap().to_string());
    let got: Vec<serde_json::Value> = listed.iter().map(fields).collect();
    prop_assert_eq!(&got, &want);
    for s in &listed {
        let found = ScanLayout::locate(&s.name, &d.disks, Some(s.format))
            .and_then(|l| l.summary())
            .unwrap();
        prop_assert_eq!(
            serde_json::to_value(&found).unwrap(),
            serde_json::to_value(s).unwrap()
        );
    }
    for name in NAMES.iter().chain(&["s3", "s"]) {
        let on_disk = scans.iter().any(|m| {
            m.name == *name || (m.name.starts_with(name) && m.name[name.len()..].starts_with("_ds"))
        });
        prop_assert_eq!(super::name_taken(name, &d.disks), on_disk, "name {}", name);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_catalogue_sees_the_disks_as_they_are(
        (n_disks, all) in (1usize..4).prop_flat_map(|n| (Just(n), models(n))),
    ) {
        let d = Disks::new(n_disks);
        // Half the scans before the catalogue first reads the disks, half after.
        let (before, after) = all.split_at(all.len() / 2);
        for m in before {
            write(&d, m);
        }
        let mut now: Vec<Model> = before.to_vec();
        check(&d, &now)?;
        for m in after {
            write(&d, m);
            now.push(m.clone());
            check(&d, &now)?;
        }
        // Another program deletes one, and adds a chunk to a vbs scan.
        if let Some(m) = now.first().cloned() {
            delete(&d, &m);
            now.remove(0);
            check(&d, &now)?;
        }
        if let Some(i) = now.iter().position(|m| m.format == Format::Vbs && !m.closed && m.torn == 0) {
            // A chunk more in a directory the scan already has: no name at a disk's top changes.
            let m = &mut now[i];
            let first = m.parts.iter().position(|p| p.present).unwrap();
            let disk = m.parts[first].disk;
            let n = m.parts.len();
            let total: usize = m.parts.iter().map(|p| p.frames).sum::<usize>() + 5;
            let data = stream_of(total.div_ceil(2) as u64);
            let from = (total - 5) * FS;
            std::fs::write(
                layout::vbs_chunk_path(&d.disks[disk], &m.name, n as u64),
                &data[from..from + 5 * FS],
            )
            .unwrap();
            m.parts.push(Part { frames: 5, disk, present: true });
            check(&d, &now)?;
        }
        // A disk taken away and another put in its place under the same path.
        if d.disks.len() > 1 {
            let gone = d.disks.len() - 1;
            std::fs::remove_dir_all(&d.disks[gone]).unwrap();
            std::fs::create_dir_all(&d.disks[gone]).unwrap();
            // The scans it held are gone whole; the others are laid out again.
            for m in &now {
                delete(&d, m);
            }
            now.retain(|m| !m.parts.iter().any(|p| p.present && p.disk == gone));
            for m in &now {
                write(&d, m);
            }
            check(&d, &now)?;
        }
    }
}
