//! Ethernet II with at most one IEEE 802.1Q tag (RoCE v2 rides on IPv4 or
//! IPv6 over Ethernet; A17 §17.2). The tag's PCP carries the packet's
//! priority (A17 §17.4.2: SL maps directly to 802.1p priority).

use super::field::{set_u16, u16_at};
use super::{Error, Result};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Tag protocol identifier of an 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Length without a tag.
pub const HEADER_LEN: usize = 14;
/// Length with one 802.1Q tag.
pub const HEADER_LEN_VLAN: usize = 18;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff, every station on the segment.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// An 802.1Q tag: priority code point, drop eligible, VLAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// The tag of a tag control information field (IEEE 802.1Q §9.6: PCP
    /// 3 bits, DEI 1 bit, VID 12 bits).
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }

    /// The tag control information field; [`Error::FieldRange`] if a
    /// value does not fit its bits.
    pub fn tci(&self) -> Result<u16> {
        if self.pcp > 7 || self.vid > 0x0FFF {
            return Err(Error::FieldRange);
        }
        Ok((self.pcp as u16) << 13 | (self.dei as u16) << 12 | self.vid)
    }
}

/// A checked view of an Ethernet header (with its tag, if any).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` if it holds the whole header, tag included.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN || (u16_at(b, 12) == ETHERTYPE_VLAN && b.len() < HEADER_LEN_VLAN) {
            return Err(Error::Truncated);
        }
        Ok(EthernetFrame { buffer })
    }

    /// Destination MAC address.
    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[0..6]);
        MacAddr(m)
    }

    /// Source MAC address.
    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[6..12]);
        MacAddr(m)
    }

    /// The 802.1Q tag, if the frame has one.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (u16_at(b, 12) == ETHERTYPE_VLAN).then(|| VlanTag::from_tci(u16_at(b, 14)))
    }

    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        u16_at(self.buffer.as_ref(), self.header_len() - 2)
    }

    /// 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if u16_at(self.buffer.as_ref(), 12) == ETHERTYPE_VLAN {
            HEADER_LEN_VLAN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header (and tag).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The Ethernet header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: MacAddr,
    /// Source MAC address.
    pub src: MacAddr,
    /// The 802.1Q tag, if the frame has one.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }

    /// 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN_VLAN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.header_len();
        if buf.len() < n {
            return Err(Error::BufferTooSmall);
        }
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        if let Some(tag) = self.vlan {
            set_u16(buf, 12, ETHERTYPE_VLAN);
            set_u16(buf, 14, tag.tci()?);
        }
        set_u16(buf, n - 2, self.ethertype);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_and_untagged_round_trip() {
        for vlan in [
            None,
            Some(VlanTag {
                pcp: 3,
                dei: true,
                vid: 100,
            }),
        ] {
            let r = EthernetRepr {
                dst: MacAddr([2, 0, 0, 0, 0, 1]),
                src: MacAddr([2, 0, 0, 0, 0, 2]),
                vlan,
                ethertype: ETHERTYPE_IPV4,
            };
            let mut b = [0u8; 18];
            let n = r.emit(&mut b).unwrap();
            let f = EthernetFrame::new_checked(&b[..n]).unwrap();
            assert_eq!(EthernetRepr::parse(&f), r);
            assert_eq!(f.header_len(), n);
        }
    }

    #[test]
    fn a_cut_tag_is_truncated() {
        let mut b = [0u8; 16];
        set_u16(&mut b, 12, ETHERTYPE_VLAN);
        assert_eq!(
            EthernetFrame::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        assert!(EthernetFrame::new_checked(&b[..13]).is_err());
    }

    #[test]
    fn an_out_of_range_tag_is_refused() {
        let r = EthernetRepr {
            dst: MacAddr::BROADCAST,
            src: MacAddr::default(),
            vlan: Some(VlanTag {
                pcp: 8,
                dei: false,
                vid: 1,
            }),
            ethertype: ETHERTYPE_IPV6,
        };
        assert_eq!(r.emit(&mut [0; 18]), Err(Error::FieldRange));
    }
}
