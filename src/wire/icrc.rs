//! The invariant CRC of a RoCE v2 packet (IBTA Vol. 1 A17 §17.3.3, CA17-22;
//! reference B.7).
//!
//! CRC-32 (IEEE 802.3, as in Ethernet's FCS) over: 8 bytes of 0xFF standing
//! for the LRH, then the IP header with its variant fields set to ones (IPv4:
//! TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit), the
//! UDP header with checksum 0xFFFF, the BTH with its byte 4 (FECN, BECN,
//! reserved) set to 0xFF, and everything after the BTH up to the ICRC. The
//! result goes on the wire least-significant byte first.

const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const BTH_LEN: usize = 12;

/// Why an ICRC cannot be computed over the given bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IcrcError {
    #[error("packet too short for IP + UDP + BTH + ICRC")]
    /// Shorter than IP + UDP + BTH + the 4-byte ICRC.
    Truncated,
    #[error("not an IPv4 header with IHL 5 nor an IPv6 header")]
    /// Neither an IPv4 header with IHL 5 nor an IPv6 header.
    BadIpHeader,
}

/// The CRC of the 8 bytes of 0xFF that stand for the LRH: where every ICRC
/// computation starts (rxe's seed 0xdebb20e3 is this value inverted).
const LRH_CRC: u32 = 0x2144_DF1C;

/// A CRC state at [`LRH_CRC`], built once: crc32fast asks the CPU which
/// kernel to use each time it builds one (some 37 instructions, 2% of a
/// 64 B SEND's four ICRCs), and a copy of a built one keeps its answer.
static START: std::sync::LazyLock<crc32fast::Hasher> =
    std::sync::LazyLock::new(|| crc32fast::Hasher::new_with_initial(LRH_CRC));

/// The bytes the ICRC sets to ones, for a packet starting with an IPv4 or
/// an IPv6 header: OR-ed into the first 48 / 64 bytes (IP + UDP + BTH,
/// rounded up to 16) before the CRC runs over them.
const fn mask(ip_len: usize) -> [u8; 64] {
    let mut m = [0u8; 64];
    if ip_len == IPV4_LEN {
        m[1] = 0xFF; // DSCP + ECN
        m[8] = 0xFF; // TTL
        m[10] = 0xFF; // header checksum
        m[11] = 0xFF;
    } else {
        m[0] = 0x0F; // traffic class, high nibble ...
        m[1] = 0xFF; // ... its low nibble and the flow label
        m[2] = 0xFF;
        m[3] = 0xFF;
        m[7] = 0xFF; // hop limit
    }
    m[ip_len + 6] = 0xFF; // UDP checksum
    m[ip_len + 7] = 0xFF;
    m[ip_len + UDP_LEN + 4] = 0xFF; // BTH resv8a: FECN, BECN, reserved
    m
}

const MASK_V4: [u8; 64] = mask(IPV4_LEN);
const MASK_V6: [u8; 64] = mask(IPV6_LEN);

/// The ICRC of a packet that starts at its IP header and ends just before
/// its ICRC (so `ip_packet` excludes the 4 ICRC bytes).
#[inline]
pub fn compute(ip_packet: &[u8]) -> Result<u32, IcrcError> {
    compute_parts(ip_packet, &[])
}

/// How long a CRC run must be for crc32fast's widest kernel, which folds
/// 256-byte blocks.
const LONG: usize = 2048;
/// The most bytes [`tail_moved`] moves.
const TAIL_MAX: usize = 256;

/// How many bytes of a long contiguous run after the masked head to take
/// into the head's CRC call: crc32fast's widest kernel finishes 128 bytes
/// or more past its last 256-byte block with a second pass of its own (a
/// 4 KiB payload behind a 48-byte head leaves 248), which costs more than
/// folding them into the head's call, copied beside it.
fn tail_moved(run: usize, last: bool) -> usize {
    let left = run % 256;
    if last && run >= LONG + TAIL_MAX && left >= 128 {
        left
    } else {
        0
    }
}

/// The ICRC of a packet held in parts: `ip_head` from the IP header on
/// (at least through the BTH), then each of `rest` in order (a payload
/// lent from registered memory, its pad bytes), all without the ICRC.
/// The same value as [`compute`] over the parts laid end to end.
#[inline]
pub fn compute_parts(ip_head: &[u8], rest: &[&[u8]]) -> Result<u32, IcrcError> {
    let (ip_len, mask, head_len) = match ip_head.first().map(|b| b >> 4) {
        Some(4) if ip_head[0] == 0x45 => (IPV4_LEN, &MASK_V4, 48),
        Some(6) => (IPV6_LEN, &MASK_V6, 64),
        Some(_) => return Err(IcrcError::BadIpHeader),
        None => return Err(IcrcError::Truncated),
    };
    let n = ip_head.len();
    if n < ip_len + UDP_LEN + BTH_LEN {
        return Err(IcrcError::Truncated);
    }
    let mut h = START.clone();
    let mut head = [0u8; 64];
    if n >= head_len {
        for (i, out) in head[..head_len].chunks_exact_mut(16).enumerate() {
            let at = 16 * i;
            let p = u128::from_ne_bytes(ip_head[at..at + 16].try_into().unwrap_or([0; 16]));
            let m = u128::from_ne_bytes(mask[at..at + 16].try_into().unwrap_or([0; 16]));
            out.copy_from_slice(&(p | m).to_ne_bytes());
        }
        let moved = tail_moved(n - head_len, rest.is_empty());
        if moved == 0 {
            h.update(&head[..head_len]);
        } else {
            let mut long = [0u8; 64 + TAIL_MAX];
            long[..64].copy_from_slice(&head);
            long[head_len..head_len + TAIL_MAX]
                .copy_from_slice(&ip_head[head_len..head_len + TAIL_MAX]);
            h.update(&long[..head_len + moved]);
        }
        h.update(&ip_head[head_len + moved..]);
    } else {
        // Every masked field lies in the IP, UDP and BTH headers, which
        // `ip_head` holds.
        for (o, (p, m)) in head.iter_mut().zip(ip_head.iter().zip(mask)) {
            *o = p | m;
        }
        h.update(&head[..n]);
    }
    for part in rest {
        h.update(part);
    }
    Ok(h.finalize())
}

/// The reflected CRC-32 polynomial of IEEE 802.3, which the ICRC uses.
const POLY: u32 = 0xEDB8_8320;

/// The CRC's step for one byte: `BYTE[i]` is the register after a byte
/// that leaves `i` in its low eight bits.
const BYTE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = i as u32;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
            bit += 1;
        }
        t[i] = r;
        i += 1;
    }
    t
};

/// Where, within IP + UDP + BTH, the packets of one connected QP differ
/// from each other outside the masked bytes: the IP length (IPv4 total
/// length, IPv6 payload length), the UDP length, and the BTH's opcode, its
/// SE / MigReq / pad / TVer byte, its AckReq byte and its PSN (the fields a
/// [`crate::wire::template::HeaderTemplate`] patches).
const VARIES_V4: [usize; 10] = [2, 3, 24, 25, 28, 29, 36, 37, 38, 39];
const VARIES_V6: [usize; 10] = [4, 5, 44, 45, 48, 49, 56, 57, 58, 59];
/// IP + UDP + BTH: the bytes a [`HeadFold`] stands for.
const FIXED_V4: usize = IPV4_LEN + UDP_LEN + BTH_LEN;
const FIXED_V6: usize = IPV6_LEN + UDP_LEN + BTH_LEN;

/// For each position of `at` in a run of `len` bytes and each value of
/// the byte there, what that byte adds to the CRC register at the run's
/// end: the CRC, from a zero register, of the byte and the zero bytes
/// after it. The CRC is linear, so a run's register is that of the run
/// with those bytes zero, XOR-ed with each byte's share.
const fn shares<const N: usize>(at: [usize; N], len: usize) -> [[u32; 256]; N] {
    let mut t = [[0u32; 256]; N];
    let mut k = 0;
    while k < N {
        let mut x = 0;
        while x < 256 {
            let mut r = BYTE[x];
            let mut zeros = len - 1 - at[k];
            while zeros > 0 {
                r = BYTE[(r & 0xFF) as usize] ^ (r >> 8);
                zeros -= 1;
            }
            t[k][x] = r;
            x += 1;
        }
        k += 1;
    }
    t
}

static SHARES_V4: [[u32; 256]; 10] = shares(VARIES_V4, FIXED_V4);
static SHARES_V6: [[u32; 256]; 10] = shares(VARIES_V6, FIXED_V6);

/// The ICRC's invariant prefix of one connected QP's packets, folded once:
/// the CRC of the LRH's ones and of the QP's IP, UDP and BTH bytes with
/// the fields that vary per packet set to zero. A packet's ICRC then
/// starts from this state, adds the share of each of its ten varying
/// bytes (a table lookup each) and runs the CRC over the rest only
/// (extension headers, payload, pad), instead of over 48 (IPv4) or 60
/// (IPv6) more bytes. Valid for packets whose IP, UDP and BTH bytes agree
/// with the ones it was built from everywhere but in the masked bytes and
/// the ten that vary: every packet of the QP's header template (a
/// received packet's sender may change others, the IPv4 identification
/// among them, so a receiver computes the ICRC whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadFold {
    state: u32,
    v6: bool,
}

impl HeadFold {
    /// The fold of the packets whose headers `ip_head` starts with (from
    /// the IP header through at least the BTH).
    pub fn new(ip_head: &[u8]) -> Result<HeadFold, IcrcError> {
        let (v6, fixed, varies): (bool, usize, &[usize]) = match ip_head.first() {
            Some(0x45) => (false, FIXED_V4, &VARIES_V4),
            Some(b) if b >> 4 == 6 => (true, FIXED_V6, &VARIES_V6),
            Some(_) => return Err(IcrcError::BadIpHeader),
            None => return Err(IcrcError::Truncated),
        };
        let mut head = [0u8; FIXED_V6];
        let head = &mut head[..fixed];
        head.copy_from_slice(ip_head.get(..fixed).ok_or(IcrcError::Truncated)?);
        for &at in varies {
            head[at] = 0;
        }
        // The masked bytes are ones whatever the packet holds.
        let state = compute_parts(head, &[])?;
        Ok(HeadFold { state, v6 })
    }

    /// The ICRC of one of the QP's packets: `ip_head` from its IP header
    /// on (through at least the BTH), then each of `rest` in order, all
    /// without the ICRC. The same value as [`compute_parts`] for a packet
    /// the fold is valid for.
    #[inline]
    pub fn compute(&self, ip_head: &[u8], rest: &[&[u8]]) -> Result<u32, IcrcError> {
        if self.v6 {
            fold::<FIXED_V6>(self.state, &VARIES_V6, &SHARES_V6, ip_head, rest)
        } else {
            fold::<FIXED_V4>(self.state, &VARIES_V4, &SHARES_V4, ip_head, rest)
        }
    }
}

/// Past this many bytes after the BTH (an ACK's AETH is 4, a RETH 16), a
/// [`HeadFold`] hands the rest to crc32fast; up to it, a byte at a time
/// costs fewer instructions than setting up crc32fast's state.
const SHORT_REST: usize = 16;

/// [`HeadFold::compute`] for one IP version: `FIXED` header bytes, the
/// positions that vary in them and each position's shares. Written for
/// constants, so the ten lookups unroll without bounds checks.
#[inline(always)]
fn fold<const FIXED: usize>(
    state: u32,
    varies: &[usize; 10],
    shares: &[[u32; 256]; 10],
    ip_head: &[u8],
    rest: &[&[u8]],
) -> Result<u32, IcrcError> {
    let Some((head, after)) = ip_head.split_first_chunk::<FIXED>() else {
        return Err(IcrcError::Truncated);
    };
    let mut state = state;
    for (share, &at) in shares.iter().zip(varies) {
        state ^= share[usize::from(head[at])];
    }
    if rest.is_empty() && after.len() <= SHORT_REST {
        // The CRC's register is the complement of the running value.
        let mut r = !state;
        for &b in after {
            r = BYTE[usize::from(r as u8 ^ b)] ^ (r >> 8);
        }
        return Ok(!r);
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(after);
    for part in rest {
        h.update(part);
    }
    Ok(h.finalize())
}

/// Whether the last 4 bytes of `ip_packet_with_icrc` are its ICRC.
pub fn verify(ip_packet_with_icrc: &[u8]) -> Result<bool, IcrcError> {
    let n = ip_packet_with_icrc.len();
    if n < 4 {
        return Err(IcrcError::Truncated);
    }
    let want = compute(&ip_packet_with_icrc[..n - 4])?;
    Ok(ip_packet_with_icrc[n - 4..] == want.to_le_bytes())
}

/// Computes the ICRC of `ip_packet_with_icrc` (everything but its last 4
/// bytes) and writes it into those 4 bytes, least-significant byte first.
pub fn seal(ip_packet_with_icrc: &mut [u8]) -> Result<u32, IcrcError> {
    let n = ip_packet_with_icrc.len();
    if n < 4 {
        return Err(IcrcError::Truncated);
    }
    let (body, tail) = ip_packet_with_icrc.split_at_mut(n - 4);
    let c = compute(body)?;
    tail.copy_from_slice(&c.to_le_bytes());
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of a classic little-endian pcap (enough for the vectors here).
    fn pcap_frames(bytes: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut off = 24;
        while off + 16 <= bytes.len() {
            let incl = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
            out.push(&bytes[off + 16..off + 16 + incl]);
            off += 16 + incl;
        }
        out
    }

    #[test]
    fn rxe_frames_verify_and_a_flipped_bit_does_not() {
        let pcap = include_bytes!("../../tests/vectors/rc_pingpong.pcap");
        let roce: Vec<&[u8]> = pcap_frames(pcap)
            .into_iter()
            .filter(|f| {
                f.len() > 42
                    && f[12..14] == [8, 0]
                    && f[23] == 17
                    && f[36..38] == 4791u16.to_be_bytes()
            })
            .collect();
        assert!(roce.len() >= 10, "found {} RoCE frames", roce.len());
        for f in &roce {
            assert_eq!(verify(&f[14..]), Ok(true));
            // Variant fields are masked: a changed TTL or ECN keeps the ICRC.
            let mut g = f[14..].to_vec();
            g[8] = 3;
            g[1] |= 3;
            assert_eq!(verify(&g), Ok(true));
            // An invariant byte is covered.
            let last = g.len() - 5;
            g[last] ^= 1;
            assert_eq!(verify(&g), Ok(false));
        }
    }

    #[test]
    fn the_lrh_seed_is_the_crc_of_eight_ones() {
        assert_eq!(crc32fast::hash(&[0xFF; 8]), LRH_CRC);
        assert_eq!(!LRH_CRC, 0xdebb20e3);
    }

    #[test]
    fn a_packet_in_parts_has_the_icrc_of_the_whole() {
        let pcap = include_bytes!("../../tests/vectors/rc_pingpong.pcap");
        let mut seen = 0;
        for f in pcap_frames(pcap) {
            if f.len() < 14 + 64 + 4 || f[12..14] != [8, 0] || f[23] != 17 {
                continue;
            }
            let ip = &f[14..f.len() - 4];
            let whole = compute(ip).unwrap();
            for cut in [40, 47, 48, 49, 60, ip.len()] {
                let (head, rest) = ip.split_at(cut);
                let (mid, end) = rest.split_at(rest.len() / 2);
                assert_eq!(compute_parts(head, &[mid, end]), Ok(whole), "cut at {cut}");
            }
            seen += 1;
        }
        assert!(seen > 0);
        assert_eq!(
            compute_parts(&[0x45; 30], &[&[0; 64]]),
            Err(IcrcError::Truncated)
        );
    }

    #[test]
    fn every_head_length_gives_the_icrc_of_the_masked_bytes() {
        // The definition, byte by byte: the mask OR-ed over the headers,
        // the CRC over the LRH's ones and everything after.
        for (first, mask) in [(0x45u8, &MASK_V4), (0x60, &MASK_V6)] {
            let mut packet: Vec<u8> = (0..160u32).map(|i| (i * 37 + 11) as u8).collect();
            packet[0] = first;
            let mut masked = packet.clone();
            for (b, m) in masked.iter_mut().zip(mask.iter()) {
                *b |= m;
            }
            let mut lrh = vec![0xFF; 8];
            lrh.extend_from_slice(&masked);
            let want = crc32fast::hash(&lrh);
            // IP + UDP + BTH at least.
            let min = if first == 0x45 { IPV4_LEN } else { IPV6_LEN } + UDP_LEN + BTH_LEN;
            for cut in min..=packet.len() {
                let (head, rest) = packet.split_at(cut);
                assert_eq!(
                    compute_parts(head, &[rest]),
                    Ok(want),
                    "{first:#x}, cut {cut}"
                );
            }
        }
    }

    #[test]
    fn every_long_packet_gives_the_icrc_of_the_masked_bytes() {
        // Whole packets (the receive and copy-send case) long enough for
        // the CRC's widest kernel, every length past 4 KiB of payload:
        // each remainder past a 256-byte block, moved into the head's
        // call or not.
        for (first, mask) in [(0x45u8, &MASK_V4), (0x60, &MASK_V6)] {
            let all: Vec<u8> = (0..4400u32).map(|i| (i * 37 + 11) as u8).collect();
            for len in 2000..=all.len() {
                let mut packet = all[..len].to_vec();
                packet[0] = first;
                let mut lrh = vec![0xFF; 8];
                lrh.extend(
                    packet
                        .iter()
                        .zip(mask.iter().chain([0u8; 4400].iter()))
                        .map(|(b, m)| b | m),
                );
                assert_eq!(
                    compute(&packet),
                    Ok(crc32fast::hash(&lrh)),
                    "{first:#x}, {len} B"
                );
            }
        }
    }

    #[test]
    fn a_folded_head_gives_the_icrc_of_every_packet_of_its_qp() {
        // Packets that differ from the one the fold was built from in the
        // ten varying bytes and in the masked ones, with rests of every
        // shape: the ICRC computed whole.
        let mut seed = 0x1234_5678u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as u8
        };
        for (first, fixed, varies, mask) in [
            (0x45u8, FIXED_V4, &VARIES_V4[..], &MASK_V4),
            (0x6A, FIXED_V6, &VARIES_V6[..], &MASK_V6),
        ] {
            let mut base: Vec<u8> = (0..4200u32).map(|i| (i * 37 + 11) as u8).collect();
            base[0] = first;
            let fold = HeadFold::new(&base[..fixed]).unwrap();
            let short = fixed + SHORT_REST;
            for len in [
                fixed,
                fixed + 1,
                fixed + 4,
                short,
                short + 1,
                fixed + 64,
                fixed + 116,
                4200,
            ] {
                for _ in 0..40 {
                    let mut p = base[..len].to_vec();
                    for &at in varies.iter() {
                        p[at] = next();
                    }
                    for (b, &m) in p.iter_mut().zip(mask.iter()) {
                        if m != 0 {
                            *b ^= next() & m;
                        }
                    }
                    let want = compute(&p).unwrap();
                    assert_eq!(fold.compute(&p, &[]), Ok(want), "{first:#x} {len} B");
                    let (head, rest) = p.split_at(fixed);
                    let (a, b) = rest.split_at(rest.len() / 3);
                    assert_eq!(fold.compute(head, &[a, b]), Ok(want));
                }
            }
            assert_eq!(
                fold.compute(&base[..fixed - 1], &[]),
                Err(IcrcError::Truncated)
            );
            // A byte outside the varying and masked ones is the QP's own:
            // a packet that changes it is not one the fold is for.
            let mut other = base[..fixed + 8].to_vec();
            other[fixed - 9] ^= 1; // in the BTH's destination QP
            assert_ne!(fold.compute(&other, &[]), compute(&other));
        }
        assert_eq!(HeadFold::new(&[0x45; 20]), Err(IcrcError::Truncated));
        assert_eq!(HeadFold::new(&[0x46; 60]), Err(IcrcError::BadIpHeader));
    }

    #[test]
    fn short_or_foreign_input_is_an_error() {
        assert_eq!(compute(&[]), Err(IcrcError::Truncated));
        assert_eq!(compute(&[0x45; 30]), Err(IcrcError::Truncated));
        assert_eq!(compute(&[0x46; 60]), Err(IcrcError::BadIpHeader));
        assert_eq!(verify(&[1, 2]), Err(IcrcError::Truncated));
    }
}
