//! ferroce's capability tail: how two ferroce endpoints tell each other,
//! inside a standard message, which non-standard features they ask for
//! (INT telemetry, selective repeat), without another peer ever seeing a
//! difference.
//!
//! The tail is the last four bytes of a field that a standard peer fills
//! with zeros and never reads: perftest's version message after its NUL
//! (perftest reads it with `atof`), and the end of the RDMA-CM private
//! data of a REQ or REP (IBTA §12.6.5 / §12.6.8: 92 and 196 bytes, of
//! which the consumer's own data comes first). A message whose tail lacks
//! the marker comes from a peer that is not ferroce, or did not ask:
//! nothing non-standard is then sent to it.
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..3 | marker `0xF5 'f' 'r'` |
//! | 3 | capability bits: [`INT`], [`SELECTIVE_REPEAT`] |

/// The tail's length.
pub const LEN: usize = 4;
/// Its first three bytes.
pub const MARKER: [u8; 3] = [0xF5, b'f', b'r'];
/// INT telemetry on the QPs (`super::int`), asked by a rate control that
/// needs it.
pub const INT: u8 = 1;
/// Selective repeat on the QPs (`super::sr`).
pub const SELECTIVE_REPEAT: u8 = 2;

/// Writes the tail with `bits` into the last [`LEN`] bytes of `field`;
/// a field shorter than that is left alone.
pub fn emit(field: &mut [u8], bits: u8) {
    if let Some(start) = field.len().checked_sub(LEN) {
        field[start..start + 3].copy_from_slice(&MARKER);
        field[start + 3] = bits;
    }
}

/// The bits of a ferroce peer's tail at the end of `field`; `None` when
/// the field does not end with one (any other peer).
pub fn parse(field: &[u8]) -> Option<u8> {
    let tail = field.get(field.len().checked_sub(LEN)?..)?;
    (tail[..3] == MARKER).then_some(tail[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_round_trips_and_zeros_or_short_fields_are_no_tail() {
        let mut f = [0u8; 56];
        assert_eq!(parse(&f), None);
        emit(&mut f, INT | SELECTIVE_REPEAT);
        assert_eq!(&f[52..], &[0xF5, b'f', b'r', 3]);
        assert_eq!(parse(&f), Some(3));
        assert_eq!(parse(&f[..3]), None);
        let mut short = [0u8; 3];
        emit(&mut short, INT);
        assert_eq!(short, [0; 3]);
    }
}
