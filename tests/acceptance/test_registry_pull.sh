#!/usr/bin/env bash
# Pulling from a real registry: Debian's docker-registry (distribution 2.8)
# on loopback, plain HTTP without auth, TLS with a CA the test makes and
# htpasswd auth, and token auth with a token server in Python (the bearer
# flow). Images are built here (make_oci.py) and pushed with skopeo.
# Checks what a user sees: pull by tag and digest, boxes from pulled
# images, platform selection, auth and TLS refused and accepted, corrupted
# blobs refused, broken connections resumed, concurrent pulls, --pull.
# SBX_VALGRIND_SKIP="its hundred pulls take memcheck 3 minutes; the ASan run and the fuzzers cover the client"
. "$(dirname "$0")/lib.sh"
need_root
for tool in docker-registry skopeo htpasswd openssl curl; do
  command -v $tool >/dev/null || skip_all "$tool is not installed (scripts/deps.sh)"
done
. "$ROOT/tests/registry/fixture.sh"
cd "$T/host"
PIDS=()
cleanup() {
  local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for d in "$T"/reg*; do [ -d "$d" ] && reg_stop "$d"; done
}
trap cleanup EXIT
LAYOUT="$SBX_STATE_DIR/linux/images/oci" # <store>/oci; the store is <state_dir>/images
export DOCKER_CONFIG="$T/host/dc-none" # no credentials unless a check sets them
mkdir -p "$DOCKER_CONFIG"

"$ROOT/scripts/make-test-rootfs.sh" base.tar
py "$ROOT/tests/registry/make_oci.py" oci multi base.tar --marker amd --arm64-marker arm >/dev/null
py "$ROOT/tests/registry/make_oci.py" oci single base.tar --marker single >/dev/null
py "$ROOT/tests/registry/make_oci.py" oci bad base.tar --marker to-be-corrupted >/dev/null
py "$ROOT/tests/registry/make_oci.py" oci big base.tar --marker big --filler 24 >/dev/null

# --- plain HTTP, no auth ------------------------------------------------------
reg_start "$T/reg1" plain none || skip_all "docker-registry does not start here"
R1=$REG
reg_push oci multi "$R1/x:1" --all
reg_push oci single "$R1/y:1"
reg_push oci bad "$R1/z:1"
reg_push oci big "$R1/w:1"

run "pull by tag (multi-arch index, host platform)" 0 "$SBX" image pull "$R1/x:1"
check "prints the canonical name and digest" has "$OUT" "$R1/x:1 sha256:"
run "image ls shows it" 0 "$SBX" image ls -q
check "listed under its reference" has "$OUT" "$R1/x:1"
run "a box runs from the pulled image" 0 "$SBX" run --image "$R1/x:1" -- cat /etc/pulled
check "the amd64 manifest was chosen" test "$OUT" = amd
run "whiteout applied, opaque dir kept its layer's file" 0 "$SBX" run --image "$R1/x:1" -- \
  sh -c 'test -e /etc/image-name && echo present || echo gone; cat /opt/op/kept /opt/third'
check "whiteout removed /etc/image-name" has "$OUT" "gone"
check "uncompressed layer applied" has "$OUT" "third"

run "pull another platform from the index" 0 "$SBX" image pull --platform linux/arm64 "$R1/x:1"
run "box sees the arm64 image's file" 0 "$SBX" run --image "$R1/x:1" -- cat /etc/pulled
check "the arm64 manifest was chosen" test "$OUT" = arm
run "a platform the index lacks" 1 "$SBX" image pull --platform linux/s390x "$R1/x:1"
check "says which platforms there are" has "$ERR" "linux/arm64/v8"

DIG=$(skopeo inspect --raw --tls-verify=false "docker://$R1/y:1" | sha256sum | cut -d' ' -f1)
run "pull by digest" 0 "$SBX" image pull "$R1/y@sha256:$DIG"
check "named by the digest" has "$OUT" "$R1/y@sha256:$DIG"
run "a box from the digest reference" 0 "$SBX" run --image "$R1/y@sha256:$DIG" -- cat /etc/pulled
check "it is the single image" test "$OUT" = single
run "a wrong digest is refused" 1 "$SBX" image pull "$R1/y@sha256:$(printf %064d 0)"

run "--pull never on a missing image" 125 "$SBX" run --pull never --image "$R1/y:1" -- true
check "says pulling is off" has "$ERR" "pull: never"
run "run --image pulls a missing image" 0 "$SBX" run --image "$R1/y:1" -- cat /etc/pulled
check "and runs it" test "$OUT" = single
run "--pull always pulls again" 0 "$SBX" run --pull always --image "$R1/y:1" -- true
run "bad --pull value" 2 "$SBX" run --pull sometimes --image "$R1/y:1" -- true
# On a terminal, the pull a run makes shows its bars (as image pull does); piped, nothing.
script -qec "$SBX run --pull always --image $R1/y:1 -- true" /dev/null >"$T/tty" 2>&1
check "run on a terminal: the pull's bars" grep -q 'total .*\[' "$T/tty"
check "  and each layer's" grep -Eq '^.?[0-9a-f]{12} layer ' "$T/tty"
run "run piped: no bars on stderr" 0 "$SBX" run --pull always --image "$R1/y:1" -- true
check "  stderr is empty" test -z "$ERR"

run "--json: a line per event" 0 "$SBX" image pull --json "$R1/y:1"
check "events name blobs and states" has "$OUT" '"state":"cached"'
check "the last line is the image" has "$(printf '%s\n' "$OUT" | tail -1)" '"event":"pulled"'
run "piped without --json: no progress on stderr" 0 "$SBX" image pull "$R1/y:1"
check "stderr is empty" test -z "$ERR"

# A blob whose bytes changed in the registry's storage is refused by its digest.
BAD=$(py -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["layers"][1]["digest"][7:])' \
  "oci/blobs/sha256/$(py -c 'import json; i=json.load(open("oci/index.json")); print([m for m in i["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"]=="bad"][0]["digest"][7:])')")
BLOB="$T/reg1/data/docker/registry/v2/blobs/sha256/${BAD:0:2}/$BAD/data"
check "found the layer in the registry's storage" test -f "$BLOB"
size=$(stat -c %s "$BLOB")
head -c "$size" /dev/zero >"$BLOB"
run "a corrupted blob is refused" 1 "$SBX" image pull "$R1/z:1"
check "says it does not match its digest" has "$ERR" "does not match its digest"
check "the bad blob is not kept" test ! -e "$LAYOUT/blobs/sha256/$BAD" -a ! -e "$LAYOUT/blobs/sha256/$BAD.partial"
run "and no image is named" 0 "$SBX" image ls -q
check "z is not listed" eval '! has "$OUT" "$R1/z:1"'

# Mirrors: a docker.io image (no network here: Docker Hub cannot answer) comes
# from the configured mirrors, a dead one skipped.
reg_push oci single "$R1/library/mirrored:1"
DEAD=$(reg_free_port)
cat >mirror.yaml <<YAML
sandbox:
  linux:
    registry_mirrors: ["127.0.0.1:$DEAD", "http://$R1"]
YAML
run "a docker.io image pulled through a mirror" 0 "$SBX" run --config mirror.yaml --image mirrored:1 -- cat /etc/pulled
check "it is the mirror's image" test "$OUT" = single
run "stored under its docker.io name" 0 "$SBX" image ls -q
check "named docker.io/library/mirrored:1" has "$OUT" "docker.io/library/mirrored:1"
run "without mirrors docker.io is asked (and cannot answer here)" 125 "$SBX" run --pull always --image mirrored:1 -- true
check "the failure names the docker.io reference" has "$ERR" "docker.io/library/mirrored:1"

# The pulled image's config reaches the box (Env from the config blob), by
# its short name too (looked up under its canonical one).
run "the image's Env reaches a box from a pulled image" 0 "$SBX" run --image "$R1/y:1" -- sh -c 'echo "$PULLED"'
check "PULLED=1 from the config" test "$OUT" = 1
run "and through a short docker.io name" 0 "$SBX" run --config mirror.yaml --image mirrored:1 -- sh -c 'echo "$PULLED"'
check "PULLED=1 there too" test "$OUT" = 1

# --- layers shared with the store -------------------------------------------
# sh:2 has sh:1's two layers and a third: its pull fetches and unpacks only
# the third (the store's OCI import finds the others in layers/).
STORE="$SBX_STATE_DIR/linux/images"
py "$ROOT/tests/registry/make_oci.py" oci sh1 base.tar --plain --filler 2:shared >/dev/null
py "$ROOT/tests/registry/make_oci.py" oci sh2 base.tar --plain --filler 2:shared --filler 1:own >/dev/null
reg_push oci sh1 "$R1/sh:1"
reg_push oci sh2 "$R1/sh:2"
run "pull an image of two layers" 0 "$SBX" image pull "$R1/sh:1"
before=$(cd "$STORE/layers" && ls | sort)
inodes=$(cd "$STORE/layers" && stat -c '%n %i' */diff | sort)
run "pull an image with those two layers and a third" 0 "$SBX" image pull --json "$R1/sh:2"
layer_digests() { printf '%s\n' "$OUT" | grep '"kind":"layer"' | grep "\"state\":\"$1\"" | grep -o '"digest":"[0-9a-f]*"' | sort -u | wc -l; }
check "its two shared layers were cached, not fetched" test "$(layer_digests cached)" = 2
check "one layer was downloaded" test "$(layer_digests done)" = 1
after=$(cd "$STORE/layers" && ls | sort)
check "one layer was unpacked into the store" test "$(comm -13 <(echo "$before") <(echo "$after") | wc -l)" = 1
check "the layers already there were not unpacked again" \
  test "$(cd "$STORE/layers" && stat -c '%n %i' $(echo "$before" | sed 's|$|/diff|') | sort)" = "$inodes"
run "a box from the second image sees all three layers" 0 "$SBX" run --image "$R1/sh:2" -- sh -c 'ls /filler | sort | tr "\n" " "'
check "shared and own filler" test "$OUT" = "own shared "

# --- prune and the pull layout ------------------------------------------------
SH1=$(skopeo inspect --raw --tls-verify=false "docker://$R1/sh:1" | sha256sum | cut -d' ' -f1)
SH2=$(skopeo inspect --raw --tls-verify=false "docker://$R1/sh:2" | sha256sum | cut -d' ' -f1)
check "sh:1's manifest is in the layout" test -f "$LAYOUT/blobs/sha256/$SH1"
"$SBX" image rm "$R1/sh:1" >/dev/null
STALE=$(printf '%064d' 7).partial
LIVE=$(printf '%064d' 8).partial
echo stale >"$LAYOUT/blobs/sha256/$STALE"
echo live >"$LAYOUT/blobs/sha256/$LIVE"
flock "$LAYOUT/blobs/sha256/$LIVE" sleep 300 &
HOLDER=$!
PIDS+=($HOLDER)
for i in $(seq 1 50); do flock -n "$LAYOUT/blobs/sha256/$LIVE" true || break; sleep 0.1; done
run "prune --dry-run lists the layout's leftovers" 0 "$SBX" image prune --dry-run
check "names sh:1's manifest blob" has "$OUT" "pulled blob sha256:$SH1"
check "and the stale partial" has "$OUT" "partial blob"
check "a dry run removes nothing" test -f "$LAYOUT/blobs/sha256/$SH1" -a -f "$LAYOUT/blobs/sha256/$STALE"
run "prune" 0 "$SBX" image prune
check "sh:1's manifest blob is gone" test ! -e "$LAYOUT/blobs/sha256/$SH1"
check "sh:1 left index.json" eval '! grep -q "$R1/sh:1\"" "$LAYOUT/index.json"'
check "sh:2's manifest blob stays" test -f "$LAYOUT/blobs/sha256/$SH2"
check "the partial of a dead writer is gone" test ! -e "$LAYOUT/blobs/sha256/$STALE"
check "the partial a writer holds stays" test -f "$LAYOUT/blobs/sha256/$LIVE"
kill $HOLDER 2>/dev/null; wait $HOLDER 2>/dev/null
rm -f "$LAYOUT/blobs/sha256/$LIVE"
run "sh:2 is pulled again without fetching a layer" 0 "$SBX" image pull --json "$R1/sh:2"
check "no layer downloaded" test "$(layer_digests done)" = 0
check "every layer cached" test "$(layer_digests cached)" = 3
run "and still runs" 0 "$SBX" run --image "$R1/sh:2" -- sh -c 'test -s /filler/own && echo ok'
check "with its own layer" test "$OUT" = ok

# --- broken connections: a proxy that cuts blob transfers --------------------
PP=$(reg_free_port)
echo "4000000 1" >cut.ctl
"$PY" "$ROOT/tests/registry/cut_proxy.py" "$PP" "$REG_PORT" cut.ctl &
PIDS+=($!)
for i in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$PP/v2/" && break; sleep 0.1; done
run "a cut connection is retried and resumed in one pull" 0 "$SBX" image pull --json "127.0.0.1:$PP/w:1"
check "the proxy did cut" test "$(cat cut.ctl)" = "4000000 0"
check "the retry resumed (a download started past byte 0)" \
  eval "printf '%s\n' \"\$OUT\" | grep '\"state\":\"downloading\"' | grep -v '\"done\":0,' | grep -q '\"kind\":\"layer\"'"
"$SBX" image rm "127.0.0.1:$PP/w:1" >/dev/null
rm -f "$LAYOUT"/blobs/sha256/*
echo "4000000 1000" >cut.ctl
run "a registry that keeps breaking fails the pull" 1 "$SBX" image pull "127.0.0.1:$PP/w:1"
check "says to pull again to resume" has "$ERR" "pull again to resume"
check "the partial blob is kept" eval 'ls "$LAYOUT"/blobs/sha256/*.partial >/dev/null 2>&1'
echo "0 0" >cut.ctl
run "the next pull resumes and succeeds" 0 "$SBX" image pull --json "127.0.0.1:$PP/w:1"
check "it started past byte 0" \
  eval "printf '%s\n' \"\$OUT\" | grep '\"state\":\"downloading\"' | grep -v '\"done\":0,' | grep -q '\"kind\":\"layer\"'"
check "no partial left" eval '! ls "$LAYOUT"/blobs/sha256/*.partial >/dev/null 2>&1'
run "the resumed image runs" 0 "$SBX" run --image "127.0.0.1:$PP/w:1" -- cat /etc/pulled
check "with its content" test "$OUT" = big

# Two pulls of one image at once: both succeed, each blob is fetched once.
"$SBX" image rm "127.0.0.1:$PP/w:1" >/dev/null
rm -f "$LAYOUT"/blobs/sha256/*
"$SBX" image pull --json "$R1/w:1" >c1.out 2>c1.err &
c1=$!
"$SBX" image pull --json "$R1/w:1" >c2.out 2>c2.err &
c2=$!
wait $c1; rc1=$?
wait $c2; rc2=$?
check "concurrent pull 1 succeeded" test "$rc1" = 0
check "concurrent pull 2 succeeded" test "$rc2" = 0
FILLER=$(grep '"kind":"layer"' c1.out | grep -o '"total":[0-9]*' | sort -t: -k2 -n | tail -1)
fetched=$(cat c1.out c2.out | grep '"state":"done"' | grep -c "$FILLER}")
check "the big layer was downloaded once (the other pull found it cached)" test "$fetched" = 1
run "one image named once" 0 "$SBX" image ls -q
check "w listed once" test "$(printf '%s\n' "$OUT" | grep -c "^$R1/w:1\$")" = 1

# --- TLS with a test CA, htpasswd auth ---------------------------------------
reg_ca "$T/reg2" || skip_all "openssl cannot make a CA"
reg_start "$T/reg2" tls htpasswd alice s3cret
R2=$REG
reg_push oci single "$R2/s:1" --dest-creds alice:s3cret
export SBX_CERTS_DIRS="$T/host/nocerts"
run "TLS with an unknown CA is refused" 1 "$SBX" image pull "$R2/s:1"
check "says to add the CA to certs.d" has "$ERR" "certs.d"
mkdir -p "certs.d/$R2"
cp "$T/reg2/ca.crt" "certs.d/$R2/ca.crt"
export SBX_CERTS_DIRS="$T/host/certs.d"
run "no credentials: refused" 1 "$SBX" image pull "$R2/s:1"
check "says credentials are required" has "$ERR" "requires credentials"
mkdir -p dc-bad dc-good dc-helper
printf '{"auths":{"%s":{"auth":"%s"}}}' "$R2" "$(printf alice:wrong | base64)" >dc-bad/config.json
printf '{"auths":{"https://%s":{"auth":"%s"}}}' "$R2" "$(printf alice:s3cret | base64)" >dc-good/config.json
DOCKER_CONFIG="$T/host/dc-bad" run "wrong credentials: refused" 1 "$SBX" image pull "$R2/s:1"
check "says the credentials were refused" has "$ERR" "refused the credentials"
DOCKER_CONFIG="$T/host/dc-good" run "credentials from DOCKER_CONFIG: pulled over TLS" 0 "$SBX" image pull "$R2/s:1"
DOCKER_CONFIG="$T/host/dc-good" run "and a box runs from it" 0 "$SBX" run --image "$R2/s:1" -- cat /etc/pulled
check "the TLS image's content" test "$OUT" = single
# A credential helper, run as Docker runs it (server on stdin, JSON on stdout).
mkdir -p bin
cat >bin/docker-credential-sbxtest <<HELPER
#!/bin/sh
read server
echo "\$server" >"$T/host/helper.asked"
[ "\$1" = get ] && printf '{"ServerURL":"%s","Username":"alice","Secret":"s3cret"}' "\$server"
HELPER
chmod +x bin/docker-credential-sbxtest
printf '{"credHelpers":{"%s":"sbxtest"}}' "$R2" >dc-helper/config.json
"$SBX" image rm "$R2/s:1" >/dev/null
PATH="$T/host/bin:$PATH" DOCKER_CONFIG="$T/host/dc-helper" run "credentials from a credential helper" 0 "$SBX" image pull "$R2/s:1"
check "the helper was asked for the registry" test "$(cat helper.asked 2>/dev/null)" = "$R2"
unset SBX_CERTS_DIRS

# --- token auth (bearer flow) ---------------------------------------------------
TP=$(reg_free_port)
mkdir -p "$T/reg3"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sbx token signer" \
  -keyout "$T/reg3/token.key" -out "$T/reg3/token.crt" >/dev/null 2>&1
(cd "$T/reg3" && exec "$PY" "$ROOT/tests/registry/token_server.py" "$TP" token.key token.crt bob pw) &
PIDS+=($!)
reg_start "$T/reg3" plain token "http://127.0.0.1:$TP/token" "$T/reg3/token.crt"
R3=$REG
for i in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$TP/" && break; sleep 0.1; done
# skopeo pushes through the same token flow.
reg_push oci single "$R3/t/u:1" --dest-creds bob:pw
run "token auth without credentials: refused" 1 "$SBX" image pull "$R3/t/u:1"
check "says the token service refused" has "$ERR" "token service"
mkdir -p dc-tok
printf '{"auths":{"%s":{"username":"bob","password":"pw"}}}' "$R3" >dc-tok/config.json
DOCKER_CONFIG="$T/host/dc-tok" run "token auth with credentials: pulled" 0 "$SBX" image pull "$R3/t/u:1"
check "the token was asked for the pull scope" grep -q "scope=repository%3At%2Fu%3Apull" "$T/reg3/token-$TP.log"
DOCKER_CONFIG="$T/host/dc-tok" run "box from the token-auth image" 0 "$SBX" run --image "$R3/t/u:1" -- cat /etc/pulled
check "its content" test "$OUT" = single

cleanup
PIDS=()
trap - EXIT
finish
