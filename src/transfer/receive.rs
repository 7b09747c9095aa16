//! `vdifrec receive`: the correlator's end. It listens, proves and checks the token on every
//! connection, and for each transfer offered writes a partial copy beside the destination
//! (`.<name>.vdifrec-part`, preallocated), block by block at each block's offset, each block
//! checked against its xxh3-128 before it is written and acknowledged. A manifest lists the
//! blocks on disk; the copy gets its name only after the whole of it was read back and every
//! block matched. A refused or broken connection never stops the receiver, and connections
//! that say nothing cannot keep others out: the handshakes have few places, shared between
//! addresses, that a silent connection gives up to a newer one (`handshakes`).

use super::auth;
use super::blocks::BlockMap;
use super::cpu::CpuCounters;
use super::handshakes::{self, Handshakes};
use super::manifest::Manifest;
use super::names::{manifest_name, name_problem, partial_name};
use super::wire::{self, BlockIndex, Message, Offer, PlanState, Shape};
use super::TransferError;
use crate::options::{listen_address, ArgError, Size};
use memmap2::MmapMut;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Smallest and largest block a sender may choose (a multiple of 4 KiB, for O_DIRECT).
pub const MIN_BLOCK: u64 = 64 << 10;
pub const MAX_BLOCK: u64 = 1 << 30;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReceiveOptions {
    /// `[HOST:]PORT` to listen on; a port alone listens on localhost only.
    pub listen: Option<String>,
    /// Where transfers land (created if absent).
    pub dir: Option<PathBuf>,
    /// The shared token's file (its first line).
    pub token_file: Option<PathBuf>,
    /// Connections served at once; more are refused until one ends.
    pub max_connections: i64,
    /// Memory for block buffers (one block per data connection); a connection waits for
    /// room when it is all taken.
    pub max_memory: Size,
}

impl Default for ReceiveOptions {
    fn default() -> ReceiveOptions {
        ReceiveOptions {
            listen: None,
            dir: None,
            token_file: None,
            max_connections: 64,
            max_memory: Size::bytes(2 << 30),
        }
    }
}

/// A transfer the receiver finished, refused or lost, as the command line prints it.
#[derive(Clone, Debug, Serialize)]
pub struct ReceiveEvent {
    pub peer: String,
    pub name: String,
    /// `received`, `skipped` (identical already there), `refused`, `interrupted` (resumable).
    pub state: &'static str,
    pub bytes: u64,
    pub bytes_received: u64,
    pub blocks: u64,
    pub blocks_resumed: u64,
    pub blocks_damaged: u64,
    pub seconds: f64,
    pub digest: Option<String>,
    pub message: String,
}

impl ReceiveEvent {
    /// A refusal from `peer` of `name` (empty: before any name was offered); the fields of a
    /// transfer are filled in as it goes.
    fn refused(peer: SocketAddr, name: &str, message: String) -> ReceiveEvent {
        ReceiveEvent {
            peer: peer.to_string(),
            name: name.to_string(),
            state: "refused",
            bytes: 0,
            bytes_received: 0,
            blocks: 0,
            blocks_resumed: 0,
            blocks_damaged: 0,
            seconds: 0.0,
            digest: None,
            message,
        }
    }
}

/// Bytes of block buffers in use, bounded by `max_memory`.
struct Budget {
    used: Mutex<u64>,
    freed: Condvar,
    max: u64,
}

impl Budget {
    fn take(&self, bytes: u64, stop: &AtomicBool) -> bool {
        let mut used = self.used.lock().unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while *used + bytes > self.max {
            if stop.load(Ordering::Relaxed) || Instant::now() > until {
                return false;
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        *used += bytes;
        true
    }

    fn give(&self, bytes: u64) {
        *self.used.lock().unwrap() -= bytes;
        self.freed.notify_all();
    }
}

/// One destination file of a session: a buffered descriptor and, where the file system
/// allows it, an O_DIRECT one for whole aligned blocks.
struct DestFile {
    buffered: File,
    direct: Option<File>,
}

struct SessionState {
    /// Each block's checksum once known (from the manifest or from the block as received).
    expected: Vec<Option<u128>>,
    /// Listed in the manifest: on disk after a flush.
    listed: Vec<bool>,
    /// Written since the last flush, not yet listed.
    written: Vec<(BlockIndex, u128)>,
    manifest: Manifest,
    in_flight: usize,
    damaged: u64,
    failed: Option<String>,
}

struct Session {
    offer: Offer,
    map: BlockMap,
    files: Vec<DestFile>,
    part: PathBuf,
    state: Mutex<SessionState>,
    idle: Condvar,
    received: AtomicU64,
    closed: AtomicBool,
    started: Instant,
    /// Held across a whole flush, so that a flush that finds nothing pending can be sure an
    /// earlier one has finished (the copy is named only after its blocks are on disk).
    flushing: Mutex<()>,
}

impl Session {
    /// Flushes the blocks written so far and lists them in the manifest.
    fn flush(&self) -> std::io::Result<()> {
        let _one_at_a_time = self.flushing.lock().unwrap();
        let pending = std::mem::take(&mut self.state.lock().unwrap().written);
        if pending.is_empty() {
            return Ok(());
        }
        // Every block in `pending` was written before this fdatasync began; only the files
        // they are in need it (a vbs copy has thousands).
        let files: std::collections::BTreeSet<usize> = pending
            .iter()
            .filter_map(|&(b, _)| self.map.span(b).map(|s| s.file))
            .collect();
        for f in files {
            self.files[f].buffered.sync_data()?;
        }
        let mut st = self.state.lock().unwrap();
        st.manifest.append(&pending)?;
        for &(b, _) in &pending {
            st.listed[b as usize] = true;
        }
        Ok(())
    }

    fn write_block(&self, index: BlockIndex, bytes: &[u8]) -> std::io::Result<()> {
        let span = self.map.span(index).expect("index checked");
        let f = &self.files[span.file];
        let aligned = span.offset % 4096 == 0 && bytes.len() % 4096 == 0;
        match (&f.direct, aligned) {
            (Some(d), true) => d.write_all_at(bytes, span.offset),
            _ => f.buffered.write_all_at(bytes, span.offset),
        }
    }
}

struct Shared {
    dir: PathBuf,
    token: Vec<u8>,
    max_connections: usize,
    connections: AtomicUsize,
    budget: Budget,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    /// Names with a transfer under way (one push at a time per destination).
    busy: Mutex<HashSet<String>>,
    next_session: AtomicU64,
    /// Open connections, shut down when the receiver stops.
    open: Mutex<HashMap<u64, TcpStream>>,
    next_connection: AtomicU64,
    events: Mutex<Vec<ReceiveEvent>>,
    stop: AtomicBool,
    /// Places for connections that have not proven the token yet.
    handshakes: Handshakes,
}

/// How long a connection may say nothing in its handshake before it is dropped.
const HANDSHAKE_SILENCE: Duration = Duration::from_secs(10);

/// TCP keepalive probes after 10 s idle, every 5 s, 4 of them: a half-open connection (the
/// other end gone without a word) ends within about 30 s instead of hours.
pub fn keepalive(s: &TcpStream) {
    let k = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&k);
}

pub struct Receiver {
    listener: TcpListener,
    shared: Arc<Shared>,
}

fn arg(name: &str, why: impl Into<String>) -> TransferError {
    ArgError::new(name, why).into()
}

impl Receiver {
    /// Checks the options, reads the token, creates the directory and binds the port.
    pub fn bind(opts: &ReceiveOptions) -> Result<Receiver, TransferError> {
        let listen = opts.listen.as_deref().ok_or_else(|| {
            arg(
                "listen",
                "give [HOST:]PORT to listen on (a port alone: localhost only)",
            )
        })?;
        let addr = listen_address("listen", listen)?;
        let dir = opts
            .dir
            .clone()
            .ok_or_else(|| arg("dir", "give the directory transfers land in"))?;
        let token = auth::read_token(opts.token_file.as_deref())?;
        let max_connections = crate::options::in_range(
            "max_connections",
            opts.max_connections,
            2,
            4096,
            "a control connection and at least one data connection",
        )? as usize;
        let max_memory = opts.max_memory.get("max_memory")?;
        if max_memory < MIN_BLOCK {
            return Err(arg("max_memory", format!("{max_memory} bytes holds no block: give at least 64KiB (one block per data connection)")));
        }
        if dir.exists() && !dir.is_dir() {
            return Err(arg("dir", format!("{} is not a directory", dir.display())));
        }
        std::fs::create_dir_all(&dir).map_err(TransferError::io(&dir))?;
        super::raise_open_files_limit();
        let listener = TcpListener::bind(addr)
            .map_err(|e| arg("listen", format!("cannot listen on {addr}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TransferError::Failed(format!("listen: {e}")))?;
        Ok(Receiver {
            listener,
            shared: Arc::new(Shared {
                dir,
                token,
                max_connections,
                connections: AtomicUsize::new(0),
                budget: Budget {
                    used: Mutex::new(0),
                    freed: Condvar::new(),
                    max: max_memory,
                },
                sessions: Mutex::default(),
                busy: Mutex::default(),
                next_session: AtomicU64::new(1),
                open: Mutex::default(),
                next_connection: AtomicU64::new(1),
                events: Mutex::default(),
                stop: AtomicBool::new(false),
                handshakes: Handshakes::new(
                    handshakes::MOST,
                    handshakes::PER_PEER,
                    handshakes::GRACE,
                ),
            }),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound")
    }

    /// Serves until `stop` is called: every connection in its own thread.
    pub fn serve(&self) {
        let mut handlers = Vec::new();
        while !self.shared.stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let shared = Arc::clone(&self.shared);
                    handlers.push(std::thread::spawn(move || connection(shared, stream, peer)));
                    handlers.retain(|h| !h.is_finished());
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                // A connection reset before it was accepted, out of descriptors for a moment:
                // the receiver goes on.
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        for s in self.shared.open.lock().unwrap().values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for h in handlers {
            let _ = h.join();
        }
    }

    /// Asks `serve` to return: open connections are shut, partial copies keep their manifests.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    pub fn stopper(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = Arc::clone(&self.shared);
        move || shared.stop.store(true, Ordering::Relaxed)
    }

    /// Transfers ended since the last call.
    pub fn take_events(&self) -> Vec<ReceiveEvent> {
        std::mem::take(&mut *self.shared.events.lock().unwrap())
    }
}

/// Registers an open connection for shutdown at stop; unregisters when dropped.
struct Registered<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.shared.open.lock().unwrap().remove(&self.id);
        self.shared.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

fn refuse(stream: &mut TcpStream, message: String) {
    let _ = wire::send(
        stream,
        &Message::Error {
            message,
            retry: false,
        },
    );
}

/// Refuses a connection that may be made again later.
fn not_now(stream: &mut TcpStream, message: String) {
    let _ = wire::send(
        stream,
        &Message::Error {
            message,
            retry: true,
        },
    );
}

fn connection(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let n = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    if let Ok(s) = stream.try_clone() {
        shared.open.lock().unwrap().insert(id, s);
    }
    let _registered = Registered {
        shared: &shared,
        id,
    };
    if n > shared.max_connections {
        not_now(
            &mut stream,
            format!(
                "the receiver is serving its most connections ({}): try fewer streams, or later",
                shared.max_connections
            ),
        );
        return;
    }
    // A dead peer (a path gone, a host rebooted) is noticed within about half a minute.
    keepalive(&stream);
    let event = |name: &str, message: String| ReceiveEvent::refused(peer, name, message);
    match handshake(&shared, &mut stream, peer) {
        Ok(()) => {}
        // A peer that left before proving anything, or was answered busy, is not worth a
        // line; one that failed is.
        Err(None) => return,
        Err(Some(why)) => {
            shared
                .events
                .lock()
                .unwrap()
                .push(event("", format!("connection from {peer}: {why}")));
            return;
        }
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    match wire::receive(&mut stream) {
        Ok(Message::Offer(offer)) => {
            let name = offer.name.clone();
            // None: refused before the name was taken (and already reported).
            if let Some(e) = control(&shared, stream, peer, offer) {
                shared.busy.lock().unwrap().remove(&name);
                shared.events.lock().unwrap().push(e);
            }
        }
        Ok(Message::Join { session }) => data(&shared, stream, session),
        Ok(other) => refuse(
            &mut stream,
            format!("expected an offer or a join, got {other:?}"),
        ),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) => {}
        Err(e) => {
            let why = format!("connection from {peer}: {e}");
            refuse(&mut stream, why.clone());
            shared.events.lock().unwrap().push(event("", why));
        }
    }
}

/// The token handshake, in one of the few places for it (`handshakes`): a peer that connects
/// and says nothing is dropped after `HANDSHAKE_SILENCE`, or sooner, answered busy, when a
/// newer connection needs its place; a newcomer that finds no place is answered busy at once,
/// in place of the challenge, so that a push tries again rather than failing.
fn handshake(
    shared: &Shared,
    stream: &mut TcpStream,
    peer: SocketAddr,
) -> Result<(), auth::Refused> {
    let place = match shared
        .handshakes
        .enter(peer.ip(), Instant::now(), stream.try_clone().ok())
    {
        Ok(place) => place,
        Err(busy) => {
            not_now(stream, busy);
            return Err(None);
        }
    };
    let ours = auth::challenge(stream)?;
    // Wait for the answer's first bytes, looking between waits whether the place has gone
    // to a newer connection.
    let until = Instant::now() + HANDSHAKE_SILENCE;
    loop {
        if place.gave_way() {
            not_now(
                stream,
                format!(
                    "busy: this connection said nothing for {} s or more and gave its place to a newer one; try again",
                    handshakes::GRACE.as_secs()
                ),
            );
            return Err(None);
        }
        match wire::readable(stream, Duration::from_millis(100)) {
            Ok(true) => break,
            Ok(false) if Instant::now() < until => {}
            Ok(false) => {
                return Err(Some(format!(
                    "handshake: nothing said for {} s",
                    HANDSHAKE_SILENCE.as_secs()
                )))
            }
            Err(_) => return Err(None),
        }
    }
    if !place.spoke() {
        // It gave way just as its answer arrived.
        not_now(
            stream,
            "busy: this connection's place went to a newer one; try again".into(),
        );
        return Err(None);
    }
    // The rest of the answer is a few hundred bytes: it gets what is left of the time.
    let left = until.saturating_duration_since(Instant::now());
    let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(100))));
    auth::check_answer(stream, &shared.token, &ours)
}

fn problem_with(offer: &Offer) -> Option<String> {
    if let Some(why) = name_problem(&offer.name) {
        return Some(format!("name refused: {why}"));
    }
    let b = offer.block_size;
    if !(MIN_BLOCK..=MAX_BLOCK).contains(&b) || b % 4096 != 0 {
        return Some(format!(
            "block size {b}: give a multiple of 4 KiB from 64 KiB to 1 GiB"
        ));
    }
    match offer.shape {
        Shape::File if offer.files.len() != 1 || !offer.files[0].name.is_empty() => {
            Some("a file transfer has exactly one unnamed file".into())
        }
        Shape::Vbs => {
            let mut seen = HashSet::new();
            for f in &offer.files {
                if let Some(why) = name_problem(&f.name) {
                    return Some(format!("chunk name refused: {why}"));
                }
                if !seen.insert(&f.name) {
                    return Some(format!("chunk {} offered twice", f.name));
                }
            }
            None
        }
        _ => None,
    }
}

/// The destination's files in offer order (`<dir>/<name>`, or `<dir>/<name>/<chunk>`).
fn dest_paths(root: &Path, offer: &Offer) -> Vec<PathBuf> {
    match offer.shape {
        Shape::File => vec![root.to_path_buf()],
        Shape::Vbs => offer.files.iter().map(|f| root.join(&f.name)).collect(),
    }
}

/// Whether what is at `root` has the offer's shape: same files, same sizes, no links.
fn same_shape(root: &Path, offer: &Offer) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(root).map_err(|e| e.to_string())?;
    match offer.shape {
        Shape::File => {
            if !meta.file_type().is_file() {
                return Err("it is not a plain file".into());
            }
            if meta.len() != offer.files[0].size {
                return Err(format!(
                    "it holds {} bytes, the source {}",
                    meta.len(),
                    offer.files[0].size
                ));
            }
        }
        Shape::Vbs => {
            if !meta.file_type().is_dir() {
                return Err("it is not a directory".into());
            }
            let mut there: HashMap<String, u64> = HashMap::new();
            for e in std::fs::read_dir(root).map_err(|e| e.to_string())? {
                let e = e.map_err(|e| e.to_string())?;
                let m = e.metadata().map_err(|e| e.to_string())?;
                if !m.file_type().is_file() {
                    return Err(format!("it holds {:?}, not a chunk file", e.file_name()));
                }
                there.insert(e.file_name().to_string_lossy().into_owned(), m.len());
            }
            for f in &offer.files {
                match there.remove(&f.name) {
                    Some(size) if size == f.size => {}
                    Some(size) => {
                        return Err(format!(
                            "chunk {} holds {size} bytes, the source {}",
                            f.name, f.size
                        ))
                    }
                    None => return Err(format!("chunk {} is missing", f.name)),
                }
            }
            if let Some(extra) = there.keys().next() {
                return Err(format!("it holds {extra}, which the source does not"));
            }
        }
    }
    Ok(())
}

/// Each block's checksum as it is on disk now, read with a few threads.
fn digests_on_disk(paths: &[PathBuf], map: &BlockMap) -> std::io::Result<Vec<u128>> {
    let files: Vec<File> = paths.iter().map(File::open).collect::<Result<_, _>>()?;
    map.digests(
        || (),
        |_, span, b| files[span.file].read_exact_at(b, span.offset),
    )
}

fn create_dest(root: &Path, offer: &Offer) -> std::io::Result<Vec<DestFile>> {
    // A stale partial copy without a manifest holds nothing known: start it over.
    remove_partial(root)?;
    let made = make_dest(root, offer);
    if made.is_err() {
        // A transfer refused (a disk too small for its reservation) leaves nothing behind.
        let _ = remove_partial(root);
    }
    made
}

/// What a partial copy at `root` is (a file, or a vbs scan's directory), removed.
fn remove_partial(root: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.file_type().is_dir() => std::fs::remove_dir_all(root),
        Ok(_) => std::fs::remove_file(root),
        Err(_) => Ok(()),
    }
}

fn make_dest(root: &Path, offer: &Offer) -> std::io::Result<Vec<DestFile>> {
    if offer.shape == Shape::Vbs {
        std::fs::create_dir(root)?;
    }
    dest_paths(root, offer)
        .iter()
        .zip(&offer.files)
        .map(|(p, f)| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(p)?;
            if f.size > 0 {
                // Reserved now: a disk too small refuses the transfer before a byte is sent.
                let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, f.size as i64) };
                if r != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                        return Err(e);
                    }
                    file.set_len(f.size)?;
                }
            }
            Ok(file)
        })
        .map(|f: std::io::Result<File>| f.map(with_direct))
        .collect::<std::io::Result<Vec<_>>>()
}

fn with_direct(buffered: File) -> DestFile {
    // O_DIRECT through /proc/self/fd reopens the same file; file systems without it (tmpfs)
    // refuse, and every block is then written buffered.
    let direct = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", buffered.as_raw_fd()))
        .ok();
    DestFile { buffered, direct }
}

fn open_dest(root: &Path, offer: &Offer) -> std::io::Result<Vec<DestFile>> {
    dest_paths(root, offer)
        .iter()
        .map(|p| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(p)
        })
        .map(|f| f.map(with_direct))
        .collect()
}

/// Renames `from` to `to` unless `to` exists (never replacing what another process put there).
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (f, t) = (c(from)?, c(to)?);
    // The system call, not glibc's wrapper (glibc 2.28): the wheel runs on glibc 2.17.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    // A file system (or kernel) without it: rename, having looked first.
    let unsupported = matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS));
    if unsupported && std::fs::symlink_metadata(to).is_err() {
        return std::fs::rename(from, to);
    }
    Err(e)
}

/// The control connection of one transfer, from its offer to its end. Returns the event to
/// report (None for a refusal before the name was taken, already reported).
fn control(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    offer: Offer,
) -> Option<ReceiveEvent> {
    let started = Instant::now();
    let mut event = ReceiveEvent {
        bytes: offer.files.iter().map(|f| f.size).sum(),
        ..ReceiveEvent::refused(peer, &offer.name, String::new())
    };
    let problem = problem_with(&offer).or_else(|| {
        (offer.block_size > shared.budget.max).then(|| {
            format!(
                "blocks of {} bytes do not fit the receiver's --max-memory of {}: push with a \
                 smaller --block-size, or raise --max-memory at the receiver",
                offer.block_size, shared.budget.max
            )
        })
    });
    if let Some(why) = problem {
        event.message = why.clone();
        refuse(&mut stream, why);
        shared.events.lock().unwrap().push(event);
        return None;
    }
    if !shared.busy.lock().unwrap().insert(offer.name.clone()) {
        // Perhaps this push's own earlier connection, not yet seen dead, or the push before
        // it still closing: it tries again, and that try is what gets reported.
        let why = format!("{} is being received from another push now", offer.name);
        not_now(&mut stream, why);
        return None;
    }
    let finish = |mut e: ReceiveEvent, state: &'static str, message: String| {
        e.state = state;
        e.message = message;
        e.seconds = started.elapsed().as_secs_f64();
        Some(e)
    };
    let dest = shared.dir.join(&offer.name);
    let part = shared.dir.join(partial_name(&offer.name));
    let manifest_path = shared.dir.join(manifest_name(&offer.name));
    let map = BlockMap::new(&offer.files, offer.block_size);
    event.blocks = map.count();

    // Already there: the sender compares its blocks' checksums with these.
    if std::fs::symlink_metadata(&dest).is_ok() {
        if let Err(why) = same_shape(&dest, &offer) {
            let why = format!(
                "{} is already in {} and differs from the source ({why}): remove it, or push to another --dir",
                offer.name,
                shared.dir.display()
            );
            refuse(&mut stream, why.clone());
            return finish(event, "refused", why);
        }
        let digests = match digests_on_disk(&dest_paths(&dest, &offer), &map) {
            Ok(d) => d,
            Err(e) => {
                let why = format!("cannot read {}: {e}", dest.display());
                refuse(&mut stream, why.clone());
                return finish(event, "refused", why);
            }
        };
        let plan = Message::Plan {
            session: 0,
            state: PlanState::Exists,
            done: vec![],
            digests: digests.iter().map(|d| wire::hex128(*d)).collect(),
        };
        if wire::send(&mut stream, &plan).is_err() {
            return finish(event, "interrupted", "the sender went away".into());
        }
        return match wire::receive(&mut stream) {
            Ok(Message::Finish) => {
                event.digest = Some(wire::hex128(wire::digest_of_digests(&digests)));
                finish(event, "skipped", "identical copy already there".into())
            }
            Ok(Message::Error { message, .. }) => finish(event, "refused", message),
            _ => finish(event, "interrupted", "the sender went away".into()),
        };
    }

    // A partial copy of the same sources resumes; of other sources, it is refused.
    let previous = match Manifest::load(&manifest_path) {
        Ok(p) => p,
        Err(e) => {
            let why = format!("cannot read {}: {e}", manifest_path.display());
            refuse(&mut stream, why.clone());
            return finish(event, "refused", why);
        }
    };
    let resumable = match previous {
        Some((old, blocks)) if std::fs::symlink_metadata(&part).is_ok() => {
            if old != offer {
                let what = if old.sources != offer.sources {
                    "the source changed since the partial copy was started".to_string()
                } else {
                    format!(
                        "it was pushed with blocks of {} bytes, now {}",
                        old.block_size, offer.block_size
                    )
                };
                let why = format!(
                    "a partial copy of {} is in {} but {what}: remove {} and {} to start over (or push with --block-size {})",
                    offer.name,
                    shared.dir.display(),
                    part.display(),
                    manifest_path.display(),
                    old.block_size
                );
                refuse(&mut stream, why.clone());
                return finish(event, "refused", why);
            }
            same_shape(&part, &offer).ok().map(|_| blocks)
        }
        _ => None,
    };
    let opened = match &resumable {
        Some(_) => {
            open_dest(&part, &offer).and_then(|f| Manifest::reopen(&manifest_path).map(|m| (f, m)))
        }
        None => create_dest(&part, &offer).and_then(|f| {
            Manifest::create(&manifest_path, &offer)
                .map(|m| (f, m))
                .inspect_err(|_| {
                    // Refused: neither the copy just made nor a manifest is left.
                    let _ = remove_partial(&part);
                    let _ = std::fs::remove_file(&manifest_path);
                })
        }),
    };
    let (files, manifest) = match opened {
        Ok(x) => x,
        Err(e) => {
            let why = format!("cannot write {}: {e}", part.display());
            refuse(&mut stream, why.clone());
            return finish(event, "refused", why);
        }
    };
    let count = map.count() as usize;
    let mut expected = vec![None; count];
    let mut listed = vec![false; count];
    for &(b, d) in resumable.iter().flatten() {
        if (b as usize) < count {
            expected[b as usize] = Some(d);
            listed[b as usize] = true;
        }
    }
    let resumed = listed.iter().filter(|&&x| x).count() as u64;
    event.blocks_resumed = resumed;
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let session = Arc::new(Session {
        offer: offer.clone(),
        map,
        files,
        part: part.clone(),
        state: Mutex::new(SessionState {
            expected,
            listed: listed.clone(),
            written: Vec::new(),
            manifest,
            in_flight: 0,
            damaged: 0,
            failed: None,
        }),
        idle: Condvar::new(),
        received: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        started,
        flushing: Mutex::new(()),
    });
    shared
        .sessions
        .lock()
        .unwrap()
        .insert(id, Arc::clone(&session));
    let plan = Message::Plan {
        session: id,
        state: if resumable.is_some() {
            PlanState::Resume
        } else {
            PlanState::New
        },
        done: wire::to_runs((0..count as u64).filter(|&b| listed[b as usize])),
        digests: vec![],
    };
    let outcome = match wire::send(&mut stream, &plan) {
        Ok(()) => run_session(shared, &session, &mut stream, &dest, &manifest_path),
        Err(_) => Err("the sender went away".to_string()),
    };
    session.closed.store(true, Ordering::Relaxed);
    shared.sessions.lock().unwrap().remove(&id);
    let _ = session.flush();
    event.bytes_received = session.received.load(Ordering::Relaxed);
    event.blocks_damaged = session.state.lock().unwrap().damaged;
    match outcome {
        Ok(digest) => {
            event.digest = Some(digest);
            finish(
                event,
                "received",
                format!("verified, in {}", dest.display()),
            )
        }
        Err(why) => {
            let on_disk = session
                .state
                .lock()
                .unwrap()
                .listed
                .iter()
                .filter(|&&x| x)
                .count();
            let why =
                format!("{why}; {on_disk} of {count} blocks on disk, resumable by pushing again");
            finish(event, "interrupted", why)
        }
    }
}

/// Serves a session's control connection: the load reports (ten a second), periodic flushes,
/// and the whole-copy check when the sender says every block was acknowledged. Returns the
/// destination's checksum once it is in place.
fn run_session(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    stream: &mut TcpStream,
    dest: &Path,
    manifest_path: &Path,
) -> Result<String, String> {
    let writer = Arc::new(Mutex::new(stream.try_clone().map_err(|e| e.to_string())?));
    let reporting = Arc::new(AtomicBool::new(true));
    let reporter = {
        let (writer, reporting, session, shared) = (
            Arc::clone(&writer),
            Arc::clone(&reporting),
            Arc::clone(session),
            Arc::clone(shared),
        );
        std::thread::spawn(move || {
            let mut tick = 0u32;
            while reporting.load(Ordering::Relaxed) && !shared.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                tick += 1;
                let load = Message::Load {
                    received: session.received.load(Ordering::Relaxed),
                    seconds: session.started.elapsed().as_secs_f64(),
                    cpu: CpuCounters::read(),
                };
                if wire::send(&mut *writer.lock().unwrap(), &load).is_err() {
                    return;
                }
                if tick % 10 == 0 {
                    if let Err(e) = session.flush() {
                        session
                            .state
                            .lock()
                            .unwrap()
                            .failed
                            .get_or_insert(format!("cannot flush: {e}"));
                    }
                }
            }
        })
    };
    let result = (|| loop {
        // The control connection is quiet while blocks flow: wait for it, watching for a stop.
        let ended = |e: std::io::Error| format!("the control connection ended ({e})");
        while !wire::readable(stream, Duration::from_millis(250)).map_err(ended)? {
            if shared.stop.load(Ordering::Relaxed) {
                return Err("the receiver was stopped".into());
            }
        }
        let m = wire::receive(stream).map_err(ended)?;
        match m {
            Message::Finish => {
                if let Some(why) = session.state.lock().unwrap().failed.clone() {
                    let _ = wire::send(
                        &mut *writer.lock().unwrap(),
                        &Message::Error {
                            message: why.clone(),
                            retry: false,
                        },
                    );
                    return Err(why);
                }
                let (resend, digest) =
                    check_whole(session).map_err(|e| format!("cannot read the copy back: {e}"))?;
                if !resend.is_empty() {
                    let m = Message::Verified {
                        resend,
                        digest: None,
                    };
                    wire::send(&mut *writer.lock().unwrap(), &m).map_err(|e| e.to_string())?;
                    continue;
                }
                let digest = wire::hex128(digest);
                rename_no_replace(&session.part, dest).map_err(|e| {
                    format!("cannot name the verified copy {}: {e}", dest.display())
                })?;
                let _ = std::fs::remove_file(manifest_path);
                if let Ok(d) = File::open(&shared.dir) {
                    let _ = d.sync_all();
                }
                let m = Message::Verified {
                    resend: vec![],
                    digest: Some(digest.clone()),
                };
                let _ = wire::send(&mut *writer.lock().unwrap(), &m);
                return Ok(digest);
            }
            Message::Error { message, .. } => return Err(format!("the sender gave up: {message}")),
            other => return Err(format!("unexpected {other:?} on the control connection")),
        }
    })();
    reporting.store(false, Ordering::Relaxed);
    let _ = reporter.join();
    result
}

/// Flushes, then reads the whole copy back: blocks whose bytes do not match their checksum
/// (or that never arrived) are to be sent again; when none, the copy's checksum.
fn check_whole(session: &Session) -> std::io::Result<(Vec<BlockIndex>, u128)> {
    {
        let mut st = session.state.lock().unwrap();
        while st.in_flight > 0 {
            st = session.idle.wait(st).unwrap();
        }
    }
    session.flush()?;
    let paths = dest_paths(&session.part, &session.offer);
    let on_disk = digests_on_disk(&paths, &session.map)?;
    let mut st = session.state.lock().unwrap();
    let mut resend = Vec::new();
    for (i, d) in on_disk.iter().enumerate() {
        if st.expected[i] != Some(*d) {
            resend.push(i as BlockIndex);
            st.expected[i] = None;
            st.listed[i] = false;
        }
    }
    Ok((resend, wire::digest_of_digests(&on_disk)))
}

/// A data connection: blocks in, each checked, written and acknowledged.
fn data(shared: &Arc<Shared>, mut stream: TcpStream, session: u64) {
    let Some(session) = shared.sessions.lock().unwrap().get(&session).cloned() else {
        not_now(
            &mut stream,
            format!("no transfer {session} under way (it ended): push again"),
        );
        return;
    };
    let block_size = session.offer.block_size;
    if !shared.budget.take(block_size, &shared.stop) {
        not_now(&mut stream, "the receiver's block memory (--max-memory) is taken by other connections: use fewer streams".into());
        return;
    }
    let mut buf = match MmapMut::map_anon(block_size as usize) {
        Ok(b) => b,
        Err(e) => {
            shared.budget.give(block_size);
            refuse(&mut stream, format!("no memory for a block: {e}"));
            return;
        }
    };
    let _ = receive_blocks(&session, &mut stream, &mut buf);
    shared.budget.give(block_size);
}

fn receive_blocks(
    session: &Session,
    stream: &mut TcpStream,
    buf: &mut [u8],
) -> std::io::Result<()> {
    let protocol = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    while !session.closed.load(Ordering::Relaxed) {
        // An idle connection (the sender waiting for the whole-copy check) is not a dead one.
        if !wire::readable(stream, Duration::from_millis(250))? {
            continue;
        }
        let (index, len, digest) = match wire::receive(stream)? {
            Message::Block { index, len, digest } => (index, len, digest),
            other => return Err(protocol(format!("expected a block, got {other:?}"))),
        };
        let span = session.map.span(index);
        let Some(want) = wire::parse_hex128(&digest) else {
            return Err(protocol("a block without a checksum".into()));
        };
        if span.map(|s| s.len) != Some(len) {
            let why = format!("block {index} of {len} bytes is not in this transfer");
            refuse(stream, why.clone());
            return Err(protocol(why));
        }
        let bytes = &mut buf[..len as usize];
        let mut got = 0;
        while got < bytes.len() {
            let end = (got + (1 << 20)).min(bytes.len());
            let n = stream.read(&mut bytes[got..end])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
            session.received.fetch_add(n as u64, Ordering::Relaxed);
        }
        if wire::digest(bytes) != want {
            // Damaged on the way: never written as good; the sender sends it again.
            session.state.lock().unwrap().damaged += 1;
            wire::send(stream, &Message::Ack { index, ok: false })?;
            continue;
        }
        {
            let mut st = session.state.lock().unwrap();
            if let Some(why) = &st.failed {
                let why = why.clone();
                drop(st);
                refuse(stream, why.clone());
                return Err(std::io::Error::other(why));
            }
            st.in_flight += 1;
        }
        let written = session.write_block(index, bytes);
        {
            let mut st = session.state.lock().unwrap();
            st.in_flight -= 1;
            match &written {
                Ok(()) => {
                    st.expected[index as usize] = Some(want);
                    st.written.push((index, want));
                }
                Err(e) => {
                    st.failed.get_or_insert(format!(
                        "cannot write {}: {e}; make room (or mend the disk) there, then push \
                         again to resume",
                        session.part.display()
                    ));
                }
            }
            session.idle.notify_all();
        }
        if let Err(e) = written {
            let why = session
                .state
                .lock()
                .unwrap()
                .failed
                .clone()
                .unwrap_or_default();
            refuse(stream, why);
            return Err(e);
        }
        wire::send(stream, &Message::Ack { index, ok: true })?;
    }
    Ok(())
}
