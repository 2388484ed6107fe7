//! The simulator's one source of randomness: xoshiro256** (Blackman and
//! Vigna), its 256-bit state filled from a 64-bit seed by splitmix64. Small,
//! fast, and the same stream on every machine for a given seed.

/// A seeded pseudo-random generator (xoshiro256**). Not for cryptography.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

/// One step of splitmix64: advances `state` and returns the next output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole stream follows from `seed` (any value,
    /// zero included: splitmix64 never yields the all-zero state from it).
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// A uniform value in [0, 1), with 53 random bits (every value is a
    /// multiple of 2^-53).
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in [0, n), without modulo bias; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        loop {
            let x = self.next_u64();
            let r = x % n;
            // Accept x only if the whole block of n values it falls in,
            // [x - r, x - r + n - 1], fits in u64: then every residue is
            // equally likely.
            if x - r <= u64::MAX - (n - 1) {
                return r;
            }
        }
    }

    /// True with probability `p` (never for p <= 0, always for p >= 1).
    /// Draws nothing when `p` is 0, so a fault-free setting leaves the
    /// stream untouched.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit_f64() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_outputs_for_seed_zero() {
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(&mut s), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let xa: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn unit_and_below_stay_in_range_and_spread() {
        let mut r = Rng::new(1);
        let mut buckets = [0u32; 10];
        let mut sum = 0.0;
        for _ in 0..10_000 {
            let u = r.unit_f64();
            assert!((0.0..1.0).contains(&u));
            sum += u;
            let k = r.below(10);
            assert!(k < 10);
            buckets[k as usize] += 1;
        }
        assert!((sum / 10_000.0 - 0.5).abs() < 0.02);
        assert!(
            buckets.iter().all(|&n| (850..1150).contains(&n)),
            "{buckets:?}"
        );
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
        assert!(r.below(u64::MAX) < u64::MAX);
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }
}
