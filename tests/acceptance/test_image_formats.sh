#!/usr/bin/env bash
# Image formats beyond a rootfs tarball (docs/images.md, "Archives and
# stdin", "SIF and squashfs"): a `docker save` archive and an oci-archive
# made by skopeo from an OCI layout this test builds (two layers, a
# whiteout), imported from a file and from stdin (plain, gzip, zstd); a
# squashfs made by mksquashfs and a SIF written around it; each runs a
# command in a box. Hostile archives and images fail with a clear message
# and leave nothing: no temporary in the store, no name.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="the ASan run covers its CLI calls; fuzz_image, fuzz_manifest and fuzz_sif cover the parsers"
. "$(dirname "$0")/lib.sh"
need_root
D="$ROOT/tests/acceptance/formats"
for tool in skopeo mksquashfs zstd; do
  command -v $tool >/dev/null || skip_all "$tool is not installed (scripts/deps.sh)"
done
[ -x /bin/busybox ] && file -L /bin/busybox | grep -q static || skip_all "busybox-static is not installed"
cd "$T/host"
mkdir -p sq0/bin && cp /bin/busybox sq0/bin/
IMAGES="$SBX_STATE_DIR/linux/images"
# nothing_left NAME: no temporary of an import in the store, and no image NAME.
nothing_left() {
  local tmps; tmps=$(ls -A "$IMAGES" 2>/dev/null | grep -E '^tmp-|\.tmp-')
  check "$1 leaves no temporary in the store" [ -z "$tmps" ]
  check "$1 leaves no name" sh -c "! '$SBX' image ls -q | grep -qx '$1'"
}

py "$D/make_layout.py" layout /bin/busybox || skip_all "cannot build the OCI layout"
skopeo --insecure-policy copy -q oci:layout:v1 docker-archive:docker.tar:fmt/test:v1 &&
  skopeo --insecure-policy copy -q oci:layout:v1 oci-archive:oci.tar:v1 || skip_all "skopeo copy failed"
gzip -c docker.tar >docker.tar.gz
zstd -q -c oci.tar >oci.tar.zst

# What every image of this test shows: layer 2's file, layer 1's base, and layer 1's /etc/gone whited out.
probe='test ! -e /etc/gone && cat /etc/layer2 /etc/base'
want=$'from layer 2\nbase'

# --- docker save and oci-archive, from a file and from stdin
run "import a docker save archive" 0 "$SBX" image import dk docker.tar
run "a box from it sees both layers and the whiteout" 0 "$SBX" run --image dk -- sh -c "$probe"
check "docker-save output" [ "$OUT" = "$want" ]
run "import an oci-archive by its tag" 0 "$SBX" image import oc oci.tar:v1
run "a box from the oci-archive" 0 "$SBX" run --image oc -- sh -c "$probe"
check "oci-archive output" [ "$OUT" = "$want" ]
run "--image /abs/docker.tar runs directly" 0 "$SBX" run --image "$T/host/docker.tar" -- sh -c "$probe"
check "--image docker.tar output" [ "$OUT" = "$want" ]
run "a docker save tag picks the image" 0 "$SBX" image import dk2 docker.tar:fmt/test:v1
py "$D/make_docker25.py" layout docker25.tar
run "import a Docker 25 docker save archive (an OCI layout inside)" 0 "$SBX" image import d25 docker25.tar:fmt/d25:v1
run "a box from it" 0 "$SBX" run --image d25 -- sh -c "$probe"
check "Docker 25 archive output" [ "$OUT" = "$want" ]

# The store (docs/images.md "The store"): an archive's layers are the image's, shared by diff_id.
nlayers() { ls "$IMAGES/layers" | grep -c '^sha256-'; }
check "every archive's two layers are unpacked once, shared" [ "$(nlayers)" = 2 ]
check "a record names its archive, not the temporary layout" sh -c "! grep -l 'tmp-' '$IMAGES'/records/*.json"
check "the docker save archive's record keeps its config" \
  [ "$(py -c 'import glob,json,sys; print(sum(1 for f in glob.glob(sys.argv[1]+"/records/*.json") if json.load(open(f)).get("config")))' "$IMAGES")" -ge 1 ]
nsrcs=$(ls "$IMAGES/srcs" | wc -l)
"$SBX" image import sd - <docker.tar >"$T/out" 2>"$T/err"
check "import - of a docker save archive" [ $? = 0 ]
"$SBX" image import sz - <docker.tar.gz >"$T/out" 2>"$T/err"
check "import - of a gzip-compressed docker save archive" [ $? = 0 ]
"$SBX" image import so - <oci.tar.zst >"$T/out" 2>"$T/err"
check "import - of a zstd-compressed oci-archive" [ $? = 0 ]
for name in sd sz so; do
  run "a box from stdin's image $name" 0 "$SBX" run --image $name -- sh -c "$probe"
  check "stdin image $name output" [ "$OUT" = "$want" ]
done
check "stdin leaves no source key (its spool is gone)" [ "$(ls "$IMAGES/srcs" | wc -l)" = "$nsrcs" ]
check "stdin adds no layer" [ "$(nlayers)" = 2 ]
check "stdin's source reads (stdin)" \
  [ "$("$SBX" image ls --json | py -c 'import json,sys; print({i["name"]:i["source"] for i in json.load(sys.stdin)}["sd"])')" = "(stdin)" ]
check "the same archive, file or gzip stdin, is one image" \
  [ "$("$SBX" image ls --json | py -c 'import json,sys; d={i["name"]:i["digest"] for i in json.load(sys.stdin)}; print(d["dk"]==d["sz"]==d["sd"])')" = True ]
tar -C sq0 -cf rootfs-plain.tar . 2>/dev/null

# --- several images: a tag is needed
py "$D/tamper.py" two oci.tar two.tar
run "an archive of two images without a tag is refused" 1 "$SBX" image import tw two.tar
check "the message lists the tags" has "$ERR" "v1, v2"
nothing_left tw
run "with :v2 it imports" 0 "$SBX" image import tw two.tar:v2

# --- SIF and squashfs
mkdir -p sq/bin sq/etc && cp /bin/busybox sq/bin/ && ln -s busybox sq/bin/sh && ln -s busybox sq/bin/cat
ln sq/bin/busybox sq/bin/stat
echo hello-sqfs >sq/etc/msg
mksquashfs sq img.sqsh -quiet -noappend -all-root >/dev/null || skip_all "mksquashfs failed"
py "$D/make_sif.py" img.sqsh img.sif
nl=$(nlayers)
run "--image x.sqsh runs a command" 0 "$SBX" run --image "$T/host/img.sqsh" -- cat /etc/msg
check "squashfs output" [ "$OUT" = hello-sqfs ]
run "import a SIF" 0 "$SBX" image import sif img.sif
run "a box from the SIF" 0 "$SBX" run --image sif -- cat /etc/msg
check "SIF output" [ "$OUT" = hello-sqfs ]
run "--image x.sif runs directly" 0 "$SBX" run --image "$T/host/img.sif" -- cat /etc/msg
run "import the squashfs inside it" 0 "$SBX" image import sqs img.sqsh
check "a SIF and its squashfs are one image" \
  [ "$("$SBX" image ls --json | py -c 'import json,sys; d={i["name"]:i["digest"] for i in json.load(sys.stdin)}; print(d["sif"]==d["sqs"])')" = True ]
check "a squashfs is one layer of the store" [ "$(nlayers)" = "$((nl + 1))" ]
run "a squashfs hard link stays one file" 0 "$SBX" run --image sif -- stat -c %h /bin/busybox
check "  two names" [ "$OUT" = 2 ]

# --- hostile inputs: a clear error, nothing left
py "$D/make_sif.py" img.sqsh outside.sif outside
run "a SIF whose partition lies outside the file" 1 "$SBX" image import bs outside.sif
check "  says it lies outside" has "$ERR" "outside the"
nothing_left bs
head -c 100000 img.sqsh >trunc.sqsh
run "a truncated squashfs" 1 "$SBX" image import bt trunc.sqsh
check "  says it cannot be read" has "$ERR" "cannot be read"
nothing_left bt
run "--image of a truncated squashfs fails the create" 125 "$SBX" run --image "$T/host/trunc.sqsh" -- true
# Counts that would have libsquashfs allocate what the bytes cannot hold.
mkdir -p sqh/d1/x sqh/d2/y && echo hi >sqh/f
mksquashfs sqh plain.sqsh -quiet -noappend -all-root -noI -noD -noF >/dev/null
py "$D/tamper_sqfs.py" fragments plain.sqsh frags.sqsh
run "a squashfs declaring 2^32 fragments" 1 "$SBX" image import bf frags.sqsh
check "  says so, before allocating their table" has "$ERR" "more fragments than files"
nothing_left bf
py "$D/tamper_sqfs.py" dirtwice plain.sqsh dirtwice.sqsh
run "a squashfs listing one directory under two names" 1 "$SBX" image import b2 dirtwice.sqsh
check "  says so, before building the tree" has "$ERR" "a directory listed twice"
nothing_left b2
run "the untampered one imports" 0 "$SBX" image import bok plain.sqsh
cp img.sif big.sif
run "a SIF that unpacks past --max-bytes" 1 "$SBX" image import --max-bytes 100K bmx big.sif
check "  says so (the unpacker's error, not the stream's)" has "$ERR" "unpacks to more than"
nothing_left bmx
cp docker.tar big.tar
run "a docker save archive past --max-bytes" 1 "$SBX" image import --max-bytes 100K bmd big.tar
check "  says so" has "$ERR" "more than 102400 bytes"
nothing_left bmd
py "$D/tamper.py" dotdot docker.tar dotdot.tar
run "a docker save manifest naming ../layer" 1 "$SBX" image import bd dotdot.tar
check "  says it leaves the archive" has "$ERR" "leaves the archive"
nothing_left bd
py "$D/tamper.py" missing docker.tar missing.tar
run "a docker save manifest naming a missing layer" 1 "$SBX" image import bm missing.tar
check "  says it is not in the archive" has "$ERR" "not in the archive"
nothing_left bm
py "$D/tamper.py" badlayer docker.tar badlayer.tar
run "a docker save layer that is not its config's diff_id" 1 "$SBX" image import bl badlayer.tar
check "  says it does not match" has "$ERR" "claims"
nothing_left bl
py "$D/tamper.py" badblob oci.tar badblob.tar
run "an oci-archive blob that does not match its digest" 1 "$SBX" image import bb badblob.tar
check "  says it does not match" has "$ERR" "does not match"
nothing_left bb
run "a tag on a rootfs tarball is refused" 1 "$SBX" image import bx rootfs-plain.tar:v1
nothing_left bx
"$SBX" image import be - </dev/null >"$T/out" 2>"$T/err"
check "empty stdin is refused" [ $? = 1 ]
nothing_left be

# --- an import from stdin stopped by SIGTERM while it waits: nothing left
# (SIGTERM: a background job of a script has SIGINT ignored, and sbx keeps it so.)
mkfifo "$T/fifo"
# The real binary (not the valgrind wrapper), so the signal reaches sbx itself.
"${SBX_REAL:-$SBX}" image import bi - <"$T/fifo" >/dev/null 2>&1 &
pid=$!
exec 7>"$T/fifo"
head -c 4096 docker.tar >&7
until ls -A "$IMAGES" 2>/dev/null | grep -q '^tmp-'; do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
exec 7>&-
check "SIGTERM stops an import from stdin (exit $rc)" [ $rc = 143 ]
nothing_left bi

for name in dk dk2 d25 oc sd sz so tw sif sqs bok; do "$SBX" image rm $name >/dev/null 2>&1; done

# --- prune keeps the image a running box was made from by ARCHIVE:TAG (no name keeps it)
run "a box created from ARCHIVE:TAG" 0 "$SBX" create --image "$T/host/two.tar:v2"
box=$OUT
"$SBX" image prune >/dev/null 2>&1
check "prune keeps its layers while it runs" [ "$(nlayers)" -gt 0 ]
"$SBX" stop "$box" >/dev/null 2>&1
"$SBX" image prune >/dev/null 2>&1
check "prune removes them once it is gone" [ "$(nlayers)" = 0 ]
finish
