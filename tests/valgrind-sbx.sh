#!/usr/bin/env bash
# The sbx CLI under memcheck, for the acceptance scripts' valgrind pass
# (tests/run.sh, SBX_VALGRIND=1): each call of "$SBX" is checked, so a memory
# error or definite leak in the CLI exits 99 and fails the script's check.
exec valgrind --quiet --error-exitcode=99 --suppressions="$(dirname "$0")/valgrind.supp" \
  --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --trace-children=no "$SBX_REAL" "$@"
