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
set -euo pipefail

PACKAGES=(pkg-config libdpdk-dev dpdk-dev clang libclang-dev iproute2 tshark)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all packages present (${PACKAGES[*]})"
else
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
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
  "${APT_GET[@]}" install -y -q "${missing[@]}" ||
    { "${APT_GET[@]}" update -q && "${APT_GET[@]}" install -y -q "${missing[@]}"; }
fi

command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
