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
    for (far, name) in [(far_udp, "far_udp"), (far_udps, "far_udps")] {
        let mut far = far;
        wait_for(&far, 3000);
        let f = far.stop();
        assert_eq!(f.frames_received, 3000, "{name}: {f:#?}");
        if name == "far_udps" {
            assert_eq!((f.psn_lost, f.psn_out_of_order), (Some(0), Some(0)));
        }
        assert_eq!(
            std::fs::read(dir.join(format!("{name}.vdif"))).unwrap(),
            std::fs::read(dir.join("sent.vdif")).unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        std::fs::read(dir.join("near.vdif")).unwrap(),
        std::fs::read(dir.join("sent.vdif")).unwrap()
    );
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
    assert!((2000..=3000).contains(&in_rows), "{in_rows}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads a TCP connection slowly (a destination slower than the stream), then returns what
/// it read.
fn slow_reader(listener: TcpListener, per_read: usize, pause: Duration, most: Duration) -> Vec<u8> {
    let (mut conn, _) = listener.accept().unwrap();
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
    assert_eq!(
        std::fs::read(dir.join("near.vdif")).unwrap(),
        std::fs::read(dir.join("sent.vdif")).unwrap()
    );
    let f = &s.forward[0];
    assert!(f.skipped > 0, "{f:#?}");
    assert_eq!(f.frames + f.skipped, 12000, "{f:#?}");
    assert_eq!(f.torn, 0);
    let got = reader.join().unwrap();
    // Whole frames, each one that was sent, in order.
    let sent = std::fs::read(dir.join("sent.vdif")).unwrap();
    let whole = got.len() / FS;
    assert!(whole > 0);
    let mut at = 0;
    for frame in got.chunks_exact(FS) {
        let k = (at..sent.len() / FS)
            .find(|&k| &sent[k * FS..(k + 1) * FS] == frame)
            .expect("a frame that was sent, after the one before");
        at = k + 1;
    }
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
    let (mut conn, _) = listener.accept().unwrap();
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
    let (mut conn, _) = listener.accept().unwrap();
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
    near.set_forward(id, true).unwrap();
    send(&near, 2000, 1000, &dir.join("sent2.vdif"));
    std::thread::sleep(Duration::from_millis(100));
    let done = near.remove_forward(id).unwrap();
    assert_eq!(done.frames, 1000, "{done:#?}");
    assert_eq!(done.state, LinkState::Closed);
    assert!(near.remove_forward(id).is_err());
    let s = near.stop();
    assert_eq!(s.forward.len(), 1);
    assert_eq!(s.forward[0].frames, 1000);
    let _ = std::fs::remove_dir_all(&dir);
}
