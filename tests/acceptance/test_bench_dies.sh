#!/usr/bin/env bash
# A benchmark killed mid-run leaves no box running: every bench box is made
# from bench_spec() (tests/lib/bench.c), whose provider_options
# die_with_creator make the shim tear the box down when the bench's end of
# its control socket closes, however the bench ended (SIGKILL included).
# bench_transfer keeps one box for its whole run, in $SBX_STATE_DIR; it is
# killed once `sbx ls` lists that box running (past its create, which ends
# with its creator anyway). Its tree is 200 files, not 10,000: its transfers
# loop until the kill, and took the CPU of the tests beside it (315 s here).
. "$(dirname "$0")/lib.sh"
need_root
BENCH="$B/bench/bench_transfer"
[ -x "$BENCH" ] || skip_all "$BENCH is not built (make tests builds it)"

box_running() { "$SBX" ls 2>/dev/null | grep -q ' running '; }
for sig in KILL TERM INT; do
  before=$(echo /tmp/sbx-bench-transfer-*)
  kill_mid_run $sig "a box" box_running "$BENCH" 1000000 2 || continue
  census "SIG$sig mid-run"
  # What a failure left: stopped, so the next signal starts clean.
  for id in $(ls "$SBX_STATE_DIR/linux/boxes" 2>/dev/null); do "$SBX" stop --force "$id" >/dev/null 2>&1; done
  # Its work dir (the image and the tree it moves) is only files: a killed
  # bench cannot remove it.
  for d in /tmp/sbx-bench-transfer-*; do case " $before " in *" $d "*) ;; *) rm -rf "$d" ;; esac; done
done
finish
