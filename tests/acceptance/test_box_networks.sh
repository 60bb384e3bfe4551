#!/usr/bin/env bash
# Box-to-box networks as a user runs them (docs/networking.md, "Box-to-box
# networks"): `sbx network create`, two boxes with --network talking by
# name (python3 sockets in the "none" image), a third box outside that cannot
# reach them, `sbx network rm` refused while in use and accepted after.
# Traffic only between the script's own boxes.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="the ASan run covers its CLI calls; it parses nothing hostile"
. "$(dirname "$0")/lib.sh"
need_root

SERVE='setsid -f python3 -c "import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"0.0.0.0\", 7000)); s.listen(8); open(\"/tmp/up\", \"w\").close()
while True:
    c, _ = s.accept(); c.sendall(b\"pong\n\"); c.close()" >/dev/null 2>&1
for i in $(seq 200); do [ -e /tmp/up ] && exit 0; sleep 0.05; done; exit 1'
FETCH='python3 -c "import socket, sys
try:
    print(socket.create_connection((sys.argv[1], 7000), timeout=3).recv(10).decode().strip())
except OSError as e:
    print(\"failed\", e)"'

run "network create" 0 "$SBX" network create acc1
check "prints its name" [ "$OUT" = acc1 ]
SRV=$("$SBX" create --network acc1 2>"$T/err") || not_ok "create a server box" "$(cat "$T/err")"
CLI=$("$SBX" create --network acc1 2>"$T/err") || not_ok "create a client box" "$(cat "$T/err")"
OUTSIDE=$("$SBX" create 2>"$T/err") || not_ok "create a box outside" "$(cat "$T/err")"
run "start the server" 0 "$SBX" exec "$SRV" -- sh -c "$SERVE"
run "the client reaches it by id" 0 "$SBX" exec "$CLI" -- sh -c "$FETCH $SRV"
check "pong" [ "$OUT" = pong ]
run "the server's address" 0 "$SBX" exec "$SRV" -- sh -c "getent hosts $SRV"
ADDR=${OUT%% *}
check "in 10.89.0.0/16" has "$ADDR" "10.89."
run "the box outside cannot" 0 "$SBX" exec "$OUTSIDE" -- sh -c "$FETCH $ADDR"
check "failed" has "$OUT" "failed"
run "ls shows both boxes" 0 "$SBX" network ls --json
check "the server" has "$OUT" "$SRV"
run "rm refused while in use" 1 "$SBX" network rm acc1
check "names the boxes" has "$ERR" "in use by boxes"
run "stop" 0 "$SBX" stop "$SRV" "$CLI" "$OUTSIDE"
run "rm once empty" 0 "$SBX" network rm acc1
run "ls is empty" 0 "$SBX" network ls -q
check "nothing" [ -z "$OUT" ]
check "no namespace mount left" eval "! grep -q '$SBX_STATE_DIR' /proc/self/mountinfo"
finish
