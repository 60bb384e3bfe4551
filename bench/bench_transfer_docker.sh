#!/usr/bin/env bash
# A source tree of 10,000 small files (100 directories of 100 files, 16-200
# bytes) into and out of a box: `sbx cp` into a linux box against `docker
# cp` and `tar | docker exec -i ... tar -x` into a container of the same
# busybox image, and a host `cp -a`, each the median of N runs, printed with
# ratios. Comparisons, not pass/fail.
#
#   bench/bench_transfer_docker.sh [N]   (default 3; needs root and docker)
# docker: a daemon that already answers (DOCKER_HOST, or the private one of
# scripts/test-dockerd.sh); SBX_BENCH_DOCKER=1 starts a private dockerd of
# its own (socket and data in the bench's temporary directory, --bridge none
# --iptables=false) and stops it at the end.
set -u
N=${1:-3}
B=${B:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
SBX="$B/sbx"
[ "$(id -u)" = 0 ] || { echo "# bench_transfer_docker: needs root, skipped"; exit 0; }
command -v docker >/dev/null || { echo "# bench_transfer_docker: docker not installed, skipped"; exit 0; }
W=$(mktemp -d /tmp/sbx-bench-xfer.XXXXXX)
box= ctr=
export SBX_STATE_DIR="$W/state"
. "$ROOT/bench/docker.sh"
cleanup() {
  [ -n "$box" ] && "$SBX" stop "$box" >/dev/null 2>&1
  [ -n "$ctr" ] && docker rm -f "$ctr" >/dev/null 2>&1
  [ -n "$bench_docker_started" ] && docker rmi -f sbx-bench-xfer >/dev/null 2>&1
  bench_docker_down
  rm -rf "$W"
}
trap cleanup EXIT
bench_docker_need bench_transfer_docker "$W"

cd "$W"
bench_docker_image sbx-bench-xfer
"$SBX" image import sbx-bench-xfer base.tar >/dev/null
ctr=$(docker run -d --network none sbx-bench-xfer sleep 100000)
box=$("$SBX" create --image sbx-bench-xfer)
python3 - "$W/src" <<'EOF'
import os, random, sys
random.seed(7)
root = sys.argv[1]
for d in range(100):
    os.makedirs(f"{root}/d{d:02d}")
    for f in range(100):
        with open(f"{root}/d{d:02d}/f{f:02d}", "wb") as fh:
            fh.write(os.urandom(random.randint(16, 200)))
EOF

now() { date +%s.%N; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# Times one command line (a fresh target each run, removed after).
timed() { local t0 t1; t0=$(now); eval "$1" >/dev/null 2>&1 || return 1; t1=$(now); echo "$t1 - $t0" | bc; }
run_n() { for i in $(seq 1 "$N"); do timed "${1//@/$i}"; eval "${2//@/$i}" >/dev/null 2>&1; done | median; }

up_sbx=$(run_n "'$SBX' cp '$W/src' '$box:/up@'" "'$SBX' exec '$box' -- rm -rf /up@")
up_dcp=$(run_n "docker cp '$W/src' '$ctr:/up@'" "docker exec '$ctr' rm -rf /up@")
up_tar=$(run_n "docker exec '$ctr' mkdir /up@ && tar -C '$W/src' -cf - . | docker exec -i '$ctr' tar -xf - -C /up@" \
  "docker exec '$ctr' rm -rf /up@")
cpa=$(run_n "cp -a '$W/src' '$W/cpa@'" "rm -rf '$W/cpa@'")
"$SBX" cp "$W/src" "$box:/tree" >/dev/null
docker cp "$W/src" "$ctr:/tree" >/dev/null
down_sbx=$(run_n "'$SBX' cp '$box:/tree' '$W/dn@'" "rm -rf '$W/dn@'")
down_dcp=$(run_n "docker cp '$ctr:/tree' '$W/dd@'" "rm -rf '$W/dd@'")
down_tar=$(run_n "mkdir '$W/dt@' && docker exec '$ctr' tar -cf - -C /tree . | tar -xf - -C '$W/dt@'" "rm -rf '$W/dt@'")
# The tree arrived whole: the same bytes both ways.
"$SBX" cp "$box:/tree" "$W/check" >/dev/null
if ! diff -r "$W/src" "$W/check" >/dev/null; then
  echo "# bench_transfer_docker: the tree that came back differs"; exit 1
fi

r() { echo "$1 / $2" | bc -l; }
echo "# bench_transfer_docker: 10,000 files in 100 directories, median of $N ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
printf '%-40s %7.3f s\n' "upload: sbx cp" "$up_sbx"
printf '%-40s %7.3f s   sbx/docker-cp %.2f\n' "upload: docker cp" "$up_dcp" "$(r "$up_sbx" "$up_dcp")"
printf '%-40s %7.3f s   sbx/tar-exec %.2f\n' "upload: tar | docker exec -i tar -x" "$up_tar" "$(r "$up_sbx" "$up_tar")"
printf '%-40s %7.3f s   sbx/cp-a %.2f\n' "host cp -a" "$cpa" "$(r "$up_sbx" "$cpa")"
printf '%-40s %7.3f s\n' "download: sbx cp" "$down_sbx"
printf '%-40s %7.3f s   sbx/docker-cp %.2f\n' "download: docker cp" "$down_dcp" "$(r "$down_sbx" "$down_dcp")"
printf '%-40s %7.3f s   sbx/tar-exec %.2f\n' "download: docker exec tar -c | tar -x" "$down_tar" "$(r "$down_sbx" "$down_tar")"
