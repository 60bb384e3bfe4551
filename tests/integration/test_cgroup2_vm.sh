#!/usr/bin/env bash
# The linux provider on pure cgroup v2, for real: the linux integration suite
# runs again inside a guest whose only cgroup hierarchy is cgroup2 with the
# memory, pids and cpu controllers (scripts/cgroup2-vm.sh; this machine is
# hybrid). TAP output: the suite's own.
#
# Left out in the guest: the userns tests (its kernel, Debian 12's 6.1, has no
# idmapped tmpfs (6.3) or tmpfs user xattrs (6.6), and its root is 9p, which
# has no idmapped mounts at all), and the 200-boxes-at-once test (the guest is
# emulated: 200 creates at once there measure the emulator, and on a loaded
# machine outlast the ready timeout). The host run covers both. Then
# test_scale's memory_cgroup test: on v2 an unlimited box's group is in
# sbx/.nomem, with no memory controller of its own.
set -u
# tests/run.sh: the plain build only (the guest is emulated), and alone: the
# emulator takes a core for minutes, and the suite beside it would starve.
SBX_PLAIN_ONLY="an emulated guest: the host runs the sanitized suite"
SBX_TEST_SERIAL="an emulated guest, CPU bound for minutes"
cd "$(dirname "$0")/../.."
B=${B:-build}

skip_all() {
  if [ "${SBX_MUST_WORK:-}" = 1 ]; then
    echo "1..1"; echo "not ok 1 - pure cgroup v2 guest skipped under SBX_MUST_WORK=1: $1"; exit 1
  fi
  echo "1..0 # SKIP $1"; exit 0
}
# tests/run.sh runs this for the plain build only: the guest is emulated, and the
# sanitizer and valgrind variants check the same code on the host.
[ "$(id -u)" = 0 ] || skip_all "the linux provider needs root"
[ -x "$B/tests/integration/test_linux" ] && [ -x "$B/tests/integration/test_scale" ] ||
  skip_all "$B/tests/integration/test_linux or test_scale not built"
scripts/cgroup2-vm.sh --check || skip_all "no guest can be made here (apt-get install qemu-system-x86 busybox-static)"

export TAP_FILTER="-userns,-many_boxes"
# The tests' alarms only catch hangs; the emulated guest runs 10-50x slower
# than the host, and slower still on a loaded machine (CI saw three
# image tests pass 60 s there), so they are stretched as under valgrind.
export SBX_TEST_TIMEOUT_SCALE=${SBX_TEST_TIMEOUT_SCALE:-5}
SBX_VM_ENV="SBX_MUST_WORK TAP_FILTER SBX_TEST_TIMEOUT_SCALE" SBX_VM_TIMEOUT_S=${SBX_VM_TIMEOUT_S:-1200} \
  scripts/cgroup2-vm.sh -- sh -c '
    # Prove the guest is what this test is for before trusting its results.
    if [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ] || [ "$(cat /proc/self/cgroup)" != "0::/" ] ||
       ! grep -qw memory /sys/fs/cgroup/cgroup.controllers || ! grep -qw pids /sys/fs/cgroup/cgroup.controllers; then
      echo "1..1"; echo "not ok 1 - the guest is not pure cgroup v2"; exit 1
    fi
    "$0"; a=$?
    # memory_cgroup "limited" on v2: unlimited boxes in sbx/.nomem, no memory group of their own.
    "$1" memory_cgroup; b=$?
    [ $a = 0 ] && exit $b; exit $a' "$B/tests/integration/test_linux" "$B/tests/integration/test_scale"
rc=$?
if [ $rc = 125 ]; then
  echo "not ok 1 - the pure cgroup v2 guest gave no result (see above)"
fi
exit $rc
