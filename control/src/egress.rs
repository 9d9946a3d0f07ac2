//! The egress policy: where outbound requests made for configuration authors may go
//! (docs/SECURITY.md, "Outbound requests"; docs/operations/egress.md, "Egress policy").
//!
//! Config authors name URLs the gateway and the registry then call on their own: alert and
//! report webhooks, autoscale webhooks and `sleep_url`s, `wake_url`s, health checks,
//! notification callbacks, the reflection import's backend. Without a fence those calls
//! reach whatever the process can reach — the cloud metadata service above all. Every such
//! call goes through one [`Policy`]:
//!
//! - **Default deny**: link-local `169.254.0.0/16` and `fe80::/10`, and the metadata addresses
//!   `169.254.169.254`, `fd00:ec2::254` (AWS over IPv6) and `100.100.100.200` (Alibaba Cloud);
//!   the host names `metadata.google.internal` and `metadata.goog`.
//! - **Operators add rules**: deny and allow CIDRs (`--egress-deny` / `--egress-allow` on the
//!   registry, `PORTICO_EGRESS_DENY` / `PORTICO_EGRESS_ALLOW` on both processes). The most
//!   specific rule containing the address decides (longest prefix); at equal length an
//!   operator rule beats a default one, and deny beats allow; an address no rule contains is
//!   allowed. So `--egress-deny 10.0.0.0/8 --egress-allow
//!   10.1.2.3/32` admits one host of a denied range, and an allow of `0.0.0.0/0` does not open
//!   the metadata address (its /32 is more specific).
//! - **Every address is checked, and only checked addresses are used**: a host name is
//!   resolved, every address it resolves to is checked (one refused address refuses the
//!   target), and the caller connects to the checked addresses only ([`Policy::resolve`],
//!   [`Policy::connect`]), so a name that resolves to a public address for the check and to
//!   the metadata address for the connection (DNS rebinding) gets nowhere.
//! - IPv4-mapped (`::ffff:169.254.169.254`), IPv4-compatible and NAT64 (`64:ff9b::/96`) IPv6
//!   addresses are checked as the IPv4 address they carry, too; numeric host forms that
//!   resolvers accept for IPv4 (`2852039166`, `0xa9.0xfe.0xa9.0xfe`, `169.254.43518`) are read
//!   as the address they name.
//! - Callers never follow redirects (that is theirs to do: every HTTP client used for these
//!   calls is built without them).

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Denied unless an operator rule at least as specific allows them.
pub const DEFAULT_DENY: [&str; 5] = [
    "169.254.0.0/16",
    "fe80::/10",
    "169.254.169.254/32",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
];

/// Host names of metadata services, refused whatever they resolve to.
pub const DENIED_HOSTS: [&str; 2] = ["metadata.google.internal", "metadata.goog"];

/// Environment variables read by [`Policy::from_env`]: comma- or space-separated CIDRs (a
/// bare address is its /32 or /128).
pub const ENV_DENY: &str = "PORTICO_EGRESS_DENY";
/// See [`ENV_DENY`].
pub const ENV_ALLOW: &str = "PORTICO_EGRESS_ALLOW";

/// Why a target is refused (its `Display` is the message shown to the author or logged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The address is denied by a rule.
    #[error("{target}: the egress policy refuses {addr} ({rule})")]
    Denied {
        /// The target as named (host or URL).
        target: String,
        /// The refused address.
        addr: IpAddr,
        /// The deciding rule, e.g. `default deny 169.254.0.0/16`.
        rule: String,
    },
    /// The host name is a metadata service's.
    #[error("{0}: the egress policy refuses this host name (a cloud metadata service)")]
    DeniedHost(String),
    /// Not a URL the policy can check (no host, a scheme other than http/https, ...).
    #[error("{0}")]
    Invalid(String),
    /// The name does not resolve (or resolving failed).
    #[error("{target}: cannot resolve: {error}")]
    Unresolved {
        /// The host.
        target: String,
        /// Why.
        error: String,
    },
    /// Connecting to every checked address failed.
    #[error("{target}: cannot connect: {error}")]
    Unreachable {
        /// The host.
        target: String,
        /// The last error.
        error: String,
    },
}

impl Refused {
    /// Whether the policy itself refused (rather than the target being unresolvable or down).
    pub fn by_policy(&self) -> bool {
        matches!(self, Refused::Denied { .. } | Refused::DeniedHost(_))
    }
}

#[derive(Debug, Clone)]
struct Rule {
    net: IpNet,
    allow: bool,
    default: bool,
}

/// The egress policy: the default deny list plus the operator's rules.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(&[], &[])
    }
}

/// The host and port of a checked URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: String,
    /// The host as written (without brackets around an IPv6 address).
    pub host: String,
    /// The port (the scheme's default when none is written).
    pub port: u16,
    /// The address the host names when it is an address literal (in any form a resolver
    /// accepts).
    pub literal: Option<IpAddr>,
}

/// Parses a list of CIDRs (comma or whitespace separated; a bare address is a host route).
pub fn parse_nets(list: &str) -> Result<Vec<IpNet>, String> {
    list.split([',', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            IpNet::from_str(s)
                .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
                .map(|n| n.trunc())
                .map_err(|_| format!("{s:?} is not a CIDR (a.b.c.d/n or x::/n) or an address"))
        })
        .collect()
}

impl Policy {
    /// The default deny list plus `deny` and `allow`.
    pub fn new(deny: &[IpNet], allow: &[IpNet]) -> Policy {
        let mut rules: Vec<Rule> = DEFAULT_DENY
            .iter()
            .filter_map(|s| IpNet::from_str(s).ok())
            .map(|net| Rule {
                net,
                allow: false,
                default: true,
            })
            .collect();
        rules.extend(deny.iter().map(|n| Rule {
            net: n.trunc(),
            allow: false,
            default: false,
        }));
        rules.extend(allow.iter().map(|n| Rule {
            net: n.trunc(),
            allow: true,
            default: false,
        }));
        Policy { rules }
    }

    /// The policy from `PORTICO_EGRESS_DENY` and `PORTICO_EGRESS_ALLOW` plus `deny` and
    /// `allow` (flags).
    pub fn from_env_and(deny: &[IpNet], allow: &[IpNet]) -> Result<Policy, String> {
        let env = |name: &str| -> Result<Vec<IpNet>, String> {
            parse_nets(&std::env::var(name).unwrap_or_default()).map_err(|e| format!("{name}: {e}"))
        };
        let mut d = env(ENV_DENY)?;
        d.extend_from_slice(deny);
        let mut a = env(ENV_ALLOW)?;
        a.extend_from_slice(allow);
        Ok(Policy::new(&d, &a))
    }

    /// The operator's rules, for start-up logs: (deny, allow).
    pub fn operator_rules(&self) -> (Vec<String>, Vec<String>) {
        let pick = |allow: bool| {
            self.rules
                .iter()
                .filter(|r| !r.default && r.allow == allow)
                .map(|r| r.net.to_string())
                .collect()
        };
        (pick(false), pick(true))
    }

    /// The deciding rule for one address (no embedded-address handling).
    fn decide(&self, ip: IpAddr) -> Option<&Rule> {
        self.rules
            .iter()
            .filter(|r| r.net.contains(&ip))
            .max_by_key(|r| (r.net.prefix_len(), !r.default, !r.allow))
    }

    /// Checks one address (and the IPv4 address an IPv6 one carries, if any).
    pub fn check_ip(&self, target: &str, ip: IpAddr) -> Result<(), Refused> {
        let mut candidates = vec![ip];
        if let IpAddr::V6(v6) = ip {
            if let Some(v4) = embedded_v4(v6) {
                candidates.push(IpAddr::V4(v4));
            }
        }
        for addr in candidates {
            if let Some(rule) = self.decide(addr).filter(|r| !r.allow) {
                let origin = if rule.default {
                    "default deny"
                } else {
                    "operator deny"
                };
                return Err(Refused::Denied {
                    target: target.to_owned(),
                    addr: ip,
                    rule: format!("{origin} {}", rule.net),
                });
            }
        }
        Ok(())
    }

    /// Checks a host as written (a name, or an address in any form a resolver accepts)
    /// without resolving it: a literal address is checked, a metadata host name refused.
    /// Answers the address a literal names.
    pub fn check_host(&self, host: &str) -> Result<Option<IpAddr>, Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let lower = bare.trim_end_matches('.').to_ascii_lowercase();
        if DENIED_HOSTS.contains(&lower.as_str()) {
            return Err(Refused::DeniedHost(host.to_owned()));
        }
        match literal_ip(bare) {
            Some(ip) => self.check_ip(host, ip).map(|()| Some(ip)),
            None => Ok(None),
        }
    }

    /// Checks an `http://` or `https://` URL as written (see [`Policy::check_host`]): what a
    /// registry can say at write time. A host name is checked again, resolved, at call time.
    pub fn check_url(&self, url: &str) -> Result<Target, Refused> {
        let target = parse_url(url)?;
        let literal = self.check_host(&target.host)?;
        Ok(Target { literal, ..target })
    }

    /// Resolves `host` and checks every address it resolves to; answers them (with `port`).
    /// Connect to these addresses only.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        let result = self.resolve_unrecorded(host, port).await;
        if let Err(e) = &result {
            if e.by_policy() {
                record_refusal();
            }
        }
        result
    }

    async fn resolve_unrecorded(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refused> {
        if let Some(ip) = self.check_host(host)? {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| Refused::Unresolved {
                target: host.to_owned(),
                error: e.to_string(),
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Refused::Unresolved {
                target: host.to_owned(),
                error: "no address".to_owned(),
            });
        }
        for a in &addrs {
            self.check_ip(host, a.ip())?;
        }
        Ok(addrs)
    }

    /// Resolves and checks `host` ([`Policy::resolve`]) and connects to the first checked
    /// address that answers, each attempt within `timeout`.
    pub async fn connect(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<tokio::net::TcpStream, Refused> {
        let addrs = self.resolve(host, port).await?;
        let mut last = String::from("no address");
        for addr in addrs {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err(Refused::Unreachable {
            target: host.to_owned(),
            error: last,
        })
    }
}

static GLOBAL: OnceLock<Policy> = OnceLock::new();
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Sets the process's policy (start-up). Only the first call has an effect; returns whether
/// it was this one.
pub fn set_global(policy: Policy) -> bool {
    GLOBAL.set(policy).is_ok()
}

/// The process's policy: the one [`set_global`] set, else the defaults plus
/// `PORTICO_EGRESS_DENY` / `PORTICO_EGRESS_ALLOW` (a malformed variable is logged and
/// ignored, the defaults still apply).
pub fn global() -> &'static Policy {
    GLOBAL.get_or_init(|| {
        Policy::from_env_and(&[], &[]).unwrap_or_else(|e| {
            tracing::error!(error = %e, "egress policy: ignoring the malformed variable; defaults apply");
            Policy::default()
        })
    })
}

/// Counts a call refused by the policy (callers that check with [`Policy::check_ip`] /
/// [`Policy::check_url`] at call time count theirs with this; [`Policy::resolve`] counts
/// its own).
pub fn record_refusal() {
    REFUSED.fetch_add(1, Ordering::Relaxed);
}

/// Outbound calls refused by the policy since start (`portico_egress_refused_total`).
pub fn refused_total() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d` (not `::` or `::1`), NAT64 `64:ff9b::a.b.c.d`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0, 0, 0, 0, 0, 0] && u32::from(low) > 1 {
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    None
}

/// An address literal in any form a resolver (`inet_aton`, the WHATWG URL parser) accepts:
/// IPv6, dotted IPv4 with 1-4 parts in decimal, `0x` hex or leading-`0` octal.
fn literal_ip(host: &str) -> Option<IpAddr> {
    if let Ok(v6) = Ipv6Addr::from_str(host) {
        return Some(IpAddr::V6(v6));
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        let n = if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            if hex.is_empty() {
                0
            } else {
                u64::from_str_radix(hex, 16).ok()?
            }
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
            p.parse::<u64>().ok()?
        } else {
            return None;
        };
        nums.push(n);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    v |= last;
    Some(IpAddr::V4(Ipv4Addr::from(u32::try_from(v).ok()?)))
}

/// Splits `http(s)://[userinfo@]host[:port][/...]`.
fn parse_url(url: &str) -> Result<Target, Refused> {
    let invalid = |why: &str| Refused::Invalid(format!("{url:?}: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("not an http:// or https:// URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(invalid("only http:// and https:// are called")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("unclosed [ in the host"))?;
        (h, after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("no host"));
    }
    let port = match port.filter(|p| !p.is_empty()) {
        Some(p) => p.parse::<u16>().map_err(|_| invalid("bad port"))?,
        None => default_port,
    };
    Ok(Target {
        scheme,
        host: host.to_owned(),
        port,
        literal: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        IpAddr::from_str(s).unwrap()
    }

    fn refused(p: &Policy, s: &str) -> bool {
        p.check_ip("t", ip(s)).is_err()
    }

    #[test]
    fn egress_default_denies_link_local_and_metadata_only() {
        let p = Policy::default();
        for bad in [
            "169.254.169.254",
            "169.254.0.1",
            "169.254.255.255",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "100.100.100.200",
        ] {
            assert!(refused(&p, bad), "{bad}");
        }
        for ok in [
            "127.0.0.1",
            "10.0.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "169.253.255.255",
            "169.255.0.0",
            "100.100.100.201",
            "::1",
            "fec0::1",
            "fd00:ec2::253",
            "2001:db8::1",
        ] {
            assert!(!refused(&p, ok), "{ok}");
        }
    }

    #[test]
    fn egress_ipv4_inside_ipv6_is_checked_as_ipv4() {
        let p = Policy::default();
        for bad in [
            "::ffff:169.254.169.254",
            "::ffff:a9fe:a9fe",
            "::169.254.169.254",
            "64:ff9b::169.254.169.254",
            "::ffff:100.100.100.200",
        ] {
            assert!(refused(&p, bad), "{bad}");
        }
        for ok in ["::ffff:127.0.0.1", "::", "::1", "64:ff9b::8.8.8.8"] {
            assert!(!refused(&p, ok), "{ok}");
        }
        let deny = parse_nets("10.0.0.0/8").unwrap();
        let p = Policy::new(&deny, &[]);
        assert!(refused(&p, "::ffff:10.1.2.3"));
    }

    #[test]
    fn egress_the_most_specific_rule_decides() {
        let deny = parse_nets("10.0.0.0/8, 192.0.2.7").unwrap();
        let allow = parse_nets("10.1.2.3/32 0.0.0.0/0 169.254.0.0/16").unwrap();
        let p = Policy::new(&deny, &allow);
        assert!(refused(&p, "10.9.9.9"));
        assert!(!refused(&p, "10.1.2.3"));
        assert!(refused(&p, "192.0.2.7"));
        // The operator allowed link-local, but the metadata /32 is more specific.
        assert!(!refused(&p, "169.254.1.1"));
        assert!(refused(&p, "169.254.169.254"));
        // Equal length: deny wins.
        let same = parse_nets("203.0.113.0/24").unwrap();
        let p = Policy::new(&same, &same);
        assert!(refused(&p, "203.0.113.5"));
        // Explicitly allowing the metadata /32 is the operator's word.
        let meta = parse_nets("169.254.169.254").unwrap();
        assert!(!refused(&Policy::new(&[], &meta), "169.254.169.254"));
        assert!(parse_nets("10.0.0.0/33").is_err());
        assert!(parse_nets("nonsense").is_err());
        assert_eq!(parse_nets(" , ").unwrap(), vec![]);
    }

    #[test]
    fn egress_numeric_host_forms_are_read_as_addresses() {
        let p = Policy::default();
        for bad in [
            "169.254.169.254",
            "2852039166",
            "0xa9fea9fe",
            "0xa9.0xfe.0xa9.0xfe",
            "0251.0376.0251.0376",
            "169.254.43518",
            "169.16689662",
            "[::ffff:169.254.169.254]",
            "[fe80::1]",
            "169.254.169.254.",
            "METADATA.google.internal",
            "metadata.goog.",
        ] {
            assert!(p.check_host(bad).is_err(), "{bad}");
        }
        for ok in [
            "example.com",
            "127.0.0.1",
            "1.2.3.4.5",
            "0x",
            "256.1.1.1a",
            "hooks.local",
        ] {
            assert!(p.check_host(ok).is_ok(), "{ok}");
        }
        assert_eq!(literal_ip("256.1.1.1"), None);
        assert_eq!(literal_ip("1.2.3.256"), None);
        assert_eq!(literal_ip("1.2.65535"), Some(ip("1.2.255.255")));
    }

    #[test]
    fn egress_urls_are_split_and_checked() {
        let p = Policy::default();
        let t = p.check_url("http://hooks.example.com:8443/x?y#z").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.literal),
            ("hooks.example.com", 8443, None)
        );
        let t = p.check_url("https://[::1]/a").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 443));
        for bad in [
            "http://169.254.169.254/latest/meta-data",
            "http://user:pw@169.254.169.254:80/",
            "http://[fd00:ec2::254]/",
            "HTTP://100.100.100.200",
            "http://2852039166/",
        ] {
            assert!(p.check_url(bad).unwrap_err().by_policy(), "{bad}");
        }
        for invalid in ["ftp://x/", "169.254.169.254", "http:///x", "http://[::1/"] {
            assert!(
                matches!(p.check_url(invalid), Err(Refused::Invalid(_))),
                "{invalid}"
            );
        }
        let msg = p
            .check_url("http://169.254.169.254/")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("default deny 169.254.169.254/32"), "{msg}");
    }

    #[tokio::test]
    async fn egress_resolution_checks_every_address() {
        let p = Policy::default();
        let addrs = p.resolve("127.0.0.1", 9).await.unwrap();
        assert_eq!(addrs, vec![SocketAddr::from(([127, 0, 0, 1], 9))]);
        let localhost = p.resolve("localhost", 9).await.unwrap();
        assert!(localhost.iter().all(|a| a.ip().is_loopback()));
        let before = refused_total();
        assert!(p
            .resolve("169.254.169.254", 80)
            .await
            .unwrap_err()
            .by_policy());
        assert!(refused_total() > before);
        // A name resolving to a denied address (loopback denied by the operator here).
        let deny = parse_nets("127.0.0.0/8 ::1").unwrap();
        let strict = Policy::new(&deny, &[]);
        assert!(strict
            .resolve("localhost", 9)
            .await
            .unwrap_err()
            .by_policy());
        assert!(strict
            .connect("localhost", 9, Duration::from_secs(1))
            .await
            .unwrap_err()
            .by_policy());
    }
}
