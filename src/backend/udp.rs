//! The kernel UDP socket backend: every Ethernet frame travels whole as the
//! payload of one UDP datagram between two sockets (127.0.0.1 in the
//! benchmarks). It runs the same transport over the kernel's network stack,
//! the baseline that shows what kernel bypass buys (`ferroce bench e2e`).
//!
//! `rx_burst` receives with non-blocking `recv` calls until the socket is
//! empty or the burst is full; `tx_burst` sends one datagram per frame and
//! keeps the frames the socket would block on. Buffers are heap arrays of a
//! fixed capacity, recycled through a free list: frames sent, and received
//! frames given back with `free_burst`, are reused, so a steady run
//! allocates nothing per frame. (The loopback's `VecBuf` zero-fills what it
//! appends; here, as in an mbuf, appended bytes are whatever the buffer
//! held, which saves a memset of the whole frame room per frame.)

use super::{Backend, Burst, FrameBuf};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

/// A heap frame buffer with a fixed capacity. Its bytes are initialised
/// once, when it is made; `append` only moves the end.
#[derive(Debug, Clone)]
pub struct UdpBuf {
    bytes: Box<[u8]>,
    len: usize,
}

impl UdpBuf {
    /// A buffer for frames of up to `cap` bytes (it holds one byte more, so
    /// that a datagram too large for it is seen, not silently cut).
    pub fn with_capacity(cap: usize) -> UdpBuf {
        UdpBuf {
            bytes: vec![0u8; cap + 1].into_boxed_slice(),
            len: 0,
        }
    }

    fn cap(&self) -> usize {
        self.bytes.len() - 1
    }
}

impl FrameBuf for UdpBuf {
    fn data(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
    fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let start = self.len;
        if start + len > self.cap() {
            return None;
        }
        self.len += len;
        Some(&mut self.bytes[start..self.len])
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// What a [`UdpPort`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UdpStats {
    /// Datagrams received as frames.
    pub rx_frames: u64,
    /// Bytes of the frames received.
    pub rx_bytes: u64,
    /// Frames sent as datagrams.
    pub tx_frames: u64,
    /// Bytes of the frames sent.
    pub tx_bytes: u64,
    /// `send` calls that would have blocked (the frame stayed queued).
    pub tx_would_block: u64,
    /// Frames dropped because `send` failed (for instance the peer's
    /// socket is gone: ECONNREFUSED).
    pub tx_errors: u64,
    /// `recv` failures other than "nothing to read".
    pub rx_errors: u64,
    /// Datagrams larger than the buffer capacity, dropped.
    pub rx_too_long: u64,
    /// Buffers allocated (not taken from the free list).
    pub buffers_made: u64,
}

/// One end of a UDP link: a socket connected to its peer's.
#[derive(Debug)]
pub struct UdpPort {
    sock: UdpSocket,
    buf_cap: usize,
    free: Vec<UdpBuf>,
    stats: UdpStats,
}

/// Most buffers a port keeps on its free list.
const FREE_MAX: usize = 4096;

/// A UDP socket bound to `local`, with kernel buffers of `socket_buf` bytes
/// when given.
fn bound(local: SocketAddr, socket_buf: Option<usize>) -> io::Result<UdpSocket> {
    let domain = socket2::Domain::for_address(local);
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if let Some(n) = socket_buf {
        s.set_recv_buffer_size(n)?;
        s.set_send_buffer_size(n)?;
    }
    s.bind(&local.into())?;
    Ok(s.into())
}

impl UdpPort {
    /// A non-blocking socket bound to `local` and connected to `peer`, for
    /// frames of up to `buf_cap` bytes. `socket_buf` asks the kernel for
    /// receive and send buffers of that many bytes (it caps them at
    /// `net.core.rmem_max` / `wmem_max`); `None` keeps its defaults.
    pub fn connect(
        local: SocketAddr,
        peer: SocketAddr,
        buf_cap: usize,
        socket_buf: Option<usize>,
    ) -> io::Result<UdpPort> {
        UdpPort::connected(bound(local, socket_buf)?, peer, buf_cap)
    }

    /// Two ports on 127.0.0.1 (ports the kernel picks), connected to each
    /// other.
    pub fn pair(buf_cap: usize, socket_buf: Option<usize>) -> io::Result<(UdpPort, UdpPort)> {
        let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let a = bound(lo, socket_buf)?;
        let b = bound(lo, socket_buf)?;
        let (aa, ba) = (a.local_addr()?, b.local_addr()?);
        Ok((
            UdpPort::connected(a, ba, buf_cap)?,
            UdpPort::connected(b, aa, buf_cap)?,
        ))
    }

    fn connected(sock: UdpSocket, peer: SocketAddr, buf_cap: usize) -> io::Result<UdpPort> {
        sock.connect(peer)?;
        sock.set_nonblocking(true)?;
        Ok(UdpPort {
            sock,
            buf_cap,
            free: Vec::new(),
            stats: UdpStats::default(),
        })
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// What the port counted so far.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// The receive and send buffer sizes the kernel granted (Linux reports
    /// twice what was asked, its bookkeeping included).
    pub fn socket_buffers(&self) -> io::Result<(usize, usize)> {
        let s = socket2::SockRef::from(&self.sock);
        Ok((s.recv_buffer_size()?, s.send_buffer_size()?))
    }

    fn take_buf(&mut self) -> UdpBuf {
        match self.free.pop() {
            Some(b) => b,
            None => {
                self.stats.buffers_made += 1;
                UdpBuf::with_capacity(self.buf_cap)
            }
        }
    }

    fn recycle(&mut self, mut b: UdpBuf) {
        if self.free.len() < FREE_MAX && b.cap() == self.buf_cap {
            b.len = 0;
            self.free.push(b);
        }
    }
}

impl Backend for UdpPort {
    type Buf = UdpBuf;

    fn rx_burst(&mut self, out: &mut Burst<UdpBuf>) -> usize {
        let mut n = 0;
        while !out.is_full() {
            let mut b = self.take_buf();
            match self.sock.recv(&mut b.bytes) {
                Ok(len) if len > self.buf_cap => {
                    self.stats.rx_too_long += 1;
                    self.recycle(b);
                }
                Ok(len) => {
                    b.len = len;
                    self.stats.rx_frames += 1;
                    self.stats.rx_bytes += len as u64;
                    out.push(b);
                    n += 1;
                }
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        self.stats.rx_errors += 1;
                    }
                    self.recycle(b);
                    break;
                }
            }
        }
        n
    }

    fn alloc(&mut self) -> Option<UdpBuf> {
        Some(self.take_buf())
    }

    /// Sends from the front; a frame whose `send` fails for another reason
    /// than a full socket buffer is dropped and counted, not retried.
    /// Returns the frames the kernel took.
    fn tx_burst(&mut self, frames: &mut Burst<UdpBuf>) -> usize {
        let (mut done, mut sent) = (0, 0);
        for f in frames.iter() {
            match self.sock.send(f.data()) {
                Ok(len) => {
                    self.stats.tx_frames += 1;
                    self.stats.tx_bytes += len as u64;
                    sent += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stats.tx_would_block += 1;
                    break;
                }
                Err(_) => self.stats.tx_errors += 1,
            }
            done += 1;
        }
        for b in frames.drain(..done) {
            self.recycle(b);
        }
        sent
    }

    fn free_burst(&mut self, frames: &mut Burst<UdpBuf>) {
        for b in frames.drain(..) {
            self.recycle(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(port: &mut UdpPort, bytes: &[u8]) -> UdpBuf {
        let mut f = port.alloc().unwrap();
        f.append(bytes.len()).unwrap().copy_from_slice(bytes);
        f
    }

    /// Receives until `want` frames arrived or a second passed.
    fn recv_n(port: &mut UdpPort, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut rx = Burst::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while got.len() < want && std::time::Instant::now() < end {
            port.rx_burst(&mut rx);
            got.extend(rx.iter().map(|f| f.data().to_vec()));
            port.free_burst(&mut rx);
        }
        got
    }

    #[test]
    fn two_sockets_exchange_frames_whole_and_in_order_and_reuse_buffers() {
        let (mut a, mut b) = UdpPort::pair(4224, None).unwrap();
        assert_ne!(a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut tx = Burst::new();
        for i in 0..20u8 {
            let len = 60 + usize::from(i) * 200;
            let bytes: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_add(i)).collect();
            tx.push(frame(&mut a, &bytes));
        }
        assert_eq!(a.tx_burst(&mut tx), 20);
        assert!(tx.is_empty());
        let got = recv_n(&mut b, 20);
        assert_eq!(got.len(), 20);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.len(), 60 + i * 200);
            assert!(g
                .iter()
                .enumerate()
                .all(|(k, &x)| x == (k as u8).wrapping_add(i as u8)));
        }
        // And back: b answers with one frame of the largest size.
        let big: Vec<u8> = (0..4224).map(|k| (k % 251) as u8).collect();
        tx.push(frame(&mut b, &big));
        assert_eq!(b.tx_burst(&mut tx), 1);
        assert_eq!(recv_n(&mut a, 1), vec![big]);
        // Nothing more to read.
        let mut rx = Burst::new();
        assert_eq!(a.rx_burst(&mut rx), 0);
        assert_eq!(a.stats().rx_errors, 0);
        // a made 20 buffers for its frames and took the one it received from
        // the free list they went back to; b made one for each frame it
        // received (up to a burst at a time) plus its answer, then reused.
        assert_eq!(a.stats().buffers_made, 20);
        assert!(b.stats().buffers_made <= 21, "{:?}", b.stats());
        assert_eq!((a.stats().tx_frames, b.stats().rx_frames), (20, 20));
    }

    #[test]
    fn appended_bytes_are_bounded_by_the_capacity_and_truncate_shortens() {
        let mut f = UdpBuf::with_capacity(100);
        assert!(f.append(101).is_none());
        assert_eq!(f.append(100).unwrap().len(), 100);
        assert!(f.append(1).is_none());
        f.truncate(10);
        assert_eq!(f.len(), 10);
        f.truncate(50);
        assert_eq!(f.len(), 10);
    }

    #[test]
    fn a_datagram_longer_than_the_buffers_is_dropped_and_counted() {
        let (mut a, mut b) = UdpPort::pair(64, None).unwrap();
        // A datagram one byte too long, straight from a's socket (b is
        // connected to a: the kernel drops datagrams from anyone else).
        a.sock.send(&[7u8; 65]).unwrap();
        let mut tx = Burst::new();
        tx.push(frame(&mut a, &[1u8; 64]));
        assert_eq!(a.tx_burst(&mut tx), 1);
        let got = recv_n(&mut b, 1);
        assert_eq!(got, vec![vec![1u8; 64]]);
        assert_eq!(b.stats().rx_too_long, 1);
    }

    #[test]
    fn socket_buffers_can_be_enlarged() {
        let (a, _b) = UdpPort::pair(64, Some(1 << 20)).unwrap();
        let (rcv, snd) = a.socket_buffers().unwrap();
        // Linux doubles the request, capped by rmem_max / wmem_max; at least
        // the kernel's minimum is granted.
        assert!(rcv >= 2048 && snd >= 2048, "{rcv} {snd}");
    }
}
