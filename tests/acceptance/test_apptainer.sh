#!/usr/bin/env bash
# The apptainer provider (src/providers/apptainer, a plugin) against
# tests/fakes/apptainer, a fake of the CLI that runs instances in real user,
# mount and pid namespaces and records every argv and env file it gets: the
# shared provider suite on both paths (the agent's, the CLI's), the
# reference's argv, status table and sentinel, bin_path, config validation,
# and what sbx does differently. Then the real `apptainer` when it is on
# PATH (under SBX_MUST_WORK=1 its absence is said in a comment, not a skip:
# CI machines have no Apptainer, and the fake's cases above are what runs).
. "$(dirname "$0")/lib.sh"
SUITE="$B/tests/integration/test_provider_suite"
SO="$B/lib/sbx/providers/apptainer.so"
[ -f "$SO" ] || not_ok "apptainer.so is built (make all builds it)"
[ -x "$SUITE" ] || skip_all "$SUITE is not built (make tests)"
command -v unshare >/dev/null && command -v nsenter >/dev/null ||
  skip_all "the fake apptainer needs unshare and nsenter (util-linux)"
unshare -r -m -p --fork true 2>/dev/null || skip_all "this kernel refuses user namespaces to the fake apptainer"

REAL_APPTAINER=$(command -v apptainer || true)
FAKES="$ROOT/tests/fakes"
export FAKE_APPTAINER_STATE="$T/fake" FAKE_APPTAINER_LOG="$T/argv.jsonl"
export PATH="$FAKES:$PATH"
# The plugin is found in the build tree's provider directory, as `sbx providers` shows.
unset SBX_PLUGIN_PATH
export SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python"
cfg() { printf '{"sandbox": {"apptainer": %s}}\n' "$1" >"$T/cfg.json"; echo "$T/cfg.json"; }
IMG='"create": {"default_image": "docker://debian:12"}'

check "sbx providers lists apptainer as a plugin of the provider directory" \
  has "$("$SBX" providers | tr -s ' ')" "apptainer plugin $B/lib/sbx/providers/apptainer.so"

# --- the shared provider suite, on the agent's path and on the CLI's ---------------------
suite() { # NAME CONFIG
  SBX_SUITE_PLUGIN=apptainer SBX_SUITE_PROVIDERS=apptainer SBX_SUITE_CONFIG_apptainer="$2" \
    SBX_PLUGIN_PATH="$B/lib/sbx/providers" "$SUITE" plugin >"$T/suite" 2>&1
  while read -r line; do
    case "$line" in
      "ok "*) ok "suite ($1): ${line#ok * - }" ;;
      "not ok "*) not_ok "suite ($1): ${line#not ok * - }" "$(grep -v '^ok\|^not ok' "$T/suite" | tail -n 20)" ;;
    esac
  done <"$T/suite"
  grep -q '^# [0-9]* passed, 0 failed' "$T/suite" || not_ok "the suite ($1) ran to its end" "$(tail -n 20 "$T/suite")"
}
suite agent "{$IMG}"
suite cli "{$IMG, \"agent\": false}"

# --- the reference's argv ---------------------------------------------------------------
: >"$FAKE_APPTAINER_LOG"
out=$("$SBX" run --config "$(cfg "{\"exec\": {\"default_binds\": [\"$T/host\"]}}")" --block sandbox \
  --image debian:12 --cpu 2 --memory 512 -e SECRET='s3 cr"et' -e EMPTY= -- sh -c 'echo "[$SECRET][$EMPTY]"; pwd' 2>&1)
check "sbx run on apptainer: the box's env reaches the command" has "$out" '[s3 cr"et][]'
check "... in the mount point, /sandbox" has "$out" "/sandbox"
py - "$FAKE_APPTAINER_LOG" "$T" >"$T/argv.out" 2>&1 <<'EOF'
import json, sys, re
recs = [json.loads(l) for l in open(sys.argv[1])]
start = [r for r in recs if r["argv"][1:3] == ["instance", "start"]][0]
a = start["argv"]
name = a[-1]
assert re.fullmatch(r"nemo-gym-[0-9a-f]{16}", name), name
staging = a[4].split(":")[0]
assert a[4] == staging + ":/sandbox" and staging.endswith(name + "/staging"), a
want = ["apptainer", "instance", "start", "--bind", staging + ":/sandbox",
        "--bind", sys.argv[2] + "/host", "--bind", a[8], "--cpus", "2", "--memory", "512m",
        "--no-eval", "--env-file", a[15], "docker://debian:12", name]
assert a == want, (a, want)
assert a[8].endswith(":/.sbx-agent:ro"), a[8]
assert start["env_file"] == "SECRET='s3 cr\"et'\nEMPTY=''\n", start["env_file"]
assert start["env_file_mode"] == "600", start["env_file_mode"]
assert not start["env_file_path"].startswith(staging), "the env file is visible in the box"
for r in recs:
    assert not any("s3 cr" in x for x in r["argv"]), ("a secret on argv", r["argv"])
probe = [r for r in recs if r["argv"][1] == "exec" and "printf apptainer-sandbox-ready" in r["argv"]]
assert probe and probe[0]["argv"] == ["apptainer", "exec", "--pwd", "/sandbox", "--no-eval",
    "--env-file", probe[0]["argv"][6], "instance://" + name, "sh", "-c",
    "printf apptainer-sandbox-ready"], probe
agent = [r for r in recs if "--listen-fd" in r["argv"]][0]["argv"]
assert agent == ["apptainer", "exec", "--pwd", "/sandbox", "--no-eval", "--env-file", agent[6],
                 "instance://" + name, "/.sbx-agent", "init", "--listen-fd", "3"], agent
assert recs[-1]["argv"] == ["apptainer", "instance", "stop", name], recs[-1]
print("argv ok")
EOF
check "instance start, the probe, the agent and stop: the reference's argv, env in a 0600 file off argv and out of the box" \
  grep -q "argv ok" "$T/argv.out"
[ "$(cat "$T/argv.out")" = "argv ok" ] || echo "# $(tail -n 5 "$T/argv.out")"

# The shipped config block, every key at its default.
out=$("$SBX" run --config "$ROOT/providers/apptainer/configs/apptainer.yaml" --block sandbox \
  --image docker://debian:12 -- echo shipped 2>&1)
check "the shipped providers/apptainer/configs/apptainer.yaml runs a box" [ "$out" = shipped ]

# --fakeroot in extra_start_args drops the resource flags (with the reference's warning).
: >"$FAKE_APPTAINER_LOG"
"$SBX" run --config "$(cfg '{"create": {"extra_start_args": ["--fakeroot", "--writable-tmpfs"]}, "probe": {"command": null}}')" \
  --block sandbox --image /dev/null --cpu 1.5 --memory 64 -- true >"$T/out" 2>&1
start=$(grep '"start"' "$FAKE_APPTAINER_LOG")
check "--fakeroot in extra_start_args: no --cpus/--memory, the extra args in order, a path image kept as is" \
  py -c "import json,sys; a=json.loads(sys.argv[1])['argv']; assert '--cpus' not in a and '--memory' not in a, a; assert a[-4:-1] == ['--fakeroot', '--writable-tmpfs', '/dev/null'], a" "$start"
check "... no probe when probe.command is null" [ "$(grep -c printf "$FAKE_APPTAINER_LOG")" = 0 ]

# --- the CLI path (agent: false), the status table, the sentinel: through the binding -------
cat >"$T/cli.py" <<'EOF'
import json, os, subprocess, sys, pytest
from sbx import Sandbox, SandboxSpec, SandboxStatus

LOG = os.environ["FAKE_APPTAINER_LOG"]
def recs():
    return [json.loads(l) for l in open(LOG)]

cfg = {"apptainer": {"agent": False, "create": {"default_image": "docker://debian:12"},
                     "exec": {"extra_exec_args": ["--cleanenv"]}}}
with Sandbox(cfg, SandboxSpec(env={"A": "from-create", "B": "base"})) as sb:
    sb.start()
    open(LOG, "w").close()
    r = sb.exec("echo $A $B", env={"A": "from-call"}, timeout_s=30)
    assert (r.stdout, r.return_code, r.error_type) == ("from-call base\n", 0, None), r
    e = recs()[0]
    name = e["argv"][-4].removeprefix("instance://")
    assert e["argv"] == ["apptainer", "exec", "--pwd", "/sandbox", "--cleanenv", "--no-eval",
                         "--env-file", e["argv"][7], "instance://" + name, "sh", "-c", "echo $A $B"], e
    assert e["env_file"] == "A=from-call\nB=base\n", e["env_file"]
    # user root: --fakeroot (fakeroot_for_root); cwd: --pwd
    open(LOG, "w").close()
    r = sb.exec("pwd", cwd="/tmp", user="root", timeout_s=30)
    assert (r.stdout, r.return_code) == ("/tmp\n", 0), r
    assert recs()[0]["argv"][:5] == ["apptainer", "exec", "--pwd", "/tmp", "--fakeroot"], recs()
    # Another user: --fakeroot and su, the command and the user shell-quoted as shlex.quote does.
    open(LOG, "w").close()
    sb.exec("echo 'hi'", user="nobody", timeout_s=30)
    a = recs()[0]["argv"]
    assert "--fakeroot" in a and a[-4:] == ["instance://" + name, "sh", "-c",
        "su -s /bin/sh -c 'echo '\"'\"'hi'\"'\"'' nobody"], a
    # A command's own "does not exist" is its result, not a runtime failure (the reference misread it).
    r = sb.exec("echo 'ls: x does not exist' >&2; exit 2", timeout_s=30)
    assert (r.return_code, r.error_type) == (2, None), r
    # The timeout sentinel.
    r = sb.exec("sleep 5", timeout_s=0.5)
    assert (r.return_code, r.error_type) == (125, "timeout"), r
    assert "timed out after 0.5s" in r.stderr, r
    # Transfers through the staging fast path, and a box-planted link is not followed.
    src = os.path.join(os.environ["T"], "up.txt")
    open(src, "w").write("payload")
    sb.upload(src, "/sandbox/d/up.txt")
    assert sb.exec("cat /sandbox/d/up.txt", timeout_s=30).stdout == "payload"
    sb.upload(src, "/tmp/fallback.txt")   # outside the mount: cp in the box
    assert sb.exec("cat /tmp/fallback.txt", timeout_s=30).stdout == "payload"
    secret = os.path.join(os.environ["T"], "host-secret")
    open(secret, "w").write("host only")
    sb.exec(f"ln -s {secret} /sandbox/link; ln -s / /sandbox/rootlink", timeout_s=30)
    dst = os.path.join(os.environ["T"], "down.txt")
    with pytest.raises(Exception):
        sb.download("/sandbox/link", dst)
    with pytest.raises(Exception):
        sb.upload(src, "/sandbox/rootlink" + os.environ["T"] + "/planted")
    assert not os.path.exists(os.environ["T"] + "/planted")
    assert open(secret).read() == "host only"
    sb.download("/sandbox/d/up.txt", dst)
    assert open(dst).read() == "payload"
    # Status from `instance list --json`; a stopped instance is STOPPED, exec gives 125 "sandbox".
    assert sb.status() == SandboxStatus.RUNNING
    subprocess.run(["apptainer", "instance", "stop", name], check=True, capture_output=True)
    assert sb.status() == SandboxStatus.STOPPED
    r = sb.exec("true", timeout_s=30)
    assert (r.return_code, r.error_type) == (125, "sandbox"), r
    assert "no instance found" in r.stderr, r
print("cli ok")

# The agent's path gives the same results, and a lost instance is 125 "sandbox" too.
cfg = {"apptainer": {"create": {"default_image": "docker://debian:12"}}}
with Sandbox(cfg, SandboxSpec(env={"A": "from-create", "B": "base"})) as sb:
    sb.start()
    r = sb.exec("echo $A $B", env={"A": "from-call"}, timeout_s=30)
    assert (r.stdout, r.return_code, r.error_type) == ("from-call base\n", 0, None), r
    r = sb.exec("sleep 5", timeout_s=0.5)
    assert (r.return_code, r.error_type) == (125, "timeout"), r
    inst = [r for r in recs() if r["argv"][1:3] == ["instance", "start"]][-1]["argv"][-1]
    subprocess.run(["apptainer", "instance", "stop", inst], check=True, capture_output=True)
    r = sb.exec("true", timeout_s=30)
    assert (r.return_code, r.error_type) == (125, "sandbox"), r
    assert sb.status() in (SandboxStatus.ERROR, SandboxStatus.STOPPED)
print("agent ok")
EOF
out=$(T="$T" py "$T/cli.py" 2>&1)
check "CLI path: the reference's exec argv, env merge, --fakeroot for root, --pwd, the timeout sentinel" has "$out" "cli ok"
check "agent path: the same results, a lost instance is 125 \"sandbox\"" has "$out" "agent ok"
has "$out" "agent ok" || echo "# ${out: -1500}"

# --- bin_path, validation, failures -------------------------------------------------------
mkdir -p "$T/bin" && ln -s "$FAKES/apptainer" "$T/bin/apptainer"
cat >"$T/cfgs.py" <<'EOF'
import os, sys, pytest
from sbx import Sandbox, SandboxSpec
T = os.environ["T"]
def start(cfg, spec=None):
    with Sandbox({"apptainer": cfg}, spec or SandboxSpec(image="docker://debian:12")) as sb:
        sb.start()
        return sb.exec("echo $PATH", timeout_s=30).stdout
# bin_path: its apptainer, and PATH prefixed for the child; no PATH fallback.
os.environ["PATH"] = "/usr/bin:/bin"
p = start({"bin_path": T + "/bin"}); assert p.startswith(T + "/bin:"), p
with pytest.raises(Exception, match="no PATH fallback"):
    start({"bin_path": T + "/nowhere"})
with pytest.raises(Exception, match="apptainer executable not found on PATH"):
    start({})
os.environ["PATH"] = T + "/bin:/usr/bin:/bin"
for cfg, msg in [({"create": {"mount_point": "rel"}}, "must be an absolute path"),
                 ({"exec": {"concurrency": 0}}, "concurrency must be >= 1"),
                 ({"probe": {"stable_count": 0}}, "stable_count must be >= 1"),
                 ({"create": {"start_timeout_s": 0}}, "start_timeout_s must be None or > 0"),
                 ({"exec": {"nope": 1}}, "unexpected keyword argument 'nope'"),
                 ({"nope": 1}, "unexpected keyword argument 'nope'"),
                 ({"create": []}, "must be a mapping")]:
    with pytest.raises(Exception, match=msg):
        start(cfg)
with pytest.raises(Exception, match="spec.image is required for the apptainer provider"):
    start({}, SandboxSpec())
with pytest.raises(Exception, match=r"provider_options\['binds'\] must be a string or list"):
    start({}, SandboxSpec(image="x", provider_options={"binds": 3}))
with pytest.raises(Exception, match="read-only"):
    start({}, SandboxSpec(image="x", env={"HOME": "/x"}))
# The CLI's environment is the one at the provider's construction, as the reference's.
os.environ["FAKE_APPTAINER_FAIL_START"] = "could not open image"
with pytest.raises(Exception, match=r"apptainer instance start failed \(code=255\) for image='docker://x'"):
    start({"exec": {"concurrency": 31}}, SandboxSpec(image="x"))
del os.environ["FAKE_APPTAINER_FAIL_START"]
os.environ["FAKE_APPTAINER_START_SLEEP"] = "5"
with pytest.raises(Exception, match="apptainer instance start timed out for image="):
    start({"create": {"start_timeout_s": 0.5}, "exec": {"concurrency": 30}}, SandboxSpec(image="x"))
del os.environ["FAKE_APPTAINER_START_SLEEP"]
with pytest.raises(Exception, match="failed readiness probe"):
    start({"probe": {"command": "exit 3"}})
print("cfg ok")
EOF
out=$(T="$T" py "$T/cfgs.py" 2>&1)
check "bin_path, the reference's validation messages, start failures and timeouts, a failed probe" has "$out" "cfg ok"
has "$out" "cfg ok" || echo "# ${out: -1500}"

# sbx ls / stop by id / gc by TTL: what the reference has not.
id=$("$SBX" create --config "$(cfg "{$IMG}")" --block sandbox --label run=r1 2>"$T/err")
check "sbx create on apptainer" [ -n "$id" ]
check "sbx ls lists it with its label" has "$(SBX_PROVIDER=apptainer "$SBX" ls --label run=r1 -q 2>&1)" "$id"
# A terminal through the agent (its own connection to the agent's socket), from another process.
if command -v script >/dev/null; then
  out=$(printf 'echo shell-$((6*7)); exit 3\n' | timeout 60 script -qec "$SBX shell $id" /dev/null 2>&1); rc=$?
  check "sbx shell on apptainer: exit 3" [ "$rc" = 3 ]
  check "sbx shell on apptainer: its output" has "$out" "shell-42"
fi
check "sbx stop ID stops its instance" env SBX_PROVIDER=apptainer "$SBX" stop "$id"
check "... which apptainer no longer lists" bash -c "! apptainer instance list --json | grep -q '$id'"
id=$("$SBX" create --config "$(cfg "{$IMG}")" --block sandbox --ttl 1 2>"$T/err")
sleep 1.5
SBX_PROVIDER=apptainer "$SBX" gc >"$T/gc" 2>&1
check "sbx gc collects an expired box and its instance" bash -c "grep -q '$id' '$T/gc' && ! apptainer instance list --json | grep -q '$id'"

# --- the real apptainer --------------------------------------------------------------------
if [ -n "$REAL_APPTAINER" ]; then
  out=$(PATH="$(dirname "$REAL_APPTAINER"):/usr/bin:/bin" FAKE_APPTAINER_LOG= "$SBX" run --provider apptainer \
    --image docker://busybox -- sh -c 'echo real-$((6*7))' 2>&1)
  check "the real apptainer ($REAL_APPTAINER) runs a box" has "$out" "real-42"
elif [ "${SBX_MUST_WORK:-}" = 1 ]; then
  echo "# the real apptainer CLI is not on PATH: only the fake's cases ran"
else
  ok "the real apptainer runs a box # SKIP apptainer is not on PATH"
fi

left=$(ls -A "$FAKE_APPTAINER_STATE/instances" 2>/dev/null)
check "no fake instance is left" [ -z "$left" ]
[ -z "$left" ] || grep -h "$left" "$FAKE_APPTAINER_LOG" | cut -c1-300 | sed 's/^/# /'
for i in $left; do apptainer instance stop "$i" >/dev/null 2>&1; done
rm -rf "$FAKE_APPTAINER_STATE" "$FAKE_APPTAINER_LOG" "$T/bin"
finish
