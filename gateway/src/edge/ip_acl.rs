//! `ip_acl`: the first edge stage. Works out the client's address and refuses denied (or
//! not allowed) addresses with 403 `IP_BLOCKED`.
//!
//! - **Client address**: the socket peer; when the peer is one of `ipacl.trusted_proxies`,
//!   `X-Forwarded-For` is walked from the right (all its header lines in order, as one
//!   comma-separated list): each hop appended by a trusted proxy is believed, and the first
//!   hop that is not itself a trusted proxy is the client. If every hop is trusted the
//!   left-most one is used. A malformed hop (not an IP address; `1.2.3.4:80` and
//!   `[2001:db8::1]:443` are accepted, empty entries are skipped) stops the walk, and the last
//!   good address (a trusted proxy, or the peer) is used: it is the nearest address the
//!   gateway can vouch for. The header is read as bytes, hop by hop, so a hop that is not
//!   ASCII is just one malformed hop: the hops a trusted proxy appended to its right are still
//!   believed (a line is never thrown away whole, which would make the proxy the client).
//!   `Forwarded` (RFC 7239) is not read.
//! - **The believed chain**: the client and the trusted proxies between it and the gateway
//!   (ending with the peer) are kept in [`EdgeCtx::proxies`], so the invoke tier can tell the
//!   backend exactly that and nothing a client wrote (docs/PROTOCOL.md, "What backends
//!   receive").
//! - IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) are treated as the IPv4 address, both for
//!   clients and for the lists (a rule `::ffff:10.0.0.0/104` is the rule `10.0.0.0/8`).
//! - **Decision**: deny wins; then a non-empty allow list admits only its matches. A request
//!   whose address is unknown (no peer) is refused only when an allow list is set.
//! - Lists are compiled into sorted, merged ranges: a lookup is a binary search, with no
//!   allocation on the request path, however long the lists are.

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use ipnet::IpNet;
use portico_control::{IpAclRules, Snapshot};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The header a trusted proxy appends the address of its own client to.
const XFF: &str = "x-forwarded-for";

/// A set of addresses as sorted, disjoint, non-adjacent inclusive ranges per family.
#[derive(Debug, Clone, Default, PartialEq)]
struct RangeSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl RangeSet {
    fn new(nets: &[IpNet]) -> Self {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for net in nets {
            match net {
                IpNet::V4(n) => v4.push((u32::from(n.network()), u32::from(n.broadcast()))),
                IpNet::V6(n) => {
                    let start = n.network();
                    let end = n.broadcast();
                    v6.push((u128::from(start), u128::from(end)));
                    // The IPv4-mapped part of a v6 rule also applies to the IPv4 address.
                    let (lo, hi) = (u128::from(start), u128::from(end));
                    let mapped_lo = u128::from(Ipv4Addr::UNSPECIFIED.to_ipv6_mapped());
                    let mapped_hi = u128::from(Ipv4Addr::BROADCAST.to_ipv6_mapped());
                    let (a, b) = (lo.max(mapped_lo), hi.min(mapped_hi));
                    if a <= b {
                        // Both ends are inside ::ffff:0:0/96, so the low 32 bits are the v4.
                        v4.push(((a & 0xffff_ffff) as u32, (b & 0xffff_ffff) as u32));
                    }
                }
            }
        }
        RangeSet {
            v4: merge(v4, |x: u32| x.checked_add(1)),
            v6: merge(v6, |x: u128| x.checked_add(1)),
        }
    }

    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Whether `ip` (already normalised) is in the set.
    fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => lookup(&self.v4, u32::from(a)),
            IpAddr::V6(a) => lookup(&self.v6, u128::from(a)),
        }
    }
}

/// Sorts and merges overlapping or adjacent inclusive ranges (`succ`: the next integer,
/// `None` at the maximum).
fn merge<T: Copy + Ord>(mut ranges: Vec<(T, T)>, succ: fn(T) -> Option<T>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        if let Some(last) = out.last_mut() {
            // Adjacent when start == last.end + 1; no overflow when last.end is the maximum
            // because then start <= last.end already holds.
            if start <= last.1 || succ(last.1) == Some(start) {
                if end > last.1 {
                    last.1 = end;
                }
                continue;
            }
        }
        out.push((start, end));
    }
    out.shrink_to_fit();
    out
}

fn lookup<T: Copy + Ord>(ranges: &[(T, T)], x: T) -> bool {
    let idx = ranges.partition_point(|&(start, _)| start <= x);
    idx > 0 && ranges[idx - 1].1 >= x
}

/// `::ffff:a.b.c.d` → `a.b.c.d`; any other address unchanged.
fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The longest `X-Forwarded-For` hop that can be an address (`[` IPv6 `]:` port).
const MAX_HOP_BYTES: usize = 64;

/// Parses one `X-Forwarded-For` hop, as bytes: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:443`. Anything else (longer than an address can be, not
/// ASCII) is `None`.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    if hop.len() > MAX_HOP_BYTES || !hop.is_ascii() {
        return None;
    }
    let hop = std::str::from_utf8(hop).ok()?;
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        let ok_port = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return if ok_port {
            inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
        } else {
            None
        };
    }
    let (host, port) = hop.split_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses requests from denied or (with an allow list) not allowed client addresses, and
/// records the client address in [`EdgeCtx::client_ip`].
#[derive(Debug, Clone, Default)]
pub struct IpAclStage {
    deny: RangeSet,
    allow: RangeSet,
    trusted: RangeSet,
}

/// Who is calling, as the stage decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The client's address (normalised); `None` without a peer address.
    pub client: Option<IpAddr>,
    /// The trusted proxies between the client and the gateway, left to right, ending with
    /// the peer; empty when the peer itself is the client.
    pub proxies: Vec<IpAddr>,
    /// Whether the peer is one of `trusted_proxies`.
    pub peer_trusted: bool,
}

impl IpAclStage {
    /// The client's address: the peer, or through trusted proxies the right-most
    /// `X-Forwarded-For` hop that is not a trusted proxy (see the module docs). Normalised.
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &http::HeaderMap) -> Option<IpAddr> {
        self.caller(peer, headers).client
    }

    /// The client and the believed chain of proxies (see the module docs). One pass over the
    /// `X-Forwarded-For` bytes, from the right, stopping at the client.
    pub fn caller(&self, peer: Option<IpAddr>, headers: &http::HeaderMap) -> Caller {
        let Some(peer) = peer.map(normalize) else {
            return Caller::default();
        };
        if self.trusted.is_empty() || !self.trusted.contains(peer) {
            return Caller {
                client: Some(peer),
                proxies: Vec::new(),
                peer_trusted: false,
            };
        }
        let mut client = peer;
        // Right to left while walking; reversed at the end.
        let mut proxies = Vec::new();
        'walk: for line in headers.get_all(XFF).iter().rev() {
            for hop in line.as_bytes().rsplit(|&b| b == b',') {
                let hop = hop.trim_ascii();
                if hop.is_empty() {
                    continue;
                }
                let Some(ip) = parse_hop(hop) else {
                    break 'walk;
                };
                proxies.push(client);
                client = normalize(ip);
                if !self.trusted.contains(client) {
                    break 'walk;
                }
            }
        }
        proxies.reverse();
        Caller {
            client: Some(client),
            proxies,
            peer_trusted: true,
        }
    }
}

impl Stage for IpAclStage {
    /// Reload phase: compiles the snapshot's `ipacl` into sorted ranges. Carries nothing.
    fn build(snapshot: &Snapshot, _carried: &Carried) -> Self {
        let rules: &IpAclRules = &snapshot.ipacl;
        IpAclStage {
            deny: RangeSet::new(&rules.deny),
            allow: RangeSet::new(&rules.allow),
            trusted: RangeSet::new(&rules.trusted_proxies),
        }
    }

    fn name(&self) -> &'static str {
        "ip_acl"
    }

    /// Request phase, first stage (before `route`). Sets `ctx.client_ip`, `ctx.proxies` and
    /// `ctx.peer_trusted`. `Continue`: the address is admitted; `Respond`: 403 `IP_BLOCKED`
    /// (denied, or not on the allow list).
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let caller = self.caller(req.peer, req.headers);
        let client = caller.client;
        ctx.client_ip = client;
        ctx.proxies = caller.proxies;
        ctx.peer_trusted = caller.peer_trusted;
        match client {
            Some(ip) if self.deny.contains(ip) => {
                GatewayError::new(Code::IpBlocked, format!("client address {ip} is denied")).into()
            }
            Some(ip) if !self.allow.is_empty() && !self.allow.contains(ip) => GatewayError::new(
                Code::IpBlocked,
                format!("client address {ip} is not allowed"),
            )
            .into(),
            None if !self.allow.is_empty() => {
                GatewayError::new(Code::IpBlocked, "client address unknown").into()
            }
            _ => Flow::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get;
    use http::HeaderMap;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn stage(deny: &[&str], allow: &[&str], trusted: &[&str]) -> IpAclStage {
        let snapshot = Snapshot {
            ipacl: std::sync::Arc::new(IpAclRules {
                deny: nets(deny),
                allow: nets(allow),
                trusted_proxies: nets(trusted),
            }),
            ..Snapshot::default()
        };
        IpAclStage::build(&snapshot, &Carried::default())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Runs the stage; `Ok(client_ip)` when admitted, `Err(code)` when refused.
    fn run(stage: &IpAclStage, peer: &str, xff: &[&str]) -> Result<Option<IpAddr>, &'static str> {
        let mut headers = HeaderMap::new();
        for v in xff {
            headers.append(XFF, v.parse().unwrap());
        }
        let req = get("/x", &headers, Some(ip(peer)));
        let mut ctx = EdgeCtx::default();
        match stage.apply(&req, &mut ctx) {
            Flow::Continue => Ok(ctx.client_ip),
            Flow::Respond(Err(e)) => {
                assert_eq!(e.status(), 403);
                Err(e.code.as_str())
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn empty_acl_admits_everyone() {
        let s = stage(&[], &[], &[]);
        assert_eq!(run(&s, "203.0.113.9", &[]), Ok(Some(ip("203.0.113.9"))));
        assert_eq!(run(&s, "2001:db8::1", &[]), Ok(Some(ip("2001:db8::1"))));
    }

    #[test]
    fn v4_and_v6_deny_cidrs() {
        let s = stage(
            &["203.0.113.0/24", "2001:db8::/32", "198.51.100.7/32"],
            &[],
            &[],
        );
        assert_eq!(run(&s, "203.0.113.0", &[]), Err("IP_BLOCKED"));
        assert_eq!(run(&s, "203.0.113.255", &[]), Err("IP_BLOCKED"));
        assert!(run(&s, "203.0.114.0", &[]).is_ok());
        assert!(run(&s, "203.0.112.255", &[]).is_ok());
        assert_eq!(run(&s, "198.51.100.7", &[]), Err("IP_BLOCKED"));
        assert!(run(&s, "198.51.100.8", &[]).is_ok());
        assert_eq!(run(&s, "2001:db8:ffff::1", &[]), Err("IP_BLOCKED"));
        assert!(run(&s, "2001:db9::1", &[]).is_ok());
    }

    #[test]
    fn allow_list_admits_only_matches_and_deny_wins() {
        let s = stage(&["10.1.0.0/16"], &["10.0.0.0/8", "fd00::/8"], &[]);
        assert!(run(&s, "10.2.3.4", &[]).is_ok());
        assert!(run(&s, "fd12::1", &[]).is_ok());
        assert_eq!(run(&s, "10.1.2.3", &[]), Err("IP_BLOCKED"));
        assert_eq!(run(&s, "192.0.2.1", &[]), Err("IP_BLOCKED"));
        assert_eq!(run(&s, "fe80::1", &[]), Err("IP_BLOCKED"));
    }

    #[test]
    fn unknown_peer_is_refused_only_under_an_allow_list() {
        let headers = HeaderMap::new();
        let req = get("/x", &headers, None);
        let mut ctx = EdgeCtx::default();
        assert!(matches!(
            stage(&["0.0.0.0/0"], &[], &[]).apply(&req, &mut ctx),
            Flow::Continue
        ));
        assert!(matches!(
            stage(&[], &["10.0.0.0/8"], &[]).apply(&req, &mut ctx),
            Flow::Respond(_)
        ));
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        let s = stage(&["203.0.113.0/24", "::ffff:192.0.2.0/120"], &[], &[]);
        assert_eq!(run(&s, "::ffff:203.0.113.5", &[]), Err("IP_BLOCKED"));
        assert_eq!(run(&s, "192.0.2.200", &[]), Err("IP_BLOCKED"));
        assert_eq!(
            run(&s, "::ffff:198.51.100.1", &[]),
            Ok(Some(ip("198.51.100.1")))
        );
        // A v6 rule covering all of ::ffff:0:0/96 covers every IPv4 address.
        let all = stage(&["::/0"], &[], &[]);
        assert_eq!(run(&all, "192.0.2.1", &[]), Err("IP_BLOCKED"));
    }

    #[test]
    fn xff_is_ignored_from_untrusted_peers() {
        let s = stage(&["203.0.113.0/24"], &[], &["10.0.0.0/8"]);
        assert_eq!(
            run(&s, "192.0.2.1", &["203.0.113.1"]),
            Ok(Some(ip("192.0.2.1")))
        );
        // A client cannot unblock itself by sending XFF either.
        assert_eq!(run(&s, "203.0.113.1", &["192.0.2.1"]), Err("IP_BLOCKED"));
    }

    #[test]
    fn xff_is_walked_through_trusted_proxies() {
        let s = stage(&["203.0.113.0/24"], &[], &["10.0.0.0/8", "fd00::/8"]);
        // The right-most untrusted hop is the client; spoofed hops to its left are ignored.
        assert_eq!(
            run(&s, "10.0.0.1", &["1.1.1.1, 192.0.2.5, 10.0.0.2"]),
            Ok(Some(ip("192.0.2.5")))
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["192.0.2.5, 203.0.113.7"]),
            Err("IP_BLOCKED")
        );
        // Several header lines are one list, in order.
        assert_eq!(
            run(&s, "fd00::1", &["203.0.113.7", "198.51.100.1", "10.9.9.9"]),
            Ok(Some(ip("198.51.100.1")))
        );
        // Ports and brackets; mapped addresses normalised.
        assert_eq!(
            run(&s, "10.0.0.1", &["203.0.113.7:5555"]),
            Err("IP_BLOCKED")
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["[2001:db8::9]:443"]),
            Ok(Some(ip("2001:db8::9")))
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["::ffff:203.0.113.7"]),
            Err("IP_BLOCKED")
        );
        // All hops trusted: the left-most is the client.
        assert_eq!(
            run(&s, "10.0.0.1", &["10.0.0.3, 10.0.0.2"]),
            Ok(Some(ip("10.0.0.3")))
        );
        // No XFF: the peer.
        assert_eq!(run(&s, "10.0.0.1", &[]), Ok(Some(ip("10.0.0.1"))));
    }

    #[test]
    fn malformed_xff_stops_at_the_last_good_address() {
        let s = stage(&[], &[], &["10.0.0.0/8"]);
        assert_eq!(
            run(&s, "10.0.0.1", &["192.0.2.5, garbage"]),
            Ok(Some(ip("10.0.0.1")))
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["192.0.2.5, unknown, 10.0.0.7"]),
            Ok(Some(ip("10.0.0.7")))
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["192.0.2.5,, "]),
            Ok(Some(ip("192.0.2.5")))
        );
        assert_eq!(
            run(&s, "10.0.0.1", &["1.2.3.4:99999x"]),
            Ok(Some(ip("10.0.0.1")))
        );
    }

    #[test]
    fn a_non_ascii_hop_is_one_malformed_hop() {
        let s = stage(&["203.0.113.0/24"], &[], &["10.0.0.0/8"]);
        let with = |raw: &[u8]| {
            let mut headers = HeaderMap::new();
            headers.append(XFF, http::HeaderValue::from_bytes(raw).unwrap());
            s.caller(Some(ip("10.0.0.1")), &headers)
        };
        // The proxy appended the real client after a hop the client made up: the client is
        // still found, not the proxy.
        let c = with("1.1.1.1, é, 203.0.113.9".as_bytes());
        assert_eq!(c.client, Some(ip("203.0.113.9")));
        assert_eq!(c.proxies, vec![ip("10.0.0.1")]);
        let c = with(b"\xff\xfe, 192.0.2.8, 10.0.0.2");
        assert_eq!(c.client, Some(ip("192.0.2.8")));
        assert_eq!(c.proxies, vec![ip("10.0.0.2"), ip("10.0.0.1")]);
        // A non-ASCII hop right next to the peer: the peer is the nearest address vouched for.
        let c = with("192.0.2.8, 5.5.5.5é".as_bytes());
        assert_eq!(c.client, Some(ip("10.0.0.1")));
        assert!(c.proxies.is_empty());
        // Too long to be an address.
        let c = with(format!("192.0.2.8, {}", "1".repeat(100)).as_bytes());
        assert_eq!(c.client, Some(ip("10.0.0.1")));
    }

    #[test]
    fn the_believed_chain_ends_with_the_peer() {
        let s = stage(&[], &[], &["10.0.0.0/8"]);
        let caller = |peer: &str, xff: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in xff {
                headers.append(XFF, v.parse().unwrap());
            }
            s.caller(Some(ip(peer)), &headers)
        };
        let c = caller("10.0.0.1", &["6.6.6.6, 192.0.2.5, 10.0.0.3", "10.0.0.2"]);
        assert_eq!(c.client, Some(ip("192.0.2.5")));
        assert_eq!(
            c.proxies,
            vec![ip("10.0.0.3"), ip("10.0.0.2"), ip("10.0.0.1")]
        );
        assert!(c.peer_trusted);
        // An untrusted peer is the client, whatever it says.
        let c = caller("192.0.2.1", &["6.6.6.6"]);
        assert_eq!(
            (c.client, c.proxies.len(), c.peer_trusted),
            (Some(ip("192.0.2.1")), 0, false)
        );
        // A trusted peer without XFF is the client.
        let c = caller("::ffff:10.0.0.1", &[]);
        assert_eq!(
            (c.client, c.proxies.len(), c.peer_trusted),
            (Some(ip("10.0.0.1")), 0, true)
        );
        // Every hop trusted: the left-most is the client.
        let c = caller("10.0.0.1", &["10.0.0.3, 10.0.0.2"]);
        assert_eq!(c.client, Some(ip("10.0.0.3")));
        assert_eq!(c.proxies, vec![ip("10.0.0.2"), ip("10.0.0.1")]);
        assert_eq!(s.caller(None, &HeaderMap::new()), Caller::default());
    }

    #[test]
    fn ranges_merge_and_search() {
        let set = RangeSet::new(&nets(&[
            "10.0.0.0/9",
            "10.128.0.0/9",
            "10.0.0.0/24",
            "255.255.255.255/32",
            "0.0.0.0/32",
        ]));
        assert_eq!(
            set.v4,
            vec![
                (0, 0),
                (u32::from(ip4("10.0.0.0")), u32::from(ip4("10.255.255.255"))),
                (u32::MAX, u32::MAX)
            ]
        );
        assert!(set.contains(ip("10.200.0.1")));
        assert!(set.contains(ip("0.0.0.0")));
        assert!(set.contains(ip("255.255.255.255")));
        assert!(!set.contains(ip("11.0.0.0")));
        assert!(!set.contains(ip("9.255.255.255")));

        // A large list stays exact.
        let many: Vec<IpNet> = (0..10_000u32)
            .map(|i| IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(i << 12), 24).unwrap()))
            .collect();
        let big = RangeSet::new(&many);
        assert_eq!(big.v4.len(), 10_000);
        assert!(big.contains(IpAddr::V4(Ipv4Addr::from((777 << 12) + 255))));
        assert!(!big.contains(IpAddr::V4(Ipv4Addr::from((777 << 12) + 256))));
    }

    fn ip4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
}
