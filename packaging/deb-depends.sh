#!/usr/bin/env bash
# Prints the Depends: of the sbx package: the Debian packages that ship the
# shared libraries its binaries name as NEEDED (what dpkg-shlibdeps finds,
# without needing a debian/ source tree), at least the versions built against.
set -eu
for f in "$@"; do
  objdump -p "$f" | awk '$1 == "NEEDED" { print $2 }'
done | sort -u | while read -r soname; do
  case $soname in ld-linux*) continue;; esac # the loader: part of libc6
  pkg=$(dpkg -S "*/$soname" 2>/dev/null | grep -v -- '-dev' | head -1 | cut -d: -f1)
  [ -n "$pkg" ] || { echo "deb-depends: no package ships $soname" >&2; exit 1; }
  echo "$pkg (>= $(dpkg-query -W -f='${Version}' "$pkg" | sed 's/-[^-]*$//'))"
done | sort -u | paste -sd, | sed 's/,/, /g'
