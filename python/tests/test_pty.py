"""reference-api.md G: the sandbox.pty namespace, driven by a pure-Python
provider with scripted sessions (no C provider has PTYs yet), and the
NotImplementedError every C provider answers with."""

import asyncio
import re

import pytest

import sbx
from sbx import AsyncSandbox, SandboxPtyError, SandboxPtySpec, SandboxSpec
from conftest import RecordingProvider, run


class ScriptedSession:
    """A session whose output is scripted: `reads` are returned in order;
    when `shell` is set, each write gets the echo, the output and the marker."""

    def __init__(self, spec, *, reads=None, stderr=None, exit_code=0, shell=None):
        self.spec = spec
        self.session_id = f"s-{id(self)}"
        self.written: list[bytes] = []
        self._reads = asyncio.Queue()
        for r in reads or []:
            self._reads.put_nowait(r)
        self._stderr = list(stderr or [])
        self.exit_code = exit_code
        self.shell = shell  # command -> (output bytes, status text)
        self._closed = False
        self.close_calls = 0
        self.mode = "pty" if spec.pty else "pipe"

    @property
    def closed(self):
        return self._closed

    async def write(self, data):
        self.written.append(data)
        if self.shell is not None:
            text = data.decode()
            lines = text.split("\n")
            pieces = lines[2].split("'")  # the printf line
            token = pieces[3] + pieces[5]
            command = lines[0][2:]
            out, status = self.shell(command)
            self._reads.put_nowait(f"{{ {command}\r\n".encode() + out)
            if status is not None:
                self._reads.put_nowait(f"{token}:{status}\r\n".encode())

    async def read(self, *, timeout_s=None):
        return await self._reads.get()

    def feed(self, chunk):
        self._reads.put_nowait(chunk)

    async def read_stderr(self, *, timeout_s=None):
        if self._stderr:
            return self._stderr.pop(0)
        if self.spec.command is not None:  # a one-shot command's stream ends
            return b""
        raise TimeoutError

    async def wait_exit(self, *, timeout_s=None):
        return self.exit_code

    async def close(self):
        self.close_calls += 1
        self._closed = True


class PtyProvider(RecordingProvider):
    name = "ptyful"

    def __init__(self, factory=None, **kw):
        super().__init__(**kw)
        self.factory = factory or self._default_session
        self.pty_specs: list[SandboxPtySpec] = []
        self.sessions: list[ScriptedSession] = []

    @staticmethod
    def _default_session(spec):
        if spec.command is not None:  # one-shot: output then EOF
            return ScriptedSession(spec, reads=[b"out", b""])
        return ScriptedSession(spec, shell=lambda c: (b"out\r\n", "0"))

    async def create_pty(self, handle, spec):
        self.pty_specs.append(spec)
        s = self.factory(spec)
        self.sessions.append(s)
        return s


class AttachProvider(PtyProvider):
    async def attach_pty(self, handle, session_id, *, takeover=True, since=None):
        self.calls.append(("attach", session_id, takeover, since))
        return ScriptedSession(SandboxPtySpec())


def started(provider, **spec):
    return AsyncSandbox(provider, SandboxSpec(**spec)).start()


def test_capability_checked_before_start_state():
    async def go():
        plain = RecordingProvider()
        sb = AsyncSandbox(plain, SandboxSpec())
        msg = "Sandbox provider 'recording' does not support PTY sessions; use exec() instead"
        for call in (lambda: sb.pty.create(), lambda: sb.pty.exec("ls")):
            with pytest.raises(NotImplementedError) as e:
                await call()
            assert str(e.value) == msg
        await sb.start()
        with pytest.raises(NotImplementedError, match="use exec"):
            await sb.pty.create("ls")
        with pytest.raises(NotImplementedError) as e:
            await sb.pty.attach("s1")
        assert str(e.value) == "Sandbox provider 'recording' does not support re-attaching PTY sessions"
        with pytest.raises(RuntimeError, match="has not been started"):
            await AsyncSandbox(PtyProvider(), SandboxSpec()).pty.create()

    run(go())


def test_c_providers_have_no_pty():
    async def go():
        async with AsyncSandbox({"fake": {}}, SandboxSpec()) as sb:
            await sb.start()
            with pytest.raises(NotImplementedError) as e:
                await sb.pty.exec("ls")
            assert str(e.value) == "Sandbox provider 'fake' does not support PTY sessions; use exec() instead"
            with pytest.raises(NotImplementedError, match="re-attaching"):
                await sb.pty.attach("x")

    run(go())


def test_create_forwards_spec_and_tracks_default():
    async def go():
        p = PtyProvider()
        sb = await started(p, workdir="/w")
        cmd = await sb.pty.create("top", env={"A": "1"}, rows=30, cols=100, user="root", pty=False)
        assert p.pty_specs[-1] == SandboxPtySpec("top", "/w", {"A": "1"}, 30, 100, "root", False)
        assert sb.pty._default is None  # command sessions never become the default
        first = await sb.pty.create(cwd="/c")
        assert p.pty_specs[-1].cwd == "/c"
        second = await sb.pty.create()
        assert sb.pty._default is first  # the oldest live one is kept
        await first.close()
        third = await sb.pty.create()
        assert sb.pty._default is third and second is not third and cmd is not third

    run(go())


def test_attach_forwards_and_never_becomes_default():
    async def go():
        p = AttachProvider()
        sb = await started(p)
        s = await sb.pty.attach("sid", takeover=False, since=0)
        assert ("attach", "sid", False, 0) in p.calls
        assert sb.pty._default is None and s is not None

    run(go())


def test_marker_protocol_and_result():
    async def go():
        p = PtyProvider(factory=lambda spec: ScriptedSession(spec, shell=lambda c: (b"hello\r\n", "7"),
                                                             stderr=[b"warn\r\n"]))
        sb = await started(p)
        session = await sb.pty.create()
        r = await sb.pty.exec("echo hello", session=session)
        data = session.written[-1]
        lines = data.split(b"\n")
        assert lines[-1] == b"" and len(lines) == 4  # exactly three newline-terminated lines
        assert lines[0] == b"{ echo hello" and lines[1] == b"} </dev/null"
        m = re.fullmatch(rb"printf '%s%s:%s\\n' 'NGPTY' '([0-9a-f]{12})' \"\$\?\"", lines[2])
        assert m, lines[2]
        token = "NGPTY" + m.group(1).decode()
        assert f"{token}:".encode() not in data and b"</dev/null" in data
        assert r.stdout == "{ echo hello\r\nhello\r\n"  # the shell's echo is included
        assert r.stderr == "warn\r\n" and r.return_code == 7 and r.error_type is None
        assert not session.closed

    run(go())


def test_marker_and_status_across_chunks():
    async def go():
        p = PtyProvider(factory=lambda spec: ScriptedSession(spec))
        sb = await started(p)
        session = await sb.pty.create()
        task = asyncio.create_task(sb.pty.exec("x", session=session))
        while not session.written:
            await asyncio.sleep(0)
        pieces = session.written[0].decode().split("\n")[2].split("'")
        token = pieces[3] + pieces[5]
        for chunk in (b"a\xff", token[:7].encode(), token[7:].encode() + b":1", b"2", b"\r\nrest"):
            session.feed(chunk)
        r = await task
        assert r.stdout == "a\ufffd" and r.return_code == 12 and r.stderr is None

    run(go())


def test_non_numeric_status_and_ended_session():
    async def go():
        p = PtyProvider(factory=lambda spec: ScriptedSession(spec, shell=lambda c: (b"", "oops")))
        sb = await started(p)
        r = await sb.pty.exec("x", session=await sb.pty.create())
        assert (r.return_code, r.error_type) == (125, "pty")
        q = PtyProvider(factory=lambda spec: ScriptedSession(spec, reads=[b""]))
        sb2 = await started(q)
        s = await sb2.pty.create()
        with pytest.raises(SandboxPtyError) as e:
            await sb2.pty.exec("x", session=s)
        assert str(e.value) == "PTY session ended before the command finished"
        assert not s.closed

    run(go())


def test_explicit_session_rejects_shaping_arguments():
    async def go():
        p = PtyProvider()
        sb = await started(p)
        s = await sb.pty.create()
        n = len(p.pty_specs)
        for kw in ({"cwd": "/x"}, {"env": {}}, {"user": "root"}):
            with pytest.raises(ValueError, match="fixed at pty.create") as e:
                await sb.pty.exec("x", session=s, **kw)
        assert str(e.value) == (
            "cwd/env/user apply only when pty.exec opens its own session; "
            "for an existing session they are fixed at pty.create() time"
        )
        r = await sb.pty.exec("x", session=s, rows=50, cols=10, pty=False)  # silently ignored
        assert r.return_code == 0 and len(p.pty_specs) == n

    run(go())


def test_implicit_reuse_of_the_default_session():
    async def go():
        p = PtyProvider()
        sb = await started(p)
        default = await sb.pty.create()
        n = len(p.pty_specs)
        await sb.pty.exec("a")
        await sb.pty.exec("b")
        assert len(p.pty_specs) == n and len(default.written) == 2 and not default.closed
        # Any shaping argument opens a one-shot session and leaves the default alone.
        for kw in ({"cwd": "/x"}, {"env": {"A": "1"}}, {"user": "u"}, {"rows": 25}, {"cols": 81}, {"pty": False}):
            await sb.pty.exec("c", **kw)
            assert p.sessions[-1] is not default and p.sessions[-1].closed
        assert len(default.written) == 2
        # A custom-command session is never reused.
        sb2 = await started(PtyProvider())
        await sb2.pty.create("python")
        await sb2.pty.exec("x")
        assert sb2._provider.sessions[-1].spec.command == "x"
        # A closed default is dropped first.
        await default.close()
        await sb.pty.exec("d")
        assert sb.pty._default is None and p.sessions[-1].spec.command == "d"

    run(go())


def test_session_execs_are_serialized():
    async def go():
        p = PtyProvider(factory=lambda spec: ScriptedSession(spec))
        sb = await started(p)
        s = await sb.pty.create()
        t1 = asyncio.create_task(sb.pty.exec("one"))
        t2 = asyncio.create_task(sb.pty.exec("two"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(s.written) == 1  # the second waits for the lock
        pieces = s.written[0].decode().split("\n")[2].split("'")
        s.feed(f"{pieces[3]}{pieces[5]}:0\n".encode())
        await t1
        while len(s.written) < 2:
            await asyncio.sleep(0)
        pieces = s.written[1].decode().split("\n")[2].split("'")
        s.feed(f"{pieces[3]}{pieces[5]}:3\n".encode())
        assert (await t2).return_code == 3

    run(go())


def test_session_timeouts():
    async def go():
        hang = lambda spec: ScriptedSession(spec, shell=lambda c: (b"partial", None))  # noqa: E731
        p = PtyProvider(factory=hang)
        sb = await started(p)
        explicit = await sb.pty.create()
        r = await sb.pty.exec("sleep 9", session=explicit, timeout_s=0.05)
        assert (r.stdout, r.return_code, r.error_type) == (None, 125, "timeout")
        assert r.stderr == (
            "PTY command timed out after 0.05s: 'sleep 9'; the command is still running and the session "
            "should be discarded"
        )
        assert not explicit.closed  # an explicitly passed session is the caller's
        r = await sb.pty.exec("sleep 9", timeout_s=0.05)  # implicitly reuses `explicit` (the default)
        assert "discarded" in r.stderr and explicit.closed and sb.pty._default is None

    run(go())


def test_one_shot_sessions():
    async def go():
        def pipe(spec):
            s = ScriptedSession(spec, reads=[b"a", b"b", b""], stderr=[b"E"], exit_code=3)
            return s

        p = PtyProvider(factory=pipe)
        sb = await started(p)
        r = await sb.pty.exec("cmd", pty=False)
        assert r == sbx.SandboxExecResult("ab", "E", 3)
        assert p.sessions[-1].closed
        q = PtyProvider(factory=lambda spec: ScriptedSession(spec, reads=[b"merged", b""], stderr=[b""]))
        sb2 = await started(q)
        r = await sb2.pty.exec("cmd", cwd="/x")
        assert r == sbx.SandboxExecResult("merged", None, 0)
        assert q.pty_specs[-1].command == "cmd" and q.pty_specs[-1].cwd == "/x"
        h = PtyProvider(factory=lambda spec: ScriptedSession(spec, reads=[b"x"]))
        sb3 = await started(h)
        r = await sb3.pty.exec("forever", timeout_s=0.05)
        assert r == sbx.SandboxExecResult(None, "PTY command timed out after 0.05s: 'forever'", 125, "timeout")
        assert h.sessions[-1].closed

    run(go())
