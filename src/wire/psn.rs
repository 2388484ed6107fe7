//! Packet sequence numbers: 24 bits that wrap (IBTA §9.7.1), compared as a
//! signed 24-bit difference the way rxe's `psn_compare` does (reference
//! B.6), and the BTH pad count (IBTA §9.2: pad bytes align the payload to
//! 4 bytes).

use core::fmt;

const MASK: u32 = 0x00FF_FFFF;

/// A 24-bit packet sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct Psn(u32);

impl Psn {
    /// Half the PSN space: the size of the duplicate and the "ahead" windows
    /// of a responder (IBTA §9.7.5.1.1; reference B.6).
    pub const HALF: u32 = 1 << 23;
    /// The largest PSN, 2^24 - 1.
    pub const MAX: Psn = Psn(MASK);

    /// The low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK)
    }

    /// The PSN as a number in 0 ..= 2^24 - 1.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK)
    }

    /// `self - n`, wrapping at 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK)
    }

    /// The signed distance `self - other` in -2^23 ..= 2^23 - 1: positive
    /// when `self` is after `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Strictly after `other` in sequence space.
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// Strictly before `other` in sequence space.
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` lies in `[start, start + len)`, modulo 2^24.
    pub const fn in_range(self, start: Psn, len: u32) -> bool {
        (self.0.wrapping_sub(start.0) & MASK) < len
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Pad bytes after a payload of `len` bytes: `(-len) mod 4`.
pub const fn pad_count(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps_at_24_bits() {
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert_eq!(Psn::MAX.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0).diff(Psn::MAX), 1);
        assert_eq!(Psn::MAX.diff(Psn::new(0)), -1);
        assert!(Psn::new(2).after(Psn::MAX));
        assert!(Psn::MAX.before(Psn::new(2)));
        // The edges of the half windows.
        let e = Psn::new(100);
        assert_eq!(e.add(Psn::HALF - 1).diff(e), (Psn::HALF - 1) as i32);
        assert_eq!(e.sub(Psn::HALF).diff(e), -(Psn::HALF as i32));
        assert!(Psn::new(3).in_range(Psn::MAX, 5));
        assert!(!Psn::new(4).in_range(Psn::MAX, 5));
    }

    #[test]
    fn pad_aligns_to_four() {
        let pads: Vec<u8> = (0..8).map(pad_count).collect();
        assert_eq!(pads, [0, 3, 2, 1, 0, 3, 2, 1]);
    }
}
