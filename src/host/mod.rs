//! A RoCE host on one port: the transport [`Device`] and the port's
//! [`Neighbours`] (ARP and IPv6 Neighbor Discovery), driven together
//! through [`pump::pump`]. ARP, Neighbor Solicitation and
//! Advertisement frames go to the neighbour table, everything else to the
//! device; the table's frames leave before the transport's. Both are on the
//! device's VLAN, if it has one.

pub mod neigh;
pub mod pump;

use crate::time::Instant;
use crate::transport::{Device, DeviceConfig, Error, Lent, TxFrame};
use crate::wire::MacAddr;
use core::net::IpAddr;
use neigh::{Lookup, NeighConfig, Neighbours};
use pump::Endpoint;

/// A device and its neighbour table.
#[derive(Debug)]
pub struct Host {
    /// The transport device: QPs, memory regions, completion queues.
    pub dev: Device,
    /// ARP and Neighbor Discovery: the MAC address of each peer IP.
    pub neigh: Neighbours,
}

impl Host {
    /// A host with the device of `cfg`; its GIDs are the addresses it
    /// answers for (ARP for the IPv4 ones, Neighbor Discovery for the IPv6
    /// ones), on its VLAN.
    pub fn new(cfg: DeviceConfig, neigh: NeighConfig) -> Result<Host, Error> {
        let ips: Vec<IpAddr> = cfg.gids.clone();
        let (mac, vlan) = (cfg.mac, cfg.vlan);
        Ok(Host {
            dev: Device::new(cfg)?,
            neigh: Neighbours::new(mac, ips, neigh).with_vlan(vlan),
        })
    }

    /// The MAC of `ip`, IPv4 or IPv6 (see [`Neighbours::lookup`]).
    pub fn lookup(&mut self, ip: impl Into<IpAddr>, now: Instant) -> Lookup {
        self.neigh.lookup(ip, now)
    }

    /// The MAC of this host.
    pub fn mac(&self) -> MacAddr {
        self.dev.config().mac
    }
}

impl Endpoint for Host {
    fn handle(&mut self, now: Instant, frame: &[u8]) {
        if !self.neigh.handle(now, frame) {
            self.dev.handle(now, frame);
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.neigh
            .poll_transmit(buf)
            .or_else(|| self.dev.poll_transmit(now, buf))
    }

    fn handle_parts(&mut self, now: Instant, head: &[u8], payload: &[u8], tail: &[u8]) -> bool {
        // ARP and Neighbor Discovery never come in parts.
        self.dev.handle_parts(now, head, payload, tail)
    }

    fn poll_transmit_parts(&mut self, now: Instant, buf: &mut [u8]) -> Option<TxFrame> {
        match self.neigh.poll_transmit(buf) {
            Some(len) => Some(TxFrame { len, lent: None }),
            None => self.dev.poll_transmit_parts(now, buf),
        }
    }

    fn lent(&self, l: &Lent) -> Option<(&dyn core::any::Any, &[u8])> {
        Endpoint::lent(&self.dev, l)
    }

    fn prefetches(&self) -> bool {
        self.dev.prefetches()
    }

    fn prefetch(&self, frame_head: &[u8]) {
        self.dev.prefetch(frame_head)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.neigh.poll_timeout(), self.dev.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.neigh.poll_timeout().is_some_and(|t| t <= now) {
            self.neigh.handle_timeout(now);
        }
        if self.dev.poll_timeout().is_some_and(|t| t <= now) {
            self.dev.handle_timeout(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{loopback, Burst};
    use crate::host::pump::pump;
    use crate::transport::connect::{connect_qp, ConnectParams};
    use crate::transport::{
        Access, MrSpec, Payload, QpCaps, RecvWr, SendOp, SendWr, Sge, Wc, WcStatus,
    };

    /// Two hosts that know only each other's IP: ARP finds the MACs over
    /// the port, then the QPs connect and a SEND crosses.
    #[test]
    fn two_hosts_resolve_each_other_by_arp_then_talk_rc() {
        let (mut pa, mut pb) = loopback::pair(64, 4352);
        let (ia, ib) = (
            core::net::Ipv4Addr::new(198, 18, 0, 1),
            core::net::Ipv4Addr::new(198, 18, 0, 2),
        );
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let nc = NeighConfig::default();
        let mut a = Host::new(DeviceConfig::new(ma, ia.into()), nc.clone()).unwrap();
        let mut b = Host::new(DeviceConfig::new(mb, ib.into()), nc).unwrap();
        let (mut qa_out, mut qb_out) = (Burst::new(), Burst::new());
        let mut now = Instant::from_nanos(1);
        let mac_b = loop {
            if let Lookup::Found(m) = a.lookup(ib, now) {
                break m;
            }
            pump(&mut a, &mut pa, now, &mut qa_out);
            pump(&mut b, &mut pb, now, &mut qb_out);
            now += crate::time::Duration::from_micros(1);
            assert!(now < Instant::from_nanos(1_000_000), "no ARP answer");
        };
        assert_eq!(mac_b, mb);
        // b learnt a's MAC from the request.
        assert_eq!(b.lookup(ia, now), Lookup::Found(ma));

        let setup = |d: &mut Device| {
            let pd = d.alloc_pd();
            let cq = d.create_cq(16).unwrap();
            let mr = d.reg_mr(MrSpec::new(pd, 4096, Access::ALL)).unwrap();
            let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            (cq, mr, qp)
        };
        let (cqa, mra, qpa) = setup(&mut a.dev);
        let (cqb, mrb, qpb) = setup(&mut b.dev);
        let p = ConnectParams::default();
        connect_qp(&mut a.dev, qpa, qpb, mac_b, ib.into(), &p, 1, 2).unwrap();
        connect_qp(&mut b.dev, qpb, qpa, ma, ia.into(), &p, 2, 1).unwrap();
        a.dev.mr_mut(mra.lkey).unwrap()[..5].copy_from_slice(b"hello");
        let rsge = Sge {
            addr: mrb.addr,
            length: 64,
            lkey: mrb.lkey,
        };
        b.dev
            .post_recv(
                qpb,
                RecvWr {
                    wr_id: 1,
                    sges: smallvec::smallvec![rsge],
                },
            )
            .unwrap();
        let sge = Sge {
            addr: mra.addr,
            length: 5,
            lkey: mra.lkey,
        };
        a.dev
            .post_send(qpa, SendWr::new(2, SendOp::Send, Payload::sge(sge)))
            .unwrap();
        let mut wcs: Vec<Wc> = Vec::new();
        for _ in 0..100 {
            pump(&mut a, &mut pa, now, &mut qa_out);
            pump(&mut b, &mut pb, now, &mut qb_out);
            a.dev.poll_cq(cqa, 4, &mut wcs);
            b.dev.poll_cq(cqb, 4, &mut wcs);
            if wcs.len() == 2 {
                break;
            }
        }
        assert_eq!(wcs.len(), 2, "{wcs:?}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(&b.dev.mr(mrb.lkey).unwrap()[..5], b"hello");
        assert_eq!(a.neigh.counters().requests_sent, 1);
        assert_eq!(b.neigh.counters().replies_sent, 1);
    }
}
