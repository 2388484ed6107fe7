//! One port on several datapath lcores: software steering of received
//! frames to the datapath that owns their QP.
//!
//! A port opened with N queue pairs runs N datapaths ("shards"), each
//! polling its own queue pair with its own transport device, which owns
//! the QP numbers of its [`Shard`] (QPN mod N). A frame arrives on
//! whichever queue the NIC (RSS) or the peer picked, not necessarily its
//! QP's owner's: [`Steered`], wrapped around each queue, hands every frame
//! it receives for another shard to that shard through a lock-free ring
//! (one per shard, any shard may push into it), and takes what the others
//! handed it before polling its own queue. Transmit goes straight out on
//! the shard's own queue. There is no lock on the per-frame path: the
//! rings are `crossbeam_queue::ArrayQueue`s.
//!
//! - A RoCE frame goes to the owner of its BTH destination QP
//!   ([`crate::wire::frame::peek_dest_qp`], [`Shard::owner`]); QP0 and QP1
//!   (the CM's MADs) to shard 0.
//! - ARP and ICMPv6 (Neighbor Discovery) go to every shard: the one whose
//!   queue received the frame keeps it and the others get a copy, so that
//!   each shard's neighbour table learns the peers (only shard 0 answers
//!   requests: the others are set up not to,
//!   `crate::host::neigh::NeighConfig::answer`). Any other frame that is
//!   not RoCE stays with the shard that received it, whose device counts
//!   it (`not_roce`).
//! - A frame whose owner's ring is full is dropped and counted
//!   ([`SteerCounters::dropped`]), as a NIC drops on a full receive queue;
//!   the RC transport's retransmission recovers it.
//!
//! Frames keep their order per queue and shard: what a shard's own queue
//! gives it stays in order, and what one queue hands another arrives in
//! the order it was received.

#![deny(unsafe_code)]

use super::{Backend, Burst, FrameBuf};
use crate::wire::ethernet::{EthernetFrame, ETHERTYPE_ARP, ETHERTYPE_IPV6};
use crate::wire::frame::peek_dest_qp;
use crate::wire::ndp::NEXT_HEADER_ICMPV6;
use crate::wire::Shard;
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

/// Bursts one shard's ring holds (each up to [`super::BURST`] frames):
/// what the other shards may hand it between two of its polls.
pub const RING_DEPTH: usize = 64;

/// The rings between the shards of one port, one per shard. A shard
/// hands on what one poll of its queue gave it for another as one burst:
/// one push (and one pop) per burst, not per frame.
pub struct Steering<T> {
    rings: Vec<ArrayQueue<Burst<T>>>,
}

impl<T> Steering<T> {
    /// Rings for `count` shards, each of `depth` bursts.
    fn new(count: usize, depth: usize) -> Steering<T> {
        Steering {
            rings: (0..count).map(|_| ArrayQueue::new(depth.max(1))).collect(),
        }
    }
}

/// What one shard's steering did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// Frames this shard's queue received for another shard, handed on.
    pub handed_on: u64,
    /// Frames another shard handed this one.
    pub handed_in: u64,
    /// Frames that are not RoCE, copied to the other shards.
    pub copied: u64,
    /// Frames dropped because their owner's ring was full (or, for a
    /// copy, because no buffer was free).
    pub dropped: u64,
}

/// One shard's queue pair, with the steering of what it receives.
pub struct Steered<B: Backend> {
    queue: B,
    shard: Shard,
    steering: Arc<Steering<B::Buf>>,
    /// Own frames received but not yet taken (the caller's burst was full).
    carry: Burst<B::Buf>,
    /// The rest of a burst another shard handed this one.
    inbox: Burst<B::Buf>,
    /// Frames for each other shard, gathered while sorting a poll.
    outgoing: Vec<Burst<B::Buf>>,
    counters: SteerCounters,
}

/// Wraps the queue pairs of one port, one per shard: `queues[i]` becomes
/// shard `i` of `queues.len()`, with rings of `depth` bursts between them.
/// Errs unless 1 to [`Shard::MAX`] queues are given.
pub fn steer<B: Backend>(queues: Vec<B>, depth: usize) -> Result<Vec<Steered<B>>, String> {
    let count = queues.len() as u32;
    if Shard::new(count, 0).is_none() {
        return Err(format!(
            "a port is split over 1 to {} datapaths, not {count}",
            Shard::MAX
        ));
    }
    let steering = Arc::new(Steering::new(queues.len(), depth));
    Ok(queues
        .into_iter()
        .zip(0..)
        .map(|(queue, index)| Steered {
            queue,
            shard: Shard { count, index },
            steering: steering.clone(),
            carry: Burst::new(),
            inbox: Burst::new(),
            outgoing: (0..count).map(|_| Burst::new()).collect(),
            counters: SteerCounters::default(),
        })
        .collect())
}

impl<B: Backend> Steered<B> {
    /// Which shard this is.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// What its steering did so far.
    pub fn counters(&self) -> SteerCounters {
        self.counters
    }

    /// The queue pair it polls.
    pub fn queue(&self) -> &B {
        &self.queue
    }

    /// The queue pair, given back (frames still in its ring or carried
    /// are dropped).
    pub fn into_queue(self) -> B {
        self.queue
    }

    /// Gathers `f` for shard `to` (handed on when the burst is full or the
    /// poll sorted).
    fn hand(&mut self, to: u32, f: B::Buf) {
        let out = &mut self.outgoing[to as usize];
        out.push(f);
        if out.is_full() {
            self.flush(to as usize);
        }
    }

    /// Hands the frames gathered for shard `to` on as one burst; when its
    /// ring is full they are dropped and counted.
    fn flush(&mut self, to: usize) {
        let burst = core::mem::take(&mut self.outgoing[to]);
        let n = burst.len() as u64;
        match self.steering.rings[to].push(burst) {
            Ok(()) => self.counters.handed_on += n,
            Err(lost) => {
                self.counters.dropped += n;
                drop(lost);
            }
        }
    }

    /// Copies a frame that is not RoCE to every other shard.
    fn copy_to_others(&mut self, f: &B::Buf) {
        let me = self.shard;
        for to in (0..me.count).filter(|&i| i != me.index) {
            let copy = self.queue.alloc().and_then(|mut c| {
                c.append(f.len())?.copy_from_slice(f.data());
                Some(c)
            });
            match copy {
                Some(c) => {
                    self.counters.copied += 1;
                    self.hand(to, c);
                }
                None => self.counters.dropped += 1,
            }
        }
    }

    /// Sorts what the queue received: own frames into `carry`, the rest
    /// handed on.
    fn sort(&mut self, rx: &mut Burst<B::Buf>) {
        for f in rx.drain(..) {
            let owner = match peek_dest_qp(f.data()) {
                Some(qpn) => Shard::owner(qpn, self.shard.count),
                None => {
                    // ARP and ND: every shard gets it once, this one the
                    // original.
                    if is_neighbour(f.data()) {
                        self.copy_to_others(&f);
                    }
                    self.shard.index
                }
            };
            if owner == self.shard.index {
                self.carry.push(f);
            } else {
                self.hand(owner, f);
            }
        }
        for to in 0..self.outgoing.len() {
            if !self.outgoing[to].is_empty() {
                self.flush(to);
            }
        }
    }

    /// Moves carried own frames into `out`, as many as it has room for.
    fn take_carry(&mut self, out: &mut Burst<B::Buf>) {
        let n = self.carry.len().min(out.remaining_capacity());
        out.extend(self.carry.drain(..n));
    }
}

/// Whether a frame is ARP or ICMPv6 (which carries Neighbor Discovery):
/// what every shard's neighbour table learns from.
fn is_neighbour(head: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(head) else {
        return false;
    };
    match eth.ethertype() {
        ETHERTYPE_ARP => true,
        ETHERTYPE_IPV6 => eth.payload().get(6) == Some(&NEXT_HEADER_ICMPV6),
        _ => false,
    }
}

impl<B: Backend> Backend for Steered<B> {
    type Buf = B::Buf;

    /// Own frames carried from the last call first, then what the other
    /// shards handed this one, then the queue's own frames.
    fn rx_burst(&mut self, out: &mut Burst<B::Buf>) -> usize {
        let before = out.len();
        if self.shard.count == 1 {
            return self.queue.rx_burst(out);
        }
        self.take_carry(out);
        let n = self.inbox.len().min(out.remaining_capacity());
        out.extend(self.inbox.drain(..n));
        let ring = &self.steering.rings[self.shard.index as usize];
        while !out.is_full() {
            let Some(mut b) = ring.pop() else { break };
            self.counters.handed_in += b.len() as u64;
            let n = b.len().min(out.remaining_capacity());
            out.extend(b.drain(..n));
            // `out` is full now if anything is left: it waits in the inbox.
            self.inbox.extend(b);
        }
        // One poll of the queue per call, however its frames sort.
        if !out.is_full() {
            let mut rx = Burst::new();
            if self.queue.rx_burst(&mut rx) > 0 {
                self.sort(&mut rx);
                self.take_carry(out);
            }
        }
        out.len() - before
    }

    fn alloc(&mut self) -> Option<B::Buf> {
        self.queue.alloc()
    }

    fn tx_burst(&mut self, frames: &mut Burst<B::Buf>) -> usize {
        self.queue.tx_burst(frames)
    }

    fn tx_room(&self) -> usize {
        self.queue.tx_room()
    }

    fn free_burst(&mut self, frames: &mut Burst<B::Buf>) {
        self.queue.free_burst(frames)
    }

    fn can_lend(&self) -> bool {
        self.queue.can_lend()
    }

    fn attach(
        &mut self,
        frame: &mut B::Buf,
        head: usize,
        mem: &dyn core::any::Any,
        offset: usize,
        len: usize,
    ) -> bool {
        self.queue.attach(frame, head, mem, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback::{pair, LoopbackPort};
    use crate::wire::arp::ArpRepr;
    use crate::wire::ethernet::ETHERTYPE_VLAN;
    use crate::wire::opcode::Op;
    use crate::wire::{BthRepr, FrameRepr, IpRepr, MacAddr, Opcode};

    /// A SEND Only frame to `qpn` carrying `tag`.
    fn roce(qpn: u32, tag: u8) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::rc(Op::SendOnly),
            qpn,
            crate::wire::Psn::new(u32::from(tag)),
        );
        let r = FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            IpRepr::v4(
                [198, 18, 0, 1].into(),
                [198, 18, 0, 2].into(),
                0,
                Default::default(),
            ),
            49152,
            bth,
        );
        let mut b = vec![0u8; 128];
        let n = r.emit(&[tag; 8], &mut b).unwrap();
        b.truncate(n);
        b
    }

    fn send(far: &mut LoopbackPort, frames: &[Vec<u8>]) {
        let mut out = Burst::new();
        for f in frames {
            let mut b = far.alloc().unwrap();
            b.append(f.len()).unwrap().copy_from_slice(f);
            out.push(b);
        }
        assert_eq!(far.tx_burst(&mut out), frames.len());
    }

    fn recv(s: &mut Steered<LoopbackPort>) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        loop {
            let mut rx = Burst::new();
            if s.rx_burst(&mut rx) == 0 {
                return got;
            }
            got.extend(rx.iter().map(|f| f.data().to_vec()));
        }
    }

    /// Three shards: frames arriving on any queue reach their QP's owner,
    /// in the order each queue received them; QP1 goes to shard 0; ARP
    /// reaches every shard once.
    #[test]
    fn every_frame_reaches_its_qps_shard_once_and_in_order() {
        let (ends, mut far): (Vec<_>, Vec<_>) = (0..3).map(|_| pair(256, 256)).unzip();
        let mut s = steer(ends, 8).unwrap();
        // Queue 0 receives frames for QPs 0x12 (shard 0), 0x13 (1), 0x14 (2)
        // and QP1; queue 2 frames for 0x13.
        let q0: Vec<Vec<u8>> = (0..30u8)
            .map(|i| roce(0x12 + u32::from(i % 3), i))
            .collect();
        send(&mut far[0], &q0);
        send(&mut far[0], &[roce(1, 99)]);
        let q2: Vec<Vec<u8>> = (100..105u8).map(|i| roce(0x13, i)).collect();
        send(&mut far[2], &q2);
        let mut arp = [0u8; 64];
        let n = ArpRepr::request(
            MacAddr([2, 0, 0, 0, 0, 9]),
            [198, 18, 0, 9].into(),
            [198, 18, 0, 2].into(),
        )
        .emit_frame(&mut arp)
        .unwrap();
        send(&mut far[1], &[arp[..n].to_vec()]);
        // Other traffic that is not RoCE (UDP to port 53) stays where it
        // arrived: with shard 2, uncopied.
        let mut dns = roce(0x12, 7);
        dns[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
        send(&mut far[2], std::slice::from_ref(&dns));
        // Poll each shard in turn until nothing moves.
        let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
        for _ in 0..4 {
            for (i, sh) in s.iter_mut().enumerate() {
                got[i].extend(recv(sh));
            }
        }
        let qp = |f: &Vec<u8>| peek_dest_qp(f);
        let want1: Vec<Vec<u8>> = q0
            .iter()
            .filter(|f| qp(f) == Some(0x13))
            .cloned()
            .chain(q2.clone())
            .collect();
        let roce1: Vec<Vec<u8>> = got[1].iter().filter(|f| qp(f).is_some()).cloned().collect();
        assert_eq!(roce1, want1);
        let roce0: Vec<Option<u32>> = got[0].iter().map(qp).filter(Option::is_some).collect();
        assert_eq!(roce0.len(), 11);
        assert!(roce0.contains(&Some(1)), "QP1 goes to shard 0");
        let roce2 = got[2].iter().filter(|f| qp(f) == Some(0x14)).count();
        assert_eq!(roce2, 10);
        for (i, g) in got.iter().enumerate() {
            let arps = g.iter().filter(|f| f[..] == arp[..n]).count();
            assert_eq!(arps, 1, "shard {i} sees the ARP request once");
            let other = g.iter().filter(|f| **f == dns).count();
            assert_eq!(other, usize::from(i == 2), "shard {i}");
        }
        assert_eq!(s[0].counters().handed_on, 20);
        assert_eq!(s[1].counters().copied, 2);
        assert_eq!(s[2].counters().handed_on, 5);
        assert_eq!(s[1].counters().handed_in, 15);
        assert!(s.iter().all(|x| x.counters().dropped == 0));
    }

    /// A full ring drops and counts; what it held still arrives, in
    /// order, however many polls it takes to take it.
    #[test]
    fn a_full_ring_drops_and_counts() {
        let (a0, mut f0) = pair(256, 256);
        let (a1, _f1) = pair(256, 256);
        let mut s = steer(vec![a0, a1], 1).unwrap();
        let frames: Vec<Vec<u8>> = (0..40u8).map(|i| roce(0x13, i)).collect();
        send(&mut f0, &frames[..32]);
        send(&mut f0, &frames[32..]);
        // One poll takes 32 frames (a full burst, handed on at once) and
        // a second the other 8, which find the ring full.
        assert!(recv(&mut s[0]).is_empty());
        assert!(recv(&mut s[0]).is_empty());
        assert_eq!(s[0].counters().dropped, 8);
        assert_eq!(s[0].counters().handed_on, 32);
        let mut out = Burst::new();
        out.push(s[1].alloc().unwrap());
        assert_eq!(s[1].rx_burst(&mut out), 31, "as many as there is room for");
        assert_eq!(recv(&mut s[1]).len(), 1, "the rest from the inbox");
        assert_eq!(s[1].counters().handed_in, 32);
        assert!(steer(Vec::<LoopbackPort>::new(), 4).is_err());
    }

    /// ARP and ICMPv6, tagged or not, are neighbour frames; IPv4, other
    /// IPv6 and a short head are not.
    #[test]
    fn neighbour_frames_are_arp_and_icmpv6() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        assert!(is_neighbour(&f));
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14 + 6] = NEXT_HEADER_ICMPV6;
        assert!(is_neighbour(&f));
        f[14 + 6] = 17;
        assert!(!is_neighbour(&f));
        let mut t = vec![0u8; 64];
        t[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        t[16..18].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        t[18 + 6] = NEXT_HEADER_ICMPV6;
        assert!(is_neighbour(&t));
        assert!(!is_neighbour(&t[..20]));
        assert!(!is_neighbour(&roce(0x12, 1)));
        assert!(!is_neighbour(&[]));
    }
}
