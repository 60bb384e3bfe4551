# Sourced by the benchmarks that compare with Docker (not run by itself).
# bench_docker_up DIR: makes `docker` answer, or returns 1. A daemon that
# already answers (DOCKER_HOST, or the private one of scripts/test-dockerd.sh)
# is used; SBX_BENCH_DOCKER=1 starts a private dockerd of its own (socket and
# data under DIR, --bridge none --iptables=false), which bench_docker_down
# stops (call it from the bench's EXIT trap).
bench_docker_started=
docker_ok() { docker info >/dev/null 2>&1; }
bench_docker_up() {
  local w=$1
  if ! docker_ok && [ -z "${DOCKER_HOST:-}" ] && [ -S /run/sbx-test/docker.sock ]; then
    export DOCKER_HOST=unix:///run/sbx-test/docker.sock
  fi
  if ! docker_ok && [ "${SBX_BENCH_DOCKER:-}" = 1 ] && command -v dockerd >/dev/null; then
    dockerd --host "unix://$w/docker.sock" --data-root "$w/docker-data" --exec-root "$w/dx" \
      --pidfile "$w/docker.pid" --bridge none --iptables=false >"$w/dockerd.log" 2>&1 &
    bench_docker_started=$!
    bench_docker_dir=$w
    export DOCKER_HOST="unix://$w/docker.sock"
    for _ in $(seq 1 150); do docker_ok && break; sleep 0.2; done
  fi
  docker_ok
}
bench_docker_down() {
  [ -n "$bench_docker_started" ] || return 0
  kill "$bench_docker_started" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$bench_docker_started" 2>/dev/null || break; sleep 0.1; done
  umount -R "$bench_docker_dir/docker-data" 2>/dev/null
  bench_docker_started=
}
# bench_docker_need NAME DIR: bench_docker_up DIR, or says NAME is skipped and exits 0.
bench_docker_need() {
  bench_docker_up "$2" && return 0
  echo "# $1: no docker daemon answers (SBX_BENCH_DOCKER=1 starts one), skipped"
  exit 0
}
# bench_docker_image IMAGE: base.tar here (scripts/make-test-rootfs.sh), imported into the engine as IMAGE.
bench_docker_image() {
  "$ROOT/scripts/make-test-rootfs.sh" base.tar
  docker import base.tar "$1" >/dev/null
}
