//! `ipacl`: the IP access list (docs/operations/config-tree.md, "The configuration tree"): `deny`,
//! `allow` and `trusted_proxies`, each a list of CIDRs or bare addresses.

use super::fields::{excerpt, parse_json};
use crate::snapshot::IpAclRules;
use crate::v1;
use ipnet::IpNet;
use std::net::IpAddr;

pub(super) fn check_ipacl(raw: &[u8]) -> Result<IpAclRules, String> {
    let acl: v1::IpAcl = parse_json(raw)?;
    let parse_list = |field: &str, list: &[String]| -> Result<Vec<IpNet>, String> {
        list.iter()
            .enumerate()
            .map(|(i, s)| {
                parse_net(s).ok_or_else(|| {
                    format!("{field}[{i}]: {:?} is not a CIDR or IP address", excerpt(s))
                })
            })
            .collect()
    };
    Ok(IpAclRules {
        deny: parse_list("deny", &acl.deny)?,
        allow: parse_list("allow", &acl.allow)?,
        trusted_proxies: parse_list("trusted_proxies", &acl.trusted_proxies)?,
    })
}

/// A CIDR (`10.0.0.0/8`, host bits cleared) or a bare address (`/32` or `/128`).
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n.trunc());
    }
    s.parse::<IpAddr>().ok().map(IpNet::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_net_forms() {
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        assert!(parse_net("10.0.0.0/33").is_none());
        assert!(parse_net("").is_none());
    }
}
