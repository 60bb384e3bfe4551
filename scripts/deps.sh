#!/usr/bin/env bash
# Installs the Debian packages sbx needs to build and test, when missing.
# Safe to run again: it installs only what is not there yet.
set -eu
pkgs=(build-essential pkg-config clang libclang-rt-14-dev valgrind
      libuv1-dev libcurl4-openssl-dev libjansson-dev libyaml-dev libarchive-dev
      libseccomp-dev libcap-dev nettle-dev libsquashfs-dev libnftables-dev passt libnl-route-3-dev
      skopeo squashfs-tools zstd
      python3 python3-pytest python3-aiohttp
      busybox-static bubblewrap docker.io podman iproute2 procps util-linux e2fsprogs tmux less
      qemu-system-x86
      docker-registry skopeo apache2-utils openssl curl python3-cryptography)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "sbx: installing ${missing[*]}"
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
