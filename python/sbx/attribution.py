"""Job attribution (team / user / workload) for sandbox metadata
(reference-api.md K): explicit values, then NEMO_GYM_* variables, then Slurm's,
then (user only) the OS login name other than root."""

from __future__ import annotations

import getpass
import logging
import os
import threading
import uuid
from collections.abc import Mapping

LOGGER = logging.getLogger(__name__)

TEAM_ENV_VARS = ("NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT")
USER_ENV_VARS = ("NEMO_GYM_USER", "SLURM_JOB_USER")
WORKLOAD_ENV_VARS = ("NEMO_GYM_WORKLOAD", "SLURM_JOB_NAME", "NEMO_GYM_CONFIG_PATH")
RUN_ID_ENV_VAR = "NEMO_GYM_RUN_ID"

_lock = threading.Lock()
_run_id: str | None = None
_logged = False


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
    if not name or name.lower() == "root":
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
        out["team"] = str(team)
    user = user or _first_env(env, USER_ENV_VARS) or _login_name()
    if user:
        out["user"] = str(user)
    workload = workload or _first_env(env, WORKLOAD_ENV_VARS)
    if workload:
        out["workload"] = str(workload)
    return out


def resolve_run_id(run: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The explicit run, else NEMO_GYM_RUN_ID, else one 12-hex id per process."""
    global _run_id
    if run is not None and str(run).strip():
        return str(run).strip()
    env = os.environ if environ is None else environ
    value = (env.get(RUN_ID_ENV_VAR) or "").strip()
    if value:
        return value
    with _lock:
        if _run_id is None:
            _run_id = uuid.uuid4().hex[:12]
        return _run_id


def log_attribution_once(metadata: Mapping[str, str]) -> None:
    """Logs the first non-empty attribution once per process."""
    global _logged
    if not metadata:
        return
    with _lock:
        if _logged:
            return
        _logged = True
    LOGGER.info("Sandbox attribution metadata: %s", dict(metadata))
