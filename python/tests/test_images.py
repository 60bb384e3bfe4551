"""sbx.images over the linux provider's store: import, list, inspect (the
OCI config), tag, remove."""

import hashlib
import io
import json
import tarfile

import pytest

from sbx import SandboxError, images
from conftest import need_provider


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


def _blob(layout, data: bytes) -> str:
    h = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / h).write_bytes(data)
    return h


def _layout(tmp_path, config: dict):
    """An OCI layout: one layer holding /etc/x, and `config` as its config blob."""
    layout = tmp_path / "oci"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("etc/x")
        info.size = 2
        t.addfile(info, io.BytesIO(b"x\n"))
    layer = buf.getvalue()
    cfg = json.dumps(config).encode()
    m = json.dumps({
        "schemaVersion": 2,
        "config": {"digest": "sha256:" + _blob(layout, cfg), "size": len(cfg)},
        "layers": [{"digest": "sha256:" + _blob(layout, layer), "size": len(layer)}],
    }).encode()
    mh = _blob(layout, m)
    (layout / "index.json").write_text(json.dumps({"manifests": [{"digest": "sha256:" + mh}]}))
    (layout / "oci-layout").write_text("{}")
    return layout


def test_import_inspect_tag_remove(tmp_path):
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    layout = _layout(tmp_path, {"config": {"Env": ["A=1"], "ExposedPorts": {"8080/tcp": {}},
                                           "WorkingDir": "/srv", "User": "1000:1000"}})
    made = images.import_image(cfg, "app", layout)
    assert made["name"] == "app" and made["digest"].startswith("sha256:")
    info = images.inspect_image(cfg, "app")
    assert info["config"]["ExposedPorts"] == {"8080/tcp": {}}
    assert (info["config"]["WorkingDir"], info["config"]["User"]) == ("/srv", "1000:1000")
    images.tag_image(cfg, "app", "app2")
    assert [i["name"] for i in sorted(images.list_images(cfg), key=lambda i: i["name"])] == [
        "app", "app2"]
    assert images.inspect_image(cfg, "app2")["digest"] == made["digest"]
    images.remove_image(cfg, "app")
    assert images.inspect_image(cfg, "app2")["config"]["Env"] == ["A=1"]
    with pytest.raises(SandboxError, match="no image named app"):
        images.inspect_image(cfg, "app")


def test_hostile_config_refused(tmp_path):
    """A bad config is the input's fault: ValueError (SBX_EINVAL), nothing kept."""
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    layout = _layout(tmp_path, {"config": {"Env": ["NOEQUALS"]}})
    with pytest.raises(ValueError, match='Env\\[0\\] "NOEQUALS" is not NAME=VALUE'):
        images.import_image(cfg, "bad", layout)
    assert images.list_images(cfg) == []


def test_remove_and_prune_layers(tmp_path):
    """rm drops the layers only that image had; prune drops what no name keeps."""
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    store = tmp_path / "state" / "images" / "layers"
    layout = _layout(tmp_path, {"config": {"Env": ["A=1"]}})
    images.import_image(cfg, "ghcr.io/org/app:v1", layout)
    images.tag_image(cfg, "ghcr.io/org/app:v1", "app:latest")
    assert len(list(store.iterdir())) == 1
    images.remove_image(cfg, "ghcr.io/org/app:v1")
    assert len(list(store.iterdir())) == 1  # app:latest still has it
    assert images.prune_images(cfg) == []
    images.remove_image(cfg, "app:latest")
    assert list(store.iterdir()) == []
    assert images.prune_images(cfg, dry_run=True) == []


def test_pull_reaches_the_c_client(tmp_path):
    """pull_image goes through the C client: a bad reference and a registry
    that is not there are the C library's errors, and nothing is named."""
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    with pytest.raises(ValueError) as e:  # SBX_EINVAL
        images.pull_image(cfg, "org/app:bad tag!")
    assert "org/app:bad tag!" in str(e.value), str(e.value)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(SandboxError) as e:
        images.pull_image(cfg, f"127.0.0.1:{port}/nobody/here:1")
    assert f"127.0.0.1:{port}" in str(e.value), str(e.value)
    assert images.list_images(cfg) == []


def test_commit_needs_a_box(tmp_path):
    """commit_image passes the request through; the C library's refusals arrive
    as exceptions (tests/integration/test_image_commit.c covers real boxes)."""
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    with pytest.raises(SandboxError, match="no box"):
        images.commit_image(cfg, "no-such-box", "x", ["ENV A=1"])
    with pytest.raises(ValueError, match="invalid image name"):
        images.commit_image(cfg, "some-box", "Bad Name")
