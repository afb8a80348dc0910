"""HTTP under both clients: one request description (Req), one error mapping, a sync and an async
transport over httpx. Only this module touches httpx exceptions; callers see BerthErrors."""

from __future__ import annotations

import json as _json
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Generic, Iterator, Mapping, TypeVar
from urllib.parse import quote

import httpx

from ._errors import BerthError, ConfigError, ConnectionError, TimeoutError, from_wire
from ._options import DEFAULT, ClientOptions, Timeout, check_timeout

T = TypeVar("T")
_NO_BODY: Any = object()
USER_AGENT = "berth-python/0.1.0"


def seg(s: str) -> str:
    """One path segment (an id, a tool name), percent-encoded."""
    return quote(s, safe="")


@dataclass(frozen=True)
class Req(Generic[T]):
    """One unary call: what to send and how to read the JSON answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    query: Mapping[str, object] | None = None
    json: Any = _NO_BODY
    #: A raw body instead of JSON (a Cedar policy to validate), sent with ``content_type``.
    content: bytes | None = None
    content_type: str | None = None
    #: A call that may take as long as the machine needs (create, hibernate, fork…): no default deadline.
    long: bool = False
    #: At the server root (/healthz) instead of under /v1.
    root: bool = False
    #: Statuses read as an answer rather than an error (/healthz's 503).
    accept: tuple[int, ...] = ()
    #: Send a fresh random Idempotency-Key and, when the connection fails (no HTTP answer came), send it
    #: once more with the same key: the server answers the retry with the first attempt's answer instead
    #: of doing it twice. HTTP errors are not retried.
    idempotent: bool = False


def query_params(q: Mapping[str, object] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (q or {}).items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def http_timeout(opts: ClientOptions, timeout: Timeout, long: bool) -> httpx.Timeout:
    if timeout is DEFAULT:
        t = None if long else opts.timeout
    else:
        t = check_timeout(timeout)
    return httpx.Timeout(t)


def map_exception(e: BaseException, opts: ClientOptions, what: str) -> BerthError:
    """An httpx failure as a BerthError: a deadline, or a server that is not (or no longer) there."""
    if isinstance(e, BerthError):
        return e
    if isinstance(e, httpx.TimeoutException):
        return TimeoutError(f"Berth at {opts.url} did not answer in time ({what}): {type(e).__name__}", retryable=True)
    if isinstance(e, httpx.TransportError):
        why = str(e) or type(e).__name__
        return ConnectionError(f"cannot reach Berth at {opts.url} ({what}): {why}", retryable=True)
    if isinstance(e, httpx.InvalidURL):
        return ConfigError(f"{what}: {e}")
    return BerthError(f"{what}: {type(e).__name__}: {e}", code="internal")


def error_from_body(status: int, body: bytes) -> BerthError:
    try:
        parsed = _json.loads(body)
    except ValueError:
        parsed = None
    return from_wire(parsed, status)


def parse_json(body: bytes, what: str) -> Any:
    try:
        return _json.loads(body)
    except ValueError:
        raise BerthError(f"{what}: the server sent a response that is not JSON", code="internal") from None


IDEMPOTENCY_HEADER = "idempotency-key"


def _headers(opts: ClientOptions, has_json: bool, has_content: bool, idempotency_key: str | None = None, content_type: str | None = None) -> dict[str, str]:
    h = {"accept": "application/json", "user-agent": USER_AGENT}
    if idempotency_key is not None:
        h[IDEMPOTENCY_HEADER] = idempotency_key
    if opts.token:
        h["authorization"] = f"Bearer {opts.token}"
    if has_json:
        h["content-type"] = "application/json"
    elif has_content:
        h["content-type"] = content_type or "application/octet-stream"
    return h


def _url(opts: ClientOptions, path: str, root: bool) -> str:
    return f"{opts.url}{'' if root else '/v1'}{path}"


def _content(json: Any, content: Any) -> Any:
    if json is not _NO_BODY:
        return _json.dumps(json, separators=(",", ":")).encode()
    return content


class SyncTransport:
    def __init__(self, opts: ClientOptions, http: httpx.Client | None = None) -> None:
        self.opts = opts
        self._own = http is None
        self.http = http if http is not None else httpx.Client(timeout=httpx.Timeout(opts.timeout))

    def close(self) -> None:
        if self._own:
            self.http.close()

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        json: Any = _NO_BODY,
        content: Any = None,
        content_type: str | None = None,
        timeout: Timeout = DEFAULT,
        long: bool = False,
        root: bool = False,
        accept: tuple[int, ...] = (),
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Sends and returns the response with its body still unread (the caller closes it). Error
        statuses are raised as BerthErrors."""
        what = f"{method} {path}"
        body = _content(json, content)
        try:
            req = self.http.build_request(
                method,
                _url(self.opts, path, root),
                params=query_params(query),
                content=body,
                headers=_headers(self.opts, json is not _NO_BODY, body is not None, idempotency_key, content_type),
                timeout=http_timeout(self.opts, timeout, long),
            )
            res = self.http.send(req, stream=True)
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        if res.status_code >= 400 and res.status_code not in accept:
            try:
                data = res.read()
            except Exception:
                data = b""
            finally:
                res.close()
            raise error_from_body(res.status_code, data)
        return res

    def call(self, req: Req[T], timeout: Timeout = DEFAULT) -> T:
        what = f"{req.method} {req.path}"
        key = str(uuid.uuid4()) if req.idempotent else None

        def send() -> httpx.Response:
            return self.open(
                req.method, req.path, query=req.query, json=req.json, content=req.content, content_type=req.content_type,
                timeout=timeout, long=req.long, root=req.root, accept=req.accept, idempotency_key=key,
            )

        try:
            res = send()
        except ConnectionError:
            if key is None:
                raise
            res = send()  # once, with the same key
        try:
            data = res.read()
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        finally:
            res.close()
        return req.parse(parse_json(data, what))

    def iter_bytes(self, res: httpx.Response, what: str) -> Iterator[bytes]:
        try:
            for chunk in res.iter_bytes():
                if chunk:
                    yield chunk
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        finally:
            res.close()


class AsyncTransport:
    def __init__(self, opts: ClientOptions, http: httpx.AsyncClient | None = None) -> None:
        self.opts = opts
        self._own = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=httpx.Timeout(opts.timeout))

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        json: Any = _NO_BODY,
        content: Any = None,
        content_type: str | None = None,
        timeout: Timeout = DEFAULT,
        long: bool = False,
        root: bool = False,
        accept: tuple[int, ...] = (),
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        what = f"{method} {path}"
        body = _content(json, content)
        try:
            req = self.http.build_request(
                method,
                _url(self.opts, path, root),
                params=query_params(query),
                content=body,
                headers=_headers(self.opts, json is not _NO_BODY, body is not None, idempotency_key, content_type),
                timeout=http_timeout(self.opts, timeout, long),
            )
            res = await self.http.send(req, stream=True)
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        if res.status_code >= 400 and res.status_code not in accept:
            try:
                data = await res.aread()
            except Exception:
                data = b""
            finally:
                await res.aclose()
            raise error_from_body(res.status_code, data)
        return res

    async def call(self, req: Req[T], timeout: Timeout = DEFAULT) -> T:
        what = f"{req.method} {req.path}"
        key = str(uuid.uuid4()) if req.idempotent else None

        async def send() -> httpx.Response:
            return await self.open(
                req.method, req.path, query=req.query, json=req.json, content=req.content, content_type=req.content_type,
                timeout=timeout, long=req.long, root=req.root, accept=req.accept, idempotency_key=key,
            )

        try:
            res = await send()
        except ConnectionError:
            if key is None:
                raise
            res = await send()  # once, with the same key
        try:
            data = await res.aread()
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        finally:
            await res.aclose()
        return req.parse(parse_json(data, what))

    async def iter_bytes(self, res: httpx.Response, what: str) -> AsyncIterator[bytes]:
        try:
            async for chunk in res.aiter_bytes():
                if chunk:
                    yield chunk
        except Exception as e:
            raise map_exception(e, self.opts, what) from e
        finally:
            await res.aclose()
