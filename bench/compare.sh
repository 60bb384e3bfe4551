#!/usr/bin/env bash
# make bench-compare REF=<commit or tag>: this tree's hot path against an
# earlier one's, on this machine, in the same minutes.
#
# The reference is built from `git archive REF` in $B/bench-ref/<sha> (kept:
# a second compare against the same REF rebuilds nothing), then both trees'
# bench_linux run in turns, ROUNDS times each (this tree first, then the
# reference, and so on), so a machine that slows down slows both. Each run
# measures its own floor (a bare fork+exec of `sh -c true`) beside it; the
# table gives, for each figure, the median over the rounds of this tree and
# of the reference, their ratio (below 1: this tree is faster), and each
# tree's ratio to its own floor (which cancels the machine's load).
# It prints comparisons, never a verdict: no threshold, no exit status from
# the figures.
#
#   REF      commit or tag to compare against (required)
#   ROUNDS   runs of each tree (default 3)
#   N        iterations inside each bench_linux run (default 100)
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
REF=${REF:-${1:-}}
ROUNDS=${ROUNDS:-3}
N=${N:-100}
die() { echo "bench-compare: $*" >&2; exit 2; }
[ -n "$REF" ] || die "say which commit to compare with: make bench-compare REF=<commit or tag>"
[ "$(id -u)" = 0 ] || die "bench_linux needs root (namespaces, cgroups)"
sha=$(git rev-parse --verify --quiet "$REF^{commit}") ||
  die "'$REF' names no commit here (git rev-parse: try a sha from git log)"
cur="$B/bench/bench_linux"
[ -x "$cur" ] || die "$cur is not built (make bench-compare builds it)"

ref="$B/bench-ref/$sha"
if [ ! -x "$ref/build/bench/bench_linux" ]; then
  echo "# building the reference $(git log -1 --format='%h %s' "$sha") in $ref"
  rm -rf "$ref" && mkdir -p "$ref" || die "cannot make $ref"
  git archive "$sha" | tar -x -C "$ref" || die "git archive $sha failed"
  # Its own Makefile, its own flags: the tree as it was, built as it was.
  make -C "$ref" -s -j"$(nproc)" all build/bench/bench_linux >"$ref.log" 2>&1 ||
    die "the reference did not build; see $ref.log"
fi

# Every run's whole output is kept here (the last compare against this REF).
out="$B/bench-compare/$sha"
rm -rf "$out" && mkdir -p "$out" || die "cannot make $out"
echo "# machine: $(nproc) cores, kernel $(uname -r), $(date -u +%F); $ROUNDS rounds of bench_linux $N each"
echo "# this tree: $(git describe --always --dirty 2>/dev/null); reference: $(git log -1 --format=%h "$sha")"
for r in $(seq "$ROUNDS"); do
  for side in cur ref; do
    if [ $side = cur ]; then bin=$cur; else bin="$ref/build/bench/bench_linux"; fi
    # Each tree finds its own sbx-shim and sbx-agent beside its libsbx.
    SBX_BENCH_DOCKER=0 "$bin" "$N" >"$out/$side.$r" 2>"$out/$side.$r.err" ||
      die "$side round $r failed: $(tail -n 3 "$out/$side.$r.err")"
  done
  echo "# round $r of $ROUNDS done"
done

# The p50 row under a section's header: "linux fork+exec" (the first two numbers).
p50() { # file, header text
  awk -v h="$2" 'index($0, h) == 1 { f = 1; next } f && $1 == "p50" { print $2, $3; exit }' "$1"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "nan" }'; }

printf '\n%-32s %10s %10s %10s   %12s %12s\n' "p50 (ms), median of rounds" "this" "reference" "this/ref" "this/floor" "ref/floor"
for h in "create->ready (ms)" "one-shot: create+exec+stop (ms)" "exec true round trip (ms)"; do
  for side in cur ref; do
    for r in $(seq "$ROUNDS"); do p50 "$out/$side.$r" "$h"; done >"$out/$side.rows"
    awk '{ print $1 }' "$out/$side.rows" | median >"$out/$side.v"
    awk '$2 > 0 { print $1 / $2 }' "$out/$side.rows" | median >"$out/$side.f"
  done
  c=$(cat "$out/cur.v") f=$(cat "$out/ref.v")
  awk -v h="$h" -v c="$c" -v f="$f" -v cf="$(cat "$out/cur.f")" -v rf="$(cat "$out/ref.f")" 'BEGIN {
    sub(/ \(ms\)$/, "", h)
    if (c == "nan" || f == "nan") { printf "%-32s %10s %10s %10s   (not in both trees)\n", h, c, f, "-"; exit }
    printf "%-32s %10.2f %10.2f %9.2fx   %11.2fx %11.2fx\n", h, c, f, c / f, cf, rf }'
done
echo "# every run's whole output: $out/{cur,ref}.<round>"
