#!/usr/bin/env bash
# Pull of a ~200 MB three-layer image from a loopback registry (Debian's
# docker-registry): sbx image pull (fetch, verify, unpack into the store)
# vs skopeo copy to an OCI directory (fetch and verify only) vs docker pull
# (fetch, verify, unpack), each the median of N runs from empty, printed
# with ratios. Then a second image that shares two of the three layers:
# what sbx downloads and unpacks for it. Comparisons, not pass/fail.
#
#   bench/bench_pull.sh [N]     (default 3; needs root, docker-registry, skopeo)
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
for t in docker-registry skopeo python3; do
  command -v $t >/dev/null || { echo "# bench_pull: $t not installed, skipped"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "# bench_pull: needs root (the linux store), skipped"; exit 0; }
. "$ROOT/tests/registry/fixture.sh"
. "$ROOT/bench/docker.sh"
W=$(mktemp -d /tmp/sbx-bench-pull.XXXXXX)
cleanup() {
  reg_stop "$W/reg"
  bench_docker_down
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W"
"$ROOT/scripts/make-test-rootfs.sh" base.tar
# a: base + 100 MB (seed s1) + 100 MB (s2); b: base + the same s1 layer + 100 MB (s3).
python3 "$ROOT/tests/registry/make_oci.py" oci a base.tar --plain --filler 100:s1 --filler 100:s2 >/dev/null
python3 "$ROOT/tests/registry/make_oci.py" oci b base.tar --plain --filler 100:s1 --filler 100:s3 >/dev/null
reg_start "$W/reg" plain none || { echo "# bench_pull: registry did not start"; exit 0; }
reg_push oci a "$REG/bench/a:1"
reg_push oci b "$REG/bench/b:1"
size=$(du -sb "$W/reg/data" | cut -f1)

now() { date +%s.%N; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Prints "TOTAL FETCH": seconds to the end, and to the first unpacking event
# (every blob fetched and verified), from the --json event stream.
sbx_once() {
  local sd="$W/state-$1"
  rm -rf "$sd"
  SBX_STATE_DIR="$sd" python3 -c '
import subprocess, sys, time
t0 = time.monotonic(); fetched = None
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if fetched is None and "\"event\":\"unpacking\"" in line:
        fetched = time.monotonic() - t0
if p.wait() != 0:
    sys.exit(1)
print("%.3f %.3f" % (time.monotonic() - t0, fetched or 0))
' "$SBX" image pull --json "$REG/bench/a:1" || return 1
  rm -rf "$sd"
}
skopeo_once() {
  rm -rf "$W/sk"
  local t0 t1
  t0=$(now)
  skopeo copy -q --src-tls-verify=false "docker://$REG/bench/a:1" "oci:$W/sk:a" >/dev/null || return 1
  t1=$(now)
  rm -rf "$W/sk"
  echo "$t1 - $t0" | bc
}
bench_docker_up "$W"
docker_once() {
  docker rmi -f "$REG/bench/a:1" >/dev/null 2>&1
  local t0 t1
  t0=$(now)
  docker pull -q "$REG/bench/a:1" >/dev/null || return 1
  t1=$(now)
  docker rmi -f "$REG/bench/a:1" >/dev/null 2>&1
  echo "$t1 - $t0" | bc
}

echo "# bench_pull: image of 3 layers, $((size >> 20)) MiB in the registry, loopback, median of $N"
runs=$(for i in $(seq 1 "$N"); do sbx_once "$i"; done)
s=$(echo "$runs" | cut -d' ' -f1 | median)
sf=$(echo "$runs" | cut -d' ' -f2 | median)
k=$(for i in $(seq 1 "$N"); do skopeo_once; done | median)
printf '%-44s %8.2f s\n' "sbx image pull (fetch+verify+unpack)" "$s"
printf '%-44s %8.2f s\n' "  of which fetch+verify (to the first unpack)" "$sf"
printf '%-44s %8.2f s   sbx fetch/skopeo %.2f\n' "skopeo copy to oci: (fetch+verify)" "$k" "$(echo "$sf / $k" | bc -l)"
if docker_ok; then
  d=$(for i in $(seq 1 "$N"); do docker_once; done | median)
  printf '%-44s %8.2f s   sbx/docker %.2f\n' "docker pull (fetch+verify+unpack)" "$d" "$(echo "$s / $d" | bc -l)"
else
  echo "docker pull: skipped (no docker daemon answers; SBX_BENCH_DOCKER=1 starts one)"
fi

# The second image shares two layers: only the third is fetched, and only
# it is unpacked (the store's layers/ gains one directory).
sd="$W/state-shared"
SBX_STATE_DIR="$sd" "$SBX" image pull "$REG/bench/a:1" >/dev/null
nl0=$(ls "$sd/linux/images/layers" | wc -l)
t0=$(now)
SBX_STATE_DIR="$sd" "$SBX" image pull --json "$REG/bench/b:1" >b.json
t1=$(now)
fetched=$(grep '"kind":"layer"' b.json | grep '"state":"done"' | grep -o '"total":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s+0}')
cached=$(grep '"kind":"layer"' b.json | grep -c '"state":"cached"')
unpacked=$(($(ls "$sd/linux/images/layers" | wc -l) - nl0))
printf '%-44s %8.2f s   %d MiB fetched, %d layers cached, %d unpacked\n' \
  "sbx pull of an image sharing 2 of 3 layers" "$(echo "$t1 - $t0" | bc)" "$((fetched >> 20))" \
  "$cached" "$unpacked"

# A box from the pulled image against a box from the same rootfs imported as
# a tarball (one layer): create+exec+stop, alternated, median of 20 each.
# A pulled image is an image of the store like any other, so the two should
# match (issue #10's goal: within 10%).
SBX_STATE_DIR="$sd" "$SBX" image import bench-imported base.tar >/dev/null
run_once() { local t0 t1; t0=$(now); SBX_STATE_DIR="$sd" "$SBX" run --image "$1" -- true >/dev/null; t1=$(now); echo "$t1 - $t0" | bc; }
for _ in $(seq 1 20); do
  run_once "$REG/bench/a:1" >>pulled.t
  run_once bench-imported >>imported.t
done
p=$(median <pulled.t); i=$(median <imported.t)
printf '%-44s %8.4f s\n' "sbx run from the imported tarball" "$i"
printf '%-44s %8.4f s   pulled/imported %.2f\n' "sbx run from the pulled image (3 layers)" "$p" \
  "$(echo "$p / $i" | bc -l)"
