"""[svc-logs] A startup file with a mode: a value of SandboxSpec.files.

    SandboxSpec(files={
        "/work/run.sh": SandboxFile("#!/bin/sh\necho hi\n", mode=0o755),
        "/work/key": SandboxFile(b"\x00\xff", mode=0o600),
        "/work/notes.txt": "plain text, as in the reference",
        "/work/blob": b"bytes, mode 0600",
    })

On C providers the spec goes to the C library as JSON (src/core/spec.c
parses and checks it): a str stays a str; bytes and SandboxFile become
{"content", "encoding": "base64", "mode"} objects."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SandboxFile:
    """`content` (str: written as UTF-8; or bytes) and `mode`, the file's
    permission bits (0 to 0o777; None: 0600, as a plain value)."""

    content: str | bytes
    mode: int | None = None


def stage_file(path: Any, value: Any) -> None:
    """Writes a bytes or SandboxFile value to the temp file `path` (with the
    mode) for a Python provider's upload_file; whether the mode reaches the
    box is up to that provider's upload."""
    import os
    from pathlib import Path

    content = value.content if isinstance(value, SandboxFile) else value
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    Path(path).write_bytes(data)
    mode = value.mode if isinstance(value, SandboxFile) else None
    if mode is not None:
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise ValueError("SandboxFile mode must be an int from 0 to 0o777, such as 0o755")
        os.chmod(path, mode)


def file_to_json(value: Any) -> Any:
    """A SandboxSpec.files value as the C spec parser takes it."""
    if isinstance(value, SandboxFile):
        out = file_to_json(value.content)
        if not isinstance(out, dict):
            out = {"content": out}
        if value.mode is not None:
            if isinstance(value.mode, bool) or not isinstance(value.mode, int):
                raise TypeError("SandboxFile mode must be an int such as 0o755")
            out["mode"] = value.mode  # range checked in C, with its message
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"content": base64.b64encode(bytes(value)).decode("ascii"), "encoding": "base64"}
    return value
