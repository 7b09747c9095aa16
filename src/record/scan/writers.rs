//! The scan's writer threads. Each takes the next chunk from the queue and the next ready
//! disk, writes the chunk there, and reports it done so the gate can release its frames. A
//! disk that fails or fills is dropped from the set and the same chunk goes to the next disk:
//! nothing is lost while any disk remains. The last disk keeps what of a vbs chunk fitted (whole
//! frames); with no disk left, the rest is counted as dropped.

use crate::record::ring::Ring;
use crate::record::scan::chunk::{self, ChunkJob, ScanOut};
use crate::record::scan::disks::DiskSet;
use crate::record::scan::durable::DurableChunk;
use crate::record::stats::FileRecord;
use crossbeam_channel::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A chunk the writers are finished with: on disk, or dropped for want of a disk.
#[derive(Clone, Debug)]
pub struct Done {
    /// The stream whose ring held the chunk.
    pub input: usize,
    pub first_seq: u64,
    pub frames: u64,
    pub written: bool,
    /// The chunks of the scan its writing made durable (itself, or with `file` and `mk6`
    /// those its file's sync covered; maybe none yet).
    pub durable: Vec<DurableChunk>,
}

/// What the writers of one scan tell its summary.
#[derive(Default)]
pub struct WriterLog {
    pub bytes_written: u64,
    /// Bytes written per scan name (one per data stream with a split).
    pub bytes_by_scan: std::collections::BTreeMap<String, u64>,
    pub bytes_dropped: u64,
    pub header_bytes: u64,
    /// vbs chunk files as they close (the `file` and `mk6` files are listed when they close).
    pub files: Vec<FileRecord>,
    pub notes: Vec<String>,
    pub error: Option<String>,
}

pub struct Writers {
    handles: Vec<JoinHandle<()>>,
    pub log: Arc<Mutex<WriterLog>>,
}

impl Writers {
    /// Starts `n` writers on the queue `jobs`; each reports to `done` (the gate).
    pub fn start(
        n: usize,
        disks: Arc<DiskSet>,
        jobs: Receiver<ChunkJob>,
        done: Sender<Done>,
        cpus: &[usize],
    ) -> std::io::Result<Writers> {
        let log = Arc::new(Mutex::new(WriterLog::default()));
        // A writer takes the next chunk and its disk in one turn, so chunks reach each disk in
        // the order they are numbered (a Mark6 file's blocks increase, a file stays in order).
        let turn = Arc::new(Mutex::new(()));
        let mut handles = Vec::new();
        for k in 0..n {
            let (disks, jobs, done, log, turn) = (
                disks.clone(),
                jobs.clone(),
                done.clone(),
                log.clone(),
                turn.clone(),
            );
            let cpu = (!cpus.is_empty()).then(|| cpus[k % cpus.len()]);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("vdifrec-wr{k}"))
                    .spawn(move || {
                        if let Some(cpu) = cpu {
                            let note = crate::affinity::pin_current("scan writer", cpu);
                            if k == 0 {
                                log.lock().unwrap().notes.push(note);
                            }
                        }
                        loop {
                            let (job, disk) = {
                                let _turn = turn.lock().unwrap();
                                let Ok(job) = jobs.recv() else { break };
                                (job, disks.take())
                            };
                            let d = write_somewhere(&disks, &job, disk, &log);
                            let _ = done.send(d);
                        }
                    })?,
            );
        }
        Ok(Writers { handles, log })
    }

    /// Waits for every writer (the queue's sender must be dropped first).
    pub fn join(self) -> Arc<Mutex<WriterLog>> {
        for h in self.handles {
            if h.join().is_err() {
                self.log.lock().unwrap().error.get_or_insert_with(|| {
                    "a scan writer thread stopped unexpectedly (a bug: please report it)".into()
                });
            }
        }
        self.log
    }
}

/// Writes `job` to `first` (a disk taken for it), or, when that fails, to the next ready
/// disk, until one takes it or none is left.
fn write_somewhere(
    disks: &DiskSet,
    job: &ChunkJob,
    mut first: Option<usize>,
    log: &Mutex<WriterLog>,
) -> Done {
    let out: &ScanOut = &job.out;
    let ring: &Ring = &job.ring;
    let bytes = job.frames * out.frame_size as u64;
    let mut tried = 0;
    // Chunks made durable by attempts that failed (a rotated part closed on the way).
    let mut durable = Vec::new();
    // Bytes of the chunk kept on the last disk as it filled (the rest is dropped).
    let mut kept_bytes = 0;
    loop {
        let next = if tried == 0 {
            first.take()
        } else {
            disks.take()
        };
        tried += 1;
        let Some(d) = next else {
            let mut l = log.lock().unwrap();
            l.bytes_dropped += bytes - kept_bytes;
            l.error.get_or_insert_with(|| {
                "no disk is left in the set: the rest of the scan was not written".into()
            });
            return Done {
                input: job.input,
                first_seq: job.first_seq(),
                frames: job.frames,
                written: false,
                durable,
            };
        };
        let disk = &disks.disks[d];
        let last_disk = disks.alive() == [d];
        match chunk::write_chunk(out, ring, disk, job, last_disk) {
            Ok(mut w) => {
                disks.give(d);
                durable.append(&mut w.durable);
                if let Some(l) = job.stream.latency() {
                    // The write stage ends when the chunk's write returned (a vbs chunk's file
                    // after its fdatasync); scans have no durable latency stage of their own
                    // (what is durable is the scan's `durable` prefix).
                    let written = crate::record::latency::now_ns();
                    for &(seq, n) in &job.ranges {
                        l.written(seq, seq + n, written, true);
                    }
                }
                let mut l = log.lock().unwrap();
                l.bytes_written += bytes;
                *l.bytes_by_scan.entry(out.name.clone()).or_default() += bytes;
                l.header_bytes += w.header_bytes;
                if let Some(n) = w.note {
                    if !l.notes.contains(&n) {
                        l.notes.push(n);
                    }
                }
                if out.format == crate::vdif::layout::Format::Vbs {
                    l.files.push(FileRecord {
                        path: w.path.display().to_string(),
                        bytes: w.file_bytes,
                    });
                }
                return Done {
                    input: job.input,
                    first_seq: job.first_seq(),
                    frames: job.frames,
                    written: true,
                    durable,
                };
            }
            Err(mut f) => {
                durable.append(&mut f.durable);
                if let Some(k) = f.kept.take() {
                    kept_bytes = k.durable.bytes;
                    let mut l = log.lock().unwrap();
                    l.bytes_written += kept_bytes;
                    *l.bytes_by_scan.entry(out.name.clone()).or_default() += kept_bytes;
                    l.files.push(FileRecord {
                        path: k.path.display().to_string(),
                        bytes: kept_bytes,
                    });
                    l.notes.push(format!(
                        "chunk {} kept on {} as far as it fitted: {} of its {} frames",
                        job.number,
                        disk.path.display(),
                        k.frames,
                        job.frames
                    ));
                    durable.push(k.durable);
                }
                let why = f.why;
                log.lock().unwrap().notes.push(format!(
                    "disk {} left the set: {why}; chunk {} goes to the next disk",
                    disk.path.display(),
                    job.number
                ));
                disks.drop_disk(d, why);
            }
        }
    }
}
