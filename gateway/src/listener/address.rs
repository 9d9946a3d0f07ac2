//! The per-client-address connection cap (`--max-connections-per-address`): one address may
//! hold at most so many connections on a plane's traffic listeners (plain and TLS together),
//! so one host cannot take the listener's whole `--max-connections` from everyone else.
//! Addresses in the plane's `ipacl.trusted_proxies` are not capped: a proxy carries many
//! clients.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// The default for `--max-connections-per-address`.
pub const DEFAULT_MAX_PER_ADDRESS: usize = 256;

/// Open connections per client address, against a limit.
pub struct AddressCap {
    max: usize,
    open: DashMap<IpAddr, usize, foldhash::quality::RandomState>,
}

impl AddressCap {
    /// A cap of `max` connections per address; zero: no cap.
    pub fn new(max: usize) -> Arc<AddressCap> {
        Arc::new(AddressCap {
            max,
            open: DashMap::default(),
        })
    }

    /// Counts a connection from `ip` in, unless the address is at its limit. The connection
    /// counts until the returned guard is dropped.
    pub fn try_open(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        let ip = normalize(ip);
        if self.max == 0 {
            return Some(AddressSlot(None));
        }
        let mut open = self.open.entry(ip).or_insert(0);
        if *open >= self.max {
            return None;
        }
        *open += 1;
        Some(AddressSlot(Some((self.clone(), ip))))
    }

    /// Connections open from `ip` right now.
    pub fn open(&self, ip: IpAddr) -> usize {
        self.open.get(&normalize(ip)).map_or(0, |n| *n)
    }

    /// Addresses with a connection open (the table's size).
    pub fn addresses(&self) -> usize {
        self.open.len()
    }

    fn close(&self, ip: IpAddr) {
        if let Entry::Occupied(mut e) = self.open.entry(ip) {
            *e.get_mut() = e.get().saturating_sub(1);
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

/// One connection of an address under an [`AddressCap`]; dropping it frees its place.
pub struct AddressSlot(Option<(Arc<AddressCap>, IpAddr)>);

impl AddressSlot {
    /// A slot that counts nowhere (an uncapped address).
    pub fn uncounted() -> Self {
        AddressSlot(None)
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        if let Some((cap, ip)) = self.0.take() {
            cap.close(ip);
        }
    }
}

/// An IPv4 client seen through an IPv6 socket is the same client.
fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_capped_alone_and_its_places_come_back() {
        let cap = AddressCap::new(2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let first = cap.try_open(a).unwrap();
        let second = cap.try_open(mapped).unwrap();
        assert!(cap.try_open(a).is_none(), "the same client through IPv6");
        let other = cap.try_open(b).unwrap();
        assert_eq!((cap.open(a), cap.open(b)), (2, 1));
        drop(first);
        let again = cap.try_open(a).unwrap();
        drop((second, again, other));
        assert_eq!(cap.addresses(), 0, "closed addresses leave the table");
        let none = AddressCap::new(0);
        let held: Vec<_> = (0..1000).map(|_| none.try_open(a).unwrap()).collect();
        assert_eq!((held.len(), none.addresses()), (1000, 0));
    }
}
