"""Job attribution (team / user / workload / run) for sandbox metadata
(reference-api.md K): explicit values, then NEMO_GYM_* variables, then Slurm's,
then (user only) the OS login name other than root, (workload only) the
config path. The names are `nemo_gym.sandbox.attribution`'s, so a provider
written for the reference imports them from here unchanged; records are
logged as `sbx.attribution` and as `nemo_gym.sandbox.attribution`."""

from __future__ import annotations

import getpass
import os
import threading
import uuid
from collections.abc import Mapping

from ._logging import twin_logger

LOGGER = twin_logger(__name__, "nemo_gym.sandbox.attribution")

# The metadata keys resolve_attribution() returns, and the run id's.
TEAM_KEY = "team"
USER_KEY = "user"
WORKLOAD_KEY = "workload"
RUN_KEY = "run"

TEAM_ENV_VARS = ("NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT")
USER_ENV_VARS = ("NEMO_GYM_USER", "SLURM_JOB_USER")
WORKLOAD_ENV_VARS = ("NEMO_GYM_WORKLOAD", "SLURM_JOB_NAME", "NEMO_GYM_CONFIG_PATH")
RUN_ENV_VARS = ("NEMO_GYM_RUN_ID",)
RUN_ID_ENV_VAR = RUN_ENV_VARS[0]  # sbx's earlier name
# OS login names that say nothing about who ran the job (compared lower-case).
IGNORED_LOGIN_NAMES = frozenset({"root"})

_lock = threading.Lock()
# The reference's names: its tests reset them with monkeypatch.setattr.
_process_run_id: str | None = None
_logged_attribution = False


def _first_env(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = (environ.get(name) or "").strip()
        if value:
            return value
    return None


def _login_name() -> str | None:
    try:
        name = (getpass.getuser() or "").strip()
    except Exception:  # no login variables and no passwd entry for the uid
        return None
    # A shared root login says nothing about who ran the job.
    if not name or name.lower() in IGNORED_LOGIN_NAMES:
        return None
    return name


def resolve_attribution(
    *,
    team: str | None = None,
    user: str | None = None,
    workload: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Only the keys that resolve, in the order team, user, workload."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    team = team or _first_env(env, TEAM_ENV_VARS)
    if team:
        out[TEAM_KEY] = str(team)
    user = user or _first_env(env, USER_ENV_VARS) or _login_name()
    if user:
        out[USER_KEY] = str(user)
    workload = workload or _first_env(env, WORKLOAD_ENV_VARS)
    if workload:
        out[WORKLOAD_KEY] = str(workload)
    return out


def resolve_run_id(run: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The explicit run, else NEMO_GYM_RUN_ID, else one 12-hex id per process."""
    global _process_run_id
    if run is not None and str(run).strip():
        return str(run).strip()
    env = os.environ if environ is None else environ
    value = _first_env(env, RUN_ENV_VARS)
    if value:
        return value
    with _lock:
        if _process_run_id is None:
            _process_run_id = uuid.uuid4().hex[:12]
        return _process_run_id


def log_attribution_once(metadata: Mapping[str, str]) -> None:
    """Logs the first non-empty attribution once per process."""
    global _logged_attribution
    if not metadata:
        return
    with _lock:
        if _logged_attribution:
            return
        _logged_attribution = True
    LOGGER.info("Sandbox attribution metadata: %s", dict(metadata))
