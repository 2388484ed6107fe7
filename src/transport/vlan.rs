//! A port's 802.1Q VLAN: the tag its frames carry and which received frames
//! are its own.
//!
//! RoCE v2 rides on Ethernet, tagged or not (A17 §17.2). With a VLAN
//! configured every frame the port sends (RoCE, ARP, Neighbor Discovery)
//! carries the tag `vid` with priority `pcp` (the 802.1p priority PFC acts
//! on; A17 §17.4.2 maps a packet's service level to it, here one priority
//! per port), and only frames tagged with `vid` are accepted: untagged
//! frames and those of other VLANs are counted and dropped, as a VLAN
//! interface of a host would never see them (IEEE 802.1Q §8.6).
//!
//! VID 0 means "priority tagged" (IEEE 802.1Q §9.6): frames carry PCP in a
//! tag with VID 0 and belong to no VLAN, so untagged frames and
//! priority-tagged ones are both accepted. Without a VLAN the same two are
//! accepted, and frames tagged with any VID other than 0 are dropped.

use crate::wire::VlanTag;

/// Highest VLAN id: 0xFFF is reserved (IEEE 802.1Q §9.6, Table 9-2).
pub const MAX_VID: u16 = 0xFFE;

/// The VLAN of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Vlan {
    /// VLAN id, 1..=4094; 0 for priority tags only.
    pub id: u16,
    /// Priority code point (802.1p priority) of the frames sent, 0..=7.
    pub pcp: u8,
}

impl Vlan {
    /// VLAN `id` with priority `pcp` (unchecked: see [`Vlan::check`]).
    pub fn new(id: u16, pcp: u8) -> Vlan {
        Vlan { id, pcp }
    }

    /// Whether the id and priority fit their fields (VID 0xFFF is
    /// reserved).
    pub fn check(&self) -> Result<(), super::Error> {
        if self.id > MAX_VID {
            return Err(super::Error::InvalidArgument(
                "VLAN id must be 0..=4094 (0: priority tags only)",
            ));
        }
        if self.pcp > 7 {
            return Err(super::Error::InvalidArgument(
                "VLAN priority (PCP) must be 0..=7",
            ));
        }
        Ok(())
    }

    /// The tag frames sent on this VLAN carry.
    pub fn tag(&self) -> VlanTag {
        VlanTag {
            pcp: self.pcp,
            dei: false,
            vid: self.id,
        }
    }
}

/// Whether a port on `vlan` (`None`: no VLAN) accepts a frame with `tag`
/// (the rules at the top of this module; the priority and DEI bits of a
/// received tag are not checked).
#[inline]
pub fn accepts(vlan: Option<Vlan>, tag: Option<VlanTag>) -> bool {
    let ours = vlan.map_or(0, |v| v.id);
    let theirs = tag.map_or(0, |t| t.vid);
    ours == theirs
}

/// The tag of frames sent by a port on `vlan`.
#[inline]
pub fn tag_of(vlan: Option<Vlan>) -> Option<VlanTag> {
    vlan.map(|v| v.tag())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(vid: u16, pcp: u8) -> Option<VlanTag> {
        Some(VlanTag {
            pcp,
            dei: false,
            vid,
        })
    }

    #[test]
    fn a_vlan_port_takes_its_own_tag_only() {
        let v = Some(Vlan::new(100, 3));
        assert!(accepts(v, tag(100, 3)));
        assert!(accepts(v, tag(100, 0)), "any priority");
        assert!(!accepts(v, None), "untagged");
        assert!(!accepts(v, tag(0, 3)), "priority tagged");
        assert!(!accepts(v, tag(101, 3)));
    }

    #[test]
    fn without_a_vlan_untagged_and_priority_tagged_frames_pass() {
        for v in [None, Some(Vlan::new(0, 5))] {
            assert!(accepts(v, None));
            assert!(accepts(v, tag(0, 6)));
            assert!(!accepts(v, tag(7, 0)));
        }
        assert_eq!(tag_of(None), None);
        assert_eq!(tag_of(Some(Vlan::new(0, 5))), tag(0, 5));
    }

    #[test]
    fn out_of_range_values_are_refused() {
        assert!(Vlan::new(4094, 7).check().is_ok());
        assert!(Vlan::new(0, 0).check().is_ok());
        assert!(Vlan::new(4095, 0).check().is_err());
        assert!(Vlan::new(1, 8).check().is_err());
    }
}
