#!/usr/bin/env bash
# Where sbx finds provider plugins (docs/provider-guide.md, "Where plugins
# are found"): the provider directory of its prefix (PREFIX/lib/sbx/providers,
# found from where the CLI is, so a relocated prefix works), after
# SBX_PLUGIN_PATH, which wins for a name both have. A plugin that cannot load
# (a library it needs is missing, another user could have written it) is
# named with why, and asking for its provider says what to install.
. "$(dirname "$0")/lib.sh"
RESTBOX="$B/examples/provider/restbox.so"
[ -f "$RESTBOX" ] || not_ok "restbox.so is built (make tests builds it)"
command -v "${CC:-cc}" >/dev/null || skip_all "no C compiler"
unset SBX_PLUGIN_PATH

# A prefix of our own: bin/sbx and lib/sbx/providers/restbox.so.
P="$T/prefix"
mkdir -p "$P/bin" "$P/lib/sbx/providers"
cp "$SBX" "$P/bin/sbx"
cp "$RESTBOX" "$P/lib/sbx/providers/restbox.so"
chmod 755 "$P" "$P/lib" "$P/lib/sbx" "$P/lib/sbx/providers"
S="$P/bin/sbx"
run "sbx providers from a prefix" 0 "$S" providers
check "... lists the prefix's plugin" has "$OUT" "restbox  plugin $P/lib/sbx/providers/restbox.so"
check "... and the built-ins as built in" has "$OUT" "linux    built-in"
check "... with a header" has "$(echo "$OUT" | head -1)" "NAME     SOURCE"
run "sbx providers -q" 0 "$S" providers -q
check "... prints names alone" [ "$OUT" = "$(printf 'docker\nlinux\nlocal\nrestbox')" ]
run "sbx providers --json" 0 "$S" providers --json
check "... names the plugin's file" [ "$(py -c 'import json,sys; d={p["name"]: p for p in json.load(sys.stdin)}; print(d["restbox"]["source"], d["restbox"]["path"], d["linux"]["source"], "path" in d["linux"])' <<<"$OUT")" = "plugin $P/lib/sbx/providers/restbox.so built-in False" ]

# SBX_PLUGIN_PATH first: the same provider there wins, with no duplicate error.
mkdir -p "$T/dev" && cp "$RESTBOX" "$T/dev/restbox.so"
run "a provider on SBX_PLUGIN_PATH and in the prefix" 0 env SBX_PLUGIN_PATH="$T/dev" "$S" providers
check "... the SBX_PLUGIN_PATH one is used" has "$OUT" "restbox  plugin $T/dev/restbox.so"
check "... quietly" [ -z "$ERR" ]

# A plugin whose library is missing: named, and the provider says what to install.
cat > "$T/gone.c" <<'C'
int sbx_test_gone(void) { return 1; }
C
cat > "$T/needsdep.c" <<'C'
int sbx_test_gone(void);
int sbx_test_uses(void) { return sbx_test_gone(); }
C
(cd "$T" && "${CC:-cc}" -shared -fPIC -o libsbxgone.so.1 -Wl,-soname,libsbxgone.so.1 gone.c &&
  "${CC:-cc}" -shared -fPIC -o "$P/lib/sbx/providers/needsdep.so" needsdep.c -L. -l:libsbxgone.so.1 &&
  rm libsbxgone.so.1) || not_ok "the test plugin builds"
run "a plugin missing a library: sbx providers still works" 0 "$S" providers
check "... warns, naming the plugin and the library" has "$ERR" "sbx: warning: cannot load sbx plugin $P/lib/sbx/providers/needsdep.so: libsbxgone.so.1: cannot open shared object file"
check "... and lists the others" has "$OUT" "restbox"
run "asking for that provider fails" 2 "$S" run --provider needsdep -- true
check "... saying its plugin did not load and what it needs" has "$ERR" "Unknown sandbox provider 'needsdep'. Available providers: docker, linux, local, restbox. Its plugin $P/lib/sbx/providers/needsdep.so is installed but did not load: it needs libsbxgone.so.1, which is not installed; install the package that provides it"
rm -f "$P/lib/sbx/providers/needsdep.so"

# A plugin another user could have written does not load: it would run as us.
chmod g+w "$P/lib/sbx/providers/restbox.so"
run "a group-writable plugin" 0 "$S" providers
check "... is not loaded" [ -z "$(echo "$OUT" | grep restbox)" ]
check "... and says why and what to do" has "$ERR" "not loading sbx plugin $P/lib/sbx/providers/restbox.so: it is writable by other users (chmod go-w it"
chmod g-w "$P/lib/sbx/providers/restbox.so"
chmod o+w "$P/lib/sbx/providers"
run "a world-writable provider folder" 0 "$S" providers
check "... loads nothing from it" has "$ERR" "its folder is writable by other users"
chmod o-w "$P/lib/sbx/providers"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  chown nobody "$P/lib/sbx/providers/restbox.so"
  run "a plugin owned by another user" 0 "$S" providers
  check "... is not loaded" has "$ERR" "restbox.so: it belongs to another user"
  chown 0 "$P/lib/sbx/providers/restbox.so"
fi

# An installed tree never loads a build tree's plugins, nor the other way:
# the build's own CLI finds build/lib/sbx/providers only.
run "the build tree's sbx providers" 0 "$SBX" providers
check "... does not see the prefix's plugin" [ -z "$(echo "$OUT" | grep restbox)" ]
finish
