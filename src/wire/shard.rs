//! Which of several datapaths of one port owns a QP number.
//!
//! An engine may run one port on N datapath lcores, each with its own
//! queue pair and its own transport device ("shard"). The QP number space
//! (24 bits, IBTA §9.2 BTH DestQP) is split between them by one rule,
//! used both where a shard allocates a QP number and where a received
//! frame is steered to its owner: **QP n belongs to shard n mod N**, and
//! the management QPs 0 and 1 (§13.5.1: QP0, and QP1 of the CM's MADs)
//! belong to shard 0. (Frames that are not RoCE, ARP and Neighbor
//! Discovery, have no QP: the steering gives them to every shard,
//! `crate::backend::steer`.)

/// One datapath's share of a port's QP numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// How many datapaths share the port (at least 1).
    pub count: u32,
    /// This one's index, in `0..count`.
    pub index: u32,
}

impl Default for Shard {
    /// The only datapath of its port: every QP number is its own.
    fn default() -> Shard {
        Shard { count: 1, index: 0 }
    }
}

impl Shard {
    /// The most datapaths a port may be split over.
    pub const MAX: u32 = 64;

    /// Shard `index` of `count`; `None` unless `1 <= count <= MAX` and
    /// `index < count`.
    pub fn new(count: u32, index: u32) -> Option<Shard> {
        ((1..=Shard::MAX).contains(&count) && index < count).then_some(Shard { count, index })
    }

    /// The index of the shard that owns QP `qpn` among `count`.
    #[inline]
    pub fn owner(qpn: u32, count: u32) -> u32 {
        if qpn < 2 || count <= 1 {
            0
        } else {
            qpn % count
        }
    }

    /// Whether this shard owns QP `qpn`.
    #[inline]
    pub fn owns(&self, qpn: u32) -> bool {
        Shard::owner(qpn, self.count) == self.index
    }

    /// The first QP number from `from` on that this shard owns.
    pub fn first_from(&self, from: u32) -> u32 {
        let mut n = from;
        while !self.owns(n) {
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_qpn_has_one_owner_and_management_qps_belong_to_shard_0() {
        for count in 1..=5 {
            for qpn in 0..200u32 {
                let owners: Vec<u32> = (0..count)
                    .filter(|&i| Shard::new(count, i).unwrap().owns(qpn))
                    .collect();
                assert_eq!(owners.len(), 1, "qpn {qpn} of {count}");
                assert_eq!(owners[0], Shard::owner(qpn, count));
            }
            assert_eq!(Shard::owner(1, count), 0);
            assert_eq!(Shard::owner(0, count), 0);
        }
        assert_eq!(Shard::new(0, 0), None);
        assert_eq!(Shard::new(2, 2), None);
        assert_eq!(Shard::new(Shard::MAX + 1, 0), None);
        let s = Shard::new(4, 3).unwrap();
        assert_eq!(s.first_from(0x11), 0x13);
        assert_eq!(Shard::default().first_from(0x11), 0x11);
    }
}
