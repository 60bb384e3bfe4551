#!/usr/bin/env bash
# A registry that lies (tests/registry/hostile_registry.py, a small HTTP
# server on loopback): manifests declaring layers bigger than the image
# bound or the free space, blobs longer than declared or endless, endless
# error pages, a pull killed mid-blob, and token realms on another host or
# over a weaker scheme than the registry's. Checks what a user sees: a clear
# error naming the layer, its size and the knob; nothing left in the pull
# layout; a killed pull's partial resumed while fresh and swept when old;
# credentials never reaching a realm they do not belong to.
. "$(dirname "$0")/lib.sh"
need_root
for tool in openssl curl; do
  command -v $tool >/dev/null || skip_all "$tool is not installed (scripts/deps.sh)"
done
. "$ROOT/tests/registry/fixture.sh"
cd "$T/host"
PIDS=()
cleanup() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
BLOBS="$SBX_STATE_DIR/linux/images/oci/blobs/sha256" # <store>/oci: the pull layout
export DOCKER_CONFIG="$T/host/dc-none"
mkdir -p "$DOCKER_CONFIG"

# hostile NAME ARGS...: starts a hostile registry logging to $T/host/NAME/, on $HP.
hostile() {
  local name=$1; shift
  mkdir -p "$name"
  HP=$(reg_free_port)
  "$PY" "$ROOT/tests/registry/hostile_registry.py" "$HP" "$T/host/$name" "$@" &
  PIDS+=($!)
}
wait_up() { local i; for i in $(seq 1 100); do curl -sk -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }

hostile log
R=127.0.0.1:$HP
wait_up "http://$R/v2/" || skip_all "the hostile registry does not start here"
curl -s "http://$R/v2/ok/img/manifests/1" >manifest.json
LAYER=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"][7:])' manifest.json)
SIZE=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["size"])' manifest.json)
check "the fixture serves a manifest" test ${#LAYER} = 64
# requests REPO: blob requests the registry got for REPO; sent REPO: bytes it sent for REPO's layer.
requests() { awk -v r="$1" '$1 == r' log/blobs.log 2>/dev/null | wc -l; }
sent() { awk -v r="$1" -v d="sha256:$LAYER" '$1 == r && $2 == d { s += $4 } END { print s + 0 }' log/blobs.log 2>/dev/null; }
nothing_left() {
  check "$1: no partial blob is left" eval '! ls "$BLOBS"/*.partial >/dev/null 2>&1'
  check "$1: the layer is not stored" test ! -e "$BLOBS/$LAYER"
}

# --- declared sizes, before a byte is fetched -------------------------------
run "a layer declaring 1 TiB is refused" 1 "$SBX" image pull "$R/huge/img:1"
check "the error names the layer" has "$ERR" "layer sha256:$LAYER"
check "and its declared size" has "$ERR" "1099511627776 bytes (1.0 TiB)"
check "and the knob to raise" has "$ERR" "max_image_bytes"
check "no blob was asked for" test "$(requests huge)" = 0
nothing_left "1 TiB"

cat >small.yaml <<'YAML'
sandbox:
  linux:
    max_image_bytes: 10485760
YAML
# (sbx image uses the provider's defaults: a run with --config pulls with its max_image_bytes.)
run "four layers of 3 MiB with max_image_bytes 10 MiB are refused" 125 "$SBX" run --config small.yaml --image "$R/many/img:1" -- true
check "the error gives their sum and the bound" has "$ERR" "4 layers of $R/many/img:1 declare 12583114 bytes (12.0 MiB) together, more than the 10485760 bytes (10.0 MiB)"
check "and says to raise max_image_bytes" has "$ERR" "raise the linux provider's max_image_bytes"
check "no blob was asked for" test "$(requests many)" = 0

cat >roomy.yaml <<'YAML'
sandbox:
  linux:
    max_image_bytes: 1099511627776
YAML
avail=$(df -B1 --output=avail "$SBX_STATE_DIR" | tail -1)
if [ "$avail" -lt $((900 << 30)) ]; then
  run "a layer declaring 900 GiB, more than the free space, is refused" 125 "$SBX" run --config roomy.yaml --image "$R/big/img:1" -- true
  check "the error names the layer and the free space" has "$ERR" "layer sha256:$LAYER of $R/big/img:1 declares 966367641600 bytes (900.0 GiB), more than the"
  check "on the store's filesystem" has "$ERR" "free on the filesystem of"
  check "no blob was asked for" test "$(requests big)" = 0
  nothing_left "900 GiB"
else
  ok "# SKIP the store's filesystem has 900 GiB free"
fi

# --- blobs that do not stop where they said ----------------------------------
rm -f "$BLOBS"/*.partial # each case on its own, whatever the one before left
run "a blob whose Content-Length is past its declared size is refused" 1 "$SBX" image pull "$R/more/img:1"
check "says the registry sends more than declared" has "$ERR" "past the $SIZE bytes its manifest declares"
nothing_left "Content-Length lie"
rm -f "$BLOBS"/*.partial # each case on its own, whatever the one before left
run "a blob longer than declared, without a length, is refused" 1 "$SBX" image pull "$R/nolen/img:1"
check "says the registry sends more than declared" has "$ERR" "sends more than the $SIZE bytes its manifest declares"
nothing_left "longer stream"
rm -f "$BLOBS"/*.partial # each case on its own, whatever the one before left
run "a blob that never ends is refused" 1 "$SBX" image pull "$R/forever/img:1"
check "says the registry sends more than declared" has "$ERR" "sends more than the $SIZE bytes its manifest declares"
nothing_left "endless stream"
rm -f "$BLOBS"/*.partial # each case on its own, whatever the one before left
run "an HTTP 500 whose body never ends is refused" 1 "$SBX" image pull "$R/errpage/img:1"
check "says the error page is too long" has "$ERR" "error page longer than 64 KiB"
# Each of six attempts would read the whole page (the server caps it at 64 MiB).
check "sbx stopped reading it (less than 16 MiB sent)" test "$(sent errpage)" -lt $((16 << 20))
nothing_left "endless error page"
run "the honest image pulls" 0 "$SBX" image pull "$R/ok/img:1"
check "its layer is stored" test -f "$BLOBS/$LAYER"

# --- a killed pull's partial: resumed while fresh, swept when old -----------
fresh() { "$SBX" image rm "$R/ok/img:1" >/dev/null 2>&1; "$SBX" image prune >/dev/null; }
# killed_pull: a pull of stall/img:1 killed (-9) once its partial holds 256 KiB.
killed_pull() {
  "$SBX" image pull "$R/stall/img:1" >/dev/null 2>&1 &
  local pid=$! i
  for i in $(seq 1 300); do
    [ "$(stat -c %s "$BLOBS/$LAYER.partial" 2>/dev/null || echo 0)" -ge 262144 ] && break
    sleep 0.1
  done
  kill -9 $pid
  wait $pid 2>/dev/null
}
fresh
check "prune removed the layer" test ! -e "$BLOBS/$LAYER"
killed_pull
check "the killed pull left its partial" test -f "$BLOBS/$LAYER.partial"
run "gc" 0 "$SBX" gc
check "gc keeps a fresh partial (for a resume)" test -f "$BLOBS/$LAYER.partial"
run "the next pull of the blob succeeds" 0 "$SBX" image pull "$R/ok/img:1"
check "it resumed from byte 262144" grep -q "^ok sha256:$LAYER bytes=262144- " log/blobs.log
nothing_left_but_layer() { check "$1: no partial blob is left" eval '! ls "$BLOBS"/*.partial >/dev/null 2>&1'; }
nothing_left_but_layer "resumed"

fresh
killed_pull
touch -d '2 hours ago' "$BLOBS/$LAYER.partial"
run "gc" 0 "$SBX" gc
check "gc removed a partial abandoned two hours ago" test ! -e "$BLOBS/$LAYER.partial"

killed_pull
touch -d '2 hours ago' "$BLOBS/$LAYER.partial"
: >log/blobs.log
run "a pull of the blob after its partial was abandoned" 0 "$SBX" image pull "$R/ok/img:1"
check "started from byte 0 (the old partial was swept first)" grep -q "^ok sha256:$LAYER - " log/blobs.log
check "and did not resume it" eval '! grep -q "^ok sha256:$LAYER bytes=" log/blobs.log'
fresh
killed_pull
touch -d '2 hours ago' "$BLOBS/$LAYER.partial"
run "a pull of another image" 1 "$SBX" image pull "$R/huge/img:1"
check "swept the abandoned partial too" test ! -e "$BLOBS/$LAYER.partial"

# --- credentials and token realms -------------------------------------------
# creds HOST:PORT: a docker config holding alice's password for that registry.
creds() { mkdir -p "dc-$1"; printf '{"auths":{"%s":{"username":"alice","password":"s3cret"}}}' "$1" >"dc-$1/config.json"; echo "$T/host/dc-$1"; }
TP=$(reg_free_port)
hostile other --realm "http://127.0.0.2:$TP/token" --token-on "127.0.0.2:$TP" --token-basic-only
RO=127.0.0.1:$HP
wait_up "http://127.0.0.2:$TP/token" || skip_all "cannot listen on 127.0.0.2"
DOCKER_CONFIG=$(creds "$RO") run "a realm on another host: refused" 1 "$SBX" image pull "$RO/ok/img:1"
check "the realm was asked" test -s other/token-127.0.0.2.log
check "without the credentials" eval '! grep -q " basic$" other/token-127.0.0.2.log'
check "the error says why the credentials were not sent" has "$ERR" "were not sent to it because its realm http://127.0.0.2:$TP/token is not on http://$RO"

TP=$(reg_free_port)
hostile same --realm "http://127.0.0.1:$TP/token" --token-on "127.0.0.1:$TP" --token-basic-only
RS=127.0.0.1:$HP
wait_up "http://$RS/v2/" && wait_up "http://127.0.0.1:$TP/token"
DOCKER_CONFIG=$(creds "$RS") run "a realm on the registry's host (another port) gets them" 0 "$SBX" image pull "$RS/ok/img:1"
check "the credentials reached it" grep -q " basic$" same/token-127.0.0.1.log

reg_ca "$T/ca" || skip_all "openssl cannot make a CA"
TP=$(reg_free_port)
hostile tls --tls "$T/ca/server.crt" "$T/ca/server.key" --realm "http://127.0.0.1:$TP/token" --token-on "127.0.0.1:$TP"
RT=127.0.0.1:$HP
wait_up "https://$RT/v2/" && wait_up "http://127.0.0.1:$TP/token"
mkdir -p "certs.d/$RT"
cp "$T/ca/ca.crt" "certs.d/$RT/ca.crt"
SBX_CERTS_DIRS="$T/host/certs.d" DOCKER_CONFIG=$(creds "$RT") \
  run "an https registry with an http realm: pulled anonymously" 0 "$SBX" image pull "$RT/ok/img:1"
check "the realm was asked" test -s tls/token-127.0.0.1.log
check "never with the credentials (they would cross in clear)" eval '! grep -q " basic$" tls/token-127.0.0.1.log'

cleanup
PIDS=()
trap - EXIT
finish
