//! The out-of-band TCP connection of the interop tools (rdma-core's
//! `ibv_rc_pingpong`, perftest), with the port kept alive while it waits:
//! the peer may be resolving our MAC by ARP, or, as a passive bandwidth
//! server, we must answer its WRITEs and READs while we wait for its next
//! message.
//!
//! Both tools exchange fixed-size messages with the client writing first
//! (perftest's `ctx_xchg_data_ethernet`, rc_pingpong's
//! `pp_client_exch_dest`); each message leaves in one `write`, since
//! perftest reads each with a single `read` of exactly its size.

use crate::backend::Backend;
use crate::time::Duration;
use crate::verbs::{Context, Qp};
use anyhow::{bail, Context as _, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

/// A pseudo-random 24-bit first PSN (`lrand48() & 0xffffff` in the C
/// tools), different for each `salt` (e.g. a QP's index).
pub fn random_psn(salt: u32) -> u32 {
    crate::verbs::cm::random_psn(salt)
}

/// How long the peer must have sent nothing on our QPs before a tool's
/// port goes away: more than three of the tools' 67 ms ACK timeouts.
pub const LINGER_QUIET: Duration = Duration::from_millis(250);
/// The longest a tool lingers after its run.
pub const LINGER_MAX: Duration = Duration::from_secs(3);

/// Keeps the port answering after a run until the peer has been quiet on
/// `qps` for [`LINGER_QUIET`] (at most [`LINGER_MAX`]). Our last ACK may
/// be lost: the peer then sends its last packets again after its ACK
/// timeout, and a duplicate must be acknowledged again (IBTA §9.7.5.1.1),
/// or the peer's retries run out after we have gone.
pub fn linger<B: Backend>(ctx: &mut Context<B>, qps: &[&Qp]) {
    let rcvd = |ctx: &Context<B>| -> u64 {
        qps.iter()
            .filter_map(|q| ctx.qp_counters(q).ok())
            .map(|c| c.rcvd_pkts)
            .sum()
    };
    let start = ctx.now();
    loop {
        let before = rcvd(ctx);
        ctx.progress_until(LINGER_QUIET, |_| false);
        if rcvd(ctx) == before || ctx.now() - start >= LINGER_MAX {
            return;
        }
    }
}

/// The connection to the peer tool: TCP, or (perftest's `-R`) a control
/// QP connected by RDMA-CM ([`super::cm_link`]).
pub struct Channel {
    s: Link,
    client: bool,
    /// How long one wait for the peer may last.
    limit: Duration,
}

enum Link {
    Tcp(TcpStream),
    Cm(Box<super::cm_link::CmLink>),
}

/// Pumps `ctx` until `step` gives a value, for at most `limit`.
pub fn until<B: Backend, T>(
    ctx: &mut Context<B>,
    limit: Duration,
    what: &str,
    mut step: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let mut got = None;
    ctx.progress_until(limit, |_| match step() {
        Ok(None) => false,
        r => {
            got = Some(r);
            true
        }
    });
    match got {
        Some(Ok(Some(v))) => Ok(v),
        Some(Err(e)) => Err(e),
        _ => bail!("{what} in {limit}"),
    }
}

impl Channel {
    /// The server's side: one connection (the tools' servers take exactly
    /// one client) on `listener` when the caller bound one (e.g. to port
    /// 0, so that runs side by side never meet on a port), else on `port`
    /// of every address. Port 0 there is any free port, said on stderr
    /// (`listening on TCP port N`) for the client to be told.
    pub fn accept<B: Backend>(
        ctx: &mut Context<B>,
        listener: Option<&TcpListener>,
        port: u16,
        limit: Duration,
    ) -> Result<Channel> {
        let own;
        let l = match listener {
            Some(l) => l,
            None => {
                own = TcpListener::bind(("0.0.0.0", port))
                    .with_context(|| format!("listening on TCP port {port}"))?;
                if port == 0 {
                    eprintln!("listening on TCP port {}", own.local_addr()?.port());
                }
                &own
            }
        };
        l.set_nonblocking(true)?;
        let s = until(ctx, limit, "no client connected", || match l.accept() {
            Ok((s, _)) => Ok(Some(s)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e).context("accepting the client"),
        })?;
        Channel::new(s, false, limit)
    }

    /// The client's side: connects to `addr`, trying again while the
    /// server is not listening yet (the C tools try once).
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

    /// Sets the longest wait; returns the previous one.
    pub fn limit(&mut self, limit: Duration) -> Duration {
        core::mem::replace(&mut self.limit, limit)
    }

    fn new(s: TcpStream, client: bool, limit: Duration) -> Result<Channel> {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        Ok(Channel {
            s: Link::Tcp(s),
            client,
            limit,
        })
    }

    /// The server's side over RDMA-CM: the first connection to `port`.
    pub fn cm_accept<B: Backend>(
        ctx: &mut Context<B>,
        port: u16,
        limit: Duration,
    ) -> Result<Channel> {
        let l = super::cm_link::CmLink::accept(ctx, port, limit)?;
        Ok(Channel {
            s: Link::Cm(Box::new(l)),
            client: false,
            limit,
        })
    }

    /// The client's side over RDMA-CM: connects to `addr`:`port`.
    pub fn cm_connect<B: Backend>(
        ctx: &mut Context<B>,
        addr: core::net::IpAddr,
        port: u16,
        gid_index: u8,
        limit: Duration,
    ) -> Result<Channel> {
        let l = super::cm_link::CmLink::connect(ctx, addr, port, gid_index, limit)?;
        Ok(Channel {
            s: Link::Cm(Box::new(l)),
            client: true,
            limit,
        })
    }

    /// Whether this is an RDMA-CM control channel (perftest's `-R`),
    /// whose messages are binary where TCP's are text.
    pub fn is_cm(&self) -> bool {
        matches!(self.s, Link::Cm(_))
    }

    /// Writes all of `msg`.
    pub fn write<B: Backend>(&mut self, ctx: &mut Context<B>, msg: &[u8]) -> Result<()> {
        let s = match &mut self.s {
            Link::Tcp(s) => s,
            Link::Cm(l) => return l.send(ctx, msg, self.limit),
        };
        let mut at = 0;
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

    /// Reads exactly `n` bytes.
    pub fn read<B: Backend>(&mut self, ctx: &mut Context<B>, n: usize) -> Result<Vec<u8>> {
        let s = match &mut self.s {
            Link::Tcp(s) => s,
            Link::Cm(l) => return l.recv(ctx, n, self.limit),
        };
        let mut b = vec![0u8; n];
        let mut got = 0;
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

    /// The end: stop writing, then read to the end (an older perftest
    /// writes an unread `"done\0"` in `ctx_close_connection`), so the
    /// connection closes without a reset.
    pub fn close<B: Backend>(self, ctx: &mut Context<B>) {
        let mut s = match self.s {
            Link::Tcp(s) => s,
            Link::Cm(l) => return l.close(ctx),
        };
        let _ = s.shutdown(Shutdown::Write);
        let s = &mut s;
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
