#!/usr/bin/env bash
# `make install` into a private prefix, then build programs against it the way
# users do: pkg-config --cflags --libs sbx. TAP output.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
tmp=$(mktemp -d /tmp/sbx-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "1..4"
if make -s B="$B" install PREFIX="$tmp/prefix" PYDIR="$tmp/prefix/py" >"$tmp/log" 2>&1; then
  echo "ok 1 - make install PREFIX=..."
else
  echo "not ok 1 - make install PREFIX=..."; sed 's/^/# /' "$tmp/log"
fi
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs sbx 2>&1)
# A sanitizer build installs an instrumented library: programs must link the runtime too.
if nm -D "$B/libsbx.so" 2>/dev/null | grep -q __asan_init; then flags="$flags -fsanitize=address,undefined"; fi
if nm -D "$B/libsbx.so" 2>/dev/null | grep -q __tsan_init; then flags="$flags -fsanitize=thread"; fi
if cc -std=c11 -Wall -Werror tests/c_api_conformance.c $flags -Wl,-rpath,"$tmp/prefix/lib" \
     -o "$tmp/conf" 2>"$tmp/err" && out=$("$tmp/conf") && [ "$out" = "running invalid argument" ]; then
  echo "ok 2 - the fixed C-API prototypes compile and link with pkg-config --cflags --libs sbx"
else
  echo "not ok 2 - C-API conformance program"; head -20 "$tmp/err" | sed "s/^/# /"
fi
if cc -std=c11 -Wall -Werror examples/first_run.c $flags -Wl,-rpath,"$tmp/prefix/lib" \
     -o "$tmp/first_run" 2>"$tmp/err"; then
  echo "ok 3 - examples/first_run.c builds against the installed library"
else
  echo "not ok 3 - examples/first_run.c"; head -20 "$tmp/err" | sed "s/^/# /"
fi
# The Python package, as installed, finds the installed library by itself.
preload=""
for rt in asan ubsan; do
  if ldd "$B/libsbx.so" 2>/dev/null | grep -q "lib$rt"; then preload="$preload $(cc -print-file-name=lib$rt.so)"; fi
done
if out=$(cd "$tmp" && env -u SBX_LIB LD_PRELOAD="${preload# }" ASAN_OPTIONS=detect_leaks=0 \
         PYTHONPATH="$tmp/prefix/py" "${PYTHON:-/usr/bin/python3}" -c \
         'import sbx, sbx._lib as l; print(l.lib._name.startswith("'"$tmp"'"), "fake" in sbx.list_providers())' 2>&1) &&
   [ "$out" = "True True" ]; then
  echo "ok 4 - the installed Python package imports and loads the installed libsbx"
else
  echo "not ok 4 - installed Python package"; echo "$out" | head -20 | sed "s/^/# /"
fi
