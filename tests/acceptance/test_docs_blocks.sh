#!/usr/bin/env bash
# Every runnable command block of docs/getting-started.md and docs/cli.md,
# run as typed, each line's comment checked as its promise
# (tests/acceptance/docs_blocks.py says which blocks run and how a comment
# is read). The docs cannot lag the CLI: a changed message, exit status or
# option fails here. A block that cannot run as typed (it follows a server
# forever) is marked `<!-- docs-test: skip (why) -->` in the page.
# Under valgrind (make check-valgrind): SBX_VALGRIND_SKIP="the ASan run covers its CLI calls; it parses nothing hostile"
. "$(dirname "$0")/lib.sh"
need_root
W="$T/host"
# What the blocks take as given: the reader's files, and the checkout's
# build/sbx and scripts/ beside them.
echo a,b >"$W/data.csv"
mkdir -p "$W/dataset/sub" "$W/build" && echo x >"$W/dataset/sub/f"
ln -s "$SBX" "$W/build/sbx"
ln -s "$ROOT/scripts" "$W/scripts"
# cli.md's background-process block works on a box of the reader's ($ID).
ID=$("$SBX" create) || not_ok "a box for the blocks that use \$ID"
export ID
for page in getting-started cli; do
  py "$ROOT/tests/acceptance/docs_blocks.py" "$ROOT/docs/$page.md" "$SBX" "$W" >"$T/$page.tap" 2>&1
  rc=$?
  while IFS= read -r line; do
    case "$line" in
      "ok "*) ok "${line#ok * - }" ;;
      "not ok "*) not_ok "${line#not ok * - }" "$(sed -n "/^not ok.*${line#not ok * - }/,/^ok /p" "$T/$page.tap" | grep '^#' | head -12)" ;;
    esac
  done <"$T/$page.tap"
  [ $rc = 0 ] || [ -n "$(grep '^not ok' "$T/$page.tap")" ] || not_ok "docs/$page.md: its blocks ran" "$(tail -5 "$T/$page.tap")"
done
"$SBX" stop "$ID" >/dev/null 2>&1
# What the blocks left: their boxes are stopped by the blocks themselves.
for id in $("$SBX" ls -q 2>/dev/null); do "$SBX" stop "$id" >/dev/null 2>&1; done
"$SBX" image rm bb >/dev/null 2>&1
finish
