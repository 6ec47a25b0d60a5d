//! The sync thread's UDP sockets: one per address family a peer uses, non-blocking, with
//! receive and send buffers sized for a bulk answer's burst, and the kernel's count of the
//! datagrams it dropped for want of buffer (`SO_RXQ_OVFL`), read with every datagram.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};

/// The buffer size asked for each way: room for about 6,000 full datagrams, a bulk answer's
/// window many times over.
pub const BUFFER_BYTES: usize = 8 << 20;

/// One bound socket.
#[derive(Debug)]
pub struct SyncSocket {
    socket: UdpSocket,
    /// The receive buffer the kernel gave (bytes).
    pub recv_buffer: usize,
    dropped: u32,
    cmsg: Vec<u8>,
}

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Its length (one more than the largest accepted means "longer": the buffer is one byte
    /// longer than that).
    pub len: usize,
    /// Where from.
    pub from: SocketAddr,
}

impl SyncSocket {
    /// Bind `addr`, non-blocking, with buffers of [`BUFFER_BYTES`] (beyond the host's
    /// `rmem_max`/`wmem_max` where the process may: `CAP_NET_ADMIN`), and the drop count on.
    pub fn bind(addr: SocketAddr) -> io::Result<SyncSocket> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        let fd = socket.as_fd();
        if socket::setsockopt(&fd, sockopt::RcvBufForce, &BUFFER_BYTES).is_err() {
            let _ = socket::setsockopt(&fd, sockopt::RcvBuf, &BUFFER_BYTES);
        }
        if socket::setsockopt(&fd, sockopt::SndBufForce, &BUFFER_BYTES).is_err() {
            let _ = socket::setsockopt(&fd, sockopt::SndBuf, &BUFFER_BYTES);
        }
        socket::setsockopt(&fd, sockopt::RxqOvfl, &1).map_err(io::Error::from)?;
        let recv_buffer = socket::getsockopt(&fd, sockopt::RcvBuf).unwrap_or(0);
        Ok(SyncSocket { socket, recv_buffer, dropped: 0, cmsg: nix::cmsg_space!(u32) })
    }

    /// The address it is bound to.
    pub fn local(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Is it of `ip`'s family?
    pub fn serves(&self, ip: IpAddr) -> bool {
        self.local().is_ok_and(|l| l.is_ipv4() == ip.is_ipv4())
    }

    /// Datagrams the kernel dropped for this socket, its receive buffer full (as of the last
    /// datagram received).
    pub fn dropped(&self) -> u64 {
        u64::from(self.dropped)
    }

    /// One datagram into `buf`, if one waits.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        let mut iov = [io::IoSliceMut::new(buf)];
        let r = socket::recvmsg::<SockaddrStorage>(
            self.socket.as_raw_fd(),
            &mut iov,
            Some(&mut self.cmsg),
            MsgFlags::MSG_DONTWAIT,
        );
        let msg = match r {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let len = msg.bytes;
        let from = msg.address.and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
                })
        });
        let mut dropped = self.dropped;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::RxqOvfl(n) = c {
                    dropped = n;
                }
            }
        }
        self.dropped = dropped;
        let Some(from) = from else { return Ok(None) };
        Ok(Some(Received { len, from }))
    }

    /// Send one datagram.
    pub fn send_to(&self, d: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(d, to)
    }
}

/// Wait until one of `sockets` has a datagram, or `timeout`.
pub fn wait(sockets: &[SyncSocket], timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> =
        sockets.iter().map(|s| PollFd::new(s.socket.as_fd(), PollFlags::POLLIN)).collect();
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let _ = nix::poll::poll(&mut fds, PollTimeout::from(ms));
}
