#!/usr/bin/env bash
# Endpoints and port forwarding as a user runs them (docs/networking.md): a
# web server in a box with no network, fetched with curl through `sbx
# endpoint`, `-p` and `sbx port-forward`: 100 requests at once, a 100 MiB
# body checked by sha256, the reference's error for an undeclared port, and
# nothing listening once the box is stopped. Only loopback traffic.
# port-forward is signalled by its pid: not under memcheck.
SBX_NO_VALGRIND_CLI=1
. "$(dirname "$0")/lib.sh"
need_root
command -v curl >/dev/null || skip_all "curl is not installed"

# Listens on host TCP port $1? (/proc/net/tcp{,6}: state 0A)
listening() {
  local hex; hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6
}
# A server with a real listen backlog (python3 -m http.server's is 5).
cat >"$T/host/web.py" <<'PY'
import http.server, os, sys
os.chdir(sys.argv[2])
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
PY

ID=$("$SBX" create --port 8000 -p 9000 2>"$T/err") || { not_ok "create" "$(cat "$T/err")"; finish; exit 1; }
ok "create --port 8000 -p 9000: $ID"
run "cp the server in" 0 "$SBX" cp "$T/host/web.py" "$ID:/tmp/web.py"
run "start it in the box" 0 "$SBX" exec "$ID" -- sh -c \
  'mkdir -p /tmp/www && echo hello > /tmp/www/hi && head -c 100M /dev/urandom > /tmp/www/big &&
   setsid -f python3 /tmp/web.py 8000 /tmp/www >/dev/null 2>&1'
run "the box has no network" 0 "$SBX" exec "$ID" -- ls /sys/class/net
check "only lo" [ "$OUT" = lo ]
run "endpoint 8000" 0 "$SBX" endpoint "$ID" 8000
URL=$OUT
check "a loopback URL" has "$URL" "http://127.0.0.1:"
# The server starts in the background (a hang guard, not a timing).
for i in $(seq 1 600); do curl -sf --noproxy '*' "$URL/hi" >/dev/null && break; sleep 0.1; done
run "curl through the endpoint" 0 curl -sf --noproxy '*' "$URL/hi"
check "the box's file" [ "$OUT" = hello ]
urls=(); for i in $(seq 1 100); do urls+=("$URL/hi"); done
run "100 requests at once" 0 curl -sf --noproxy '*' --parallel --parallel-max 100 "${urls[@]}"
check "100 answers" [ "$(printf '%s\n' "$OUT" | grep -c '^hello$')" = 100 ]
run "the box's digest" 0 "$SBX" exec "$ID" -- sha256sum /tmp/www/big
want=${OUT%% *}
got=$(curl -sf --noproxy '*' "$URL/big" | sha256sum); got=${got%% *}
check "100 MiB through the endpoint, intact" [ "$got" = "$want" ]
run "an undeclared port" 2 "$SBX" endpoint "$ID" 8080
check "the reference's message" has "$ERR" "Sandbox port 8080 was not declared in SandboxSpec.ports; declared ports: [8000, 9000]"

"$SBX" port-forward "$ID" :8000 >"$T/pf" 2>&1 &
PF=$!
for i in $(seq 1 600); do grep -q -- '-> 8000' "$T/pf" 2>/dev/null && break; kill -0 $PF 2>/dev/null || break; sleep 0.1; done
PORT=$(sed -n 's/^Forwarding from 127.0.0.1:\([0-9]*\) -> 8000$/\1/p' "$T/pf")
check "port-forward says where" [ -n "$PORT" ]
got=$(curl -sf --noproxy '*' "http://127.0.0.1:$PORT/big" | sha256sum); got=${got%% *}
check "100 MiB through port-forward, intact" [ "$got" = "$want" ]
kill -INT $PF; wait $PF; rc=$?
check "Ctrl-C ends port-forward with 130" [ "$rc" = 130 ]
check "its listener is gone" eval "! listening $PORT"

EP_PORT=${URL##*:}
run "endpoint 9000" 0 "$SBX" endpoint "$ID" 9000
P9000=${OUT##*:}
run "stop" 0 "$SBX" stop "$ID"
check "no listener left after stop" eval "! listening $EP_PORT && ! listening $P9000"
check "connections refused after stop" eval "! curl -s --noproxy '*' -o /dev/null $URL/hi"
finish
