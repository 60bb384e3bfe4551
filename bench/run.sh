#!/usr/bin/env bash
# Runs every benchmark. Each prints its own baseline (fork+exec, bwrap, docker)
# measured in the same run, and ratios against it — comparisons, not pass/fail.
set -u
B=${B:-build}
cd "$(dirname "$0")/.."
# bench_core measures sbx's own overhead on the in-memory `fake` provider, a
# test double that is not in libsbx: it comes from the test plugin.
export SBX_PLUGIN_PATH="${SBX_PLUGIN_PATH:+$SBX_PLUGIN_PATH:}$PWD/$B/tests/fakes/sbx-fake.so"
# The docker comparisons start a private dockerd of their own when none
# answers (bench/docker.sh), so `make bench` prints them on a fresh machine;
# SBX_BENCH_DOCKER=0 skips them there instead.
export SBX_BENCH_DOCKER=${SBX_BENCH_DOCKER:-1}
echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(date -u +%F)"
for b in "$B"/bench/bench_*; do
  [ -x "$b" ] || continue
  case "$b" in *.d|*.o) continue;; esac
  "$b" || echo "(bench $(basename "$b") failed)"
done
for sh in bench/bench_*.sh; do
  [ -x "$sh" ] || continue
  B="$B" "$sh" || echo "(bench $sh failed)"
done
for py in bench/*.py; do
  [ -f "$py" ] || continue
  SBX_LIB="$PWD/$B/libsbx.so" PYTHONPATH="$PWD/python" /usr/bin/python3 "$py" || echo "(bench $py failed)"
done
