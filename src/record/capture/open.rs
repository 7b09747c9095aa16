//! Opening the capture backend a recorder's configuration names. The raw backends
//! (afpacket, pfring) bind nothing: they take the packets for the port on an interface; the
//! udp backend binds a socket, and may be given port 0 and report the one it got.

use crate::record::capture::afpacket::{AfPacketBackend, AfPacketError};
use crate::record::capture::pfring::{PfRingBackend, PfRingError};
use crate::record::capture::udp::{UdpBackend, UdpConfig, UdpError};
use crate::record::capture::Backend;
use crate::record::config::{BackendKind, RecorderConfig};
use std::net::SocketAddr;
use thiserror::Error;

/// Why the backend could not be opened (each says how to fix it).
#[derive(Debug, Error)]
pub enum OpenError {
    #[error(transparent)]
    Udp(#[from] UdpError),
    #[error(transparent)]
    AfPacket(#[from] AfPacketError),
    #[error(transparent)]
    PfRing(#[from] PfRingError),
}

/// A capture backend ready to run.
pub struct OpenedBackend {
    pub backend: Box<dyn Backend>,
    /// Where the stream is taken from (the real port for the udp backend when 0 was asked).
    pub address: SocketAddr,
    /// What the backend reports to the operator about its set-up.
    pub notes: Vec<String>,
}

/// Opens the configured capture backend.
pub fn open_backend(config: &RecorderConfig) -> Result<OpenedBackend, OpenError> {
    // The raw backends bind nothing: they keep the packets for this port on an interface.
    let raw_addr = SocketAddr::new(config.bind, config.port);
    Ok(match &config.backend {
        BackendKind::AfPacket { interface } => {
            let (b, notes) = AfPacketBackend::open(interface, config.port, config.offset)?;
            OpenedBackend {
                backend: Box::new(b),
                address: raw_addr,
                notes,
            }
        }
        BackendKind::PfRing {
            interface,
            library,
            check_module,
        } => {
            let (b, notes) = PfRingBackend::open(
                interface,
                config.port,
                config.offset,
                library.as_deref(),
                *check_module,
            )?;
            OpenedBackend {
                backend: Box::new(b),
                address: raw_addr,
                notes,
            }
        }
        BackendKind::Udp => {
            let (b, addr, notes) = UdpBackend::bind(&UdpConfig {
                bind: config.bind,
                port: config.port,
                multicast: config.multicast,
                rcvbuf: config.rcvbuf as usize,
                offset: config.offset,
                senders: config.tags_senders(),
                timestamps: config.latency,
            })?;
            OpenedBackend {
                backend: Box::new(b),
                address: addr,
                notes,
            }
        }
    })
}
