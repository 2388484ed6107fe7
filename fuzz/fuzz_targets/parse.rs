//! Fuzzes `Frame::parse`: any input is parsed; an accepted frame is used
//! every way a caller may (ICRC check, length) and re-emitted from its
//! `Repr` and payload, which must succeed and parse back to the same frame
//! with a good ICRC.

#![no_main]

use ferroce::wire::Frame;
use libfuzzer_sys::fuzz_target;

/// Enough for any frame: the IP length fields are 16 bits.
const BIG: usize = 18 + 40 + 65_536;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = Frame::parse(data) else {
        return;
    };
    let _ = f.icrc_ok();
    let _ = f.icrc_expected();
    let _ = (f.ecn(), f.psn(), f.dest_qp(), f.ack_req(), f.opcode());
    assert_eq!(f.ecn(), f.repr().ip.ecn());
    assert_eq!(f.psn(), f.repr().bth.psn);
    let len = f.len();
    assert!(len <= data.len(), "len {len} beyond the input");
    let want = f.repr().frame_len(f.payload.len());
    let mut buf = vec![0u8; want.max(len).min(BIG)];
    let n = match f.repr().emit(f.payload, &mut buf) {
        Ok(n) => n,
        Err(e) => panic!("a parsed frame does not emit: {e}: {f:?}"),
    };
    assert_eq!(n, len, "re-emitted length");
    let g = match Frame::parse(&buf[..n]) {
        Ok(g) => g,
        Err(e) => panic!("the re-emitted frame does not parse: {e}: {f:?}"),
    };
    assert_eq!(g.repr(), f.repr());
    assert_eq!(g.payload, f.payload);
    assert_eq!(g.pad, f.pad);
    assert!(g.icrc_ok(), "the re-emitted frame's ICRC");
});
