#!/usr/bin/env bash
# A benchmark killed mid-run leaves no Docker container either: bench_linux
# measures `docker run -d` against its boxes, and labels every container it
# makes with its run (sbx-bench=PID); bench_at_end() (tests/lib/bench.c)
# removes them once the bench has ended, however it ended. The bench runs
# against a dockerd of this test's own (nothing else's containers are on
# it), and is killed once that engine lists a container.
. "$(dirname "$0")/lib.sh"
need_root
BENCH="$B/bench/bench_linux"
[ -x "$BENCH" ] || skip_all "$BENCH is not built (make tests builds it)"
command -v dockerd >/dev/null && command -v docker >/dev/null || skip_all "no dockerd or docker"
cd "$ROOT" || exit 1

# The private engine: no bridge, no iptables, everything under $T (short paths: a socket's is bounded).
E=$(mktemp -d /tmp/sbx-bdd.XXXXXX)
export DOCKER_HOST="unix://$E/docker.sock"
dockerd --host "$DOCKER_HOST" --data-root "$E/data" --exec-root "$E/exec" --pidfile "$E/pid" \
  --bridge none --iptables=false >"$E/log" 2>&1 &
dpid=$!
end_engine() {
  docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1
  kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null
  rm -rf "$E"
}
up=""
for _ in $(seq 300); do docker info >/dev/null 2>&1 && { up=1; break; }; sleep 0.2; done
[ -n "$up" ] || { tail -5 "$E/log"; end_engine; skip_all "the private dockerd did not come up"; }

container_made() { [ -n "$(docker ps -aq 2>/dev/null)" ]; }
for sig in KILL TERM; do
  before=$(echo /tmp/sbx-bench-??????)
  kill_mid_run $sig "a container" container_made "$BENCH" 10 || continue
  # The helper removes them once the bench has ended: wait for that (a
  # guard against a hang, 2 minutes, not a measure: a leak never goes).
  for _ in $(seq 600); do [ -z "$(docker ps -aq)" ] && break; sleep 0.2; done
  if [ -z "$(docker ps -aq)" ]; then ok "SIG$sig mid-run: no container left"
  else not_ok "SIG$sig mid-run: no container left" "left: $(docker ps -a --format '{{.ID}} {{.Labels}}' | head -5)"; fi
  docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1
  # Its boxes died with it (die_with_creator): no process names its state
  # dir; the dir itself, only files then, a killed bench cannot remove.
  for d in /tmp/sbx-bench-??????; do
    case " $before " in *" $d "*) continue ;; esac
    for _ in $(seq 600); do pgrep -f "$d/" >/dev/null || break; sleep 0.2; done
    if pgrep -f "$d/" >/dev/null; then not_ok "SIG$sig mid-run: no box left" "$(pgrep -af "$d/" | head -3)"
    else ok "SIG$sig mid-run: no box left"; fi
    rm -rf "$d"
  done
done
end_engine
finish
