//! Sample frames: one well-formed RoCE v2 frame for every opcode of the
//! table, over IPv4 and IPv6, with and without a VLAN tag. Used by the
//! tshark test, the property tests and the fuzz corpus.

use ferroce::wire::ext::{AckSyndrome, AethRepr, FethRepr, CREDIT_INVALID};
use ferroce::wire::opcode::{Class, HeaderSet, OpcodeInfo, Position};
use ferroce::wire::{
    BthRepr, DethRepr, Ecn, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv6Repr, MacAddr, Opcode,
    Psn, VlanTag,
};

pub const MAC_A: MacAddr = MacAddr([0x02, 0x18, 0, 0, 0, 0x01]);
pub const MAC_B: MacAddr = MacAddr([0x02, 0x18, 0, 0, 0, 0x02]);

/// The extension headers `info` needs, with recognisable values.
pub fn ext_for(info: &OpcodeInfo) -> ExtHeaders {
    let h = info.headers;
    let mut e = ExtHeaders::default();
    if h.contains(HeaderSet::DETH) {
        e.deth = Some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x000011,
        });
    }
    if h.contains(HeaderSet::XRCETH) {
        e.xrceth = Some(0x00_0013);
    }
    if h.contains(HeaderSet::FETH) {
        e.feth = Some(FethRepr {
            selectivity: 0,
            placement: 1,
        });
    }
    if h.contains(HeaderSet::RETH) {
        e.reth = Some(ferroce::wire::RethRepr {
            va: 0x0000_7f00_1234_5000,
            rkey: 0x0000_1234,
            dma_len: 4096,
        });
    }
    if h.contains(HeaderSet::ATOMIC_ETH) {
        e.atomic = Some(ferroce::wire::AtomicEthRepr {
            va: 0x0000_7f00_1234_6000,
            rkey: 0x0000_5678,
            swap_add: 1,
            compare: 0,
        });
    }
    if h.contains(HeaderSet::AETH) {
        e.aeth = Some(AethRepr {
            syndrome: AckSyndrome::Ack {
                credit: CREDIT_INVALID,
            },
            msn: 7,
        });
    }
    if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
        e.atomic_ack = Some(41);
    }
    if h.contains(HeaderSet::IMMDT) {
        e.imm = Some(0xC0FF_EE00);
    }
    if h.contains(HeaderSet::IETH) {
        e.ieth = Some(0x0000_4321);
    }
    e
}

/// A payload length that fits the opcode: full 256 B segments for FIRST
/// and MIDDLE, 8 B for ATOMIC_WRITE, 13 B (pad 3) otherwise.
pub fn payload_len(info: &OpcodeInfo) -> usize {
    match (info.payload, info.class, info.position) {
        (false, _, _) => 0,
        (true, Class::AtomicWrite, _) => 8,
        (true, _, Position::First | Position::Middle) => 256,
        (true, _, _) => 13,
    }
}

pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// The frame for `info` over IPv4, ECT(0), DSCP 26.
pub fn repr_v4(info: &OpcodeInfo) -> FrameRepr {
    let mut bth = BthRepr::new(info.opcode, 0x000012, Psn::new(0x00AB_CDEF));
    bth.ack_req = info.is_request() && info.ends_message();
    let mut r = FrameRepr::roce(
        MAC_A,
        MAC_B,
        IpRepr::v4(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            26,
            Ecn::Ect0,
        ),
        0xC0DE,
        bth,
    );
    if info.opcode == Opcode::CNP {
        r.bth.becn = true;
        r.bth.psn = Psn::new(0);
        r.ip.set_dscp(48);
        r.ip.set_ecn(Ecn::NotEct);
    }
    r.ext = ext_for(info);
    r
}

/// The same over IPv6 (IPv4-mapped GIDs are IPv4 frames; these are real
/// IPv6 GIDs), with an 802.1Q tag.
pub fn repr_v6_vlan(info: &OpcodeInfo) -> FrameRepr {
    let mut r = repr_v4(info);
    r.ip = IpRepr::V6(Ipv6Repr {
        src: "fd18::1".parse().unwrap(),
        dst: "fd18::2".parse().unwrap(),
        dscp: r.ip.dscp(),
        ecn: r.ip.ecn(),
        flow_label: 0x1_2345,
        hop_limit: 64,
        next_header: 17,
    });
    r.eth = EthernetRepr {
        vlan: Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
        ..r.eth
    };
    r
}

/// Every opcode's frame, IPv4 then IPv6 + VLAN: (description, bytes).
pub fn every_opcode() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (tag, make) in [
        ("ipv4", repr_v4 as fn(&OpcodeInfo) -> FrameRepr),
        ("ipv6+vlan", repr_v6_vlan),
    ] {
        for info in Opcode::all() {
            let r = make(info);
            let p = payload(payload_len(info));
            let mut buf = vec![0u8; r.frame_len(p.len())];
            let n = r.emit(&p, &mut buf).expect("sample frame");
            buf.truncate(n);
            out.push((format!("{} {tag}", info.opcode), buf));
        }
    }
    out
}
