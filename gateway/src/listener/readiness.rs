//! Readiness of the traffic listeners, from `/proc`: whether this process holds a listening
//! socket for an address ([`holds_listener`]), which `/readyz` waits for.

/// Whether this process holds a listening TCP socket for `addr` (an unspecified address,
/// on either side, matches any): Pingora has bound it, or received it from the process it replaces
/// (`--upgrade`). `/readyz` waits for it (docs/operations/gateway.md, "Admin endpoints"); unlike a
/// test connection, it is not fooled by another process serving the same address, such as
/// the gateway being replaced during an upgrade. Reads `/proc/net/tcp{,6}` and
/// `/proc/self/fd` (Linux); `false` when they cannot be read.
pub fn holds_listener(addr: std::net::SocketAddr) -> bool {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        inodes.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| listening_inode(l, addr)),
        );
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// The socket inode of a `/proc/net/tcp{,6}` line when it is a socket in `LISTEN` state on
/// `addr`'s port and address (either may be the unspecified address).
fn listening_inode(line: &str, addr: std::net::SocketAddr) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
    if *state != "0A" {
        return None;
    }
    let (ip_hex, port_hex) = local.split_once(':')?;
    if u16::from_str_radix(port_hex, 16).ok()? != addr.port() {
        return None;
    }
    // The kernel prints the address as 32-bit words in host byte order.
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip_hex.len()).step_by(8) {
        let word = u32::from_str_radix(ip_hex.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: std::net::IpAddr = match bytes.len() {
        4 => std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into(),
        16 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&bytes);
            let v6 = std::net::Ipv6Addr::from(b);
            v6.to_ipv4_mapped().map_or(v6.into(), Into::into)
        }
        _ => return None,
    };
    let matches = ip.is_unspecified() || addr.ip().is_unspecified() || ip == addr.ip();
    matches.then(|| inode.parse().ok())?
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_socket_of_this_process_is_found_and_a_connection_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(holds_listener(addr));
        let any: std::net::SocketAddr = format!("0.0.0.0:{}", addr.port()).parse().unwrap();
        let other: std::net::SocketAddr = format!("127.0.0.2:{}", addr.port()).parse().unwrap();
        assert!(holds_listener(any));
        assert!(!holds_listener(other));
        // A connected socket on the port is not a listener.
        let client = std::net::TcpStream::connect(addr).unwrap();
        drop(listener);
        assert!(!holds_listener(addr));
        drop(client);
        let line = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1";
        let port8080: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(listening_inode(line, port8080), Some(4242));
        }
        let port8081: std::net::SocketAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(listening_inode(line, port8081), None);
    }
}
