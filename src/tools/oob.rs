//! The out-of-band TCP exchanges that rdma-core's `ibv_*_pingpong` and
//! perftest's `ib_*` tools run before any RoCE frame, as bytes: what a
//! ferroce tool must write and read to pair with one of theirs. No sockets
//! here; the tools own the connection and the order of the exchange.
//!
//! Both exchanges are text with fixed lengths (the C tools `read()` a fixed
//! size and `sscanf` it), NUL-terminated, checked here against what the
//! Linux tools sent in `tests/vectors/` (rdma-core 44, perftest 4.5).
//!
//! **ibv_rc_pingpong** (rdma-core `libibverbs/examples`, TCP port 18515):
//! the client writes its [`pingpong::Dest`], reads the server's, writes
//! [`pingpong::DONE`]; the server reads, connects its QP, writes its own,
//! reads `DONE`.
//!
//! **perftest** (default TCP exchange, port 18515; `ctx_xchg_data`: the
//! client writes then reads, the server reads then writes), in order:
//! the version ([`perftest::version`], 16 bytes); the cycle buffer and the
//! cache line size ([`perftest::int`], 4 bytes each, big-endian); the
//! path MTU ([`perftest::mtu`], 2 bytes, the `ibv_mtu` value as text);
//! then per QP the [`perftest::Keys`] (108 bytes, with the GID); later
//! synchronisations repeat the keys, and the end is `"done"`.

use crate::wire::gid::{ip_of, Gid};
use core::fmt;

/// Why a message cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OobError {
    /// The message is not of its fixed length.
    #[error("message of {got} bytes, expected {want}")]
    Length {
        /// Bytes received.
        got: usize,
        /// Bytes the message has.
        want: usize,
    },
    /// No NUL, or not UTF-8 before it.
    #[error("message is not NUL-terminated text")]
    NotText,
    /// A field that does not read as it should.
    #[error("field {field} is not {what}")]
    Field {
        /// The field's name, e.g. "qpn".
        field: &'static str,
        /// What it should be, e.g. "hex of the right width".
        what: &'static str,
    },
}

/// The text of a fixed-size NUL-terminated message of `want` bytes.
fn text(msg: &[u8], want: usize) -> Result<&str, OobError> {
    if msg.len() != want {
        return Err(OobError::Length {
            got: msg.len(),
            want,
        });
    }
    let end = msg.iter().position(|&b| b == 0).ok_or(OobError::NotText)?;
    core::str::from_utf8(&msg[..end]).map_err(|_| OobError::NotText)
}

/// A hex field of exactly `digits` digits.
fn hex(s: &str, digits: usize, field: &'static str) -> Result<u64, OobError> {
    let bad = OobError::Field {
        field,
        what: "hex of the right width",
    };
    if s.len() != digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad);
    }
    u64::from_str_radix(s, 16).map_err(|_| bad)
}

/// Copies `s` into a zeroed buffer of `N` bytes (the C tools send the whole
/// buffer, NUL and all).
fn fixed<const N: usize>(s: &str) -> [u8; N] {
    let mut b = [0u8; N];
    let n = s.len().min(N - 1);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

/// ibv_rc_pingpong's exchange.
pub mod pingpong {
    use super::*;

    /// Length of a destination message, NUL included: `"%04x:%06x:%06x:%s"`
    /// with a 32-digit GID.
    pub const MSG_LEN: usize = 52;

    /// What the client writes last.
    pub const DONE: &[u8; 5] = b"done\0";

    /// One side's QP address: LID (0 on RoCE), QPN, first PSN, GID.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Dest {
        /// The LID (0 on RoCE).
        pub lid: u16,
        /// The QP number (24 bits).
        pub qpn: u32,
        /// The first PSN (24 bits).
        pub psn: u32,
        /// The GID: the side's IP address (IPv4-mapped for IPv4).
        pub gid: Gid,
    }

    impl Dest {
        /// The message: four fields in hex, QPN and PSN cut to 24 bits.
        pub fn emit(&self) -> [u8; MSG_LEN] {
            let mut gid = String::with_capacity(32);
            for b in self.gid {
                gid.push_str(&format!("{b:02x}"));
            }
            fixed(&format!(
                "{:04x}:{:06x}:{:06x}:{gid}",
                self.lid,
                self.qpn & 0xFF_FFFF,
                self.psn & 0xFF_FFFF
            ))
        }

        /// Reads the peer's message; errs on a wrong length or field.
        pub fn parse(msg: &[u8]) -> Result<Dest, OobError> {
            let t = text(msg, MSG_LEN)?;
            let f: Vec<&str> = t.split(':').collect();
            let [lid, qpn, psn, gid] = f[..] else {
                return Err(OobError::Field {
                    field: "message",
                    what: "four fields",
                });
            };
            let mut g = [0u8; 16];
            if gid.len() != 32 {
                return Err(OobError::Field {
                    field: "gid",
                    what: "32 hex digits",
                });
            }
            for (i, b) in g.iter_mut().enumerate() {
                *b = hex(&gid[2 * i..2 * i + 2], 2, "gid")? as u8;
            }
            Ok(Dest {
                lid: hex(lid, 4, "lid")? as u16,
                qpn: hex(qpn, 6, "qpn")? as u32,
                psn: hex(psn, 6, "psn")? as u32,
                gid: g,
            })
        }
    }
}

/// perftest's exchange (`perftest_communication.c`).
pub mod perftest {
    use super::*;
    use crate::wire::caps;

    /// Length of the keys message with a GID (`KEY_MSG_SIZE_GID`).
    pub const KEYS_LEN: usize = 108;
    /// Length of `struct pingpong_dest` in the RDMA-CM exchange.
    pub const BINARY_LEN: usize = 56;
    /// Length of the version message (`MAX_VERSION`).
    pub const VERSION_LEN: usize = 16;
    /// The version we announce: perftest 6.06's, whose exchange we speak.
    pub const VERSION: &str = "6.06";

    /// One QP's keys (`struct pingpong_dest` as `KEY_PRINT_FMT_GID` writes it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Keys {
        /// The LID (0 on RoCE).
        pub lid: u16,
        /// READs / atomics the QP lets the peer have outstanding.
        pub out_reads: u16,
        /// The QP number (24 bits).
        pub qpn: u32,
        /// The first PSN (24 bits).
        pub psn: u32,
        /// The R_Key of the region the peer targets.
        pub rkey: u32,
        /// The address of the slot the peer's WRITEs, READs and atomics target.
        pub vaddr: u64,
        /// The GID: the side's IP address (IPv4-mapped for IPv4).
        pub gid: Gid,
        /// XRC SRQ number (0 otherwise).
        pub srqn: u32,
    }

    impl Keys {
        /// The message (`KEY_PRINT_FMT_GID`), QPN and PSN cut to 24 bits.
        pub fn emit(&self) -> [u8; KEYS_LEN] {
            let mut s = format!(
                "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
                self.lid,
                self.out_reads,
                self.qpn & 0xFF_FFFF,
                self.psn & 0xFF_FFFF,
                self.rkey,
                self.vaddr
            );
            for b in self.gid {
                s.push_str(&format!("{b:02x}:"));
            }
            s.push_str(&format!("{:08x}:", self.srqn));
            fixed(&s)
        }

        /// `struct pingpong_dest` as perftest's RDMA-CM exchange sends it
        /// (`rdma_write_keys`, 56 bytes, big-endian): LID, out_reads, QPN,
        /// PSN (4 bytes each), R_Key, 4 bytes of padding, the address (8),
        /// the GID (16), the SRQN, the GID index (4 each).
        pub fn emit_binary(&self) -> [u8; BINARY_LEN] {
            let mut b = [0u8; BINARY_LEN];
            b[0..4].copy_from_slice(&(self.lid as u32).to_be_bytes());
            b[4..8].copy_from_slice(&(self.out_reads as u32).to_be_bytes());
            b[8..12].copy_from_slice(&(self.qpn & 0xFF_FFFF).to_be_bytes());
            b[12..16].copy_from_slice(&(self.psn & 0xFF_FFFF).to_be_bytes());
            b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
            b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
            b[32..48].copy_from_slice(&self.gid);
            b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
            b
        }

        /// Reads a binary `pingpong_dest` (the padding, SRQN and GID index
        /// are not read, as `rdma_read_keys` does not).
        pub fn parse_binary(b: &[u8]) -> Result<Keys, OobError> {
            if b.len() < BINARY_LEN {
                return Err(OobError::Field {
                    field: "message",
                    what: "56 bytes",
                });
            }
            let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
            let mut gid = [0u8; 16];
            gid.copy_from_slice(&b[32..48]);
            Ok(Keys {
                lid: u32_at(0) as u16,
                out_reads: u32_at(4) as u16,
                qpn: u32_at(8) & 0xFF_FFFF,
                psn: u32_at(12) & 0xFF_FFFF,
                rkey: u32_at(16),
                vaddr: u64::from_be_bytes(b[24..32].try_into().expect("8 bytes")),
                gid,
                srqn: 0,
            })
        }

        /// Reads the peer's message; errs on a wrong length or field.
        pub fn parse(msg: &[u8]) -> Result<Keys, OobError> {
            let t = text(msg, KEYS_LEN)?;
            let f: Vec<&str> = t.split(':').collect();
            // 6 fields, 16 GID bytes, the SRQN, and the empty tail after
            // the last ':'.
            if f.len() != 24 || !f[23].is_empty() {
                return Err(OobError::Field {
                    field: "message",
                    what: "23 ':'-terminated fields",
                });
            }
            let mut gid = [0u8; 16];
            for (i, b) in gid.iter_mut().enumerate() {
                *b = hex(f[6 + i], 2, "gid")? as u8;
            }
            Ok(Keys {
                lid: hex(f[0], 4, "lid")? as u16,
                out_reads: hex(f[1], 4, "out_reads")? as u16,
                qpn: hex(f[2], 6, "qpn")? as u32,
                psn: hex(f[3], 6, "psn")? as u32,
                rkey: hex(f[4], 8, "rkey")? as u32,
                vaddr: hex(f[5], 16, "vaddr")?,
                gid,
                srqn: hex(f[22], 8, "srqn")? as u32,
            })
        }
    }

    impl fmt::Display for Keys {
        /// perftest's own line for it (`BASIC_ADDR_FMT` + `READ_FMT` +
        /// `RDMA_FMT`, without the side's name).
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "LID {:#06x} QPN {:#08x} PSN {:#08x} OUT {:#06x} RKey {:#010x} VAddr {:#018x} GID {}",
                self.lid,
                self.qpn,
                self.psn,
                self.out_reads,
                self.rkey,
                self.vaddr,
                ip_of(&self.gid)
            )
        }
    }

    /// The version message.
    pub fn version(v: &str) -> [u8; VERSION_LEN] {
        fixed(v)
    }

    /// Capability: INT telemetry on the test QPs (`crate::wire::int`),
    /// asked by a rate control that needs it.
    pub const CAP_INT: u8 = caps::INT;
    /// Capability: selective repeat on the test QPs (`crate::wire::sr`),
    /// asked by `--recovery sr`.
    pub const CAP_SR: u8 = caps::SELECTIVE_REPEAT;

    /// The version message with ferroce's capabilities `bits` in its last
    /// four bytes ([`crate::wire::caps`]: perftest reads the version with
    /// `atof` and fills those bytes with zeros, so it never sees them).
    pub fn version_with_caps(v: &str, bits: u8) -> [u8; VERSION_LEN] {
        let mut b: [u8; VERSION_LEN] = fixed(v);
        if v.len() < VERSION_LEN - caps::LEN {
            caps::emit(&mut b, bits);
        }
        b
    }

    /// The capabilities of a ferroce peer's version message; `None` from
    /// any other peer (it has asked for nothing).
    pub fn parse_caps(msg: &[u8]) -> Option<u8> {
        caps::parse(msg.get(..VERSION_LEN)?)
    }

    /// The peer's version, as perftest reads it (`atof`).
    pub fn parse_version(msg: &[u8]) -> Result<f64, OobError> {
        text(msg, VERSION_LEN)?
            .parse()
            .map_err(|_| OobError::Field {
                field: "version",
                what: "a number",
            })
    }

    /// A 4-byte integer of the exchange (cycle buffer, cache line size):
    /// big-endian (`hton_int`).
    pub fn int(v: i32) -> [u8; 4] {
        v.to_be_bytes()
    }

    /// Reads a 4-byte big-endian integer; errs on another length.
    pub fn parse_int(msg: &[u8]) -> Result<i32, OobError> {
        let b: [u8; 4] = msg.try_into().map_err(|_| OobError::Length {
            got: msg.len(),
            want: 4,
        })?;
        Ok(i32::from_be_bytes(b))
    }

    /// The path MTU message: the `ibv_mtu` value (1 = 256 .. 5 = 4096) as
    /// one digit and a NUL (`sizeof(char[2])` since perftest 5.31).
    pub fn mtu(ibv_mtu: u8) -> [u8; 2] {
        [b'0' + ibv_mtu.min(9), 0]
    }

    /// Reads the path MTU message: an `ibv_mtu` value in 1..=5.
    pub fn parse_mtu(msg: &[u8]) -> Result<u8, OobError> {
        let t = text(msg, 2)?;
        match t.parse::<u8>() {
            Ok(v @ 1..=5) => Ok(v),
            _ => Err(OobError::Field {
                field: "mtu",
                what: "an ibv_mtu value 1..5",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::gid_of;
    use core::net::IpAddr;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// Frame 6 of tests/vectors/rc_pingpong.pcap: g2 (198.18.0.3) to the
    /// server.
    const PINGPONG_CLIENT: &str = "303030303a3030303031313a6633363566653a303030303030303030303030303030303030303066666666633631323030303300";

    #[test]
    fn pingpong_dest_as_ibv_rc_pingpong_sends_it() {
        let msg = unhex(PINGPONG_CLIENT);
        let d = pingpong::Dest::parse(&msg).unwrap();
        assert_eq!(
            d,
            pingpong::Dest {
                lid: 0,
                qpn: 0x11,
                psn: 0xf365fe,
                gid: gid_of("198.18.0.3".parse().unwrap()),
            }
        );
        assert_eq!(ip_of(&d.gid), "198.18.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(d.emit().to_vec(), msg);
        assert_eq!(
            pingpong::Dest::parse(&msg[..51]),
            Err(OobError::Length { got: 51, want: 52 })
        );
        let mut bad = msg.clone();
        bad[5] = b'g';
        assert!(pingpong::Dest::parse(&bad).is_err());
        assert!(pingpong::Dest::parse(&[b'a'; 52]).is_err());
    }

    /// ferroce's capabilities ride after the version's NUL: perftest reads
    /// the same version from the message, and a perftest message (zeros
    /// there) has none.
    #[test]
    fn capabilities_ride_where_perftest_does_not_read() {
        let perftest_msg = unhex("362e3036000000000000000000000000");
        assert_eq!(perftest::parse_caps(&perftest_msg), None);
        let m = perftest::version_with_caps(perftest::VERSION, perftest::CAP_INT);
        assert_eq!(perftest::parse_version(&m).unwrap(), 6.06);
        assert_eq!(m[..5], perftest_msg[..5]);
        assert_eq!(perftest::parse_caps(&m), Some(perftest::CAP_INT));
        let none = perftest::version_with_caps(perftest::VERSION, 0);
        assert_eq!(perftest::parse_caps(&none), Some(0));
        assert_eq!(perftest::parse_caps(&m[..8]), None);
    }

    /// Frames 4, 8, 10, 12 and 14 of tests/vectors/ib_send_bw.pcap: the
    /// client's version, cycle buffer, cache line size, MTU and keys.
    #[test]
    fn perftest_messages_as_ib_send_bw_sends_them() {
        let v = unhex("362e3036000000000000000000000000");
        assert_eq!(perftest::parse_version(&v).unwrap(), 6.06);
        assert_eq!(perftest::version(perftest::VERSION).to_vec(), v);
        assert_eq!(perftest::parse_int(&unhex("00001000")).unwrap(), 4096);
        assert_eq!(perftest::int(64).to_vec(), unhex("00000040"));
        assert_eq!(perftest::parse_mtu(&unhex("3300")).unwrap(), 3);
        assert_eq!(perftest::mtu(3).to_vec(), unhex("3300"));
        assert!(perftest::parse_mtu(b"9\0").is_err());
        let k = unhex("303030303a303030313a3030303031333a3263643134323a30303030303030303a303030303536306366623539333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a63363a31323a30303a30333a30303030303030303a00");
        let keys = perftest::Keys::parse(&k).unwrap();
        assert_eq!(
            keys,
            perftest::Keys {
                lid: 0,
                out_reads: 1,
                qpn: 0x13,
                psn: 0x2cd142,
                rkey: 0,
                vaddr: 0x560c_fb59_3000,
                gid: gid_of("198.18.0.3".parse().unwrap()),
                srqn: 0,
            }
        );
        assert_eq!(keys.emit().to_vec(), k);
        assert!(keys.to_string().contains("GID 198.18.0.3"));
        let mut short = k.clone();
        short.truncate(107);
        assert!(perftest::Keys::parse(&short).is_err());
    }
}
