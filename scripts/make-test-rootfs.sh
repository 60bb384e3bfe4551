#!/usr/bin/env bash
# Builds a tiny root filesystem tarball from Debian's busybox-static, for test
# and benchmark images (no registry needed): scripts/make-test-rootfs.sh OUT.tar
set -eu
out=${1:?usage: $0 OUT.tar}
bb=/bin/busybox
[ -x "$bb" ] && file "$bb" 2>/dev/null | grep -q static || bb=$(command -v busybox)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,proc,sys,dev,run,var/tmp,home/user}
cp "$bb" "$tmp/bin/busybox"
chroot "$tmp" /bin/busybox --install -s 2>/dev/null || "$tmp/bin/busybox" --install -s "$tmp/bin"
chmod 1777 "$tmp/tmp" "$tmp/var/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$tmp/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n' >"$tmp/etc/group"
chown 1000:1000 "$tmp/home/user"
# A marker that tells this image from the host (the box writes its own /etc/hostname).
echo sbx-test >"$tmp/etc/image-name"
tar -C "$tmp" --numeric-owner -cf "$out" .
