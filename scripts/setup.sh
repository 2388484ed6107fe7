#!/usr/bin/env bash
# Installs the Debian 12 packages that ferroce needs to build and test, and
# only those that are missing (safe to run again and again).
#
#   libdpdk-dev dpdk-dev   DPDK 22.11 (headers, libraries, PMDs, dpdk-testpmd)
#   pkg-config             how build.rs finds DPDK
#   clang libclang-dev     bindgen, which generates our DPDK bindings
#   iproute2               network namespaces and veth pairs for the tests
#   tshark                 Wireshark's dissectors, the independent judge of
#                          the frames we build (tests/tshark.rs)
#   fonts-dejavu-core      the font of ferroce lab's PNG plots
# and, without their recommended extras, for the rxe interop suite
# (tests/interop/, whose guest image scripts/rxe-guest.sh builds):
#   qemu-system-x86        the guest running Linux Soft-RoCE (rdma_rxe)
#   nftables               frames dropped on the guests' bridge
#   tcpdump                each interop run's frames, as the bridge saw them
#   cpio                   packing the guest's initramfs
set -euo pipefail

PACKAGES=(pkg-config libdpdk-dev dpdk-dev clang libclang-dev iproute2 tshark fonts-dejavu-core)
LEAN_PACKAGES=(qemu-system-x86 nftables tcpdump cpio)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
lean=()
for p in "${LEAN_PACKAGES[@]}"; do
  installed "$p" || lean+=("$p")
done

if ((${#missing[@]} + ${#lean[@]} == 0)); then
  echo "setup: all packages present (${PACKAGES[*]} ${LEAN_PACKAGES[*]})"
else
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  echo "setup: installing ${missing[*]} ${lean[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # sudo resets the environment: hand DEBIAN_FRONTEND to apt-get explicitly.
  APT_GET=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  # wireshark-common (pulled in by tshark) asks whether non-root users may
  # capture; answer no beforehand so that the install never waits for it.
  if [[ " ${missing[*]} " == *" tshark "* ]]; then
    echo "wireshark-common wireshark-common/install-setuid boolean false" |
      "${SUDO[@]}" debconf-set-selections
  fi
  # Fresh package lists only when an install needs them.
  # install OPTIONS PACKAGE...
  install() {
    local opts=$1
    shift
    (($#)) || return 0
    "${APT_GET[@]}" install -y -q $opts "$@" ||
      { "${APT_GET[@]}" update -q && "${APT_GET[@]}" install -y -q $opts "$@"; }
  }
  install "" "${missing[@]}"
  install --no-install-recommends "${lean[@]}"
fi

command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
