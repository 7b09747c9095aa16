//! Whether a datagram destination is this recorder's own data port: forwarding there would
//! feed the stream back into the recording, every frame again and again, at full speed.
//!
//! The rule: the destination's address is one of this host's, and its port one the recorder
//! receives on. This host's addresses are the unspecified ones (`0.0.0.0`, `::`: a datagram
//! sent there arrives on this host), loopback (`127.0.0.0/8`, `::1`), every address of its
//! interfaces as they are now, and the IPv4-mapped IPv6 form of any of these; a multicast
//! group is one too (the host's own members get what is sent to it). Another host at
//! the same port number (station and correlator often both use the same one) is no loop, and
//! TCP cannot reach the recorder's datagram socket at all. The CLI, the API and VSI-S's
//! `mem2net` all ask here.

use std::net::{IpAddr, SocketAddr};

/// True when datagrams to `to` would arrive on one of the `receiving` ports of this host: an
/// address of this host, or a multicast group (sent to one, a datagram loops back to the
/// host's own members), at a port it receives on.
pub fn feeds_receiver(to: SocketAddr, receiving: &[SocketAddr]) -> bool {
    let ip = canonical(to.ip());
    receiving.iter().any(|r| r.port() == to.port()) && (ip.is_multicast() || is_this_host(ip))
}

/// True when `ip` is one of this host's addresses (in any of its spellings).
pub fn is_this_host(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    ip.is_unspecified() || ip.is_loopback() || interface_addresses().contains(&ip)
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Every address of this host's interfaces now (asked each time: addresses come and go).
fn interface_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list it allocated, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return found;
    }
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, not yet freed.
        let node = unsafe { &*at };
        if let Some(ip) = unsafe { address_of(node.ifa_addr) } {
            found.push(canonical(ip));
        }
        at = node.ifa_next;
    }
    // SAFETY: the list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address in `sa` (an interface's address, which may be null or of another family).
///
/// # Safety
/// `sa` is null or points at a socket address whose length its family implies.
unsafe fn address_of(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let v4 = &*(sa as *const libc::sockaddr_in);
            // The address in network order, as its bytes lie in memory.
            Some(IpAddr::from(v4.sin_addr.s_addr.to_ne_bytes()))
        }
        libc::AF_INET6 => {
            let v6 = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn every_spelling_of_this_host_at_the_receiving_port_loops() {
        for bound in ["127.0.0.1:5000", "0.0.0.0:5000", "[::]:5000"] {
            let receiving = [at(bound)];
            for to in [
                "127.0.0.1:5000",
                "127.3.2.1:5000",
                "0.0.0.0:5000",
                "[::]:5000",
                "[::1]:5000",
                "[::ffff:127.0.0.1]:5000",
                "[::ffff:0.0.0.0]:5000",
            ] {
                assert!(feeds_receiver(at(to), &receiving), "{to} to {bound}");
            }
            // Another port of this host, and another host at the same port, do not.
            assert!(!feeds_receiver(at("127.0.0.1:5001"), &receiving));
            assert!(!feeds_receiver(at("192.0.2.7:5000"), &receiving), "{bound}");
            assert!(!feeds_receiver(at("[2001:db8::7]:5000"), &receiving));
            // A multicast group at the port loops back to the host's own members.
            assert!(feeds_receiver(at("239.1.2.3:5000"), &receiving));
            assert!(!feeds_receiver(at("239.1.2.3:5001"), &receiving));
        }
    }

    #[test]
    fn an_interface_address_is_this_host() {
        for ip in interface_addresses() {
            assert!(is_this_host(ip), "{ip}");
            assert!(feeds_receiver(
                SocketAddr::new(ip, 6000),
                &[at("0.0.0.0:6000")]
            ));
        }
        // Documentation addresses (RFC 5737, 3849) are no host's.
        assert!(!is_this_host("198.51.100.1".parse().unwrap()));
    }
}
