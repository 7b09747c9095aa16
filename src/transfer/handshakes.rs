//! The receiver's places for connections in their handshake, before they have proven the
//! token: few, so that strangers cannot make it hold many threads and descriptors, and shared
//! so that no one can hold them all.
//!
//! Anyone who reaches the port can open connections and say nothing; left alone, each would
//! hold a place until the handshake's silence limit drops it (10 s), and a few dozen such
//! connections would keep every push out. Two rules keep the places for those who speak:
//!
//! - One address holds at most `per_peer` of the `most` places, so a single misbehaving host
//!   leaves room for the others. An address is counted as its host's (`Origin`): an IPv4
//!   address as itself, also when it arrives IPv4-mapped on an IPv6 socket, and an IPv6
//!   address as its /64, which one host usually holds whole, so that a host cannot take every
//!   place by speaking from many addresses.
//! - When the places a newcomer needs are taken, the connection that has said nothing the
//!   longest gives way to it: the oldest silent one of the newcomer's own address when that
//!   address is at its bound, else of the address holding the most places. A connection gives
//!   way only once it has been silent for `grace` (a sender answers the challenge within one
//!   round trip, so a handshake under way is not cut by a burst of newcomers), and never once
//!   it has begun to answer.
//!
//! A connection that gives way, and a newcomer that finds nobody to give way, are answered
//! "busy" (`wire::Message::Error` with `retry`), which `push` tells apart from a broken
//! connection and tries again after a pause. So a push from the very address that holds
//! silent connections still gets through: its connection takes the place of one of them. All
//! of this is decided under one lock, with the time passed in, so the rules are tested here
//! on plain addresses and instants.

use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Places for connections in their handshake, in all and per address.
pub const MOST: usize = 16;
pub const PER_PEER: usize = 4;
/// How long a connection must have been silent before it gives way to a newcomer.
pub const GRACE: Duration = Duration::from_secs(1);

/// Whose a connection is, as the bound per address counts it: an IPv4 address (IPv4-mapped
/// IPv6 ones as the IPv4 address they carry), or an IPv6 /64 (its host bits zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin(IpAddr);

impl Origin {
    pub fn of(peer: IpAddr) -> Origin {
        match peer {
            IpAddr::V4(_) => Origin(peer),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Origin(IpAddr::V4(v4)),
                None => Origin(IpAddr::V6(Ipv6Addr::from(
                    u128::from(v6) & !((1u128 << 64) - 1),
                ))),
            },
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

struct Place {
    id: u64,
    peer: Origin,
    since: Instant,
    /// The connection has begun to answer the challenge: it keeps its place.
    spoke: bool,
    /// Set when it gives way; its handler answers "busy" and ends.
    gave_way: Arc<AtomicBool>,
    /// The connection itself, to see whether its answer has arrived before its handler has
    /// looked (None in tests).
    stream: Option<TcpStream>,
}

impl Place {
    fn silent_for(&self, grace: Duration, now: Instant) -> bool {
        !self.spoke
            && now.saturating_duration_since(self.since) >= grace
            && !self.stream.as_ref().is_some_and(has_bytes)
    }
}

/// Whether bytes (or the end) wait to be read on `s`, without waiting.
fn has_bytes(s: &TcpStream) -> bool {
    super::wire::readable(s, Duration::ZERO).unwrap_or(true)
}

/// The places, and who holds them.
pub struct Handshakes {
    most: usize,
    per_peer: usize,
    grace: Duration,
    places: Mutex<Vec<Place>>,
    next_id: AtomicU64,
}

/// A place held; given back when dropped.
pub struct Held<'a> {
    table: &'a Handshakes,
    id: u64,
    gave_way: Arc<AtomicBool>,
}

impl Handshakes {
    pub fn new(most: usize, per_peer: usize, grace: Duration) -> Handshakes {
        Handshakes {
            most,
            per_peer: per_peer.clamp(1, most.max(1)),
            grace,
            places: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    /// A place for a connection from `peer` arriving `now`, taken from a silent connection if
    /// need be; Err: the "busy" answer to give it.
    pub fn enter(
        &self,
        peer: IpAddr,
        now: Instant,
        stream: Option<TcpStream>,
    ) -> Result<Held<'_>, String> {
        let peer = Origin::of(peer);
        let mut places = self.places.lock().unwrap();
        let held_by = |p: Origin, places: &[Place]| places.iter().filter(|x| x.peer == p).count();
        let at_bound = held_by(peer, &places) >= self.per_peer;
        if at_bound || places.len() >= self.most {
            // Who gives way: the newcomer's own address's when it is at its bound, else the
            // address holding the most places; the longest silent among them.
            let mut order: Vec<usize> = (0..places.len())
                .filter(|&i| !at_bound || places[i].peer == peer)
                .collect();
            order.sort_by_key(|&i| {
                (
                    std::cmp::Reverse(held_by(places[i].peer, &places)),
                    places[i].since,
                )
            });
            let Some(at) = order
                .into_iter()
                .find(|&i| places[i].silent_for(self.grace, now))
            else {
                return Err(if at_bound {
                    format!(
                        "busy: {} handshakes from {peer} are under way already; try again shortly",
                        self.per_peer
                    )
                } else {
                    format!(
                        "busy: the receiver has {} handshakes under way; try again shortly",
                        self.most
                    )
                });
            };
            let gone = places.swap_remove(at);
            gone.gave_way.store(true, Ordering::Release);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let gave_way = Arc::new(AtomicBool::new(false));
        places.push(Place {
            id,
            peer,
            since: now,
            spoke: false,
            gave_way: Arc::clone(&gave_way),
            stream,
        });
        Ok(Held {
            table: self,
            id,
            gave_way,
        })
    }

    /// Places held now, by everyone and by `peer`'s host (`Origin`).
    pub fn held(&self, peer: IpAddr) -> (usize, usize) {
        let peer = Origin::of(peer);
        let places = self.places.lock().unwrap();
        let mine = places.iter().filter(|p| p.peer == peer).count();
        (places.len(), mine)
    }
}

impl Held<'_> {
    /// The place was given to a newer connection: answer "busy" and end.
    pub fn gave_way(&self) -> bool {
        self.gave_way.load(Ordering::Acquire)
    }

    /// The connection has begun to answer: it keeps its place from now on. False if it gave
    /// way first (the two are decided under the table's lock, so never both).
    pub fn spoke(&self) -> bool {
        let mut places = self.table.places.lock().unwrap();
        match places.iter_mut().find(|p| p.id == self.id) {
            Some(p) => {
                p.spoke = true;
                p.stream = None;
                true
            }
            None => false,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.table
            .places
            .lock()
            .unwrap()
            .retain(|p| p.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let t = Handshakes::new(4, 2, GRACE);
        let now = Instant::now();
        let a: Vec<_> = (0..2).map(|_| t.enter(ip(1), now, None).unwrap()).collect();
        // A third from the same address, while its two are young: busy, naming the address.
        let busy = t.enter(ip(1), now, None).err().unwrap();
        assert!(
            busy.starts_with("busy: 2 handshakes from 10.0.0.1"),
            "{busy}"
        );
        // Others still get in, up to the whole table.
        let b: Vec<_> = (0..2).map(|_| t.enter(ip(2), now, None).unwrap()).collect();
        assert_eq!(t.held(ip(1)), (4, 2));
        let busy = t.enter(ip(3), now, None).err().unwrap();
        assert!(busy.starts_with("busy: the receiver has 4"), "{busy}");
        // A place given back is free again.
        drop(a);
        assert_eq!(t.held(ip(1)), (2, 0));
        assert!(t.enter(ip(3), now, None).is_ok());
        drop(b);
    }

    #[test]
    fn the_longest_silent_gives_way_once_the_grace_is_over() {
        let t = Handshakes::new(16, 4, GRACE);
        let t0 = Instant::now();
        let silent: Vec<_> = (0..4)
            .map(|k| t.enter(ip(1), t0 + Duration::from_millis(k), None).unwrap())
            .collect();
        // Within the grace nobody gives way.
        assert!(t.enter(ip(1), t0 + GRACE / 2, None).is_err());
        // After it, the oldest gives way to the newcomer from the same address.
        let later = t0 + GRACE + Duration::from_millis(10);
        let pushed = t.enter(ip(1), later, None).unwrap();
        assert!(silent[0].gave_way());
        assert!(
            !silent[0].spoke(),
            "a connection that gave way cannot keep its place"
        );
        assert!(silent[1..].iter().all(|s| !s.gave_way()));
        assert_eq!(t.held(ip(1)), (4, 4));
        // One that has begun to answer keeps its place: the next oldest silent goes instead.
        assert!(silent[1].spoke());
        let _another = t.enter(ip(1), later, None).unwrap();
        assert!(!silent[1].gave_way() && silent[2].gave_way());
        // When all of an address's places are speaking or young, the newcomer is busy.
        assert!(pushed.spoke());
        assert!(silent[3].spoke());
        assert!(t.enter(ip(1), later, None).is_err());
        // Dropping the places that gave way changes nothing: they are no longer held.
        drop(silent);
        assert_eq!(t.held(ip(1)), (2, 2));
    }

    #[test]
    fn a_full_table_takes_from_the_address_holding_most() {
        let t = Handshakes::new(6, 4, GRACE);
        let t0 = Instant::now();
        let a: Vec<_> = (0..4).map(|_| t.enter(ip(1), t0, None).unwrap()).collect();
        let b: Vec<_> = (0..2).map(|_| t.enter(ip(2), t0, None).unwrap()).collect();
        // A third address under its bound, the table full: the heaviest holder gives way,
        // though the other holds silent places as old.
        let later = t0 + GRACE;
        let _c = t.enter(ip(3), later, None).unwrap();
        assert_eq!(a.iter().filter(|h| h.gave_way()).count(), 1);
        assert!(b.iter().all(|h| !h.gave_way()));
        assert_eq!(t.held(ip(1)), (6, 3));
    }

    #[test]
    fn an_ipv4_mapped_address_counts_as_its_ipv4_address() {
        let t = Handshakes::new(16, 2, GRACE);
        let now = Instant::now();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let _a = t.enter(ip(1), now, None).unwrap();
        let _b = t.enter(mapped, now, None).unwrap();
        assert_eq!(t.held(ip(1)), (2, 2));
        assert_eq!(t.held(mapped), (2, 2));
        let busy = t.enter(mapped, now, None).err().unwrap();
        assert!(
            busy.starts_with("busy: 2 handshakes from 10.0.0.1 "),
            "{busy}"
        );
        // Another IPv4 address, mapped or not, is another host.
        assert!(t
            .enter("::ffff:10.0.0.2".parse().unwrap(), now, None)
            .is_ok());
    }

    #[test]
    fn ipv6_addresses_count_by_their_64() {
        let t = Handshakes::new(16, 2, GRACE);
        let now = Instant::now();
        let v6 = |s: &str| -> IpAddr { s.parse().unwrap() };
        // Many addresses of one /64 (one host's privacy addresses, say) share its bound.
        let _a = t.enter(v6("2001:db8:1:2::1"), now, None).unwrap();
        let _b = t
            .enter(v6("2001:db8:1:2:ffff:ffff:ffff:fffe"), now, None)
            .unwrap();
        let busy = t
            .enter(v6("2001:db8:1:2:abcd::9"), now, None)
            .err()
            .unwrap();
        assert!(
            busy.starts_with("busy: 2 handshakes from 2001:db8:1:2::/64 "),
            "{busy}"
        );
        assert_eq!(t.held(v6("2001:db8:1:2::77")), (2, 2));
        // The next /64 is another host.
        let _c = t.enter(v6("2001:db8:1:3::1"), now, None).unwrap();
        assert_eq!(t.held(v6("2001:db8:1:3::2")), (3, 1));
        assert_eq!(
            Origin::of(v6("2001:db8:1:2::1")).to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(Origin::of(v6("::ffff:192.0.2.7")).to_string(), "192.0.2.7");
    }

    #[test]
    fn a_connection_whose_answer_has_arrived_does_not_give_way() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, peer) = l.accept().unwrap();
        let t = Handshakes::new(16, 1, GRACE);
        let t0 = Instant::now();
        let first = t.enter(peer.ip(), t0, server.try_clone().ok()).unwrap();
        // Its answer is there, though its handler has not looked yet.
        std::io::Write::write_all(&mut client, b"\0\0\0\x02{}").unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while !has_bytes(&server) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(t.enter(peer.ip(), t0 + GRACE, None).is_err());
        assert!(!first.gave_way() && first.spoke());
    }
}
