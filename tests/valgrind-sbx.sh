#!/usr/bin/env bash
# The sbx CLI under memcheck, for the acceptance scripts' valgrind pass
# (tests/run.sh, SBX_VALGRIND=1): each call of "$SBX" is checked, so a memory
# error or definite leak in the CLI exits 99 and fails the script's check.
# valgrind's own words go to a log file per process in $SBX_VG_LOGS (run.sh
# prints those that report errors), never into sbx's stderr, which the
# scripts check byte for byte; --vgdb=no leaves no pipes in the temp dir.
logs=${SBX_VG_LOGS:-${TMPDIR:-/tmp}}
exec valgrind --quiet --error-exitcode=99 --vgdb=no --log-file="$logs/sbx-vg.%p.log" \
  --suppressions="$(dirname "$(readlink -f "$0")")/valgrind.supp" \
  --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --trace-children=no "$SBX_REAL" "$@"
