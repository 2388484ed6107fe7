//! `ferroce pingpong`: rdma-core's `ibv_rc_pingpong` on a ferroce host,
//! the same on the wire and in its TCP exchange, so that either end can be
//! the other tool.
//!
//! As `ibv_rc_pingpong` does (rdma-core `libibverbs/examples/rc_pingpong.c`):
//! a QP with local-write access only, a random 24-bit first PSN, `rx_depth`
//! receives posted (and topped up), SEND messages of `size` bytes of 0x7b;
//! the client sends first, each side sends its next message once its last
//! send and a receive have completed; `iters` each way. Connection:
//! path MTU as asked, `min_rnr_timer` 12, `max_dest_rd_atomic` 1, timeout
//! 14, `retry_cnt` 7, `rnr_retry` 7, `max_rd_atomic` 1. The exchange is
//! [`crate::oob::pingpong`]: the client writes its address, reads the
//! server's, writes `done`; the server reads, connects, writes, reads
//! `done`. The peer's MAC comes from ARP.

use super::host::Host;
use super::neigh::{Lookup, NeighConfig};
use super::rc::{connect_qp, pump, ConnectParams};
use crate::backend::{Backend, Burst};
use crate::oob::{gid_of, ip_of, pingpong};
use crate::time::{Clock, Duration, Instant};
use crate::transport::{
    Access, DeviceConfig, MrSpec, Mtu, Payload, QpCaps, QpCounters, RecvWr, SendOp, SendWr, Sge,
    Vlan, WcStatus,
};
use crate::wire::MacAddr;
use anyhow::{bail, ensure, Context, Result};
use core::net::{IpAddr, Ipv4Addr};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// The byte `ibv_rc_pingpong` fills its buffer with.
pub const FILL: u8 = 0x7b;

/// What to run (`ibv_rc_pingpong`'s options and defaults).
#[derive(Debug, Clone)]
pub struct PingpongOpts {
    /// `-s`: bytes per message.
    pub size: u32,
    /// `-n`: messages each way.
    pub iters: u32,
    /// `-m`: path MTU.
    pub mtu: Mtu,
    /// `-r`: receives posted.
    pub rx_depth: u32,
    /// `-p`: the TCP port of the exchange.
    pub tcp_port: u16,
    /// Give up after this long (the exchange and the run each).
    pub timeout: std::time::Duration,
    /// The port's 802.1Q VLAN (RoCE and ARP frames tagged), if any.
    pub vlan: Option<Vlan>,
}

impl Default for PingpongOpts {
    fn default() -> PingpongOpts {
        PingpongOpts {
            size: 4096,
            iters: 1000,
            mtu: Mtu::Mtu1024,
            rx_depth: 500,
            tcp_port: 18515,
            timeout: std::time::Duration::from_secs(30),
            vlan: None,
        }
    }
}

/// Which end.
#[derive(Debug, Clone)]
pub enum Role {
    /// Waits for a client on the TCP port (of every address).
    Server,
    /// Connects to the server at this address (TCP).
    Client(IpAddr),
}

/// What happened.
#[derive(Debug, Clone)]
pub struct PingpongReport {
    pub local: pingpong::Dest,
    pub remote: pingpong::Dest,
    pub elapsed: Duration,
    pub counters: QpCounters,
    /// Messages received whose bytes were not all 0x7b.
    pub bad_payloads: u32,
}

impl PingpongReport {
    /// `ibv_rc_pingpong`'s lines.
    pub fn print(&self, opts: &PingpongOpts, out: &mut dyn Write) -> std::io::Result<()> {
        let secs = self.elapsed.as_secs_f64();
        let bytes = opts.size as u64 * opts.iters as u64 * 2;
        writeln!(
            out,
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            bytes,
            secs,
            bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
        )?;
        writeln!(
            out,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            opts.iters,
            secs,
            secs * 1e6 / opts.iters.max(1) as f64
        )
    }
}

/// `ibv_rc_pingpong`'s address line.
pub fn address_line(which: &str, d: &pingpong::Dest) -> String {
    let gid = match ip_of(&d.gid) {
        IpAddr::V4(v4) => format!("::ffff:{v4}"),
        IpAddr::V6(v6) => v6.to_string(),
    };
    // "local address:" takes one more space, to line up with "remote".
    let sep = if which.len() < 6 { "  " } else { " " };
    format!(
        "  {which} address:{sep}LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {gid}",
        d.lid, d.qpn, d.psn
    )
}

/// A pseudo-random 24-bit PSN (`lrand48() & 0xffffff` in the C tool).
fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ (std::process::id() as u64) << 32;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32) & 0xFF_FFFF
}

/// A host on its port, kept alive (frames in and out, ARP answered) while
/// the tool waits for the TCP exchange or for an ARP answer.
struct Live<'a, B: Backend> {
    host: Host,
    port: &'a mut B,
    pending: Burst<B::Buf>,
    clock: &'a dyn Clock,
    limit: Duration,
}

impl<B: Backend> Live<'_, B> {
    /// One round of frames at the clock's now.
    fn pump(&mut self) {
        let now = self.clock.now();
        pump(&mut self.host, self.port, now, &mut self.pending);
    }

    /// Pumps until `step` gives a value, for at most `limit`; `what` names
    /// what did not come.
    fn until<T>(
        &mut self,
        what: &str,
        mut step: impl FnMut(&mut Host, Instant) -> Result<Option<T>>,
    ) -> Result<T> {
        let end = self.clock.now() + self.limit;
        loop {
            let now = self.clock.now();
            if let Some(v) = step(&mut self.host, now)? {
                return Ok(v);
            }
            if now > end {
                bail!("{what} in {}", self.limit);
            }
            self.pump();
        }
    }

    /// Reads exactly `n` bytes of the exchange (the peer may be resolving
    /// our MAC meanwhile: ARP must be answered).
    fn read(&mut self, s: &mut TcpStream, n: usize) -> Result<Vec<u8>> {
        s.set_nonblocking(true)?;
        let mut b = vec![0u8; n];
        let mut got = 0;
        self.until("no message from the peer", |_, _| {
            while got < n {
                match s.read(&mut b[got..]) {
                    Ok(0) => bail!("the peer closed the TCP connection after {got} of {n} bytes"),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("reading from the peer's TCP connection"),
                }
            }
            Ok(Some(()))
        })?;
        s.set_nonblocking(false)?;
        Ok(b)
    }

    /// Accepts one connection.
    fn accept(&mut self, l: &TcpListener) -> Result<TcpStream> {
        l.set_nonblocking(true)?;
        let s = self.until("no client", |_, _| match l.accept() {
            Ok((s, _)) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::yield_now();
                Ok(None)
            }
            Err(e) => Err(e).context("accepting the client"),
        })?;
        s.set_nonblocking(false)?;
        Ok(s)
    }

    /// The MAC of `ip`, by ARP.
    fn resolve(&mut self, ip: Ipv4Addr) -> Result<MacAddr> {
        self.until(
            &format!("no ARP answer from {ip}"),
            |host, now| match host.lookup(ip, now) {
                Lookup::Found(m) => Ok(Some(m)),
                Lookup::Failed => bail!("no ARP answer from {ip}"),
                Lookup::Pending => Ok(None),
            },
        )
    }
}

/// Runs one end on `port` with our `mac` and `ip`, printing the address
/// lines to `out`; the caller prints the report.
pub fn run<B: Backend>(
    port: &mut B,
    clock: &dyn Clock,
    mac: MacAddr,
    ip: Ipv4Addr,
    role: &Role,
    opts: &PingpongOpts,
    out: &mut dyn Write,
) -> Result<PingpongReport> {
    ensure!(opts.size > 0, "-s: the message size must be positive");
    ensure!(opts.iters > 0, "-n: at least one iteration");
    ensure!(opts.rx_depth >= 2, "-r: rx_depth must be at least 2");
    let limit = Duration::from_nanos(opts.timeout.as_nanos() as u64);
    let mut live = Live {
        host: Host::new(
            DeviceConfig {
                vlan: opts.vlan,
                ..DeviceConfig::new(mac, ip.into())
            },
            NeighConfig::default(),
        )?,
        port,
        pending: Burst::new(),
        clock,
        limit,
    };
    let dev = &mut live.host.dev;
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(opts.rx_depth as usize + 2)?;
    let mr = dev.reg_mr(MrSpec {
        pd,
        len: opts.size as usize,
        access: Access::LOCAL_WRITE,
        addr: None,
        key: None,
    })?;
    dev.mr_mut(mr.lkey).context("our region")?.fill(FILL);
    let caps = QpCaps {
        max_send_wr: 1,
        max_recv_wr: opts.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCaps::default()
    };
    let qpn = dev.create_qp(pd, cq, cq, caps)?;
    let local = pingpong::Dest {
        lid: 0,
        qpn,
        psn: random_psn(),
        gid: gid_of(ip.into()),
    };
    let params = ConnectParams {
        mtu: opts.mtu,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        access: Access::LOCAL_WRITE,
        ..ConnectParams::default()
    };
    let connect = |live: &mut Live<'_, B>, remote: &pingpong::Dest| -> Result<()> {
        let IpAddr::V4(rip) = ip_of(&remote.gid) else {
            bail!("the peer's GID {:?} is not an IPv4 one", ip_of(&remote.gid));
        };
        let rmac = live.resolve(rip)?;
        connect_qp(
            &mut live.host.dev,
            qpn,
            remote.qpn,
            rmac,
            rip.into(),
            &params,
            local.psn,
            remote.psn,
        )?;
        Ok(())
    };
    let remote = match role {
        Role::Client(server) => {
            let addr = SocketAddr::new(*server, opts.tcp_port);
            let mut s = TcpStream::connect_timeout(&addr, opts.timeout)
                .with_context(|| format!("connecting to {addr}"))?;
            s.write_all(&local.emit())?;
            let remote = pingpong::Dest::parse(&live.read(&mut s, pingpong::MSG_LEN)?)?;
            s.write_all(pingpong::DONE)?;
            connect(&mut live, &remote)?;
            remote
        }
        Role::Server => {
            let l = TcpListener::bind(("0.0.0.0", opts.tcp_port))
                .with_context(|| format!("listening on TCP port {}", opts.tcp_port))?;
            let mut s = live.accept(&l)?;
            let remote = pingpong::Dest::parse(&live.read(&mut s, pingpong::MSG_LEN)?)?;
            connect(&mut live, &remote)?;
            s.write_all(&local.emit())?;
            let done = live.read(&mut s, pingpong::DONE.len())?;
            ensure!(done == pingpong::DONE, "the client did not say done");
            remote
        }
    };
    writeln!(out, "{}", address_line("local", &local))?;
    writeln!(out, "{}", address_line("remote", &remote))?;

    // The ping-pong of rc_pingpong.c's main loop.
    const RECV: u64 = 1;
    const SEND: u64 = 2;
    let dev = &mut live.host.dev;
    let rsge = Sge {
        addr: mr.addr,
        length: opts.size,
        lkey: mr.lkey,
    };
    let post_recv = |dev: &mut crate::transport::Device| {
        dev.post_recv(
            qpn,
            RecvWr {
                wr_id: RECV,
                sges: vec![rsge],
            },
        )
    };
    let post_send = |dev: &mut crate::transport::Device| {
        dev.post_send(
            qpn,
            SendWr::new(SEND, SendOp::Send, Payload::Sges(vec![rsge])),
        )
    };
    let mut routs = 0u32;
    for _ in 0..opts.rx_depth {
        post_recv(dev)?;
        routs += 1;
    }
    let start = clock.now();
    let end = start + limit;
    let mut pending_ops = RECV;
    if matches!(role, Role::Client(_)) {
        post_send(dev)?;
        pending_ops |= SEND;
    }
    let (mut rcnt, mut scnt, mut bad) = (0u32, 0u32, 0u32);
    let mut wcs = Vec::with_capacity(16);
    while rcnt < opts.iters || scnt < opts.iters {
        let now = clock.now();
        if now > end {
            bail!(
                "timed out after {} with {scnt} of {} sent and {rcnt} received",
                limit,
                opts.iters
            );
        }
        live.pump();
        wcs.clear();
        live.host.dev.poll_cq(cq, 16, &mut wcs);
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status,
                    wc.status as u32,
                    wc.wr_id
                );
            }
            match wc.wr_id {
                SEND => scnt += 1,
                RECV => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < opts.rx_depth {
                            post_recv(&mut live.host.dev)?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                    let data = live.host.dev.mr(mr.lkey).context("our region")?;
                    if wc.byte_len != opts.size || data.iter().any(|&b| b != FILL) {
                        bad += 1;
                    }
                }
                id => bail!("Completion for unknown wr_id {id}"),
            }
            pending_ops &= !wc.wr_id;
            if scnt < opts.iters && pending_ops == 0 {
                post_send(&mut live.host.dev)?;
                pending_ops = RECV | SEND;
            }
        }
    }
    let elapsed = clock.now() - start;
    // Let the last ACK leave before the port goes away.
    let settle = clock.now() + Duration::from_millis(50);
    while clock.now() < settle {
        live.pump();
    }
    Ok(PingpongReport {
        local,
        remote,
        elapsed,
        counters: live.host.dev.qp_counters(qpn).copied().unwrap_or_default(),
        bad_payloads: bad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;

    struct Wall(std::time::Instant);
    impl Clock for Wall {
        fn now(&self) -> Instant {
            Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
        }
    }

    /// Both ends in one process, each on its own thread and end of an
    /// in-process link, the exchange over TCP on localhost.
    #[test]
    fn server_and_client_ping_pong_over_a_loopback_link() {
        let (mut pa, mut pb) = loopback::pair(1024, 4352);
        let port = 20000 + (std::process::id() % 20000) as u16;
        let opts = PingpongOpts {
            size: 4096,
            iters: 200,
            tcp_port: port,
            timeout: std::time::Duration::from_secs(20),
            ..PingpongOpts::default()
        };
        let o2 = opts.clone();
        let server = std::thread::spawn(move || {
            let mut out = Vec::new();
            let r = run(
                &mut pa,
                &Wall(std::time::Instant::now()),
                MacAddr([2, 0, 0, 0, 0, 1]),
                Ipv4Addr::new(198, 18, 0, 1),
                &Role::Server,
                &o2,
                &mut out,
            );
            (r, String::from_utf8(out).unwrap())
        });
        // Let the server listen first.
        let mut client = None;
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut out = Vec::new();
            match run(
                &mut pb,
                &Wall(std::time::Instant::now()),
                MacAddr([2, 0, 0, 0, 0, 2]),
                Ipv4Addr::new(198, 18, 0, 2),
                &Role::Client("127.0.0.1".parse().unwrap()),
                &opts,
                &mut out,
            ) {
                Ok(r) => {
                    client = Some((r, String::from_utf8(out).unwrap()));
                    break;
                }
                Err(e) if format!("{e:#}").contains("connecting") => continue,
                Err(e) => panic!("client: {e:#}"),
            }
        }
        let (rc, out_c) = client.expect("the client never connected");
        let (rs, out_s) = server.join().unwrap();
        let rs = rs.unwrap();
        assert_eq!(rc.remote, rs.local);
        assert_eq!(rs.remote, rc.local);
        assert_eq!((rc.bad_payloads, rs.bad_payloads), (0, 0));
        assert_eq!(rc.counters.rdma_sends, 200);
        assert_eq!(rs.counters.rdma_recvs, 200);
        assert!(
            out_c.starts_with("  local address:  LID 0x0000, QPN 0x"),
            "{out_c}"
        );
        assert!(out_s.contains("GID ::ffff:198.18.0.2"), "{out_s}");
        let mut lines = Vec::new();
        rc.print(&opts, &mut lines).unwrap();
        let text = String::from_utf8(lines).unwrap();
        assert!(text.starts_with("1638400 bytes in "), "{text}");
        assert!(text.contains("200 iters in "), "{text}");
        // The address lines as ibv_rc_pingpong prints them (its output in
        // tests/vectors' README: rc_pingpong.client.txt).
        let d = pingpong::Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xf365fe,
            gid: gid_of("198.18.0.3".parse().unwrap()),
        };
        assert_eq!(
            address_line("local", &d),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0xf365fe, GID ::ffff:198.18.0.3"
        );
        assert!(address_line("remote", &d).starts_with("  remote address: LID 0x0000,"));
    }
}
