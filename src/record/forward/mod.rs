//! Forwarding the stream live while it is recorded (e-VLBI): each destination one more reader
//! of the rings, with its own thread, that never costs a recorded frame.
//!
//! `destination` reads what the operator wrote (`udp://`, `udps://`, `tcp://`, and the shaping
//! and pacing keys); `wire` is the socket in its framing; `pacer` spaces the datagrams; `link`
//! is the thread; `own_port` refuses a destination that would feed the recording itself;
//! `account` is what each destination did, shared with the status, the rows
//! and the summary through `Shared`. `Forwarding` holds the running destinations: added at
//! the start (`forward=`) or while recording (VSI-S `mem2net`), paused, resumed, removed.

pub mod account;
pub mod destination;
pub mod link;
pub mod own_port;
pub mod pacer;
#[cfg(test)]
mod tests;
pub mod wire;

pub use account::{ForwardRow, ForwardStats, Link, LinkState};
pub use destination::{Destination, Pacing};

use crate::endpoint::Framing;
use crate::options::ArgError;
use crate::record::shared::Shared;
use link::{Control, LinkRun};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

struct Running {
    link: Arc<Link>,
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
}

/// The destinations of a recording.
pub struct Forwarding {
    /// Every stream; the first's shared state holds the accounting.
    streams: Vec<Arc<Shared>>,
    /// Where the streams are received: a datagram destination among them would loop.
    receiving: Vec<SocketAddr>,
    running: Vec<Running>,
    next_id: u32,
}

impl Forwarding {
    pub fn new(streams: Vec<Arc<Shared>>, receiving: Vec<SocketAddr>) -> Forwarding {
        Forwarding {
            streams,
            receiving,
            running: Vec::new(),
            next_id: 1,
        }
    }

    /// Starts forwarding to `text` (`udp://host:port?...`); returns its id. `from_now`: the
    /// recording is under way, start at the newest frame. `enabled`: false connects but
    /// sends nothing until `set_enabled`.
    pub fn add(&mut self, text: &str, enabled: bool, from_now: bool) -> Result<u32, ArgError> {
        let dest = Destination::parse(text)?;
        self.check_no_loop(&dest)?;
        let id = self.next_id;
        let link = Arc::new(Link::new(
            id,
            dest.label(),
            dest.text.clone(),
            dest.framing().name(),
            enabled,
            dest.pacing,
        ));
        let control = Arc::new(Control::default());
        let run = LinkRun {
            dest,
            link: link.clone(),
            streams: self.streams.clone(),
            control: control.clone(),
            from_now,
        };
        let thread = std::thread::Builder::new()
            .name("vdifrec-forward".into())
            .spawn(move || run.run())
            .map_err(|e| ArgError::new("forward", format!("cannot start its thread: {e}")))?;
        self.streams[0].add_forward_link(link.clone());
        self.next_id += 1;
        self.running.push(Running {
            link,
            control,
            thread: Some(thread),
        });
        Ok(id)
    }

    /// A datagram destination that is one of this recorder's own data ports would feed the
    /// stream back into the recording (`own_port` has the rule).
    fn check_no_loop(&self, dest: &Destination) -> Result<(), ArgError> {
        if self.feeds_itself(dest) {
            return Err(ArgError::new(
                "forward",
                format!(
                    "{:?} is this recorder's own data port: the stream would come back into \
                     the recording; give the receiver's address and port",
                    dest.text
                ),
            ));
        }
        Ok(())
    }

    /// Whether forwarding to `dest` would send the stream to this recorder's own data port.
    pub fn feeds_itself(&self, dest: &Destination) -> bool {
        dest.framing() != Framing::Tcp
            && own_port::feeds_receiver(dest.endpoint.addr, &self.receiving)
    }

    fn find(&self, id: u32) -> Result<&Running, ArgError> {
        self.running
            .iter()
            .find(|r| r.link.id == id && r.thread.is_some())
            .ok_or_else(|| {
                let ids: Vec<String> = self.ids().iter().map(u32::to_string).collect();
                ArgError::new(
                    "id",
                    format!(
                        "no forwarding destination {id} (running: {})",
                        if ids.is_empty() {
                            "none".to_string()
                        } else {
                            ids.join(", ")
                        }
                    ),
                )
            })
    }

    /// The destinations still running.
    pub fn ids(&self) -> Vec<u32> {
        self.running
            .iter()
            .filter(|r| r.thread.is_some())
            .map(|r| r.link.id)
            .collect()
    }

    /// Pauses (false) or resumes (true) sending to destination `id`; it stays connected.
    pub fn set_enabled(&self, id: u32, enabled: bool) -> Result<(), ArgError> {
        let r = self.find(id)?;
        r.link.enabled.store(enabled, Ordering::Release);
        if r.link.state().0 == LinkState::Sending && !enabled {
            r.link.set_state(LinkState::Paused, None);
        } else if r.link.state().0 == LinkState::Paused && enabled {
            r.link.set_state(LinkState::Sending, None);
        }
        Ok(())
    }

    /// Paces destination `id` anew, on the same connection: `rate=2Gbps`, `ipd=10` (as in a
    /// destination's keys), or empty text for no pacing.
    pub fn set_pacing(&self, id: u32, pacing: &str) -> Result<(), ArgError> {
        let r = self.find(id)?;
        let p = destination::parse_pacing(pacing)?;
        r.link.set_pacing(p);
        Ok(())
    }

    /// Stops forwarding to `id` and closes its connection; its accounting stays.
    pub fn remove(&mut self, id: u32) -> Result<ForwardStats, ArgError> {
        self.find(id)?;
        let r = self
            .running
            .iter_mut()
            .find(|r| r.link.id == id)
            .expect("found above");
        r.control.stop.store(true, Ordering::Release);
        if let Some(t) = r.thread.take() {
            let _ = t.join();
        }
        Ok(r.link.snapshot())
    }

    /// The capture has ended: every destination sends what is left in the rings (each
    /// within `link::DRAIN_MOST`), then closes; `finish` waits for them.
    pub fn drain(&self) {
        for r in &self.running {
            r.control.drain.store(true, Ordering::Release);
        }
    }

    pub fn finish(&mut self) {
        self.drain();
        for r in &mut self.running {
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        for r in &self.running {
            r.control.stop.store(true, Ordering::Release);
        }
        for r in &mut self.running {
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }
}
