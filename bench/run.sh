#!/usr/bin/env bash
# Runs every benchmark. Each prints its own baseline (fork+exec, bwrap, docker)
# measured in the same run, and ratios against it — comparisons, not pass/fail.
set -u
B=${B:-build}
cd "$(dirname "$0")/.."
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(date -u +%F)"
for b in "$B"/bench/bench_*; do
  [ -x "$b" ] || continue
  case "$b" in *.d|*.o) continue;; esac
  "$b" || echo "(bench $(basename "$b") failed)"
done
for py in bench/*.py; do
  [ -f "$py" ] || continue
  SBX_LIB="$PWD/$B/libsbx.so" PYTHONPATH="$PWD/python" /usr/bin/python3 "$py" || echo "(bench $py failed)"
done
