#!/usr/bin/env bash
# Starts or stops a private dockerd for tests and benchmarks, with the flags
# this machine needs: no bridge, no iptables (containers get loopback only).
#   scripts/test-dockerd.sh start   -> prints DOCKER_HOST=unix:///run/sbx-test/docker.sock
#   scripts/test-dockerd.sh stop
set -eu
run=/run/sbx-test
data=${SBX_TEST_DOCKER_DATA:-/var/lib/sbx-test-docker}
sock=$run/docker.sock
case "${1:-start}" in
start)
  mkdir -p "$run" "$data"
  if [ -S "$sock" ] && DOCKER_HOST=unix://$sock docker info >/dev/null 2>&1; then
    echo "DOCKER_HOST=unix://$sock"; exit 0
  fi
  command -v dockerd >/dev/null || { echo "dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
  nohup dockerd --host "unix://$sock" --data-root "$data" --exec-root "$run/exec" \
    --pidfile "$run/docker.pid" --bridge none --iptables=false \
    >"$run/dockerd.log" 2>&1 &
  for _ in $(seq 1 150); do
    DOCKER_HOST=unix://$sock docker info >/dev/null 2>&1 && { echo "DOCKER_HOST=unix://$sock"; exit 0; }
    sleep 0.2
  done
  echo "dockerd did not come up; see $run/dockerd.log" >&2; tail -20 "$run/dockerd.log" >&2; exit 1
  ;;
stop)
  if [ -f "$run/docker.pid" ]; then
    pid=$(cat "$run/docker.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  ;;
*) echo "usage: $0 start|stop" >&2; exit 2;;
esac
