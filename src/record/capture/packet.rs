//! Link-layer packets to UDP payloads, for the backends that see whole packets (AF_PACKET,
//! PF_RING): Ethernet with any number of 802.1Q/802.1ad tags, IPv4 or IPv6, UDP to our port.
//! IP fragments cannot be reassembled here: they are reported as such (the fix is an MTU that
//! fits a frame, 9000 for 8224-byte frames).

use super::DatagramInfo;

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const IPPROTO_UDP: u8 = 17;

/// What a packet is, as far as the capture cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// A UDP datagram to our port: its payload, and its length as the UDP header states it
    /// (longer than the payload when the packet was cut short).
    Datagram { payload: &'a [u8], udp_len: usize },
    /// A fragment of an IP datagram to our port (or one we cannot tell is not ours).
    Fragment,
    /// Anything else on the link: not ours, not counted.
    Other,
}

/// What the raw backends keep of the packets they see: the UDP datagrams to one port,
/// delivered as the udp backend would receive them; IP fragments to that port are counted.
pub struct PortFilter {
    pub port: u16,
    /// Leading bytes of each datagram that are not the frame (8: a PSN).
    pub offset: usize,
    pub fragments: u64,
}

impl PortFilter {
    pub fn new(port: u16, offset: usize) -> PortFilter {
        PortFilter {
            port,
            offset,
            fragments: 0,
        }
    }

    /// If `packet` carries a datagram to our port, copies it into `dst` (its first `offset`
    /// bytes go to the packet sequence number, at most `stride` bytes after them to `dst`)
    /// and says what arrived; `None` for anything else.
    ///
    /// # Safety
    /// `dst` must be valid for `stride` bytes.
    pub unsafe fn take(
        &mut self,
        packet: &[u8],
        dst: *mut u8,
        stride: usize,
    ) -> Option<DatagramInfo> {
        let (payload, udp_len) = match udp_payload(packet, self.port) {
            Packet::Datagram { payload, udp_len } => (payload, udp_len),
            Packet::Fragment => {
                self.fragments += 1;
                return None;
            }
            Packet::Other => return None,
        };
        let offset = self.offset;
        let body = payload.get(offset..).unwrap_or(&[]);
        let n = body.len().min(stride);
        // SAFETY: n <= stride bytes into the caller's buffer.
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), dst, n) };
        Some(DatagramInfo {
            len: udp_len,
            truncated: udp_len > offset + stride || payload.len() < udp_len,
            psn: (offset >= 8 && payload.len() >= 8)
                .then(|| u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"))),
            sender: 0,
            kernel_ns: 0,
        })
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Parses an Ethernet frame; `port` is our UDP destination port.
pub fn udp_payload(frame: &[u8], port: u16) -> Packet<'_> {
    let Some(mut ethertype) = be16(frame, 12) else {
        return Packet::Other;
    };
    let mut at = ETH_HEADER;
    // VLAN tags left in the packet (the kernel usually strips one into metadata).
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        let Some(inner) = be16(frame, at + 2) else {
            return Packet::Other;
        };
        ethertype = inner;
        at += 4;
    }
    ip_udp_payload(&frame[at.min(frame.len())..], ethertype, port)
}

/// Parses an IPv4 or IPv6 packet (`ethertype` says which).
pub fn ip_udp_payload(ip: &[u8], ethertype: u16, port: u16) -> Packet<'_> {
    let (udp_at, fragmented) = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&vihl) = ip.first() else {
                return Packet::Other;
            };
            if vihl >> 4 != 4 || ip.get(9) != Some(&IPPROTO_UDP) {
                return Packet::Other;
            }
            let ihl = (vihl & 0x0f) as usize * 4;
            let frag = be16(ip, 6).unwrap_or(0);
            let more_fragments = frag & 0x2000 != 0;
            let offset = frag & 0x1fff;
            if offset != 0 {
                // A later fragment carries no UDP header: we cannot tell its port.
                return Packet::Fragment;
            }
            (ihl, more_fragments)
        }
        ETHERTYPE_IPV6 => {
            if ip.first().is_none_or(|v| v >> 4 != 6) {
                return Packet::Other;
            }
            match ip.get(6) {
                Some(&IPPROTO_UDP) => (40, false),
                // A fragment header (44): the datagram was split.
                Some(&44) => return Packet::Fragment,
                _ => return Packet::Other,
            }
        }
        _ => return Packet::Other,
    };
    let Some(dport) = be16(ip, udp_at + 2) else {
        return Packet::Other;
    };
    if dport != port {
        return Packet::Other;
    }
    if fragmented {
        return Packet::Fragment;
    }
    let udp_len = be16(ip, udp_at + 4).unwrap_or(0) as usize;
    let start = udp_at + 8;
    let end = (udp_at + udp_len.max(8)).min(ip.len());
    Packet::Datagram {
        payload: ip.get(start..end).unwrap_or(&[]),
        udp_len: udp_len.saturating_sub(8),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// An Ethernet/IPv4/UDP packet to `port` carrying `payload`, with `vlans` tags.
    pub fn ipv4_packet(payload: &[u8], port: u16, vlans: usize) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        for _ in 0..vlans {
            p.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            p.extend_from_slice(&[0x00, 0x2a]);
        }
        p.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let total = 20 + 8 + payload.len();
        p.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
            0,
            0,
        ]);
        p.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
        p.extend_from_slice(&1234u16.to_be_bytes());
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn ipv4_with_and_without_vlans() {
        for vlans in 0..3 {
            let p = ipv4_packet(b"vdif frame", 46227, vlans);
            assert_eq!(
                udp_payload(&p, 46227),
                Packet::Datagram {
                    payload: b"vdif frame",
                    udp_len: 10
                }
            );
            assert_eq!(udp_payload(&p, 46228), Packet::Other);
        }
    }

    #[test]
    fn ipv6_and_fragments() {
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0, 0, 12, 17, 64];
        ip.extend_from_slice(&[0u8; 32]);
        ip.extend_from_slice(&[0x04, 0xd2, 0xb4, 0x93, 0, 12, 0, 0]); // to port 46227
        ip.extend_from_slice(b"abcd");
        p.extend_from_slice(&ip);
        assert_eq!(
            udp_payload(&p, 46227),
            Packet::Datagram {
                payload: b"abcd",
                udp_len: 4
            }
        );
        let mut frag = ipv4_packet(b"first part", 46227, 0);
        frag[20] = 0x20; // more fragments
        assert_eq!(udp_payload(&frag, 46227), Packet::Fragment);
        frag[21] = 0x10; // a later fragment
        assert_eq!(udp_payload(&frag, 1), Packet::Fragment);
        assert_eq!(udp_payload(&[0u8; 10], 1), Packet::Other);
        let mut truncated = ipv4_packet(&[7u8; 100], 46227, 0);
        truncated.truncate(60);
        assert_eq!(
            udp_payload(&truncated, 46227),
            Packet::Datagram {
                payload: &[7u8; 18],
                udp_len: 100
            }
        );
    }

    #[test]
    fn the_filter_delivers_ours_strips_the_psn_and_counts_fragments() {
        let mut f = PortFilter::new(46227, 8);
        let mut datagram = 0x0102_0304_0506_0708u64.to_le_bytes().to_vec();
        datagram.extend_from_slice(b"frame bytes");
        let mut dst = [0u8; 32];
        // SAFETY: dst holds the stride of bytes.
        let got =
            unsafe { f.take(&ipv4_packet(&datagram, 46227, 1), dst.as_mut_ptr(), 32) }.unwrap();
        assert_eq!(&dst[..11], b"frame bytes");
        assert_eq!(
            (got.len, got.truncated, got.psn),
            (19, false, Some(0x0102_0304_0506_0708))
        );
        // Longer than the slot: cut at the stride and flagged, as MSG_TRUNC would.
        let mut small = [0u8; 4];
        // SAFETY: small holds the stride of bytes.
        let got =
            unsafe { f.take(&ipv4_packet(&datagram, 46227, 0), small.as_mut_ptr(), 4) }.unwrap();
        assert_eq!((&small, got.truncated), (b"fram", true));
        // SAFETY: as above; nothing is written for packets that are not ours.
        assert!(unsafe { f.take(&ipv4_packet(&datagram, 9, 0), dst.as_mut_ptr(), 32) }.is_none());
        let mut frag = ipv4_packet(&datagram, 46227, 0);
        frag[20] = 0x20;
        // SAFETY: as above.
        assert!(unsafe { f.take(&frag, dst.as_mut_ptr(), 32) }.is_none());
        assert_eq!(f.fragments, 1);
    }
}
