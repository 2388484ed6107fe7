//! Fuzzes `CmMad::parse` and `CmaHdr::parse`: any input is parsed; an
//! accepted MAD re-emits, and the emitted bytes parse back to the same
//! MAD (the same for the rdma_cm private-data header).

#![no_main]

use ferroce::wire::cma::CmaHdr;
use ferroce::wire::mad::{CmMad, MAD_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = CmaHdr::parse(data) {
        let mut out = [0u8; CmaHdr::LEN];
        assert_eq!(h.emit(&mut out), Ok(CmaHdr::LEN));
        assert_eq!(CmaHdr::parse(&out), Ok(h));
    }
    let Ok(m) = CmMad::parse(data) else {
        return;
    };
    let mut out = [0u8; MAD_LEN];
    match m.emit(&mut out) {
        Ok(n) => assert_eq!(n, MAD_LEN),
        Err(e) => panic!("a parsed MAD does not emit: {e}: {m:?}"),
    }
    assert_eq!(CmMad::parse(&out), Ok(m));
});
