//! Where a connected QP's packets go: the addresses and header values
//! fixed at RTR (reference B.1), and the one function that writes a packet
//! of the QP into a caller's buffer.

use crate::wire::{
    frame::seal, BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, MacAddr, Opcode, Psn, VlanTag,
};

/// The headers every packet of one QP shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Source MAC address: the port's.
    pub smac: MacAddr,
    /// Destination MAC address: the next hop's.
    pub dmac: MacAddr,
    /// The port's 802.1Q tag, if it is on a VLAN (see [`super::vlan`]).
    pub vlan: Option<VlanTag>,
    /// Source and destination, DSCP / ECN, TTL or hop limit.
    pub ip: IpRepr,
    /// Constant per QP (A17 §17.3.2.1).
    pub src_port: u16,
    /// Partition key of every BTH (IBTA Vol. 1 §9.2.6).
    pub pkey: u16,
    /// Destination QP number of every BTH (IBTA Vol. 1 §9.2.7).
    pub dest_qp: u32,
}

/// One packet to write: the BTH fields that vary and the extension headers.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// BTH opcode (IBTA Vol. 1 §9.2.1).
    pub opcode: Opcode,
    /// BTH packet sequence number.
    pub psn: Psn,
    /// BTH AckReq: ask the responder for an ACK (§9.2.8).
    pub ack_req: bool,
    /// BTH SE: solicited event (§9.2.2).
    pub solicited: bool,
    /// The extension headers the opcode carries.
    pub ext: ExtHeaders,
}

impl Path {
    /// Writes the packet with a payload of `payload_len` bytes filled in
    /// place by `fill`; returns the frame's length, or `None` when `buf`
    /// is too small (nothing is sent then).
    pub fn emit(
        &self,
        p: &Packet,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<usize> {
        let mut bth = BthRepr::new(p.opcode, self.dest_qp, p.psn);
        bth.ack_req = p.ack_req;
        bth.solicited = p.solicited;
        bth.pkey = self.pkey;
        let mut r = FrameRepr::roce(self.smac, self.dmac, self.ip, self.src_port, bth);
        r.eth.vlan = self.vlan;
        r.ext = p.ext;
        let at = r.emit_headers(payload_len, buf).ok()?;
        fill(&mut buf[at]);
        let len = r.frame_len(payload_len);
        seal(&mut buf[..len], r.eth.header_len()).ok()?;
        Some(len)
    }

    /// Writes a CNP to this QP's peer (reference B.8, A17 §17.9.3): BTH
    /// opcode 0x81 with BECN set, the marked packet's `pkey`, the peer's
    /// QP as DestQP, PSN 0, then 16 zero bytes; IP DSCP `dscp`, Not-ECT;
    /// on a tagged port the 802.1p priority `prio`.
    pub fn emit_cnp(&self, pkey: u16, dscp: u8, prio: u8, buf: &mut [u8]) -> Option<usize> {
        let mut bth = BthRepr::new(Opcode::CNP, self.dest_qp, Psn::new(0));
        bth.pkey = pkey;
        bth.becn = true;
        let mut ip = self.ip;
        ip.set_dscp(dscp);
        ip.set_ecn(Ecn::NotEct);
        let mut r = FrameRepr::roce(self.smac, self.dmac, ip, self.src_port, bth);
        r.eth.vlan = self.vlan.map(|t| VlanTag { pcp: prio & 7, ..t });
        r.ext = ExtHeaders::default();
        r.emit_headers(0, buf).ok()?;
        let len = r.frame_len(0);
        seal(&mut buf[..len], r.eth.header_len()).ok()?;
        Some(len)
    }

    /// The ECN codepoint the QP's packets carry.
    pub fn ecn(&self) -> Ecn {
        self.ip.ecn()
    }
}
