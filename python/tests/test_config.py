"""reference-api.md J (config resolution), K (attribution), L (rewrite_image)."""

import logging

import pytest

import sbx.attribution as attr
from sbx import resolve_provider_config, resolve_provider_metadata, rewrite_image


NAMED = {
    "sandbox_main": {"opensandbox": {"connection": {"domain": "x"}}, "default_metadata": {"team": "t"}},
    "other": {"a": 1, "b": 2},
    "scalar": 3,
}


def test_resolve_by_name_and_inline():
    got = resolve_provider_config("sandbox_main", NAMED)
    assert got == {"opensandbox": {"connection": {"domain": "x"}}}
    assert got is not NAMED["sandbox_main"]
    inline = {"docker": {}}
    r = resolve_provider_config(inline)
    assert r == inline and r is not inline
    assert resolve_provider_config({"docker": None, "default_metadata": {"a": "b"}}) == {"docker": None}


def test_mapping_like_objects_are_converted():
    from collections.abc import Mapping

    class Conf(Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    assert resolve_provider_config("s", {"s": Conf({"local": {}})}) == {"local": {}}
    assert type(resolve_provider_config(Conf({"local": {}}))) is dict


def test_reference_errors():
    with pytest.raises(ValueError) as e:
        resolve_provider_config("", NAMED)
    assert str(e.value) == "Sandbox provider reference must be a non-empty string"
    for named in (NAMED, None, {"missing": None}):
        with pytest.raises(ValueError, match="is not defined in the merged config"):
            resolve_provider_config("missing", named)
    with pytest.raises(ValueError) as e:
        resolve_provider_config("missing", NAMED)
    assert str(e.value) == (
        "Sandbox provider reference 'missing' is not defined in the merged config. Define a top-level "
        "'missing:' block (e.g. via nemo_gym/sandbox/providers/<provider>/configs/<provider>.yaml) and include "
        "it in your config_paths. Available sandbox configs: 'sandbox_main'"
    )
    with pytest.raises(ValueError, match=r"Available sandbox configs: \(none\)"):
        resolve_provider_config("missing", None)
    with pytest.raises(TypeError, match="must be a name reference") as e:
        resolve_provider_config(3)
    assert str(e.value) == (
        "sandbox_provider must be a name reference (str) or a single-key provider mapping, got int"
    )
    with pytest.raises(ValueError) as e:
        resolve_provider_config("scalar", NAMED)
    assert str(e.value) == "Sandbox provider config from reference 'scalar' must be a mapping, got: 3"
    with pytest.raises(ValueError, match="exactly one provider key") as e:
        resolve_provider_config("other", NAMED)
    assert str(e.value) == (
        "Sandbox provider config from reference 'other' must have exactly one provider key "
        "{provider_name: config}, got keys: ['a', 'b']"
    )
    with pytest.raises(ValueError, match="from inline sandbox_provider config must have exactly one"):
        resolve_provider_config({"default_metadata": {}})


def test_metadata():
    md = resolve_provider_metadata("sandbox_main", NAMED)
    assert md == {"team": "t"} and md is not NAMED["sandbox_main"]["default_metadata"]
    assert resolve_provider_metadata({"docker": {}}) == {}
    assert resolve_provider_metadata({"docker": {}, "default_metadata": None}) == {}
    assert resolve_provider_metadata("other", NAMED) == {}  # provider-key count is not checked
    with pytest.raises(ValueError, match="must be a mapping") as e:
        resolve_provider_metadata({"docker": {}, "default_metadata": ["x"]})
    assert str(e.value) == (
        "Sandbox 'default_metadata' from inline sandbox_provider config must be a mapping, got: ['x']"
    )


# --- K. attribution -------------------------------------------------------------


def test_attribution_order_and_explicit_values(monkeypatch):
    monkeypatch.setattr(attr.getpass, "getuser", lambda: "alice")
    env = {"NEMO_GYM_TEAM": "envteam", "SLURM_JOB_ACCOUNT": "acct", "SLURM_JOB_NAME": "job"}
    got = attr.resolve_attribution(environ=env)
    assert got == {"team": "envteam", "user": "alice", "workload": "job"}
    assert list(got) == ["team", "user", "workload"]
    assert attr.resolve_attribution(team="t", user="u", workload="w", environ=env) == {
        "team": "t", "user": "u", "workload": "w"}
    assert attr.resolve_attribution(environ={"SLURM_JOB_ACCOUNT": "acct"})["team"] == "acct"
    assert attr.resolve_attribution(environ={"NEMO_GYM_USER": "n", "SLURM_JOB_USER": "s"})["user"] == "n"
    assert attr.resolve_attribution(environ={"SLURM_JOB_USER": "s"})["user"] == "s"
    assert attr.resolve_attribution(environ={"NEMO_GYM_WORKLOAD": "w", "SLURM_JOB_NAME": "j"})["workload"] == "w"
    assert attr.resolve_attribution(environ={"NEMO_GYM_CONFIG_PATH": "/c.yaml"})["workload"] == "/c.yaml"


def test_attribution_trims_and_skips_blank(monkeypatch):
    monkeypatch.setattr(attr.getpass, "getuser", lambda: "  ")
    got = attr.resolve_attribution(environ={"NEMO_GYM_TEAM": "   ", "SLURM_JOB_ACCOUNT": " acct ",
                                            "NEMO_GYM_USER": ""})
    assert got == {"team": "acct"}


def test_login_fallback(monkeypatch):
    monkeypatch.setattr(attr.getpass, "getuser", lambda: "ROOT")
    assert "user" not in attr.resolve_attribution(environ={})
    assert attr.resolve_attribution(environ={"NEMO_GYM_USER": "root"})["user"] == "root"

    def boom():
        raise OSError("no passwd entry")

    monkeypatch.setattr(attr.getpass, "getuser", boom)
    assert attr.resolve_attribution(environ={}) == {}
    monkeypatch.setattr(attr.getpass, "getuser", lambda: "bob")
    assert attr.resolve_attribution(environ={}) == {"user": "bob"}


def test_attribution_uses_process_environment(monkeypatch):
    monkeypatch.setenv("NEMO_GYM_TEAM", "from-os")
    assert attr.resolve_attribution()["team"] == "from-os"


def test_run_id(monkeypatch):
    assert attr.resolve_run_id("  r1 ") == "r1"
    assert attr.resolve_run_id(environ={"NEMO_GYM_RUN_ID": " e1 "}) == "e1"
    monkeypatch.delenv("NEMO_GYM_RUN_ID", raising=False)
    a = attr.resolve_run_id(environ={})
    assert len(a) == 12 and all(c in "0123456789abcdef" for c in a)
    assert attr.resolve_run_id() == a == attr.resolve_run_id(environ={"NEMO_GYM_RUN_ID": "  "})


def test_log_attribution_once(monkeypatch, caplog):
    monkeypatch.setattr(attr, "_logged_attribution", False)
    with caplog.at_level(logging.INFO, logger="sbx.attribution"):
        attr.log_attribution_once({})
        assert caplog.records == []
        attr.log_attribution_once({"team": "t"})
        attr.log_attribution_once({"team": "u"})
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["Sandbox attribution metadata: {'team': 't'}"]
    assert caplog.records[0].levelno == logging.INFO


# --- L. rewrite_image -----------------------------------------------------------


def test_rewrite_image():
    rules = [{"from": "docker.io/", "to": "mirror/dockerhub/"}, {"from": "docker.io/library/", "to": "never/"}]
    assert rewrite_image(None, rules) is None
    assert rewrite_image("docker.io/library/python:3.13", rules) == "mirror/dockerhub/library/python:3.13"
    assert rewrite_image("ghcr.io/x", rules) == "ghcr.io/x"
    assert rewrite_image("ghcr.io/x", [{"from": "docker.io/", "to": "m/"}, {"bad": 1}][:1]) == "ghcr.io/x"
    with pytest.raises(KeyError):
        rewrite_image("ghcr.io/x", [{"from": "docker.io/", "to": "m/"}, {"to": "x"}])
    assert rewrite_image("a/x", [{"from": "a/", "to": "b/"}, {"to": "never reached"}]) == "b/x"
