//! Where a connected QP's packets go: the addresses and header values
//! fixed at RTR (reference B.1), and the one function that writes a packet
//! of the QP into a caller's buffer; built from the QP's attributes at RTR
//! (`build_path`), with INT telemetry where both ends agreed (`check_int`);
//! its headers as a template of bytes, patched per packet
//! ([`crate::wire::template`]).
//! The device's [`Offload`] settings: who computes and checks the ICRC.

use super::qp::{AddressVector, QpAttr};
use super::{vlan, DeviceConfig, Error, RxCounters};
use crate::wire;
use crate::wire::frame::{seal_offloaded, OFFLOADED_ICRC};
use crate::wire::int::{self, Trailer};
use crate::wire::opcode::Op;
use crate::wire::sr::{self, SrTrailer};
use crate::wire::template::{BthVaries, HeaderTemplate};
use crate::wire::{
    frame::seal, AethRepr, BthRepr, Ecn, ExtHeaders, Frame, FrameRepr, IpRepr, MacAddr, Opcode,
    Psn, VlanTag,
};
use core::net::IpAddr;

/// Work a device leaves to its NIC's hardware, as the simulator's lab
/// runs it; the default leaves nothing: every ICRC is computed and
/// checked, every WRITE's payload lands in its region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offload {
    /// The ICRC is the NIC's (A17 §17.3.3 asks it of the channel adapter,
    /// which computes it in hardware): frames are sent with
    /// [`OFFLOADED_ICRC`] in its place, computed by nobody, and a received
    /// frame that carries it is taken without a check, counted in
    /// [`RxCounters::icrc_unchecked`]. A frame with any other ICRC is
    /// checked as usual. Both ends must agree: a device without it drops
    /// the other's frames as ICRC errors.
    pub icrc: bool,
    /// A WRITE's packets are checked (R_Key, protection domain, access,
    /// bounds) but their payload is not copied into the region: for a
    /// driver that never reads the memory written (the lab), where the
    /// copy would be all the work.
    pub discard_write_payloads: bool,
}

impl Offload {
    /// Whether a received frame passes the ICRC check, or skips it (an
    /// offloaded ICRC on a device that offloads it); counts the frame in
    /// `rx` as an ICRC error or as unchecked.
    pub(super) fn admits(&self, f: &Frame<'_>, rx: &mut RxCounters) -> bool {
        if self.icrc && f.icrc == OFFLOADED_ICRC {
            rx.icrc_unchecked += 1;
            return true;
        }
        if !f.icrc_ok() {
            rx.icrc_errors += 1;
            return false;
        }
        true
    }
}

/// Seals a frame of `len` bytes written at the start of `buf`: its ICRC
/// left to the NIC, or computed, from the folded prefix of `tmpl` when the
/// frame's headers are that template's packet's (not a CNP's).
fn seal_frame(
    buf: &mut [u8],
    len: usize,
    eth_len: usize,
    offload_icrc: bool,
    tmpl: Option<&HeaderTemplate>,
) -> Option<()> {
    let frame = &mut buf[..len];
    match tmpl {
        _ if offload_icrc => seal_offloaded(frame).ok(),
        Some(t) => t.seal(frame).ok().map(|_| ()),
        None => seal(frame, eth_len).ok().map(|_| ()),
    }
}

/// The headers every packet of one QP shares. What a packet reads when
/// the QP has a template comes first (`repr(C)`): the template and the
/// choices beside it; the fields it was built from after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Path {
    /// Both ends agreed to INT telemetry
    /// ([`AddressVector::int_telemetry`](super::AddressVector::int_telemetry)):
    /// packets carry the trailer of [`crate::wire::int`].
    pub int: bool,
    /// Both ends agreed to selective repeat
    /// ([`Recovery::Selective`](super::Recovery::Selective)): requests
    /// carry the place trailer of [`crate::wire::sr`], and NAKs for
    /// packets that came ahead of their turn its sack trailer.
    pub sr: bool,
    /// The ICRC is left to the NIC ([`Offload::icrc`]).
    pub icrc_offload: bool,
    /// The fields above as header bytes, built once ([`Path::with_template`])
    /// and patched per packet; `None` (a path whose fields change per
    /// send, as UD's) builds each packet's headers from the fields.
    pub(super) tmpl: Option<HeaderTemplate>,
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
    /// The INT trailer after the IP packet, on a path with
    /// [`Path::int`] only (`None` elsewhere).
    pub int: Option<Trailer>,
    /// The selective-repeat trailer after it (after the INT trailer when
    /// there is one), on a path with [`Path::sr`] only.
    pub sr: Option<SrTrailer>,
}

impl Packet {
    /// A packet with `opcode`, `psn` and `ext`, its flags clear and no
    /// trailers.
    pub fn new(opcode: Opcode, psn: Psn, ext: ExtHeaders) -> Packet {
        Packet {
            opcode,
            psn,
            ack_req: false,
            solicited: false,
            ext,
            int: None,
            sr: None,
        }
    }
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
        let (at, len, eth_len) = self.headers(p, payload_len, buf)?;
        fill(&mut buf[at]);
        seal_frame(buf, len, eth_len, self.icrc_offload, self.tmpl.as_ref())?;
        let mut end = len;
        if let Some(t) = p.int.filter(|_| self.int) {
            t.emit(buf.get_mut(end..)?)?;
            end += int::LEN;
        }
        if let Some(t) = p.sr.filter(|_| self.sr) {
            t.emit(buf.get_mut(end..)?)?;
            end += t.len();
        }
        Some(end)
    }

    /// Writes an RC Acknowledge with `aeth` and `psn`, and the trailers
    /// `int` and `sr` as [`Path::emit`] does; returns the frame's length,
    /// or `None` when `buf` is too small. Without trailers, a path with a
    /// template takes [`HeaderTemplate::emit_ack`], which skips the checks
    /// of the general path: every ACK is the same shape.
    pub fn emit_ack(
        &self,
        psn: Psn,
        aeth: AethRepr,
        int: Option<Trailer>,
        sr: Option<SrTrailer>,
        buf: &mut [u8],
    ) -> Option<usize> {
        if let (Some(t), None, None) = (&self.tmpl, int, sr) {
            let len = t.emit_ack(psn, &aeth, buf).ok()?;
            seal_frame(buf, len, t.eth_len(), self.icrc_offload, Some(t))?;
            return Some(len);
        }
        let ext = ExtHeaders {
            aeth: Some(aeth),
            ..ExtHeaders::default()
        };
        let p = Packet {
            int,
            sr,
            ..Packet::new(Opcode::rc(Op::Acknowledge), psn, ext)
        };
        self.emit(&p, 0, buf, |_| {})
    }

    /// Whether the QP's packets may leave with their payload in place
    /// ([`Path::emit_parts`]): not on a path whose frames carry a trailer
    /// after the ICRC (INT, selective repeat).
    pub fn lends(&self) -> bool {
        !self.int && !self.sr
    }

    /// Writes a packet whose payload stays where it is, for a port that
    /// sends it from there (zero-copy send): the headers into `buf`, and
    /// right after them the pad bytes and the ICRC, computed over the
    /// headers, `payload` in place and the pad (A17 §17.3.3). Returns the
    /// headers' length and the whole frame's; the frame on the wire is
    /// `buf[..head]`, then `payload`, then `buf[head..head + pad + 4]`.
    /// Only for a path that [`Path::lends`].
    pub fn emit_parts(&self, p: &Packet, payload: &[u8], buf: &mut [u8]) -> Option<(usize, usize)> {
        debug_assert!(self.lends());
        let (at, len, eth_len) = self.headers(p, payload.len(), buf)?;
        let head = at.start;
        let pad = len - wire::len::ICRC - at.end;
        let pads = [0u8; 3];
        let rest = [payload, &pads[..pad]];
        let icrc = match &self.tmpl {
            _ if self.icrc_offload => OFFLOADED_ICRC,
            Some(t) => t.icrc_parts(&buf[eth_len..head], &rest).ok()?,
            None => wire::icrc::compute_parts(&buf[eth_len..head], &rest).ok()?,
        };
        if pad != 0 {
            buf[head..head + pad].fill(0);
        }
        buf[head + pad..head + pad + wire::len::ICRC].copy_from_slice(&icrc.to_le_bytes());
        Some((head, len))
    }

    /// Writes a packet's headers into `buf` (pad bytes zeroed after the
    /// payload's place); returns where the payload goes, the frame's
    /// length through its ICRC, and the Ethernet header's length.
    fn headers(
        &self,
        p: &Packet,
        payload_len: usize,
        buf: &mut [u8],
    ) -> Option<(core::ops::Range<usize>, usize, usize)> {
        debug_assert!(
            self.tmpl.is_none() || self.tmpl == self.with_template().tmpl,
            "a path's fields changed after its template was built"
        );
        let (at, len, eth_len) = match &self.tmpl {
            Some(t) => {
                let v = BthVaries {
                    opcode: p.opcode,
                    psn: p.psn,
                    solicited: p.solicited,
                    ack_req: p.ack_req,
                };
                let at = t.emit_headers(&v, &p.ext, payload_len, buf).ok()?;
                (at, t.frame_len(p.opcode, payload_len), t.eth_len())
            }
            None => {
                let r = self.repr(p);
                let at = r.emit_headers(payload_len, buf).ok()?;
                (at, r.frame_len(payload_len), r.eth.header_len())
            }
        };
        Some((at, len, eth_len))
    }

    /// The trailers of a received frame of this QP, from `tail`, the
    /// bytes after its IP packet: the INT trailer on a path with INT
    /// (counted in `int_missing` when absent), then the selective-repeat
    /// trailer on a path with selective repeat.
    #[inline]
    pub(super) fn trailers(
        &self,
        tail: &[u8],
        int_missing: &mut u64,
    ) -> (Option<Trailer>, Option<SrTrailer>) {
        if !self.int && !self.sr {
            // A plain path (the common case) reads neither: decided where
            // the frame is handled, without a call.
            return (None, None);
        }
        self.read_trailers(tail, int_missing)
    }

    /// [`Path::trailers`] on a path with INT or selective repeat.
    #[inline(never)]
    fn read_trailers(
        &self,
        tail: &[u8],
        int_missing: &mut u64,
    ) -> (Option<Trailer>, Option<SrTrailer>) {
        let mut rest = tail;
        let int = if self.int {
            let t = Trailer::parse(rest);
            match t {
                Some(_) => rest = &rest[int::LEN..],
                None => *int_missing += 1,
            }
            t
        } else {
            None
        };
        let sr = if self.sr {
            SrTrailer::parse(rest)
        } else {
            None
        };
        (int, sr)
    }

    /// The length of the frame [`Path::emit`] would write (its INT
    /// trailer included).
    pub fn frame_len(&self, p: &Packet, payload_len: usize) -> usize {
        let int = if p.int.is_some() && self.int {
            int::LEN
        } else {
            0
        };
        let sr = p.sr.filter(|_| self.sr).map_or(0, |t| t.len());
        let frame = match &self.tmpl {
            Some(t) => t.frame_len(p.opcode, payload_len),
            None => self.repr(p).frame_len(payload_len),
        };
        frame + int + sr
    }

    /// This path with its header template built from its fields (none if
    /// a field is out of range: then each packet's headers are built, and
    /// refused, as without one).
    pub(super) fn with_template(mut self) -> Path {
        let probe = Packet {
            opcode: Opcode::rc(wire::opcode::Op::SendOnly),
            psn: Psn::new(0),
            ack_req: false,
            solicited: false,
            ext: ExtHeaders::default(),
            int: None,
            sr: None,
        };
        self.tmpl = HeaderTemplate::new(&self.repr(&probe)).ok();
        self
    }

    fn repr(&self, p: &Packet) -> FrameRepr {
        let mut bth = BthRepr::new(p.opcode, self.dest_qp, p.psn);
        bth.ack_req = p.ack_req;
        bth.solicited = p.solicited;
        bth.pkey = self.pkey;
        let mut r = FrameRepr::roce(self.smac, self.dmac, self.ip, self.src_port, bth);
        r.eth.vlan = self.vlan;
        r.ext = p.ext;
        r
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
        seal_frame(buf, len, r.eth.header_len(), self.icrc_offload, None)?;
        Some(len)
    }

    /// The Ethernet header's length (with the VLAN tag, if any).
    pub fn eth_header_len(&self) -> usize {
        match self.vlan {
            Some(_) => crate::wire::ethernet::HEADER_LEN_VLAN,
            None => crate::wire::ethernet::HEADER_LEN,
        }
    }

    /// The ECN codepoint the QP's packets carry.
    pub fn ecn(&self) -> Ecn {
        self.ip.ecn()
    }
}

/// INT telemetry ([`crate::wire::int`]) and selective repeat's trailer
/// ([`crate::wire::sr`]) at RTR: a rate control that needs INT (HPCC)
/// gets it, the trailers fit the frame buffers behind the largest request
/// of the path MTU (RETH and ImmDt, the most a request with a payload
/// carries), and a QP in selective repeat keeps no more PSNs in flight
/// than the responder places ahead ([`super::selective::WINDOW`]).
pub(super) fn check_int(
    path: &Path,
    mtu: u32,
    needed: bool,
    cfg: &super::QpConfig,
) -> Result<(), Error> {
    if path.sr && cfg.max_inflight > super::selective::WINDOW {
        return Err(Error::InvalidAttr(
            "selective repeat places at most 4096 packets ahead: the QP's max_inflight \
             must not exceed 4096",
        ));
    }
    if needed && !path.int {
        return Err(Error::InvalidAttr(
            "the QP's rate control needs INT telemetry: set the address vector's \
             int_telemetry, toward a ferroce peer that sets it too",
        ));
    }
    let largest = path.eth_header_len()
        + path.ip.header_len()
        + wire::udp::HEADER_LEN
        + wire::bth::HEADER_LEN
        + 20
        + mtu as usize
        + wire::frame::ICRC_LEN;
    let int = if path.int { wire::int::LEN } else { 0 };
    let sr = if path.sr { sr::MAX_LEN } else { 0 };
    if path.int && largest + int + sr > super::MAX_FRAME {
        return Err(Error::InvalidAttr(
            "INT telemetry does not fit a frame of this path MTU over IPv6 or a VLAN, or with \
             selective repeat (the frame buffers hold 4224 bytes): use a path MTU of 2048 or less",
        ));
    }
    if path.sr && largest + sr > super::MAX_FRAME {
        return Err(Error::InvalidAttr(
            "selective repeat's trailer does not fit a frame of this path MTU over IPv6 on a VLAN \
             (the frame buffers hold 4224 bytes): use a path MTU of 2048 or less",
        ));
    }
    Ok(())
}

/// The headers of a QP's packets from its attributes (reference B.1): the
/// local GID of `sgid_index` and the remote GID (same IP version), DSCP
/// and ECN from the traffic class, TTL 64 on IPv4 as rxe sends (the AV
/// hop limit on IPv6), the kernel's source port over both QPNs.
pub(super) fn build_path(
    cfg: &DeviceConfig,
    qpn: u32,
    attr: &QpAttr,
    av: &AddressVector,
) -> Result<Path, Error> {
    let sgid = cfg.gids[av.sgid_index as usize];
    let dscp = av.traffic_class >> 2;
    let mut ecn = Ecn::from_bits(av.traffic_class & 3);
    if cfg.congestion.ecn && ecn == Ecn::NotEct {
        // ECN-capable transport (reference B.8): ECT(0), as ConnectX.
        ecn = Ecn::Ect0;
    }
    let ip = match (sgid, av.dgid.to_canonical()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::v4(s, d, dscp, ecn),
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut ip = IpRepr::v6(s, d, dscp, ecn, av.flow_label);
            if let IpRepr::V6(r) = &mut ip {
                r.hop_limit = av.hop_limit;
            }
            ip
        }
        _ => {
            return Err(Error::InvalidAttr(
                "dgid and sgid are of different IP versions",
            ))
        }
    };
    Ok(Path {
        smac: cfg.mac,
        dmac: av.dmac,
        vlan: vlan::tag_of(cfg.vlan),
        ip,
        src_port: av
            .src_port
            .unwrap_or_else(|| wire::udp::kernel_source_port(qpn, attr.dest_qp_num)),
        pkey: cfg.pkeys[attr.pkey_index as usize],
        dest_qp: attr.dest_qp_num,
        int: av.int_telemetry,
        sr: av.recovery == super::Recovery::Selective,
        icrc_offload: cfg.offload.icrc,
        tmpl: None,
    }
    .with_template())
}
