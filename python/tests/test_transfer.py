"""The transfer module (sbx.transfer) over real linux boxes whose image has
no shell and no tar: directories, archives and bytes in and out, kinds, and
the reference's error taxonomy."""

import asyncio
import io
import os
import tarfile

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec
from sbx import transfer
from sbx.transfer import SandboxTransferError, SandboxUnavailableError
from conftest import need_provider, skip_or_fail


@pytest.fixture(autouse=True)
def _linux(monkeypatch):
    need_provider("linux")
    if os.geteuid() != 0:
        skip_or_fail("linux boxes need root")
    # A sanitizer build's sbx-agent is linked dynamically and cannot run in
    # an image: use the plain build's static one, as tests/linux_fixture.h
    # does (the agent is not what these tests sanitize).
    static = os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx-agent")
    if "SBX_AGENT" not in os.environ and os.path.exists(static):
        monkeypatch.setenv("SBX_AGENT", os.path.realpath(static))


@pytest.fixture
def bare_image(tmp_path):
    img = tmp_path / "bare"
    (img / "etc").mkdir(parents=True)
    (img / "etc/passwd").write_text("root:x:0:0:root:/root:/nope\n")
    (img / "etc/group").write_text("root:x:0:\n")
    return str(img)


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir", st.st_mode & 0o7777, int(st.st_mtime))
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", st.st_mode & 0o7777, int(st.st_mtime), f.read())
    return out


def test_dir_round_trip_bytes_kinds(tmp_path, bare_image):
    src = tmp_path / "src"
    (src / "a/b").mkdir(parents=True)
    for i in range(50):
        p = src / "a" / f"f{i}"
        p.write_bytes(bytes([i]) * i)
        os.chmod(p, 0o600 if i % 2 else 0o755)
        os.utime(p, (1600000000 + i, 1600000000 + i))
    os.symlink("/", src / "root-link")
    os.link(src / "a/f3", src / "a/b/hard")
    with Sandbox({"linux": {}}, SandboxSpec(image=bare_image, workdir="/work")) as sb:
        sb.start()
        transfer.upload_dir(sb, src, "up")
        assert transfer.remote_kind(sb, "up") == "dir"
        assert transfer.remote_kind(sb, "/work/up/a/f3") == "file"
        assert transfer.remote_kind(sb, "/nothing") is None
        transfer.download_dir(sb, "/work/up", tmp_path / "back")
        assert _tree(src) == _tree(tmp_path / "back")
        assert os.lstat(tmp_path / "back/a/f3").st_ino == os.lstat(tmp_path / "back/a/b/hard").st_ino
        transfer.write_file(sb, "deep/x.bin", b"\x00\x01bytes", 0o640)
        assert transfer.read_file(sb, "/work/deep/x.bin") == b"\x00\x01bytes"
        with pytest.raises(SandboxTransferError, match="more than the limit"):
            transfer.read_file(sb, "/work/deep/x.bin", max_bytes=2)
        with pytest.raises(SandboxTransferError, match="/no/such"):
            transfer.download_dir(sb, "/no/such", tmp_path / "none")
        transfer.download_path(sb, "/work/deep/x.bin", tmp_path / "x.bin")
        assert (tmp_path / "x.bin").read_bytes() == b"\x00\x01bytes"
        transfer.download_path(sb, "/work/up/a", tmp_path / "a-back")
        assert (tmp_path / "a-back/f5").read_bytes() == bytes([5]) * 5


def test_hostile_archive_is_a_transfer_error(tmp_path, bare_image):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        ti = tarfile.TarInfo("../escape")
        data = b"x\n"
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    with Sandbox({"linux": {}}, SandboxSpec(image=bare_image, workdir="/work")) as sb:
        sb.start()
        with pytest.raises(SandboxTransferError, match=r"'\.\.'"):
            transfer.upload_archive(sb, buf.getvalue(), "/work/t")
        assert transfer.remote_kind(sb, "/work/escape") is None
        # A well-formed archive, replayed byte for byte from a file.
        good = io.BytesIO()
        with tarfile.open(fileobj=good, mode="w", format=tarfile.PAX_FORMAT) as t:
            ti = tarfile.TarInfo("keep/me.txt")
            ti.size = 3
            ti.mode = 0o604
            t.addfile(ti, io.BytesIO(b"ok\n"))
        (tmp_path / "good.tar").write_bytes(good.getvalue())
        transfer.upload_archive(sb, tmp_path / "good.tar", "/work/t")
        assert transfer.read_file(sb, "/work/t/keep/me.txt") == b"ok\n"
        transfer.download_archive(sb, "/work/t", tmp_path / "out.tar")
        with tarfile.open(tmp_path / "out.tar") as t:
            m = t.getmember("keep/me.txt")
            assert (m.mode & 0o7777, t.extractfile(m).read()) == (0o604, b"ok\n")


def test_async_sandbox(tmp_path, bare_image):
    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(image=bare_image, workdir="/work")) as sb:
            await sb.start()
            await transfer.write_file(sb, "/work/a.txt", "text ✓")
            assert (await transfer.read_file(sb, "/work/a.txt")).decode() == "text ✓"
            src = tmp_path / "s"
            src.mkdir()
            (src / "f").write_text("1")
            await transfer.upload_path(sb, src, "/work/s")
            await transfer.download_path(sb, "/work/s", tmp_path / "s-back")
            assert (tmp_path / "s-back/f").read_text() == "1"
            await sb.stop()
            with pytest.raises(RuntimeError, match="not been started"):
                await transfer.read_file(sb, "/work/a.txt")

    asyncio.run(go())


def test_local_transfers_through_the_host_agent(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub/f").write_text("1")
    os.chmod(src / "sub/f", 0o751)
    with Sandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path / "w"))) as sb:
        sb.start()
        transfer.upload_dir(sb, src, "t")
        assert (tmp_path / "w/t/sub/f").read_text() == "1"
        transfer.download_dir(sb, "t", tmp_path / "back")
        assert (tmp_path / "back/sub/f").read_text() == "1"
        assert os.stat(tmp_path / "back/sub/f").st_mode & 0o7777 == 0o751


def test_provider_without_agent_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("SBX_AGENT", str(tmp_path / "no-such-agent"))
    with Sandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path / "w"))) as sb:
        sb.start()
        with pytest.raises(SandboxUnavailableError) as ei:
            transfer.upload_dir(sb, tmp_path, "/x")
        assert ei.value.error_type == "unsupported"
        assert "sbx-agent" in str(ei.value)