//! An independent reading of a frame's Ethernet, IP and UDP headers with
//! the etherparse crate, to hold our own parser and emitter against.

use ferroce::wire::{Frame, IpRepr};

/// Checks that etherparse reads `bytes` as our `Frame` says: addresses,
/// DSCP / ECN, TTL or hop limit, IP ID and DF, UDP ports, and that the UDP
/// payload is the BTH onward. Returns the first disagreement.
pub fn agrees(bytes: &[u8], f: &Frame<'_>) -> Result<(), String> {
    use etherparse::{LinkSlice, NetSlice, SlicedPacket, TransportSlice};
    let p = SlicedPacket::from_ethernet(bytes).map_err(|e| format!("etherparse: {e}"))?;
    let Some(LinkSlice::Ethernet2(eth)) = &p.link else {
        return Err("no Ethernet II header".into());
    };
    let r = &f.repr();
    check("dst mac", eth.destination(), r.eth.dst.0)?;
    check("src mac", eth.source(), r.eth.src.0)?;
    match (&p.net, &r.ip) {
        (Some(NetSlice::Ipv4(ip)), IpRepr::V4(ours)) => {
            let h = ip.header();
            check("ipv4 src", h.source_addr(), ours.src)?;
            check("ipv4 dst", h.destination_addr(), ours.dst)?;
            check("dscp", h.dcp().value(), ours.dscp)?;
            check("ecn", h.ecn().value(), ours.ecn.bits())?;
            check("ttl", h.ttl(), ours.ttl)?;
            check("ident", h.identification(), ours.ident)?;
            check("df", h.dont_fragment(), ours.dont_frag)?;
        }
        (Some(NetSlice::Ipv6(ip)), IpRepr::V6(ours)) => {
            let h = ip.header();
            check("ipv6 src", h.source_addr(), ours.src)?;
            check("ipv6 dst", h.destination_addr(), ours.dst)?;
            check(
                "traffic class",
                h.traffic_class(),
                ours.dscp << 2 | ours.ecn.bits(),
            )?;
            check("flow label", h.flow_label().value(), ours.flow_label)?;
            check("hop limit", h.hop_limit(), ours.hop_limit)?;
        }
        _ => return Err("IP version differs".into()),
    }
    let Some(TransportSlice::Udp(udp)) = &p.transport else {
        return Err("no UDP header".into());
    };
    check("udp sport", udp.source_port(), r.udp.src_port)?;
    check("udp dport", udp.destination_port(), r.udp.dst_port)?;
    let ours = &bytes[f.ip_offset + r.ip.header_len() + 8..f.len()];
    check("udp payload", udp.payload(), ours)?;
    Ok(())
}

fn check<A: PartialEq<B> + std::fmt::Debug, B: std::fmt::Debug>(
    what: &str,
    theirs: A,
    ours: B,
) -> Result<(), String> {
    if theirs == ours {
        Ok(())
    } else {
        Err(format!("{what}: etherparse {theirs:?}, ferroce {ours:?}"))
    }
}
