#!/bin/sh
# Captures the Linux kernel's own IPv6 Neighbor Discovery into
# tests/vectors/ndisc/linux_ndisc.pcap: two network namespaces joined by a veth
# pair, A = 02:00:00:00:00:01 fd18::1/64, B = 02:00:00:00:00:02 fd18::2/64
# (no duplicate address detection for these; the link-local ones do it).
# A sends a UDP datagram to fd18::2 (A solicits B, B advertises), waits 2 s
# and sends another: with a 300 ms reachable time both entries are stale
# by then, so each side re-checks the other with unicast solicitations
# (from its link-local address), answered without the override flag and
# without a target link-layer option (RFC 4861 §7.2.4 allows both for a
# unicast solicitation).
# Only the solicitations and advertisements are kept (classic pcap).
# Needs root, ip(8), dumpcap and tshark (scripts/setup.sh installs them).
set -eu
out="$(cd "$(dirname "$0")/.." && pwd)/tests/vectors/ndisc/linux_ndisc.pcap"
tmp=$(mktemp -d)
A=frnd-a-$$
B=frnd-b-$$
cleanup() {
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add "frnda$$" netns "$A" type veth peer name "frndb$$" netns "$B"
for side in a b; do
	if [ $side = a ]; then n=$A; m=01; else n=$B; m=02; fi
	ip -n "$n" link set "frnd$side$$" name veth0
	ip -n "$n" link set veth0 address "02:00:00:00:00:$m"
	ip netns exec "$n" sysctl -qw net.ipv6.conf.all.accept_ra=0 \
		net.ipv6.neigh.veth0.base_reachable_time_ms=300 \
		net.ipv6.neigh.veth0.delay_first_probe_time=1
done
ip -n "$A" addr add fd18::1/64 dev veth0 nodad
ip -n "$B" addr add fd18::2/64 dev veth0 nodad
ip -n "$A" link set veth0 up
ip netns exec "$A" dumpcap -q -i veth0 -w "$tmp/all.pcapng" -a duration:9 &
sleep 2
ip -n "$B" link set veth0 up
sleep 2.5
ip netns exec "$A" python3 -c "
import socket, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.sendto(b'x', ('fd18::2', 9))
time.sleep(2)
s.sendto(b'y', ('fd18::2', 9))
"
wait
tshark -r "$tmp/all.pcapng" -Y "icmpv6.type == 135 || icmpv6.type == 136" \
	-F pcap -w "$out" 2>/dev/null
tshark -r "$out" 2>/dev/null
