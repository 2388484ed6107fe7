//! perftest's out-of-band TCP channel (`perftest_communication.c`), with
//! the port kept alive while it waits: the peer may be resolving our MAC
//! by ARP, or, as a passive bandwidth server, we must answer its WRITEs
//! and READs while we wait for its next message.
//!
//! Every exchange of perftest has the client write first, then read; the
//! server reads first, then writes (`ctx_xchg_data_ethernet`). Each
//! message leaves in one `write`, since perftest reads each with a single
//! `read` of exactly its size.

use crate::backend::Backend;
use crate::oob::perftest::{self as pt, Keys};
use crate::time::Duration;
use crate::verbs::Context;
use anyhow::{bail, Context as _, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

/// The connection to the peer tool.
pub struct Channel {
    s: TcpStream,
    client: bool,
    /// How long one wait for the peer may last.
    limit: Duration,
}

/// Pumps `ctx` until `step` gives a value, for at most `limit`.
fn until<B: Backend, T>(
    ctx: &mut Context<B>,
    limit: Duration,
    what: &str,
    mut step: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let end = ctx.now() + limit;
    loop {
        if let Some(v) = step()? {
            return Ok(v);
        }
        if ctx.now() > end {
            bail!("{what} in {limit}");
        }
        let st = ctx.progress();
        if st.rx == 0 && st.tx == 0 {
            std::thread::yield_now();
        }
    }
}

impl Channel {
    /// The server's side: one connection on `port` of every address
    /// (perftest's server takes exactly one client).
    pub fn accept<B: Backend>(ctx: &mut Context<B>, port: u16, limit: Duration) -> Result<Channel> {
        let l = TcpListener::bind(("0.0.0.0", port))
            .with_context(|| format!("listening on TCP port {port}"))?;
        l.set_nonblocking(true)?;
        let s = until(ctx, limit, "no client connected", || match l.accept() {
            Ok((s, _)) => Ok(Some(s)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e).context("accepting the client"),
        })?;
        Channel::new(s, false, limit)
    }

    /// The client's side: connects to `addr`, trying again while the
    /// server is not listening yet (perftest's client tries once).
    pub fn connect<B: Backend>(
        ctx: &mut Context<B>,
        addr: SocketAddr,
        limit: Duration,
    ) -> Result<Channel> {
        let s =
            until(
                ctx,
                limit,
                &format!("no server at {addr}"),
                || match TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)) {
                    Ok(s) => Ok(Some(s)),
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        Ok(None)
                    }
                    Err(e) if e.kind() == ErrorKind::TimedOut => Ok(None),
                    Err(e) => Err(e).with_context(|| format!("connecting to {addr}")),
                },
            )?;
        Channel::new(s, true, limit)
    }

    fn new(s: TcpStream, client: bool, limit: Duration) -> Result<Channel> {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        Ok(Channel { s, client, limit })
    }

    fn write<B: Backend>(&mut self, ctx: &mut Context<B>, msg: &[u8]) -> Result<()> {
        let mut at = 0;
        let s = &mut self.s;
        until(ctx, self.limit, "the peer took no data", || {
            while at < msg.len() {
                match s.write(&msg[at..]) {
                    Ok(0) => bail!("the peer closed the TCP connection"),
                    Ok(n) => at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("writing to the peer"),
                }
            }
            Ok(Some(()))
        })
    }

    fn read<B: Backend>(&mut self, ctx: &mut Context<B>, n: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        let mut got = 0;
        let s = &mut self.s;
        until(ctx, self.limit, "no message from the peer", || {
            while got < n {
                match s.read(&mut b[got..]) {
                    Ok(0) => bail!("the peer closed the TCP connection after {got} of {n} bytes"),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("reading from the peer"),
                }
            }
            Ok(Some(()))
        })?;
        Ok(b)
    }

    /// One exchange of `msg` for the peer's message of the same length.
    pub fn exchange<B: Backend>(&mut self, ctx: &mut Context<B>, msg: &[u8]) -> Result<Vec<u8>> {
        if self.client {
            self.write(ctx, msg)?;
            self.read(ctx, msg.len())
        } else {
            let r = self.read(ctx, msg.len())?;
            self.write(ctx, msg)?;
            Ok(r)
        }
    }

    /// One keys exchange (`ctx_hand_shake`): a QP's keys, or QP 0's as a
    /// barrier.
    pub fn keys<B: Backend>(&mut self, ctx: &mut Context<B>, mine: &Keys) -> Result<Keys> {
        let r = self.exchange(ctx, &mine.emit())?;
        Keys::parse(&r).context("the peer's keys")
    }

    /// Waits in a barrier for as long as the peer's run may take (the
    /// passive server's wait for the client to finish).
    pub fn barrier_after_run<B: Backend>(
        &mut self,
        ctx: &mut Context<B>,
        mine: &Keys,
        run_limit: Duration,
    ) -> Result<Keys> {
        let l = self.limit;
        self.limit = run_limit;
        let r = self.keys(ctx, mine);
        self.limit = l;
        r
    }

    /// One 8-byte value of the results exchange (`xchg_bw_reports`).
    pub fn exchange_u64<B: Backend>(&mut self, ctx: &mut Context<B>, v: u64) -> Result<u64> {
        let r = self.exchange(ctx, &v.to_be_bytes())?;
        Ok(u64::from_be_bytes(r[..8].try_into()?))
    }

    /// The end (`ctx_close_connection` on the peer): stop writing, then
    /// read to the end (an older perftest writes an unread `"done\0"`), so
    /// the connection closes without a reset.
    pub fn close<B: Backend>(mut self, ctx: &mut Context<B>) {
        let _ = self.s.shutdown(Shutdown::Write);
        let s = &mut self.s;
        let mut sink = [0u8; 64];
        let _ = until(ctx, Duration::from_millis(500), "no end", || {
            match s.read(&mut sink) {
                Ok(0) => Ok(Some(())),
                Ok(_) => Ok(None),
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
                Err(_) => Ok(Some(())),
            }
        });
    }
}

/// What the setup exchanges agreed on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agreed {
    /// The peer's version (`atof` of its string).
    pub peer_version: f64,
    /// max(ours, theirs): the buffer cycle (page size).
    pub cycle_buffer: u32,
    /// max(ours, theirs): the cache line.
    pub cache_line: u32,
    /// min(ours, theirs): the `ibv_mtu` value, 1..5.
    pub mtu: u8,
}

/// The setup every tool starts with: versions, system data, MTU
/// (`exchange_versions`, `check_sys_data`, `check_mtu`).
pub fn setup<B: Backend>(
    ch: &mut Channel,
    ctx: &mut Context<B>,
    cycle_buffer: u32,
    cache_line: u32,
    mtu: u8,
) -> Result<Agreed> {
    let v = ch.exchange(ctx, &pt::version(pt::VERSION))?;
    let peer_version = pt::parse_version(&v).context("the peer's version")?;
    if peer_version < 5.70 {
        bail!("the peer's perftest version {peer_version} is older than 5.70, which this exchange needs");
    }
    if (peer_version * 100.0).round() as i64 == 628 {
        bail!(
            "the peer is perftest {peer_version}, which always negotiates parameters in a 320-byte \
             message this tool does not speak; use a perftest other than 6.28"
        );
    }
    let cyc = pt::parse_int(&ch.exchange(ctx, &pt::int(cycle_buffer as i32))?)?;
    let cl = pt::parse_int(&ch.exchange(ctx, &pt::int(cache_line as i32))?)?;
    let m = pt::parse_mtu(&ch.exchange(ctx, &pt::mtu(mtu))?).context("the peer's MTU")?;
    Ok(Agreed {
        peer_version,
        cycle_buffer: cycle_buffer.max(cyc.max(0) as u32),
        cache_line: cache_line.max(cl.max(0) as u32),
        mtu: mtu.min(m),
    })
}
