//! Every out-of-band TCP message the Linux tools sent in the captures of
//! `tests/vectors/` (rdma-core's ibv_*_pingpong and perftest 4.5, port
//! 18515) reads with `ferroce::tools::oob` and is written back byte for byte.

use etherparse::{SlicedPacket, TransportSlice};
use ferroce::pcap;
use ferroce::tools::oob::{perftest, pingpong};
use std::path::Path;

/// The TCP payloads to or from port 18515 of a capture, in order.
fn oob_payloads(file: &Path) -> Vec<Vec<u8>> {
    let mut r = pcap::open(file).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let Ok(p) = SlicedPacket::from_ethernet(rec.data) else {
            continue;
        };
        if let Some(TransportSlice::Tcp(t)) = p.transport {
            if (t.source_port() == 18515 || t.destination_port() == 18515)
                && !t.payload().is_empty()
            {
                out.push(t.payload().to_vec());
            }
        }
    }
    out
}

#[test]
fn every_out_of_band_message_of_the_captures_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    names.sort();
    for file in names {
        let perftest = file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ib_");
        for m in oob_payloads(&file) {
            let what = match (perftest, m.len()) {
                (_, 5) => {
                    assert_eq!(&m[..], pingpong::DONE, "{file:?}");
                    "done"
                }
                (false, pingpong::MSG_LEN) => {
                    let d = pingpong::Dest::parse(&m).unwrap();
                    assert_eq!(d.emit().to_vec(), m, "{file:?}");
                    "pingpong dest"
                }
                (true, perftest::KEYS_LEN) => {
                    let k = perftest::Keys::parse(&m).unwrap();
                    assert_eq!(k.emit().to_vec(), m, "{file:?}");
                    "perftest keys"
                }
                (true, perftest::VERSION_LEN) => {
                    let v = perftest::parse_version(&m).unwrap();
                    assert_eq!(perftest::version(&format!("{v:.2}")).to_vec(), m);
                    "perftest version"
                }
                (true, 2) => {
                    let mtu = perftest::parse_mtu(&m).unwrap();
                    assert_eq!(perftest::mtu(mtu).to_vec(), m);
                    "perftest mtu"
                }
                (true, 4) => {
                    let v = perftest::parse_int(&m).unwrap();
                    assert_eq!(perftest::int(v).to_vec(), m);
                    "perftest int"
                }
                // The results exchange (doubles and longs, 8 bytes).
                (true, 8) => "perftest result",
                (_, n) => panic!("{file:?}: an out-of-band message of {n} bytes"),
            };
            *seen.entry(what).or_default() += 1;
        }
    }
    println!("{seen:?}");
    for what in [
        "done",
        "pingpong dest",
        "perftest keys",
        "perftest version",
        "perftest mtu",
        "perftest int",
    ] {
        assert!(seen.get(what).copied().unwrap_or(0) > 0, "no {what} seen");
    }
}
