"""Client options: resolved once, validated, frozen. Bad options raise ConfigError; none is silently fixed.
The only reader of the environment is :func:`resolve_env` (used by ``Berth.from_env``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from ._errors import ConfigError

DEFAULT_URL = "http://127.0.0.1:7070"
#: Seconds a short call may go without progress (connect, each read, each write). Streams and the verbs
#: that move machines (create, hibernate, wake, snapshot, fork, terminate, approve) have no default limit.
DEFAULT_TIMEOUT = 120.0


class _Default:
    """The ``timeout`` sentinel: use the client's (short calls) or none (long calls)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()
#: Seconds, ``None`` for no limit, or DEFAULT.
Timeout = float | None | _Default


@dataclass(frozen=True)
class ClientOptions:
    url: str
    token: str | None
    timeout: float | None


def check_timeout(value: object, name: str = "timeout") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise ConfigError(f"{name}: must be a number of seconds ≥ 0 or None, got {value!r}", details={"field": name})
    return float(value)


def resolve_options(url: str | None, token: str | None, timeout: object) -> ClientOptions:
    u = DEFAULT_URL if url is None else url
    if not isinstance(u, str):
        raise ConfigError(f"url: must be a string, got {type(u).__name__}", details={"field": "url"})
    parts = urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"url: must be an http or https URL, got {u!r}", details={"field": "url"})
    if token is not None and (not isinstance(token, str) or token == "" or any(c.isspace() for c in token)):
        raise ConfigError("token: must be a non-empty string without whitespace", details={"field": "token"})
    t = check_timeout(DEFAULT_TIMEOUT if timeout is DEFAULT else timeout)
    return ClientOptions(url=u.rstrip("/"), token=token, timeout=t)


@dataclass(frozen=True)
class EnvResolution:
    url: str
    token: str | None
    #: Where the token came from: "BERTH_TOKEN", "root.key" or None.
    token_source: str | None
    #: $BERTH_DATA/root.key (BERTH_DATA default ./.berth), resolved against the working directory.
    root_key_path: Path


def resolve_env(env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None) -> EnvResolution:
    """BERTH_URL (default http://127.0.0.1:7070); BERTH_TOKEN, else the root key in $BERTH_DATA/root.key
    (BERTH_DATA default ./.berth), as the CLI reads them. A missing key file is not an error here: calls
    then fail with UnauthenticatedError."""
    e = os.environ if env is None else env
    base = Path(cwd) if cwd is not None else Path.cwd()
    root_key_path = (base / (e.get("BERTH_DATA") or "./.berth")).resolve() / "root.key"
    url = e.get("BERTH_URL") or DEFAULT_URL
    if e.get("BERTH_TOKEN"):
        return EnvResolution(url, e["BERTH_TOKEN"], "BERTH_TOKEN", root_key_path)
    try:
        token = root_key_path.read_text("utf-8").strip() or None
    except OSError:
        token = None
    return EnvResolution(url, token, "root.key" if token else None, root_key_path)
