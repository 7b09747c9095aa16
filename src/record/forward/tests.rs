//! Forwarding while recording, end to end on loopback: what arrives at the far end, and that
//! the local recording is untouched whatever the destination does.

use crate::record::config::{RecorderConfig, Target};
use crate::record::forward::LinkState;
use crate::record::recorder::Recorder;
use crate::sources::generate::SignalSpec;
use crate::sources::sender::{SendConfig, Sender};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FS: usize = 8224;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vdifrec-fwd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spec(fps: u32) -> SignalSpec {
    SignalSpec {
        frame_size: FS,
        fps,
        ref_epoch: Some(53),
        start_second: Some(1000),
        ..Default::default()
    }
}

fn recorder(out: &Path, forward: Vec<String>, psn: bool) -> Recorder {
    Recorder::start(RecorderConfig {
        target: Some(Target::File(out.to_path_buf())),
        ring_bytes: 16 << 20,
        frame_size: Some(FS),
        psn,
        offset: if psn { 8 } else { 0 },
        forward,
        ..Default::default()
    })
    .unwrap()
}

/// Sends `frames` at `fps` to `rec`, writing what was sent to `sent`; waits until `rec` has
/// them all (bounded).
fn send(rec: &Recorder, fps: u32, frames: u64, sent: &Path) {
    let mut cfg = SendConfig::new(rec.local_addr(), spec(fps));
    cfg.frames = Some(frames);
    cfg.record_sent = Some(sent.to_path_buf());
    let mut sender = Sender::start(cfg).unwrap();
    let s = sender.wait(Some(Duration::from_secs(60))).unwrap().unwrap();
    assert_eq!(s.frames_sent, frames);
    wait_for(rec, frames);
}

fn wait_for(rec: &Recorder, frames: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rec.stats().capture.frames_received < frames && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn forwarded_udp_and_udps_streams_are_the_recording_byte_for_byte() {
    let dir = tmpdir("udp");
    let far_udp = recorder(&dir.join("far_udp.vdif"), vec![], false);
    let far_udps = recorder(&dir.join("far_udps.vdif"), vec![], true);
    let mut near = recorder(
        &dir.join("near.vdif"),
        vec![
            format!("udp://{}", far_udp.local_addr()),
            format!("udps://{}", far_udps.local_addr()),
        ],
        false,
    );
    send(&near, 2000, 3000, &dir.join("sent.vdif"));
    let s = near.stop();
    assert!(s.ok, "{s:#?}");
    let (_, near_bytes) = recorded_what_arrived(&dir, 3000, s.frames_received);
    for (far, name) in [(far_udp, "far_udp"), (far_udps, "far_udps")] {
        let mut far = far;
        wait_for(&far, s.frames_received);
        let f = far.stop();
        let got = std::fs::read(dir.join(format!("{name}.vdif"))).unwrap();
        // Each far end is the near recording, less what its own kernel dropped.
        let lacking = missing_from(&got, &near_bytes) as u64;
        assert_eq!(lacking, s.frames_received - f.frames_received, "{name}");
        if name == "far_udps" {
            assert_eq!(f.psn_out_of_order, Some(0));
            assert!(f.psn_lost.unwrap() <= lacking);
        }
    }
    assert_eq!(s.forward.len(), 2);
    for f in &s.forward {
        assert_eq!((f.frames, f.skipped, f.torn), (3000, 0, 0), "{f:#?}");
        assert_eq!(
            f.bytes,
            3000 * (FS as u64 + if f.scheme == "udps" { 8 } else { 0 })
        );
        assert_eq!(f.state, LinkState::Closed);
    }
    // The rows say what went, second by second; they add up to what went in those seconds.
    let in_rows: u64 = s
        .seconds
        .iter()
        .flat_map(|r| r.forward.iter().filter(|f| f.id == 1))
        .map(|f| f.frames)
        .sum();
    assert!(in_rows > 0 && in_rows <= s.frames_received, "{in_rows}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The next connection to `listener`, within 20 s (a test never waits for ever).
fn accept_within(listener: &TcpListener) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match listener.accept() {
            Ok((conn, _)) => {
                conn.set_nonblocking(false).unwrap();
                return conn;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("no connection within 20 s: {e}"),
        }
    }
}

/// How many frames of `of` (whole frames of `FS` bytes) `sub` lacks; asserts that `sub` is
/// `of` with only those left out, in order (loopback keeps the order; a full socket buffer
/// drops whole datagrams).
fn missing_from(sub: &[u8], of: &[u8]) -> usize {
    let mut at = 0;
    let mut missing = 0;
    for frame in sub.chunks_exact(FS) {
        while at < of.len() / FS && &of[at * FS..(at + 1) * FS] != frame {
            at += 1;
            missing += 1;
        }
        assert!(
            at < of.len() / FS,
            "a frame that is not in the stream, or out of order"
        );
        at += 1;
    }
    missing + (of.len() / FS - at)
}

/// What was sent (`sent.vdif`) and recorded (`near.vdif`) in `dir`, having checked that the
/// recording is what was sent, less only what this host's kernel dropped on the way in.
fn recorded_what_arrived(dir: &Path, sent_frames: u64, received: u64) -> (Vec<u8>, Vec<u8>) {
    let sent = std::fs::read(dir.join("sent.vdif")).unwrap();
    let near = std::fs::read(dir.join("near.vdif")).unwrap();
    assert_eq!(missing_from(&near, &sent) as u64, sent_frames - received);
    (sent, near)
}

/// Reads a TCP connection slowly (a destination slower than the stream), then returns what
/// it read.
fn slow_reader(listener: TcpListener, per_read: usize, pause: Duration, most: Duration) -> Vec<u8> {
    let mut conn = accept_within(&listener);
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; per_read];
    let t0 = Instant::now();
    while t0.elapsed() < most {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        std::thread::sleep(pause);
    }
    got
}

#[test]
fn a_slow_tcp_destination_skips_whole_frames_and_costs_the_recording_nothing() {
    let dir = tmpdir("slow");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // About 1 MB/s against a stream of 33 MB/s.
    let reader = std::thread::spawn(move || {
        slow_reader(
            listener,
            65536,
            Duration::from_millis(50),
            Duration::from_secs(6),
        )
    });
    let mut near = recorder(
        &dir.join("near.vdif"),
        vec![format!("tcp://127.0.0.1:{port}")],
        false,
    );
    send(&near, 4000, 12000, &dir.join("sent.vdif"));
    let s = near.stop();
    assert!(s.ok, "{s:#?}");
    let (sent, _) = recorded_what_arrived(&dir, 12000, s.frames_received);
    let f = &s.forward[0];
    assert!(f.skipped > 0, "{f:#?}");
    assert_eq!(f.frames + f.skipped, s.frames_received, "{f:#?}");
    assert_eq!(f.torn, 0);
    let got = reader.join().unwrap();
    // Whole frames, each one that was sent, in order (the last may be cut where the reader
    // stopped reading).
    let whole = got.len() / FS;
    assert!(whole > 0);
    missing_from(&got[..whole * FS], &sent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_destination_that_goes_away_and_comes_back_is_reconnected() {
    let dir = tmpdir("down");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut near = recorder(&dir.join("near.vdif"), vec![format!("tcp://{addr}")], false);
    let mut cfg = SendConfig::new(near.local_addr(), spec(2000));
    cfg.frames = Some(10000);
    let mut sender = Sender::start(cfg).unwrap();
    // The first connection takes 200 frames, then goes away with its listener.
    let mut conn = accept_within(&listener);
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut first = vec![0u8; 200 * FS];
    conn.read_exact(&mut first).unwrap();
    drop((conn, listener));
    let deadline = Instant::now() + Duration::from_secs(10);
    while near.forward_stats()[0].state != LinkState::Down && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(near.forward_stats()[0].state, LinkState::Down);
    std::thread::sleep(Duration::from_millis(300));
    // It comes back: the forwarder finds it within its backoff and sends whole frames again.
    let listener = TcpListener::bind(addr).unwrap();
    let mut conn = accept_within(&listener);
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut second = vec![0u8; 100 * FS];
    conn.read_exact(&mut second).unwrap();
    for f in first.chunks_exact(FS).chain(second.chunks_exact(FS)) {
        let h = crate::vdif::Header::parse(f).unwrap();
        assert_eq!(h.frame_size(), FS);
    }
    let f = near.forward_stats()[0].clone();
    assert_eq!(f.state, LinkState::Sending, "{f:#?}");
    assert!(f.reconnects >= 1 && f.skipped > 0, "{f:#?}");
    drop((conn, listener));
    sender.wait(Some(Duration::from_secs(30))).unwrap().unwrap();
    wait_for(&near, 10000);
    let s = near.stop();
    assert!(s.ok, "{s:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn paused_and_removed_destinations_keep_their_accounting() {
    let dir = tmpdir("pause");
    let far = recorder(&dir.join("far.vdif"), vec![], false);
    let mut near = recorder(&dir.join("near.vdif"), vec![], false);
    let id = near
        .add_forward(&format!("udp://{}", far.local_addr()), false)
        .unwrap();
    assert!(near
        .set_forward(99, true)
        .unwrap_err()
        .why
        .contains("no forwarding destination 99"));
    send(&near, 2000, 1000, &dir.join("sent.vdif"));
    std::thread::sleep(Duration::from_millis(100));
    let paused = &near.forward_stats()[0];
    assert_eq!((paused.frames, paused.skipped), (0, 0), "{paused:#?}");
    assert_eq!(paused.state, LinkState::Paused);
    // A destination that is the recorder's own data port would loop the stream.
    let own = near.add_forward(&format!("udp://{}", near.local_addr()), true);
    assert!(own.unwrap_err().why.contains("own data port"));
    near.set_forward(id, true).unwrap();
    let before = near.stats().capture.frames_received;
    send(&near, 2000, 1000, &dir.join("sent2.vdif"));
    std::thread::sleep(Duration::from_millis(100));
    let after = near.stats().capture.frames_received;
    let done = near.remove_forward(id).unwrap();
    assert_eq!(done.frames, after - before, "{done:#?}");
    assert_eq!(done.state, LinkState::Closed);
    assert!(near.remove_forward(id).is_err());
    let s = near.stop();
    assert_eq!(s.forward.len(), 1);
    assert_eq!(s.forward[0].frames, after - before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_paced_shaped_destination_sends_every_piece_of_the_last_frames() {
    // Each input frame becomes 4 channels x 4 pieces of 512 bytes; paced at a datagram every
    // 20 us, a batch takes 5 pieces, so the last input frames' pieces are still queued when
    // the stream stops: they go all the same, and a frame counts once all its pieces went.
    let dir = tmpdir("paced-shaped");
    let far = Recorder::start(RecorderConfig {
        target: Some(Target::File(dir.join("far.vdif"))),
        ring_bytes: 16 << 20,
        frame_size: Some(544),
        ..Default::default()
    })
    .unwrap();
    let dest = format!("udp://{}?channels=0-3&payload=512&ipd=20", far.local_addr());
    let mut near = recorder(&dir.join("near.vdif"), vec![dest], false);
    send(&near, 500, 1000, &dir.join("sent.vdif"));
    let s = near.stop();
    let f = &s.forward[0];
    assert_eq!(
        (f.frames, f.skipped, f.torn),
        (s.frames_received, 0, 0),
        "{f:#?}"
    );
    assert_eq!(f.frames_out, 16 * s.frames_received, "{f:#?}");
    let mut far = far;
    far.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_threads_filter_sends_the_kept_frames_as_they_are() {
    let dir = tmpdir("threads");
    let far = recorder(&dir.join("far.vdif"), vec![], false);
    let dest = format!("udp://{}?threads=1", far.local_addr());
    let mut near = recorder(&dir.join("near.vdif"), vec![dest], false);
    let mut cfg = SendConfig::new(
        near.local_addr(),
        SignalSpec {
            threads: 2,
            ..spec(1000)
        },
    );
    cfg.frames = Some(2000);
    cfg.record_sent = Some(dir.join("sent.vdif"));
    let mut sender = Sender::start(cfg).unwrap();
    sender.wait(Some(Duration::from_secs(60))).unwrap().unwrap();
    wait_for(&near, 2000);
    let s = near.stop();
    let mut far = far;
    let f = s.forward[0].clone();
    wait_for(&far, f.frames);
    let got = far.stop();
    let near_bytes = std::fs::read(dir.join("near.vdif")).unwrap();
    let thread_1: Vec<u8> = near_bytes
        .chunks_exact(FS)
        .filter(|fr| crate::vdif::Header::parse(fr).unwrap().thread_id() == 1)
        .flatten()
        .copied()
        .collect();
    // Exactly the recording's thread-1 frames, as recorded (less what the far end's kernel
    // dropped), each counted once; the other thread's are neither sent nor skipped.
    assert_eq!(
        (f.frames, f.frames_out, f.skipped),
        ((thread_1.len() / FS) as u64, f.frames, 0)
    );
    let far_bytes = std::fs::read(dir.join("far.vdif")).unwrap();
    assert_eq!(
        missing_from(&far_bytes, &thread_1) as u64,
        f.frames - got.frames_received
    );
    let _ = std::fs::remove_dir_all(&dir);
}
