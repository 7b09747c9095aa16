//! What push and receive say to each other over TCP: messages as length-prefixed JSON, each
//! block's bytes right after the message that announces them.
//!
//! Every connection starts with the token handshake (`auth`); then the first message says
//! what the connection is for: `Offer` opens a transfer (the control connection), `Join`
//! attaches a data connection to one. Control messages are small; a block is a `Block`
//! message followed by `len` raw bytes, acknowledged by an `Ack` once it is written.
//!
//! Busy: a receiver that cannot take a connection now answers `Error` with `retry: true` and
//! closes it: in place of its challenge (`Hello`) when all its connections, or all its places
//! for handshakes (overall or for the sender's address), are taken; in place of its proof
//! (`Proven`) when the connection said nothing for a while and its place went to a newer one
//! (see `handshakes`). A push tells this from a broken connection (which ends without a
//! message) and asks again after a pause. The message text starts with `busy:` where it is
//! about handshakes. Older pushes, which know `Error` but not this use of it, report it as an
//! unexpected answer naming the message, so the protocol's version stays 1.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// The protocol's version; both ends must speak the same one.
pub const VERSION: u32 = 1;

/// The longest message accepted (a plan listing the block checksums of a large scan fits;
/// a peer cannot make the other end allocate more than this).
pub const MAX_MESSAGE: usize = 64 << 20;

/// One destination file of a transfer: its name below the item (empty for a plain file,
/// the chunk's name for a `vbs` scan) and size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
}

/// A source file as it was when the transfer started: a partial copy is resumed only from
/// the same sources.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStamp {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
}

/// How the destination is laid out: one file, or a directory of `vbs` chunk files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    File,
    Vbs,
}

/// What a transfer will write: `<dir>/<name>` (a file, or a directory of `files`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub name: String,
    pub shape: Shape,
    pub files: Vec<FileEntry>,
    pub block_size: u64,
    pub sources: Vec<SourceStamp>,
}

/// What the receiver found at the destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanState {
    /// Nothing there: every block is to be sent.
    New,
    /// A partial copy of the same sources: the blocks in `done` are there and verified.
    Resume,
    /// A complete destination of the same size: `digests` are its blocks' checksums, for the
    /// sender to compare with its own (identical: skipped; different: refused).
    Exists,
}

/// Block `index` of the transfer's concatenated files (blocks never span two files).
pub type BlockIndex = u64;

/// Half-open runs of block indices, `[start, end)`, for lists of blocks done.
pub type Runs = Vec<(BlockIndex, BlockIndex)>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Receiver → sender, first on every connection: the challenge.
    Hello { version: u32, nonce: String },
    /// Sender → receiver: its own challenge and the proof it holds the token.
    Prove { nonce: String, mac: String },
    /// Receiver → sender: the receiver's proof (a sender never sends data to an impostor).
    Proven { mac: String },
    /// Sender → receiver on the control connection.
    Offer(Offer),
    /// Receiver → sender: the session data connections join, and what is there.
    Plan {
        session: u64,
        state: PlanState,
        #[serde(default)]
        done: Runs,
        #[serde(default)]
        digests: Vec<String>,
    },
    /// Sender → receiver: a data connection for `session`.
    Join { session: u64 },
    /// Sender → receiver: `len` bytes of block `index` follow, with their xxh3-128.
    Block {
        index: BlockIndex,
        len: u64,
        digest: String,
    },
    /// Receiver → sender: block `index` was written (`ok`), or arrived damaged and is to be
    /// sent again.
    Ack { index: BlockIndex, ok: bool },
    /// Receiver → sender ten times a second on the control connection: bytes received so far
    /// and the host's cumulative CPU counters, from which the sender derives rates.
    Load {
        received: u64,
        seconds: f64,
        cpu: super::cpu::CpuCounters,
    },
    /// Sender → receiver: every block has been acknowledged; check the whole destination.
    Finish,
    /// Receiver → sender: the whole-destination check. `resend`: blocks whose bytes on disk do
    /// not match (sent again, then `Finish` again); `digest`: the destination's xxh3-128 over
    /// its block checksums when all match.
    Verified {
        resend: Vec<BlockIndex>,
        digest: Option<String>,
    },
    /// Either way: why the other end gives up on this connection. `retry`: the connection
    /// may be made again (the transfer it joined has ended, the receiver is busy).
    Error {
        message: String,
        #[serde(default)]
        retry: bool,
    },
}

/// Writes one message (4-byte big-endian length, then JSON).
pub fn send(w: &mut impl Write, m: &Message) -> std::io::Result<()> {
    let body = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out)
}

/// Reads one message; a peer that sends something else is an `InvalidData` error.
pub fn receive(r: &mut impl Read) -> std::io::Result<Message> {
    receive_at_most(r, MAX_MESSAGE)
}

/// Reads a message of the handshake, before the peer has proven anything: a few hundred
/// bytes, never the 64 MiB a proven peer may send.
pub fn receive_small(r: &mut impl Read) -> std::io::Result<Message> {
    receive_at_most(r, 4096)
}

fn receive_at_most(r: &mut impl Read, most: usize) -> std::io::Result<Message> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > most {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a message of {len} bytes: more than the {most} allowed here; is this a vdifrec push/receive?"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a vdifrec transfer message ({e}); is the other end a vdifrec push/receive of the same version?"),
        )
    })
}

/// Waits up to `timeout` for `stream` to have bytes to read (or to be closed), so that a
/// thread waiting for the next message can look at its stop flags between waits without
/// cutting a message in two.
pub fn readable(
    stream: &std::net::TcpStream,
    timeout: std::time::Duration,
) -> std::io::Result<bool> {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(stream),
        events: libc::POLLIN,
        revents: 0,
    };
    let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    match r {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// The xxh3-128 of a block, as messages carry it.
pub fn digest(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

pub fn hex128(d: u128) -> String {
    format!("{d:032x}")
}

pub fn parse_hex128(s: &str) -> Option<u128> {
    if s.len() != 32 {
        return None;
    }
    u128::from_str_radix(s, 16).ok()
}

/// The destination's checksum: xxh3-128 over its blocks' checksums in order.
pub fn digest_of_digests(digests: &[u128]) -> u128 {
    let mut all = Vec::with_capacity(digests.len() * 16);
    for d in digests {
        all.extend_from_slice(&d.to_be_bytes());
    }
    digest(&all)
}

/// Sorted block indices as runs.
pub fn to_runs(sorted: impl IntoIterator<Item = BlockIndex>) -> Runs {
    let mut runs: Runs = Vec::new();
    for i in sorted {
        match runs.last_mut() {
            Some((_, end)) if *end == i => *end += 1,
            _ => runs.push((i, i + 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let m = Message::Block {
            index: 7,
            len: 4096,
            digest: hex128(digest(b"abc")),
        };
        let mut buf = Vec::new();
        send(&mut buf, &m).unwrap();
        assert_eq!(receive(&mut buf.as_slice()).unwrap(), m);
        let e = receive(&mut &b"\x00\x00\x00\x03abc"[..]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let e = receive(&mut &b"GET / HTTP/1.1\r\n"[..]).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
    }

    #[test]
    fn runs_and_digests() {
        assert_eq!(to_runs([0, 1, 2, 5, 7, 8]), vec![(0, 3), (5, 6), (7, 9)]);
        let d = digest(b"vdif");
        assert_eq!(parse_hex128(&hex128(d)), Some(d));
        assert_eq!(parse_hex128("zz"), None);
        assert_ne!(digest_of_digests(&[1, 2]), digest_of_digests(&[2, 1]));
    }
}
