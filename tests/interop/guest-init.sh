#!/bin/busybox sh
# /init of the interop suite's Soft-RoCE guest (built by scripts/rxe-guest.sh).
#
# Kernel command line (all set by the suite, tests/interop/lab.rs):
#   ferroce.name=rxe1  ferroce.ip=198.18.0.2/24  ferroce.mtu=9000
#   ferroce.ip6=2001:2::2/64 (optional)
#
# It loads the modules, brings eth0 up, creates the rxe device `rxe0` on it,
# mounts the host's 9p share (mount tag "share") on /share and then serves
# jobs: the host writes /share/jobs/ID.job (a shell script); the guest renames
# it ID.taken, runs it in /tmp with its output in ID.log, and last writes its
# exit status to ID.exit. /share/ready appears once rxe0 is up.

/bin/busybox --install -s
export PATH=/usr/bin:/bin:/usr/sbin:/sbin
mount -t proc none /proc
mount -t sysfs none /sys
mount -t devtmpfs none /dev
mount -t tmpfs none /tmp
say() { echo "guest: $*" >/dev/console; }

NAME=rxe IP=198.18.0.2/24 MTU=1500 IP6=
for arg in $(cat /proc/cmdline); do
  case $arg in
    ferroce.name=*) NAME=${arg#*=} ;;
    ferroce.ip=*) IP=${arg#*=} ;;
    ferroce.mtu=*) MTU=${arg#*=} ;;
    ferroce.ip6=*) IP6=${arg#*=} ;;
  esac
done
hostname "$NAME"

for m in $(cat /modules/order); do
  insmod "/modules/$m.ko" || say "insmod $m failed"
done

# IPv6 on eth0 only with ferroce.ip6: the GID table then holds the
# link-local GID (index 0), ::ffff:IP (index 1, the RoCE v2 GID most tools
# use) and IP6 (the suite looks its index up).
echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6
ip link set lo up
ip link set eth0 mtu "$MTU" up
ip addr add "$IP" dev eth0
if [ -n "$IP6" ]; then
  c=/proc/sys/net/ipv6/conf/eth0
  echo 0 >$c/router_solicitations
  echo 0 >$c/accept_dad  # no duplicate address detection: usable at once
  echo 0 >$c/disable_ipv6
  ip -6 addr add "$IP6" dev eth0
fi
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add failed"

mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share ||
  { say "no 9p share"; exec sh; }
mkdir -p /share/jobs
say "ready: $(rdma link show 2>&1)"
echo "$NAME $IP mtu $MTU" >/share/ready.part && mv /share/ready.part /share/ready

while :; do
  for job in /share/jobs/*.job; do
    [ -e "$job" ] || continue
    id=${job%.job}
    mv "$job" "$id.taken"
    (
      cd /tmp
      sh "$id.taken" >"$id.log" 2>&1
      echo $? >"$id.exit.part"
      mv "$id.exit.part" "$id.exit"
    ) &
  done
  sleep 0.05
done
