#!/usr/bin/env bash
# Builds the Soft-RoCE guest of the interop suite (tests/interop/) and caches
# it: Debian 12's kernel, whose rdma_rxe module is Linux's own RoCE v2
# implementation, and a busybox initramfs with rdma-core's libraries and rxe
# provider, ibverbs-utils (ibv_rc_pingpong, ibv_ud_pingpong), perftest,
# rdmacm-utils (rping) and iproute2's `rdma`.
# Every file comes from Debian packages fetched with `apt-get download`;
# nothing is installed on the host.
#
#   scripts/rxe-guest.sh [DIR]      DIR defaults to target/rxe-guest
#
# Result: DIR/vmlinuz, DIR/initrd.gz and DIR/manifest (package versions).
# A second run with the same packages and the same guest init does nothing.
# Needs: apt-get, dpkg-deb, cpio, gzip (scripts/setup.sh installs cpio).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-target/rxe-guest}")
INIT=tests/interop/guest-init.sh

# The guest's programs and the libraries they load (from `readelf -d` on
# each: libibverbs -> libnl, rdma -> libmnl/libbsd/libcap, perftest -> librdmacm
# and libibumad, libpci -> libudev/zlib; the rxe provider is dlopen()ed by libibverbs;
# glibc dlopen()s libgcc_s when a thread exits, which rping's do).
USER_PKGS=(busybox-static libc6 libibverbs1 ibverbs-providers ibverbs-utils
  perftest librdmacm1 rdmacm-utils libgcc-s1 libnl-3-200 libnl-route-3-200 libpci3
  libudev1 zlib1g iproute2 libmnl0 libbsd0 libmd0 libcap2 libibumad3)
# Kernel modules wanted; their dependencies are added from each module's
# own `depends=` field. crc32_generic backs the "crc32" hash rxe asks the
# crypto API for (the ICRC); rdma_ucm is RDMA-CM's user interface
# (/dev/infiniband/rdma_cm), with rdma_cm and ib_cm under it.
MODULES=(virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm)

log() { printf 'rxe-guest: %s\n' "$*"; }

# The kernel package that linux-image-amd64 stands for.
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1
}
KPKG=$(kernel_pkg)
if [[ -z $KPKG ]]; then
  log "no package lists yet: apt-get update"
  apt-get update -q >/dev/null
  KPKG=$(kernel_pkg)
fi
[[ -n $KPKG ]] || { log "cannot find the kernel behind linux-image-amd64" >&2; exit 1; }

# What this build is made of: package versions plus this script and the init.
manifest() {
  apt-cache policy "$KPKG" "${USER_PKGS[@]}" | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }'
  sha256sum "$0" "$INIT" | cut -d' ' -f1
}
WANT=$(manifest)
if [[ -f $OUT/manifest && -f $OUT/vmlinuz && -f $OUT/initrd.gz ]] &&
  [[ $(cat "$OUT/manifest") == "$WANT" ]]; then
  log "up to date in $OUT"
  exit 0
fi

t0=$SECONDS
DEBS=$OUT/debs
mkdir -p "$DEBS"
log "downloading $KPKG and ${#USER_PKGS[@]} user-space packages"
(cd "$DEBS" && apt-get download -q "$KPKG" "${USER_PKGS[@]}" 2>&1 | grep -v 'unsandboxed' || true)
deb_of() { ls -t "$DEBS/$1"_*.deb 2>/dev/null | head -n1; }
for p in "$KPKG" "${USER_PKGS[@]}"; do
  [[ -n $(deb_of "$p") ]] || { log "download of $p failed" >&2; exit 1; }
done

WORK=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
KTREE=$WORK/kernel PKGS=$WORK/pkgs ROOT=$WORK/root
mkdir -p "$KTREE" "$PKGS" "$ROOT"
dpkg-deb -x "$(deb_of "$KPKG")" "$KTREE"
for p in "${USER_PKGS[@]}"; do dpkg-deb -x "$(deb_of "$p")" "$PKGS"; done
KVER=$(ls "$KTREE/lib/modules")

# --- the root: busybox, the tools, every shared library of the packages
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/lib,lib64,proc,sys,dev,tmp,run,share,etc/libibverbs.d}
cp "$PKGS/bin/busybox" "$ROOT/bin/"
for f in "$PKGS"/usr/bin/{ibv_*,ib_*,rdma,rping}; do cp "$f" "$ROOT/usr/bin/"; done
# Debian 12 is merged-/usr: libraries live in usr/lib, /lib links to it.
mkdir -p "$ROOT/usr/lib/x86_64-linux-gnu"
for d in "$PKGS/lib/x86_64-linux-gnu" "$PKGS/usr/lib/x86_64-linux-gnu"; do
  [[ -d $d ]] || continue
  (cd "$d" && find . -name '*.so*' \( -type f -o -type l \) -not -path './gconv/*' |
    cpio -pdm --quiet "$ROOT/usr/lib/x86_64-linux-gnu")
done
ln -s usr/lib "$ROOT/lib"
ln -s /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ROOT/lib64/ld-linux-x86-64.so.2"
cp "$PKGS"/etc/libibverbs.d/rxe.driver "$ROOT/etc/libibverbs.d/"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"

# --- kernel modules, dependencies first (the order /init loads them in)
MODDIR=$KTREE/lib/modules/$KVER
declare -A seen=()
ORDER=()
module_file() {
  find "$MODDIR/kernel" \( -name "$1.ko" -o -name "${1//_/-}.ko" \) -print -quit
}
add_module() {
  local m=$1 f dep
  [[ -n ${seen[$m]:-} ]] && return
  seen[$m]=1
  f=$(module_file "$m")
  [[ -n $f ]] || { log "kernel $KVER has no module $m" >&2; exit 1; }
  # The .modinfo section is NUL-separated key=value strings.
  for dep in $(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | tr ',' ' '); do
    add_module "$dep"
  done
  mkdir -p "$ROOT/modules"
  cp "$f" "$ROOT/modules/$m.ko"
  ORDER+=("$m")
}
for m in "${MODULES[@]}"; do add_module "$m"; done
printf '%s\n' "${ORDER[@]}" >"$ROOT/modules/order"

install -m 755 "$INIT" "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$OUT/initrd.gz.tmp"
cp "$KTREE/boot/vmlinuz-$KVER" "$OUT/vmlinuz.tmp"
mv "$OUT/initrd.gz.tmp" "$OUT/initrd.gz"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
printf '%s\n' "$WANT" >"$OUT/manifest"
log "built $OUT (kernel $KVER, modules: ${ORDER[*]}, initrd $(du -h "$OUT/initrd.gz" | cut -f1)) in $((SECONDS - t0)) s"
