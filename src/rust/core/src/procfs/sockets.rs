//! A process's TCP connections on this machine: its sockets (the
//! `socket:[INODE]` links of `fd/`) and the connection tables of its
//! network namespace (`net/tcp`, `net/tcp6`), enough to find the socket at
//! the other end of each connection and then the process holding it (how a
//! PSOCK cluster's workers are found: they are not the R process's
//! descendants).
//!
//! Addresses are kept as the kernel printed them, turned into network
//! order: each 32-bit word of the table is the address's bytes read as a
//! number in this machine's byte order. An IPv4 address is kept as IPv6's
//! mapped form (`::ffff:a.b.c.d`), so that the two ends of a connection
//! compare equal whichever table lists them.

use super::Proc;
use std::collections::HashSet;

/// An address and port, in IPv6 form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
}

/// One line of a connection table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    pub local: Endpoint,
    pub remote: Endpoint,
    /// State `01`: both ends connected.
    pub established: bool,
    /// The socket's inode (0: no longer held by any process).
    pub inode: u64,
}

/// `0100007F:2BE2` (IPv4) or 32 hex digits and a port (IPv6).
fn parse_endpoint(field: &str) -> Option<Endpoint> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(u32::from_str_radix(addr.get(8 * i..8 * i + 8)?, 16).ok()?.to_ne_bytes())
    };
    let mut out = [0u8; 16];
    match addr.len() {
        8 => {
            out[10..12].copy_from_slice(&[0xff, 0xff]);
            out[12..].copy_from_slice(&word(0)?);
        }
        32 => {
            for i in 0..4 {
                out[4 * i..4 * i + 4].copy_from_slice(&word(i)?);
            }
        }
        _ => return None,
    }
    Some(Endpoint { addr: out, port })
}

/// The connections of a table's text (its header line left out; lines
/// that do not read are skipped).
pub fn parse_table(text: &str) -> impl Iterator<Item = Connection> + '_ {
    text.lines().skip(1).filter_map(|line| {
        let mut f = line.split_whitespace();
        let _slot = f.next()?;
        let local = parse_endpoint(f.next()?)?;
        let remote = parse_endpoint(f.next()?)?;
        let established = f.next()? == "01";
        // tx:rx queues, timer, retransmits, uid, timeout, then the inode.
        let inode = f.nth(5)?.parse().ok()?;
        Some(Connection { local, remote, established, inode })
    })
}

/// The TCP connections of a process's network namespace (IPv4 and IPv6).
pub fn connections(of: Proc) -> Vec<Connection> {
    let mut out = Vec::new();
    for table in ["net/tcp", "net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(of.path(None, table)) {
            out.extend(parse_table(&text));
        }
    }
    out
}

/// The inode of an `fd/` link's target `socket:[INODE]`.
pub fn parse_socket_link(target: &str) -> Option<u64> {
    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The inodes of the sockets a process holds open (none if its `fd/`
/// cannot be read: another user's process).
pub fn socket_inodes(of: Proc) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(of.path(None, "fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let target = std::fs::read_link(e.ok()?.path()).ok()?;
        parse_socket_link(target.to_str()?)
    })
    .collect()
}

/// The sockets at the other end of the established connections of the
/// sockets `mine`, as listed in `table` (one namespace's connections).
pub fn peer_inodes(table: &[Connection], mine: &HashSet<u64>) -> HashSet<u64> {
    let ends: HashSet<(Endpoint, Endpoint)> = table
        .iter()
        .filter(|c| c.established && mine.contains(&c.inode))
        .map(|c| (c.remote, c.local))
        .collect();
    table
        .iter()
        .filter(|c| {
            c.established && c.inode != 0 && !mine.contains(&c.inode) && ends.contains(&(c.local, c.remote))
        })
        .map(|c| c.inode)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // (Tables as a little-endian kernel prints them.)
    const TCP: &str = concat!(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
        "   0: 0100007F:2BE2 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 100 1 0 100 0 0 10 0\n",
        "   1: 0100007F:2BE2 0100007F:A1B0 01 00000000:00000000 00:00000000 00000000  1000        0 101 1 0 20 4 30 10 -1\n",
        "   2: 0100007F:A1B0 0100007F:2BE2 01 00000000:00000000 00:00000000 00000000  1000        0 201 1 0 20 4 30 10 -1\n",
        "   3: 0100007F:2BE2 0100007F:A1B2 06 00000000:00000000 03:00000000 00000000     0        0 0 3 0\n",
        "   4: 0100007F:A1B4 0100007F:2BE3 01 00000000:00000000 00:00000000 00000000  1000        0 301 1 0 20 4 30 10 -1\n",
        "   5: 0100007F:2BE3 0100007F:A1B4 01 00000000:00000000 00:00000000 00000000  1000        0 302 1 0 20 4 30 10 -1\n",
        "   6: 0100007F:2BE2 0100007F:A1B6 01 00000000:00000000 00:00000000 00000000  1000        0 102 1 0 20 4 30 10 -1\n",
        "   7: a broken line\n",
    );
    const TCP6: &str = concat!(
        "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
        "   0: 0000000000000000FFFF00000100007F:A1B6 0000000000000000FFFF00000100007F:2BE2 01 00000000:00000000 00:00000000 00000000  1000        0 401 1 0 20 4 30 10 -1\n",
        "   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C000 01 00000000:00000000 00:00000000 00000000  1000        0 501 1 0 20 4 30 10 -1\n",
    );

    fn loopback(port: u16) -> Endpoint {
        let mut addr = [0u8; 16];
        addr[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
        Endpoint { addr, port }
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn tables_read_as_endpoints_in_network_order() {
        let t: Vec<Connection> = parse_table(TCP).collect();
        assert_eq!(t.len(), 7, "the header and the broken line are skipped");
        assert_eq!(t[1].local, loopback(11234));
        assert_eq!(t[1].remote, loopback(41392));
        assert!(t[1].established && !t[0].established && !t[3].established);
        assert_eq!((t[0].inode, t[3].inode), (100, 0));
        let t6: Vec<Connection> = parse_table(TCP6).collect();
        // IPv4 mapped into IPv6 compares equal to the IPv4 table's form.
        assert_eq!(t6[0].remote, loopback(11234));
        let mut ipv6_loopback = [0u8; 16];
        ipv6_loopback[15] = 1;
        assert_eq!(t6[1].local, Endpoint { addr: ipv6_loopback, port: 8080 });
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn peers_are_the_other_ends_of_established_connections_in_either_table() {
        let mut all: Vec<Connection> = parse_table(TCP).collect();
        all.extend(parse_table(TCP6));
        // A server holding its listening socket and two accepted ones: the
        // clients' sockets, one of them in the IPv6 table.
        let server = HashSet::from([100, 101, 102]);
        assert_eq!(peer_inodes(&all, &server), HashSet::from([201, 401]));
        // A client finds its server's accepted socket.
        assert_eq!(peer_inodes(&all, &HashSet::from([201])), HashSet::from([101]));
        // Another pair, and no connection at all.
        assert_eq!(peer_inodes(&all, &HashSet::from([301])), HashSet::from([302]));
        assert!(peer_inodes(&all, &HashSet::from([999])).is_empty());
    }

    #[test]
    fn socket_links_and_this_process_s_connection_to_itself() {
        assert_eq!(parse_socket_link("socket:[12345]"), Some(12345));
        assert_eq!(parse_socket_link("pipe:[12345]"), None);
        assert_eq!(parse_socket_link("/dev/null"), None);
        // Both ends of a connection made here are this process's sockets,
        // each the other's peer.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mine: HashSet<u64> = socket_inodes(Proc::This).into_iter().collect();
        assert!(mine.len() >= 3, "the listener and both ends are held: {mine:?}");
        let table = connections(Proc::This);
        let ends: Vec<&Connection> =
            table.iter().filter(|c| c.established && mine.contains(&c.inode)).collect();
        let port = client.local_addr().unwrap().port();
        let client_end = ends.iter().find(|c| c.local.port == port).expect("the client's end is listed");
        let server_end = ends.iter().find(|c| c.remote.port == port).expect("the server's end is listed");
        assert_eq!(
            peer_inodes(&table, &HashSet::from([client_end.inode])),
            HashSet::from([server_end.inode])
        );
        drop((client, server));
    }
}
