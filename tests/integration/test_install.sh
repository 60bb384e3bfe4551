#!/usr/bin/env bash
# `make install` into a scratch prefix, then use it the way users do, with the
# build tree out of reach (a tmpfs over the checkout, in a mount namespace of
# the test's own): the installed CLI runs a linux box (so sbx-shim and
# sbx-agent were installed where libsbx finds them), a program built with
# `pkg-config --cflags --libs sbx` runs one, and the installed Python package
# runs one. Then `make uninstall` leaves nothing, and `make deb` builds a
# package that dpkg accepts and that works unpacked. TAP output.
set -u
# tests/run.sh: make check runs this on the plain build only.
SBX_PLAIN_ONLY="installs the plain build, as a user would"
cd "$(dirname "$0")/../.."
# The makes here are a user's, not sub-makes of the one running the suite:
# an inherited MAKEFLAGS (its -w, its jobserver) would print into the
# output this reads, whatever the command line says.
unset MAKEFLAGS MFLAGS MAKELEVEL
B=${B:-build}
PY=${PYTHON:-/usr/bin/python3}
top=$PWD
tmp=$(mktemp -d /tmp/sbx-install-XXXXXX)
prefix=$tmp/prefix
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); echo "not ok $n - $1"; shift; [ $# -gt 0 ] && printf '%s\n' "$@" | head -30 | sed 's/^/# /'; }
check() { # description, command...
  local d=$1; shift
  if out=$("$@" 2>&1); then ok "$d"; else nok "$d" "$out"; fi
}
# The plan is printed at the end (TAP allows it): a script that dies early has none.

# A sanitizer build installs instrumented binaries: programs must link the runtime
# too, and Python must preload it.
san="" preload=""
if nm -D "$B/libsbx.so" 2>/dev/null | grep -q __asan_init; then san="-fsanitize=address,undefined"; fi
if nm -D "$B/libsbx.so" 2>/dev/null | grep -q __tsan_init; then san="-fsanitize=thread"; fi
for rt in asan ubsan; do
  if ldd "$B/libsbx.so" 2>/dev/null | grep -q "lib$rt"; then preload="$preload $(cc -print-file-name=lib$rt.so)"; fi
done
preload=${preload# }

if make -s B="$B" install PREFIX="$prefix" >"$tmp/log" 2>&1; then
  ok "make install PREFIX=..."
else
  nok "make install PREFIX=..." "$(cat "$tmp/log")"
fi
pydir=$(make -s --no-print-directory B="$B" PREFIX="$prefix" print-pydir)
missing=""
for f in bin/sbx lib/libsbx.so.0 lib/libsbx.so lib/pkgconfig/sbx.pc include/sbx.h include/sbx/provider.h include/sbx/box.h \
         libexec/sbx/sbx-shim libexec/sbx/sbx-agent share/man/man1/sbx.1 \
         share/bash-completion/completions/sbx share/zsh/site-functions/_sbx \
         share/sbx/providers/linux/configs/linux.yaml share/sbx/providers/local/configs/local.yaml; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
[ -f "$pydir/sbx/__init__.py" ] || missing="$missing $pydir/sbx"
[ -f "$pydir/sbx/providers/utils.py" ] || missing="$missing $pydir/sbx/providers"
if [ -z "$missing" ]; then ok "everything is installed: library, headers, pc, CLI, shim, agent, man, completions, Python, provider configs"
else nok "installed files" "missing:$missing"; fi

# The shipped config block of a provider, used as a NeMo Gym config names it.
out=$(cd "$tmp" && TMPDIR="$tmp" "$prefix/bin/sbx" run --no-stdin \
      --config "$prefix/share/sbx/providers/local/configs/local.yaml" --block sandbox -- echo shipped 2>&1)
if [ "$out" = shipped ]; then ok "the installed share/sbx/providers/local/configs/local.yaml runs a box"
else nok "the installed local.yaml runs a box" "$out"; fi

# The test doubles (tests/fakes) are not part of what is installed.
out=$(env -u SBX_PLUGIN_PATH "$prefix/bin/sbx" providers -q 2>&1)
if [ "$out" = "$(printf 'apptainer
docker
linux
local
opensandbox')" ] && ! find "$prefix" -name '*fake*' | grep -q .; then
  ok "the installed sbx has no test providers: sbx providers lists apptainer and opensandbox (its plugins), docker, linux and local"
else nok "the installed sbx lists test providers" "$out" "$(find "$prefix" -name '*fake*')"; fi

# The completions ask the installed sbx for their words (sbx help --words).
out=$(PATH="$prefix/bin:$PATH" bash -c 'source "$1"; COMP_WORDS=(sbx ru); COMP_CWORD=1; _sbx; echo "${COMPREPLY[*]}";
               COMP_WORDS=(sbx image r); COMP_CWORD=2; _sbx; echo "${COMPREPLY[*]}";
               COMP_WORDS=(sbx exec --wo); COMP_CWORD=2; _sbx; echo "${COMPREPLY[*]}"' sh \
      "$prefix/share/bash-completion/completions/sbx" 2>&1)
if [ "$out" = "$(printf 'run\nrm\n--workdir')" ]; then ok "the bash completion completes commands, subcommands and options"
else nok "bash completion" "$out"; fi
# Neither can lag: every command `sbx --help` lists is completed and has its section in the man page.
cmds=$("$prefix/bin/sbx" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF && !/^Commands:/ {print $1}')
words=$(PATH="$prefix/bin:$PATH" bash -c 'source "$1"; COMP_WORDS=(sbx ""); COMP_CWORD=1; _sbx; printf "%s\n" "${COMPREPLY[@]}"' sh \
        "$prefix/share/bash-completion/completions/sbx" 2>&1)
lag=""
for c in $cmds; do
  printf '%s\n' "$words" | grep -qx -- "$c" || lag="$lag completion:$c"
  grep -qx ".SS $c" "$prefix/share/man/man1/sbx.1" || lag="$lag man:$c"
done
if [ -n "$cmds" ] && [ -z "$lag" ]; then ok "completion and man page have every command ($(echo $cmds | wc -w))"
else nok "completion or man page lags the CLI" "$lag" "$cmds"; fi
if man -l "$prefix/share/man/man1/sbx.1" 2>/dev/null | grep -q 'sbx - create isolated sandboxes' ||
   { ! command -v man >/dev/null && grep -q '^.TH SBX 1' "$prefix/share/man/man1/sbx.1"; }; then
  ok "the man page renders"
else nok "the man page renders"; fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags="$(pkg-config --cflags --libs sbx 2>&1) $san"
if cc -std=c11 -Wall -Werror tests/c_api_conformance.c $flags -Wl,-rpath,"$prefix/lib" \
     -o "$tmp/conf" 2>"$tmp/err" && out=$("$tmp/conf") && [ "$out" = "running invalid argument" ]; then
  ok "the fixed C-API prototypes compile and link with pkg-config --cflags --libs sbx"
else
  nok "C-API conformance program" "$(cat "$tmp/err")"
fi
if cc -std=c11 -Wall -Werror examples/first_run.c $flags -Wl,-rpath,"$prefix/lib" \
     -o "$tmp/first_run" 2>"$tmp/err"; then
  ok "examples/first_run.c builds against the installed library"
else
  nok "examples/first_run.c" "$(cat "$tmp/err")"
fi

# The box-provider kit's example, built out of tree from the installed headers only.
mkdir -p "$tmp/plugins"
if cc -std=c11 -Wall -Wextra -Werror -shared -fPIC examples/provider/hostbox.c $flags \
     -Wl,-rpath,"$prefix/lib" -o "$tmp/plugins/hostbox.so" 2>"$tmp/err"; then
  ok "examples/provider/hostbox.c builds as a plugin against the installed headers"
else
  nok "examples/provider/hostbox.c" "$(cat "$tmp/err")"
fi

# Everything below runs with the checkout hidden: nothing may come from the build tree.
hidden() { # command... run in a private mount namespace with a tmpfs over the checkout
  unshare --mount --propagation private -- sh -c 'mount -t tmpfs -o size=1m sbx-hide "$1" && shift && exec "$@"' \
    sh "$top" env -u SBX_LIB -u SBX_SHIM -u SBX_AGENT PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    SBX_STATE_DIR="$tmp/state" LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 "$@"
}
if [ "$(id -u)" != 0 ]; then
  for i in 1 2 3 4; do
    if [ -n "${SBX_MUST_WORK:-}" ]; then nok "installed linux boxes need root"; else ok "installed linux boxes # SKIP not root"; fi
  done
else
  check "the build tree is out of reach in the test's namespace" \
    hidden sh -c "! test -e '$top/Makefile'"
  out=$(cd "$tmp" && hidden "$prefix/bin/sbx" run -- sh -c 'echo "in a box as $(id -u)"' 2>&1)
  if [ "$out" = "in a box as 0" ]; then ok "the installed sbx runs a linux box"
  else nok "the installed sbx runs a linux box" "$out"; fi
  out=$(cd "$tmp" && hidden "$tmp/first_run" linux 2>&1)
  if echo "$out" | grep -q 'hello from a sandbox'; then ok "the installed example runs a linux box"
  else nok "the installed example runs a linux box" "$out"; fi
  out=$(cd "$tmp" && hidden env PYTHONPATH="$pydir" "$PY" -c '
import sys, sbx, sbx._lib as l
assert l.lib._name.startswith(sys.argv[1]), l.lib._name
async def main():
    async with sbx.AsyncSandbox({"linux": {}}, sbx.SandboxSpec()) as box:
        await box.start()
        r = await box.exec("echo py in $(hostname)")
        print(r.stdout.strip().split()[0], r.return_code)
import asyncio; asyncio.run(main())' "$prefix" 2>&1)
  if [ "$out" = "py 0" ]; then ok "the installed Python package runs a linux box with the installed libsbx"
  else nok "the installed Python package runs a linux box" "$out"; fi
fi
# The installed CLI loads the plugin, which finds the installed sbx-agent (hostbox needs no root).
run_hidden=hidden; [ "$(id -u)" = 0 ] || run_hidden="env -u SBX_AGENT SBX_STATE_DIR=$tmp/state"
out=$(cd "$tmp" && $run_hidden env SBX_PLUGIN_PATH="$tmp/plugins" SBX_PROVIDER=hostbox \
      sh -c '"$1" run -- sh -c "echo from-hostbox; exit 4"; echo "rc=$?"; "$1" ls -q' sh "$prefix/bin/sbx" 2>&1)
if [ "$out" = "$(printf 'from-hostbox\nrc=4')" ]; then
  ok "the installed sbx runs a box of the out-of-tree hostbox plugin (SBX_PLUGIN_PATH)"
else nok "the installed sbx with the hostbox plugin" "$out"; fi
# The same plugin dropped into the prefix's provider directory: found with no
# SBX_PLUGIN_PATH, by the installed CLI and by the installed Python package.
install -d -m 755 "$prefix/lib/sbx/providers"
install -m 644 "$tmp/plugins/hostbox.so" "$prefix/lib/sbx/providers/hostbox.so"
out=$(cd "$tmp" && $run_hidden env -u SBX_PLUGIN_PATH SBX_PROVIDER=hostbox \
      sh -c '"$1" providers | grep hostbox; "$1" run -- sh -c "echo from-prefix"' sh "$prefix/bin/sbx" 2>&1)
if [ "$(echo "$out" | tr -s ' ')" = "$(printf 'hostbox plugin %s\nfrom-prefix' "$prefix/lib/sbx/providers/hostbox.so")" ]; then
  ok "the installed sbx finds a plugin in PREFIX/lib/sbx/providers"
else nok "a plugin in PREFIX/lib/sbx/providers" "$out"; fi
out=$(cd "$tmp" && $run_hidden env -u SBX_PLUGIN_PATH PYTHONPATH="$pydir" "$PY" -c '
import sbx; print("hostbox" in sbx.list_providers())' 2>&1)
if [ "$out" = True ]; then ok "the installed Python package finds it too (libsbx.so.0 beside it)"
else nok "Python and PREFIX/lib/sbx/providers" "$out"; fi
rm -f "$prefix/lib/sbx/providers/hostbox.so"

# Where a real install puts the Python package, python3 and a venv that sees the
# system's packages look.
sysdir=$(make -s --no-print-directory B="$B" PREFIX=/usr/local print-pydir 2>/dev/null)
"$PY" -m venv --system-site-packages --without-pip "$tmp/venv" >/dev/null 2>&1
if "$PY" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$sysdir" &&
   "$tmp/venv/bin/python" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$sysdir"; then
  ok "PREFIX=/usr/local puts the Python package where python3 and a --system-site-packages venv look ($sysdir)"
else
  nok "Python package location for PREFIX=/usr/local" "$sysdir is not on the path of $PY or its venv"
fi

make -s B="$B" uninstall PREFIX="$prefix" >"$tmp/log" 2>&1
left=$(find "$prefix" -type f -o -type l 2>/dev/null)
if [ -z "$left" ]; then ok "make uninstall removes every installed file"
else nok "make uninstall left files" "$left"; fi

# The Debian package.
if ! command -v dpkg-deb >/dev/null; then
  for i in 1 2 3; do
    if [ -n "${SBX_MUST_WORK:-}" ]; then nok "make deb needs dpkg-deb"; else ok "deb # SKIP no dpkg-deb"; fi
  done
else
  rm -f "$B"/sbx_*.deb
  if make -s B="$B" deb >"$tmp/log" 2>&1 && deb=$(ls "$B"/sbx_*.deb) && [ -f "$deb" ]; then
    ok "make deb builds $(basename "$deb")"
  else
    nok "make deb" "$(cat "$tmp/log")"; deb=/nonexistent
  fi
  if out=$(dpkg --dry-run -i "$deb" 2>&1); then ok "dpkg accepts the package (dependencies met, dry run)"
  else nok "dpkg --dry-run -i" "$out"; fi
  dpkg-deb -x "$deb" "$tmp/debroot" 2>/dev/null
  if [ "$(id -u)" = 0 ]; then
    out=$(cd "$tmp" && hidden env LD_LIBRARY_PATH="$tmp/debroot/usr/lib" \
          "$tmp/debroot/usr/bin/sbx" run -- echo from-the-deb 2>&1)
    if [ "$out" = "from-the-deb" ]; then ok "the packaged sbx, unpacked anywhere, runs a linux box"
    else nok "the packaged sbx runs a linux box" "$out"; fi
  elif [ -n "${SBX_MUST_WORK:-}" ]; then nok "the packaged sbx needs root"
  else ok "the packaged sbx # SKIP not root"; fi
fi
rm -rf "$tmp/state"
echo "1..$n"
