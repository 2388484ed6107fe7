//! The interop matrix: which tools run against rxe, in which role, path
//! MTU, loss and message sizes, and what each run must show.

use std::fmt;

/// A tool pair: ours and rdma-core's / perftest's of the same name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tool {
    Pingpong,
    UdPingpong,
    Rping,
    WriteBw,
    ReadBw,
    SendBw,
    AtomicBw,
    WriteLat,
    ReadLat,
    SendLat,
}

impl Tool {
    pub const ALL: [Tool; 10] = [
        Tool::Pingpong,
        Tool::UdPingpong,
        Tool::Rping,
        Tool::WriteBw,
        Tool::ReadBw,
        Tool::SendBw,
        Tool::AtomicBw,
        Tool::WriteLat,
        Tool::ReadLat,
        Tool::SendLat,
    ];

    /// The `ferroce` subcommand.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Pingpong => "pingpong",
            Tool::UdPingpong => "ud-pingpong",
            Tool::Rping => "rping",
            Tool::WriteBw => "write-bw",
            Tool::ReadBw => "read-bw",
            Tool::SendBw => "send-bw",
            Tool::AtomicBw => "atomic-bw",
            Tool::WriteLat => "write-lat",
            Tool::ReadLat => "read-lat",
            Tool::SendLat => "send-lat",
        }
    }

    /// The peer's program in the guest.
    pub fn peer(self) -> &'static str {
        match self {
            Tool::Pingpong => "ibv_rc_pingpong",
            Tool::UdPingpong => "ibv_ud_pingpong",
            Tool::Rping => "rping",
            Tool::WriteBw => "ib_write_bw",
            Tool::ReadBw => "ib_read_bw",
            Tool::SendBw => "ib_send_bw",
            Tool::AtomicBw => "ib_atomic_bw",
            Tool::WriteLat => "ib_write_lat",
            Tool::ReadLat => "ib_read_lat",
            Tool::SendLat => "ib_send_lat",
        }
    }

    /// The option naming the GID index (rdma-core's tools and perftest
    /// differ); GID 1 of the guest's rxe0 is ::ffff:198.18.0.2, RoCE v2.
    fn gid_option(self) -> &'static str {
        match self {
            Tool::Pingpong | Tool::UdPingpong => "-g",
            _ => "-x",
        }
    }

    /// Whether the tool has loss cells: ibv_ud_pingpong has no retry (a
    /// lost datagram stops it, as UD allows), so it runs without loss.
    pub fn has_loss_cells(self) -> bool {
        self != Tool::UdPingpong
    }

    /// A UD tool: no path MTU to negotiate; its cells' "MTU" is the
    /// port's, which its largest datagram fills.
    pub fn is_ud(self) -> bool {
        self == Tool::UdPingpong
    }

    /// A tool that always connects by RDMA-CM (rping).
    pub fn uses_rdma_cm(self) -> bool {
        self == Tool::Rping
    }

    /// One of perftest's tools.
    pub fn is_perftest(self) -> bool {
        !matches!(self, Tool::Pingpong | Tool::UdPingpong | Tool::Rping)
    }

    pub fn is_bw(self) -> bool {
        matches!(
            self,
            Tool::WriteBw | Tool::ReadBw | Tool::SendBw | Tool::AtomicBw
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// ferroce waits, the guest's tool connects.
    FerroceServer,
    /// The guest's tool waits, ferroce connects.
    FerroceClient,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::FerroceServer => "ferroce-server",
            Role::FerroceClient => "ferroce-client",
        }
    }
}

/// One frame in `LOSS_EVERY` on average is dropped in each direction in
/// the loss cells (at random; see `Lab::set_loss`). Go-back-N resends up to a window of packets per loss, and rxe
/// answers a re-issued READ after finishing every READ queued before it,
/// so a much higher rate makes 1 MiB READs crawl under emulation.
pub const LOSS_EVERY: u32 = 200;

/// The tools of the CE-marking cells: every kind of traffic (SEND, WRITE,
/// READ, both directions of pingpong) makes rxe's packets arrive marked,
/// so ferroce sends CNPs to rxe in both roles.
pub const CE_TOOLS: [Tool; 4] = [Tool::Pingpong, Tool::WriteBw, Tool::ReadBw, Tool::SendBw];

/// The spot cells: a tool at a small path MTU, both roles.
pub const SPOT: [(Tool, u16); 3] = [
    (Tool::Pingpong, 256),
    (Tool::WriteBw, 256),
    (Tool::ReadBw, 512),
];

/// The tools of the IPv6 cells (path MTU 4096, both roles).
pub const IPV6_TOOLS: [Tool; 4] = [
    Tool::Pingpong,
    Tool::UdPingpong,
    Tool::WriteBw,
    Tool::ReadLat,
];

/// A cell of the interop table (docs/interop.md): a tool in a role at a
/// path MTU, with or without loss. It runs one or more sizes.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub tool: Tool,
    pub role: Role,
    pub mtu: u16,
    pub loss: Option<u32>,
    /// The bridge sets CE on every RoCE frame from rxe, so ferroce's
    /// notification point sends CNPs to rxe.
    pub ce: bool,
    /// Both ends use their IPv6 GIDs (the guest's 2001:2::2, ferroce's GID
    /// 1, 2001:2::10) instead of the IPv4-mapped ones.
    pub ipv6: bool,
    /// perftest's `-R`: both tools connect by RDMA-CM.
    pub cm: bool,
}

/// The perftest cells run with `-R` (both roles): (tool, path MTU, loss).
pub const CM_CELLS: [(Tool, u16, bool); 8] = [
    (Tool::WriteBw, 1024, false),
    (Tool::WriteBw, 4096, false),
    (Tool::WriteBw, 1024, true),
    (Tool::WriteBw, 4096, true),
    (Tool::SendBw, 4096, false),
    (Tool::SendBw, 1024, true),
    (Tool::ReadLat, 4096, false),
    (Tool::ReadLat, 1024, true),
];

/// What varies between the runs of a cell.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    Size(usize),
    /// ib_atomic_bw's -A.
    Atomic(&'static str),
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Size(s) if *s >= 1 << 20 && s % (1 << 20) == 0 => {
                write!(f, "{}MiB", s >> 20)
            }
            Variant::Size(s) => write!(f, "{s}B"),
            Variant::Atomic(a) => f.write_str(a),
        }
    }
}

pub const MIB: usize = 1 << 20;

impl Cell {
    /// `tool` in `role` at path MTU `mtu`, over IPv4, without loss or CE
    /// marks.
    pub fn plain(tool: Tool, role: Role, mtu: u16) -> Cell {
        Cell {
            tool,
            role,
            mtu,
            loss: None,
            ce: false,
            ipv6: false,
            cm: false,
        }
    }

    /// Whether the cell's tools connect by RDMA-CM: then its path MTU is
    /// the interfaces' (rdma_cm takes the netdev's), so the cell sets the
    /// links' MTU.
    pub fn uses_rdma_cm(&self) -> bool {
        self.cm || self.tool.uses_rdma_cm()
    }

    /// Every cell, in the order they run: every tool in both roles at path
    /// MTU 1024, 2048 and 4096 without loss and at 1024 and 4096 with it,
    /// the CE-marking cells, and spot cells at path MTU 256 and 512.
    pub fn all() -> Vec<Cell> {
        let mut v = Vec::new();
        for (loss, mtus) in [
            (None, &[1024, 2048, 4096][..]),
            (Some(LOSS_EVERY), &[1024, 4096][..]),
        ] {
            for &mtu in mtus {
                for tool in Tool::ALL
                    .into_iter()
                    .filter(|t| loss.is_none() || t.has_loss_cells())
                {
                    for role in [Role::FerroceServer, Role::FerroceClient] {
                        v.push(Cell {
                            loss,
                            ..Cell::plain(tool, role, mtu)
                        });
                    }
                }
            }
        }
        for tool in CE_TOOLS {
            for role in [Role::FerroceServer, Role::FerroceClient] {
                v.push(Cell {
                    ce: true,
                    ..Cell::plain(tool, role, 1024)
                });
            }
        }
        for (tool, mtu) in SPOT {
            for role in [Role::FerroceServer, Role::FerroceClient] {
                v.push(Cell::plain(tool, role, mtu));
            }
        }
        for (tool, mtu, loss) in CM_CELLS {
            for role in [Role::FerroceServer, Role::FerroceClient] {
                v.push(Cell {
                    cm: true,
                    loss: loss.then_some(LOSS_EVERY),
                    ..Cell::plain(tool, role, mtu)
                });
            }
        }
        for tool in IPV6_TOOLS {
            for role in [Role::FerroceServer, Role::FerroceClient] {
                v.push(Cell {
                    ipv6: true,
                    ..Cell::plain(tool, role, 4096)
                });
            }
        }
        v
    }

    /// Which directions carry the tool's data (towards rxe, from rxe):
    /// where a loss cell must see frames dropped. The other way carries
    /// only acknowledgements, too few in some runs for the bridge's first
    /// drop.
    pub fn data_directions(&self) -> (bool, bool) {
        let ferroce_client = self.role == Role::FerroceClient;
        match self.tool {
            Tool::WriteBw | Tool::SendBw => (ferroce_client, !ferroce_client),
            Tool::ReadBw => (!ferroce_client, ferroce_client),
            _ => (true, true),
        }
    }

    /// The CM MAD a loss cell of an RDMA-CM tool drops first, of those
    /// ferroce sends, so that ferroce's CM must send it again: a message
    /// of the disconnect where the order of the teardown is fixed (the
    /// DREQ of rping's client; the DREP of send-bw's server to the DREQ
    /// of perftest's client, which goes again only if ferroce is still
    /// there to answer the DREQ's resend, seconds later), otherwise its
    /// REQ as the client, its REP as the server.
    pub fn cm_drop(&self) -> Option<u16> {
        const REQ: u16 = 0x0010;
        const REP: u16 = 0x0013;
        const DREQ: u16 = 0x0015;
        const DREP: u16 = 0x0016;
        if !self.uses_rdma_cm() || self.loss.is_none() {
            return None;
        }
        Some(match (self.tool, self.role) {
            (Tool::Rping, Role::FerroceClient) => DREQ,
            (Tool::SendBw, Role::FerroceServer) => DREP,
            (_, Role::FerroceClient) => REQ,
            (_, Role::FerroceServer) => REP,
        })
    }

    /// ferroce asks for selective repeat (`--recovery sr`): in the loss
    /// cells of the perftest tools. rxe does not ask, so the QPs must run
    /// go-back-N, ferroce must say so, and no frame may carry ferroce's
    /// selective-repeat trailer: the cell's results are go-back-N's.
    pub fn asks_selective_repeat(&self) -> bool {
        self.loss.is_some() && self.tool.is_perftest()
    }

    /// A cell at a path MTU the main columns leave out.
    pub fn is_spot(&self) -> bool {
        !matches!(self.mtu, 1024 | 2048 | 4096)
    }

    pub fn loss_name(&self) -> String {
        match self.loss {
            None => "none".into(),
            Some(n) => format!("1/{n}"),
        }
    }

    /// `write-bw ferroce-server mtu 1024 loss none` (with ` ecn ce` for a
    /// CE-marking cell).
    pub fn id(&self) -> String {
        format!(
            "{} {} mtu {} loss {}{}",
            self.tool.name(),
            self.role.name(),
            self.mtu,
            self.loss_name(),
            if self.ce { " ecn ce" } else { "" }
        ) + if self.ipv6 { " ipv6" } else { "" }
            + if self.cm { " rdma_cm" } else { "" }
    }

    /// A file-name-safe form of the id.
    pub fn slug(&self) -> String {
        format!(
            "{}.{}.mtu{}.{}",
            self.tool.name(),
            self.role.name(),
            self.mtu,
            match self.loss {
                None => "noloss".into(),
                Some(n) => format!("loss{n}"),
            }
        ) + if self.ce { ".ce" } else { "" }
            + if self.ipv6 { ".ipv6" } else { "" }
            + if self.cm { ".cm" } else { "" }
    }

    /// The runs of this cell. Every size list has a message that is not a
    /// multiple of 4 (4099 B: pad bytes in its last packet) and one that
    /// crosses packet boundaries at both MTUs; 1 B, 64 B and 4096 B are in
    /// the MTU 1024 loss-free cells.
    pub fn variants(&self) -> Vec<Variant> {
        if self.tool == Tool::AtomicBw {
            return vec![
                Variant::Atomic("FETCH_AND_ADD"),
                Variant::Atomic("CMP_AND_SWAP"),
            ];
        }
        if self.ce {
            return vec![Variant::Size(64), Variant::Size(MIB)];
        }
        if self.tool == Tool::Rping {
            // A ping inside one packet and one crossing packet
            // boundaries, not a multiple of 4 (pad 1 on its last packet).
            return [100, 4099].iter().map(|&s| Variant::Size(s)).collect();
        }
        if self.tool.is_ud() {
            // Datagrams of the port's MTU and one byte less (pad 1), and
            // at 1024 a 1-byte one.
            let m = self.mtu as usize;
            let sizes: &[usize] = if m == 1024 {
                &[1, m - 1, m]
            } else {
                &[m - 1, m]
            };
            return sizes.iter().map(|&s| Variant::Size(s)).collect();
        }
        let sizes: &[usize] = match (self.mtu, self.loss) {
            // Under loss a lost last packet waits out the 2.1 s ACK
            // timeout RDMA-CM gives the QPs: 16 KiB keeps the run short.
            _ if self.cm && self.loss.is_some() => &[4099, 16384],
            _ if self.is_spot() || self.ipv6 || self.cm => &[4099, 65536],
            (1024, None) => &[1, 64, 4096, 4099, MIB],
            (_, None) => &[4096, 4099, MIB],
            (1024, Some(_)) => &[64, 4099, MIB],
            (_, Some(_)) => &[4099, MIB],
        };
        sizes.iter().map(|&s| Variant::Size(s)).collect()
    }

    /// Iterations of a run: perftest's minimum of 5 for 1 MiB, more for
    /// small messages; under loss enough that each direction sees drops.
    pub fn iters(&self, v: Variant) -> u32 {
        let big = matches!(v, Variant::Size(s) if s >= MIB);
        match (big, self.loss) {
            _ if self.is_spot() || self.ipv6 => 20,
            // A ping is six messages, and a lost one at its end waits out
            // the 2.1 s ACK timeout RDMA-CM gives the QPs; so does a lost
            // last packet of an RDMA-CM perftest run.
            _ if self.tool == Tool::Rping || (self.cm && self.loss.is_some()) => 100,
            _ if self.cm => 20,
            (true, _) => 5,
            (false, None) => 100,
            (false, Some(n)) => (2 * n).max(100),
        }
    }

    /// The options both tools get (ours mirror the C tools'; a UD tool
    /// has no path MTU).
    fn common_args(&self, v: Variant) -> Vec<String> {
        let mut a: Vec<String> = if self.tool.is_ud() {
            Vec::new()
        } else {
            vec!["-m".into(), self.mtu.to_string()]
        };
        match v {
            Variant::Size(s) => a.extend(["-s".into(), s.to_string()]),
            Variant::Atomic(op) => a.extend(["-A".into(), op.into()]),
        }
        a.extend(["-n".into(), self.iters(v).to_string()]);
        if self.cm {
            a.push("-R".into());
        } else if let Some(u) = self.qp_timeout() {
            a.extend(["-u".into(), u.to_string()]);
        }
        a
    }

    /// The `-u` both ends are given, when not perftest's 14 (about 67
    /// ms): 16 (about 268 ms) at path MTU 4096. rxe in the TCG guest
    /// drains about 5 MB/s, so a full window of 128 4 KiB packets takes
    /// it about 100 ms: with 67 ms the requester times out while rxe is
    /// still working through the window, resends all of it behind the
    /// first copy, and the backlog only grows until the retries run out.
    /// Hardware never waits that long, and rxe on a real core neither;
    /// the ACK timeout is a path parameter chosen for the path, as here.
    /// RDMA-CM cells take the ACK timeout from the path record;
    /// ibv_rc_pingpong has no `-u` (and one message in flight).
    fn qp_timeout(&self) -> Option<u8> {
        (self.mtu == 4096 && self.tool.is_perftest() && !self.cm).then_some(16)
    }

    /// The local ACK timeout of the cell's QPs, in nanoseconds (IBTA
    /// §9.7.6.1.3: 4.096 µs × 2^timeout): perftest's 14 or the cell's
    /// `-u`; RDMA-CM's QPs take the CM's packet life time (18) plus one,
    /// about 2.1 s.
    pub fn ack_timeout_ns(&self) -> u64 {
        let exp = if self.uses_rdma_cm() {
            19
        } else {
            self.qp_timeout().unwrap_or(14)
        };
        4096 << exp
    }

    /// rping's options: the role and address, the size, the count (the
    /// client's), print (and on the client check) every ping.
    fn rping_args(&self, v: Variant, server: Option<&str>, own: &str) -> Vec<String> {
        let Variant::Size(size) = v else {
            unreachable!("rping runs sizes")
        };
        let mut a: Vec<String> = match server {
            Some(s) => vec!["-c".into(), "-a".into(), s.into(), "-V".into()],
            None => vec!["-s".into(), "-a".into(), own.into()],
        };
        a.extend([
            "-S".into(),
            size.to_string(),
            "-C".into(),
            self.iters(v).to_string(),
            "-v".into(),
        ]);
        a
    }

    /// The guest's command line; `server` is set for its client; `gid`:
    /// the index of rxe0's GID to use (1 is ::ffff:198.18.0.2).
    pub fn peer_command(&self, v: Variant, server: Option<&str>, gid: u8) -> String {
        if self.tool == Tool::Rping {
            let mut a = vec!["rping".to_string()];
            a.extend(self.rping_args(v, server, crate::lab::GUEST_IP));
            return a.join(" ");
        }
        let mut a = vec![
            self.tool.peer().to_string(),
            "-d".into(),
            "rxe0".into(),
            self.tool.gid_option().into(),
            gid.to_string(),
        ];
        a.extend(self.common_args(v));
        if let Some(s) = server {
            a.push(s.into());
        }
        a.join(" ")
    }

    /// ferroce's arguments after the subcommand.
    pub fn ferroce_args(&self, v: Variant, config: &str, server: Option<&str>) -> Vec<String> {
        let mut a = vec![
            self.tool.name().to_string(),
            "--config".into(),
            config.into(),
            "--port".into(),
            "p".into(),
            "--stats".into(),
            "--timeout-ms".into(),
            self.limit_ms(v).to_string(),
        ];
        if self.tool == Tool::Rping {
            a.extend(self.rping_args(v, server, "0.0.0.0"));
            return a;
        }
        if self.ipv6 {
            // GID 1 of the suite's config: ferroce's IPv6 address.
            a.extend([self.tool.gid_option().into(), "1".into()]);
        }
        if self.asks_selective_repeat() {
            a.extend(["--recovery".into(), "sr".into()]);
        }
        a.extend(self.common_args(v));
        if let Some(s) = server {
            a.push(s.into());
        }
        a
    }

    /// How long a run may take: generous for emulation (rxe in TCG moves
    /// about 5 MB/s).
    pub fn limit_ms(&self, v: Variant) -> u64 {
        let big = matches!(v, Variant::Size(s) if s >= MIB);
        match (big, self.loss.is_some()) {
            _ if self.uses_rdma_cm() && self.loss.is_some() => 120_000,
            (false, _) => 30_000,
            (true, false) => 60_000,
            (true, true) => 120_000,
        }
    }

    /// The start of the result line both sides print: perftest's table
    /// row (size, then iterations; a bandwidth server prints the results
    /// its client sends) or ibv_rc_pingpong's "N bytes in".
    pub fn result_line(&self, v: Variant) -> String {
        let n = self.iters(v);
        match (self.tool, v) {
            (Tool::Pingpong | Tool::UdPingpong, Variant::Size(s)) => {
                format!("{} bytes in ", s as u64 * n as u64 * 2)
            }
            // The last ping's data (the server's line starts "server ").
            (Tool::Rping, _) => format!("ping data: rdma-ping-{}: ", n - 1),
            (Tool::AtomicBw, _) => format!(" {:<10} {n} ", 8),
            (t, Variant::Size(s)) if t.is_bw() => format!(" {s:<10} {n} "),
            (_, Variant::Size(s)) => format!(" {s:<7} {n} "),
            (_, Variant::Atomic(_)) => unreachable!("only atomic-bw has atomic variants"),
        }
    }
}

/// rxe's per-port hw_counters (drivers/infiniband/sw/rxe/rxe_hw_counters.c)
/// that a run may move, and when; `host_lost`: ferroce's host dropped
/// frames before its transport saw them.
pub fn check_rxe_counters(
    cell: &Cell,
    delta: &[(String, i64)],
    host_lost: bool,
) -> Result<(), String> {
    let get = |n: &str| {
        delta
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .unwrap_or(0)
    };
    if get("rcvd_pkts") <= 0 || get("sent_pkts") <= 0 {
        return Err(format!(
            "rxe received {} and sent {} packets",
            get("rcvd_pkts"),
            get("sent_pkts")
        ));
    }
    let mut bad = Vec::new();
    for (k, v) in delta {
        if *v == 0 {
            continue;
        }
        let ok = match k.as_str() {
            // Traffic, and acknowledgements coalesced by rxe's responder.
            "sent_pkts" | "rcvd_pkts" | "rdma_sends" | "rdma_recvs" | "ack_deferred" => true,
            // rxe's requester resends from its retransmit timer even with
            // nothing lost: the timer is not pushed back as its packets
            // are acknowledged, so it can fire a millisecond after a new
            // message left (seen in the captures: a message sent again
            // while our ACK of the one before had long arrived). The
            // duplicates must be acknowledged and the run go on.
            "completer_retry_err" => true,
            // What a lost frame leads to: rxe's responder sees a PSN gap
            // (out_of_seq_request) or a resent packet (duplicate_request);
            // its requester gets a NAK (rcvd_seq_err). Frames lost on
            // ferroce's host (`host_lost`) are losses too.
            "out_of_seq_request" | "duplicate_request" | "rcvd_seq_err" => {
                cell.loss.is_some() || host_lost
            }
            // Never: retries exhausted, send errors, receiver not ready.
            _ => false,
        };
        if !ok {
            bad.push(format!("{k} +{v}"));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected rxe hw_counters: {}", bad.join(", ")))
    }
}
