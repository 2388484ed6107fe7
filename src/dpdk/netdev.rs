//! The kernel's side of a net_af_packet port: the interface's MTU (read,
//! and set when a config asks for another) and the frames its packet
//! sockets' receive rings dropped because they were full, which the PMD
//! does not count. Everything here is a plain socket call on the
//! interface in the calling thread's network namespace.
#![cfg(feature = "dpdk")]

use std::io;

/// An `ifreq` naming `iface` (at most 15 bytes).
fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {iface:?}"),
        ));
    }
    // SAFETY: ifreq is plain old data (a name array and a union of
    // integers and addresses): all zeroes is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

/// A datagram socket for interface ioctls, closed on drop.
struct CtlSocket(libc::c_int);

impl CtlSocket {
    fn open() -> io::Result<CtlSocket> {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CtlSocket(fd))
    }

    fn ioctl(&self, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
        // SAFETY: an interface ioctl on our own socket with a valid, named
        // ifreq that outlives the call.
        let ret = unsafe { libc::ioctl(self.0, req as _, r as *mut libc::ifreq) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for CtlSocket {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe { libc::close(self.0) };
    }
}

/// The MTU of kernel interface `iface` (`SIOCGIFMTU`).
pub fn if_mtu(iface: &str) -> io::Result<u32> {
    let mut r = ifreq(iface)?;
    CtlSocket::open()?.ioctl(libc::SIOCGIFMTU, &mut r)?;
    // SAFETY: SIOCGIFMTU filled the union's MTU member.
    let mtu = unsafe { r.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// Sets the MTU of kernel interface `iface` (`SIOCSIFMTU`; needs
/// CAP_NET_ADMIN), as the PMD's own MTU call would.
pub fn set_if_mtu(iface: &str, mtu: u32) -> io::Result<()> {
    let mut r = ifreq(iface)?;
    r.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    CtlSocket::open()?.ioctl(libc::SIOCSIFMTU, &mut r)
}

/// The index of kernel interface `iface`.
pub fn if_index(iface: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// `SOL_PACKET` socket options (linux/if_packet.h).
const SOL_PACKET: libc::c_int = 263;
/// `PACKET_STATISTICS`: `struct tpacket_stats`, zeroed by each read.
const PACKET_STATISTICS: libc::c_int = 6;

/// `struct tpacket_stats` (TPACKET_V1 and V2 rings).
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// Frames the kernel dropped since the last call because a receive ring
/// of this process's packet sockets bound to interface `ifindex` was full
/// (`PACKET_STATISTICS` `tp_drops`, which each read zeroes: the caller
/// adds them up). The PMD's sockets are found among the process's open
/// descriptors; `None` if none is bound to the interface.
pub fn packet_ring_drops(ifindex: u32) -> Option<u64> {
    let mut found = false;
    let mut drops = 0u64;
    for e in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Some(fd) = e
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::c_int>().ok())
        else {
            continue;
        };
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("socket:") || !bound_to(fd, ifindex) {
            continue;
        }
        let mut st = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: getsockopt on a descriptor of ours with an out buffer of
        // the size we pass.
        let ret = unsafe {
            libc::getsockopt(
                fd,
                SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStats as *mut libc::c_void,
                &mut len,
            )
        };
        if ret == 0 {
            found = true;
            drops += u64::from(st.tp_drops);
        }
    }
    found.then_some(drops)
}

/// Whether descriptor `fd` is a packet socket bound to interface `ifindex`.
fn bound_to(fd: libc::c_int, ifindex: u32) -> bool {
    // SAFETY: sockaddr_ll is plain old data; all zeroes is valid.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: getsockname on a descriptor of ours with an out buffer of the
    // size we pass; a non-socket just fails.
    let ret = unsafe {
        libc::getsockname(
            fd,
            &mut sa as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut len,
        )
    };
    ret == 0 && i32::from(sa.sll_family) == libc::AF_PACKET && sa.sll_ifindex as u32 == ifindex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_mtu_is_read_and_bad_names_refused() {
        // "lo" exists in every network namespace.
        assert!(if_mtu("lo").unwrap() >= 1500);
        assert!(if_index("lo").unwrap() >= 1);
        assert!(if_mtu("").is_err());
        assert!(if_mtu("a-name-longer-than-15").is_err());
        assert!(if_mtu("nosuchif0").is_err());
        // No packet socket of ours is bound to lo.
        assert_eq!(packet_ring_drops(if_index("lo").unwrap()), None);
    }
}
