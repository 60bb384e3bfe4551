"""reference-api.md I: register/get/list/create_provider, C providers and
entry points of the group nemo_gym.sandbox_providers."""

import logging
import sys
import textwrap

import pytest

from sbx import create_provider, get_provider_class, list_providers, register_provider
from sbx.cprovider import CProvider
from sbx import registry
from conftest import RecordingProvider


def test_register_and_lookup():
    with pytest.raises(ValueError, match="Provider name must be non-empty"):
        register_provider("", RecordingProvider)
    register_provider("recording", RecordingProvider)
    assert get_provider_class("recording") is RecordingProvider
    with pytest.raises(ValueError) as e:
        register_provider("recording", RecordingProvider)
    assert str(e.value) == "Sandbox provider 'recording' is already registered"
    with pytest.raises(ValueError, match="'fake' is already registered"):
        register_provider("fake", RecordingProvider)  # a C provider (the test plugin)
    class Other(RecordingProvider):
        pass
    register_provider("recording", Other, override=True)
    assert get_provider_class("recording") is Other
    assert issubclass(get_provider_class("fake"), CProvider)
    register_provider("fake", Other, override=True)  # shadows the C provider
    assert get_provider_class("fake") is Other
    assert isinstance(create_provider({"fake": {}}), Other)


def test_unknown_provider_message():
    with pytest.raises(ValueError, match="Unknown sandbox provider") as e:
        get_provider_class("nope")
    assert str(e.value) == f"Unknown sandbox provider 'nope'. Available providers: {', '.join(list_providers())}"
    with pytest.raises(ValueError, match="Unknown sandbox provider 'nope'"):
        create_provider({"nope": {}})


def test_list_providers_sorted_union():
    register_provider("zzz", RecordingProvider)
    register_provider("aaa", RecordingProvider)
    names = list_providers()
    assert names == sorted(names)
    assert {"aaa", "zzz", "fake", "fake_basic"} <= set(names)


def test_create_provider_validation():
    register_provider("recording", RecordingProvider)
    with pytest.raises(ValueError, match="exactly one provider name"):
        create_provider({})
    with pytest.raises(ValueError, match="exactly one provider name"):
        create_provider({"a": {}, "b": {}})
    with pytest.raises(ValueError, match="Sandbox provider name must be a non-empty string"):
        create_provider({"": {}})
    with pytest.raises(ValueError, match="Sandbox provider name must be a non-empty string"):
        create_provider({1: {}})
    with pytest.raises(TypeError) as e:
        create_provider({"recording": "x"})
    assert str(e.value) == "Sandbox provider 'recording' config must be a mapping"
    assert create_provider({"recording": None}).marker is None
    assert create_provider({"recording": {"marker": "configured"}}).marker == "configured"
    c = create_provider({"fake": None})
    assert isinstance(c, CProvider) and c.name == "fake"


def _publish(tmp_path, dist, entries):
    """Makes an installed-looking distribution publishing `entries` (name -> value)."""
    info = tmp_path / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[nemo_gym.sandbox_providers]\n{lines}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = tmp_path / "ep_provider_mod.py"
    mod.write_text(textwrap.dedent("""
        class EpProvider:
            name = "ep"
            def __init__(self, **kw):
                self.kw = kw
    """))
    registry._reset_entry_points()
    yield tmp_path
    sys.modules.pop("ep_provider_mod", None)


def test_entry_points_are_discovered(site):
    _publish(site, "pkg-a", {"ep_one": "ep_provider_mod:EpProvider", "sbx_local": "sbx.nemo_gym_adapter:LocalProvider"})
    assert "ep_one" in list_providers()
    assert "sbx_local" not in list_providers()  # sbx's own adapters are not listed twice
    cls = get_provider_class("ep_one")
    assert cls.__name__ == "EpProvider"
    assert create_provider({"ep_one": {"a": 1}}).kw == {"a": 1}


def test_duplicate_entry_points(site):
    _publish(site / "a", "pkg-a", {"dup": "ep_provider_mod:EpProvider"})
    _publish(site / "b", "pkg-b", {"dup": "ep_provider_mod:EpProvider"})
    sys.path.insert(0, str(site / "a"))
    sys.path.insert(0, str(site / "b"))
    try:
        registry._reset_entry_points()
        with pytest.raises(ValueError, match="Duplicate sandbox provider entry point.*pkg-a.*pkg-b") as e:
            list_providers()
        assert str(e.value) == (
            "Duplicate sandbox provider entry point 'dup' published by 'pkg-a' and 'pkg-b'. Rename one of them."
        )
    finally:
        sys.path.remove(str(site / "a"))
        sys.path.remove(str(site / "b"))


def test_shadowed_entry_point_warns_and_builtin_wins(site, caplog):
    _publish(site, "pkg-s", {"fake": "ep_provider_mod:EpProvider"})
    with caplog.at_level(logging.WARNING):
        names = list_providers()
    assert names.count("fake") == 1
    assert any("shadowed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert issubclass(get_provider_class("fake"), CProvider)


def test_shipped_entry_points_match_pyproject():
    """`make install` ships python/sbx-0.1.0.dist-info so NeMo Gym finds the
    adapters without pip; it must publish exactly what pyproject.toml does."""
    import configparser
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    declared = pyproject["project"]["entry-points"]["nemo_gym.sandbox_providers"]
    cp = configparser.ConfigParser()
    cp.optionxform = str
    cp.read(root / "sbx-0.1.0.dist-info" / "entry_points.txt")
    assert dict(cp["nemo_gym.sandbox_providers"]) == declared
    from sbx import nemo_gym_adapter

    for name, target in declared.items():
        module, attr = target.split(":")
        cls = getattr(nemo_gym_adapter, attr)
        assert module == "sbx.nemo_gym_adapter" and cls.display_name == name
