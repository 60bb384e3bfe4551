#!/usr/bin/env bash
# Runs a command on a machine with pure cgroup v2: a qemu guest booted with
# Debian's own kernel and `cgroup_no_v1=all`, whose root is this machine's /
# (read-only, over 9p), with fresh tmpfs on /tmp, /run, /var/tmp and /root,
# and the unified hierarchy at /sys/fs/cgroup with memory, pids and cpu
# enabled at its root (as systemd leaves it).
#
# Why a guest: this machine (and CI's) is cgroup-hybrid; its memory, pids and
# cpu controllers are bound to v1 hierarchies that other software here uses,
# and a controller bound to v1 cannot be enabled in v2. Most users run pure
# v2; the guest is how the suite runs the linux provider on it for real.
#
# The guest is emulated (TCG) by default: /dev/kvm here creates VMs but a
# guest kernel hangs in them. SBX_VM_ACCEL=kvm where nesting works.
#
#   scripts/cgroup2-vm.sh [--] CMD...   run CMD in the guest, in the current
#                                       directory; exits with its status
#                                       (125: the guest gave no result)
#   scripts/cgroup2-vm.sh --check       exit 0 when a guest can be made here
#
# SBX_VM_ENV names the variables to pass in (space-separated, e.g.
# "SBX_MUST_WORK TAP_FILTER"). The kernel comes from Debian's linux-image
# package (apt-get download, never installed), cached in SBX_VM_CACHE
# (default /var/cache/sbx-test-vm). SBX_VM_KEEP=1 keeps the run's folder
# (console log) in /tmp.
set -eu
cache=${SBX_VM_CACHE:-/var/cache/sbx-test-vm}
mem=${SBX_VM_MEM_MIB:-4096}
timeout_s=${SBX_VM_TIMEOUT_S:-1200}

die() { echo "cgroup2-vm: $*" >&2; exit 125; }
usable() { command -v qemu-system-x86_64 >/dev/null && [ -x /bin/busybox ] && command -v apt-get >/dev/null; }

if [ "${1:-}" = --check ]; then usable; exit; fi
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || die "usage: $0 [--] CMD... | --check"
usable || die "needs qemu-system-x86_64 (apt-get install qemu-system-x86) and busybox-static"

# --- kernel and initramfs, made once --------------------------------------------
prepare() {
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [ -z "$pkg" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  [ -n "$pkg" ] || die "cannot find Debian's linux-image-amd64 package (apt-get update?)"
  [ -f "$cache/$pkg/ready" ] && { echo "$cache/$pkg"; return; }
  local dir="$cache/$pkg" tmp
  rm -rf "$dir"; mkdir -p "$dir"
  tmp=$(mktemp -d "$cache/.prep.XXXXXX")
  # apt-get download writes as _apt when it can: give it a directory it may write.
  chmod 0777 "$tmp"
  (cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/root"
  local kver; kver=$(ls "$tmp/root/lib/modules")
  cp "$tmp/root/boot/vmlinuz-$kver" "$dir/vmlinuz"
  # The initramfs: static busybox, the modules the guest needs before its
  # root exists (virtio-pci, 9p) and after (overlayfs), in load order.
  local ir="$tmp/initramfs" m
  mkdir -p "$ir/bin" "$ir/mod" "$ir/dev" "$ir/proc" "$ir/sys" "$ir/newroot"
  cp /bin/busybox "$ir/bin/busybox"
  local order=""
  for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev \
           drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci fs/netfs/netfs \
           fs/fscache/fscache net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p fs/overlayfs/overlay; do
    local f; f=$(ls "$tmp/root/lib/modules/$kver/kernel/$m".ko* 2>/dev/null | head -1)
    [ -n "$f" ] || continue # built in
    case "$f" in *.xz) xz -dc "$f" >"$ir/mod/$(basename "$m").ko" ;; *) cp "$f" "$ir/mod/$(basename "$m").ko" ;; esac
    order="$order $(basename "$m")"
  done
  cat >"$ir/init" <<EOF
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
for m in $order; do /bin/busybox insmod /mod/\$m.ko || echo "cgroup2-vm: insmod \$m failed"; done
/bin/busybox mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144,cache=loose hostroot /newroot &&
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /newroot/mnt || {
  echo "cgroup2-vm: cannot mount the host's root"; /bin/busybox poweroff -f; }
/bin/busybox umount /proc
/bin/busybox mount --move /dev /newroot/dev
exec /bin/busybox switch_root /newroot /bin/sh /mnt/init.sh
EOF
  chmod +x "$ir/init"
  (cd "$ir" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$dir/initrd"
  echo "$kver" >"$dir/version"
  rm -rf "$tmp"
  touch "$dir/ready"
  echo "$dir"
}
mkdir -p "$cache"
kdir=$(
  exec 9>"$cache/.lock"
  flock 9
  prepare
)

# --- one run ----------------------------------------------------------------------
run=$(mktemp -d /tmp/sbx-vm.XXXXXX)
qpid=
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null && wait "$qpid" 2>/dev/null
  [ -n "${SBX_VM_KEEP:-}" ] || rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
: >"$run/output"
pwd -P >"$run/cwd"
{
  echo "cd $(printf '%q' "$(pwd -P)")"
  for v in ${SBX_VM_ENV:-}; do
    [ -n "${!v+x}" ] && echo "export $v=$(printf '%q' "${!v}")"
  done
  printf 'exec'
  printf ' %q' "$@"
  echo
} >"$run/cmd"
# The guest's init (the initramfs mounts this folder at /mnt): a private, writable world over the read-only host root.
cat >"$run/init.sh" <<'EOF'
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# The caller's directory may be under a folder the tmpfs mounts below hide
# (a checkout in /tmp): hold it on /dev meanwhile and put it back in place.
cwd=$(cat /mnt/cwd)
mkdir /dev/.sbx-cwd && mount --bind "$cwd" /dev/.sbx-cwd
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=0755 run /run
mount -t tmpfs -o mode=1777 vartmp /var/tmp
mount -t tmpfs -o mode=0700 roothome /root
if [ ! -d "$cwd" ] || [ -z "$(ls -A "$cwd" 2>/dev/null)" ]; then
  mkdir -p "$cwd" && mount --move /dev/.sbx-cwd "$cwd"
else
  umount /dev/.sbx-cwd
fi
rmdir /dev/.sbx-cwd 2>/dev/null
mkdir -p /dev/pts /dev/shm /run/out
mount --move /mnt /run/out
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
ip link set lo up 2>/dev/null
hostname sbx-cgroup2-vm
ulimit -n 20000 2>/dev/null
# What systemd does on a pure v2 host: the controllers are enabled at the root.
echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control
bash /run/out/cmd >/run/out/output 2>&1 </dev/null
echo $? >/run/out/rc
sync
poweroff -f
EOF
# The command's output is shown as the guest writes it (the share is synchronous).
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
  -accel "${SBX_VM_ACCEL:-tcg,thread=multi}" -cpu max -smp "$(nproc)" -m "$mem" -nodefaults -no-reboot \
  -display none -serial file:"$run/console" \
  -kernel "$kdir/vmlinuz" -initrd "$kdir/initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 cgroup_no_v1=all" \
  -fsdev local,id=hostroot,path=/,security_model=passthrough,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev local,id=out,path="$run",security_model=passthrough \
  -device virtio-9p-pci,fsdev=out,mount_tag=out </dev/null &
qpid=$!
tail -n +1 -f --pid=$qpid "$run/output"
set +e
wait $qpid
qrc=$?
qpid=
set -e
if [ ! -s "$run/rc" ]; then
  echo "cgroup2-vm: the guest ended without a result (qemu exit $qrc); its console:" >&2
  tail -n 40 "$run/console" >&2
  exit 125
fi
exit "$(cat "$run/rc")"
