"""A real local S3 server for tests (moto), behind a proxy that can refuse, slow or drop requests.

The session fixture :func:`s3_endpoint` starts moto's S3 server in this process on a free port of
127.0.0.1 and, in front of it, a small HTTP proxy on another free port. Clients talk to the proxy
(:attr:`LocalS3.url`); the proxy forwards every request (method, path, query, headers, body) to
moto and streams the answer back, unless :attr:`LocalS3.faults` says otherwise, and counts what
it saw (:attr:`LocalS3.requests`). The function fixture :func:`s3_env` sets the environment every
client needs (boto3/botocore, s3fs through fsspec, TensorBoard's own S3 reader, also in the
processes a test starts) and clears fsspec's cached S3 file systems, before and after the test.

Use it from a test module by naming this module a plugin, by the kit's package name (importing
the fixtures by name works too, but ruff calls each test's argument a redefinition, F811)::

    from tests.kit.s3_server import LocalS3

    pytest_plugins = ["tests.kit.s3_server"]  # s3_endpoint, s3_env, s3_fail_fast

    def test_writes(s3_env: LocalS3) -> None:
        bucket = s3_env.bucket()
        with fsspec.open(f"s3://{bucket}/x", "wb") as f:
            f.write(b"hello")
        assert s3_env.requests["PUT"] == 1
        s3_env.faults.refuse(503, "SlowDown", times=1, methods={"PUT"})

Under pytest-xdist every worker process starts its own servers (the fixture is session-scoped
per process; both servers bind port 0, so the ports never collide). Everything stops at the end
of the session: open connections are shut and their threads joined.

What was found out while building this (moto 5.2, s3fs 2026.9 with aiobotocore 3.10, botocore
1.43, TensorBoard 2.21 without TensorFlow):

* **Endpoint.** botocore (and so boto3 and aiobotocore, so s3fs) reads ``AWS_ENDPOINT_URL``
  itself: ``fsspec.filesystem("s3")`` and ``fsspec.open("s3://...")`` need no ``endpoint_url``
  nor ``client_kwargs``. An ``http://`` endpoint needs no ``use_ssl=False`` either. Credentials
  and region come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_DEFAULT_REGION``
  (moto accepts any; it does not check signatures). ``AWS_CONFIG_FILE`` and
  ``AWS_SHARED_CREDENTIALS_FILE`` point at ``os.devnull`` and ``AWS_PROFILE`` and friends are
  removed, so a developer's ``~/.aws`` cannot redirect or slow the tests.
* **TensorBoard** (no TensorFlow) reads ``s3://`` through its own stub
  (``tensorboard.compat.tensorflow_stub.io.gfile.S3FileSystem``): boto3 clients with
  ``endpoint_url=os.environ["S3_ENDPOINT"]``, read once when that module is imported (so in a
  process that imported it before the fixture ran, it falls back to ``AWS_ENDPOINT_URL``, which
  botocore honours as well; a TensorBoard server given only ``AWS_ENDPOINT_URL`` reads the
  run too, so ``S3_ENDPOINT`` matters for botocore older than 1.31, which lacks it).
  ``S3_USE_HTTPS``/``S3_VERIFY_SSL`` are TensorFlow's names; the stub ignores them, they are
  set for a TensorFlow-backed TensorBoard. ``--load_fast`` (the Rust data server) does not read
  ``s3://``: TensorBoard falls back to its Python loader by itself. The stub makes a new boto3
  client for every call (``list_objects``, ``head_object``, ranged ``get_object``), so a
  TensorBoard server makes many small requests.
* **Writing event files to S3** (``torch.utils.tensorboard``/Lightning's ``TensorBoardLogger``
  on an ``s3://`` log dir) goes through the same stub, which cannot append: every flush PUTs the
  whole event file again (one epoch of the tiny fit: about 10 PUTs of the same file, plus an
  empty ``version_0/`` key for the directory). Lightning itself makes the directories and writes
  ``hparams.yaml`` through fsspec (s3fs).
* **Retries and refused requests.** A refused request (503 ``SlowDown``) is retried twice over:
  botocore retries it (legacy mode: 5 attempts, backoff up to 1, 2, 4, 8 s) and s3fs retries
  the whole call again (``S3FileSystem.retries = 5`` attempts, sleeping 0.1 to 0.8 s, for
  ``SlowDown`` and connection errors; other ``ClientError`` codes are not retried by s3fs).
  Refused for good, one write can take tens of seconds. To fail fast ask for the
  :func:`s3_fail_fast` fixture: ``AWS_MAX_ATTEMPTS=1`` (botocore, read when a client is made)
  and ``S3FileSystem.retries = 1`` (a class attribute; s3fs takes no ``retries`` argument: an
  unknown keyword goes to the botocore session and fails, so fsspec's config cannot set it).
  Then a refused write fails in about 0.2 s (one PUT). A refusal with ``times=1`` and the default
  retries succeeds on the next attempt after botocore's backoff (under 1 s).
* **Caches.** fsspec keeps one ``S3FileSystem`` per set of arguments
  (``S3FileSystem.clear_instance_cache()`` drops them) and s3fs caches listings per instance;
  a cached instance also keeps its botocore client, made with the environment of the test that
  made it. :func:`s3_env` therefore clears the instance cache before and after each test.
* **moto in this process.** The server runs moto's own WSGI application
  (``DomainDispatcherApplication``) on werkzeug, built here like ``ThreadedMotoServer`` but
  with a quiet request handler (werkzeug logs every request otherwise) and with its connection
  threads tracked so stopping joins them. Its buckets live in moto's in-process backends: a
  test that uses moto's ``mock_aws`` in the same worker would share (and may reset) them.
* **Dropped connections.** aiohttp (under s3fs) sends a request again, once, by itself when a
  kept-alive connection closes without an answer, even with no retries configured: one
  :meth:`Faults.drop` goes unnoticed by s3fs, two in a row reach it as botocore's
  ``ConnectionClosedError``. Refused requests get answered, so they are not sent again that way.

(PYTEST_DONT_REWRITE: this module has no asserts; the marker lets a test module both import it
and name it in ``pytest_plugins`` without pytest warning that it cannot rewrite it.)
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import os
import re
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from xml.sax.saxutils import escape

import pytest

# Request headers that belong to one connection, not to the request the proxy forwards.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)

# S3's own messages for the error codes tests are likely to send.
_MESSAGES = {
    "SlowDown": "Please reduce your request rate.",
    "ServiceUnavailable": "Service is unable to handle request.",
    "InternalError": "We encountered an internal error. Please try again.",
    "AccessDenied": "Access Denied",
    "RequestTimeout": "Your socket connection to the server was not read from or written to "
    "within the timeout period.",
}

_CHUNK = 64 * 1024


class RequestCounts:
    """What the proxy has received since the last :meth:`reset`; safe to read from any thread.

    Example:
        >>> s3.requests.reset()
        >>> ...  # write one object
        >>> s3.requests["PUT"], s3.requests.bytes_in
        (1, 5)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._methods: Counter[str] = Counter()
        self._seen: list[tuple[str, str]] = []
        self._bytes_in = 0
        self._refused = 0
        self._dropped = 0

    def __getitem__(self, method: str) -> int:
        """The number of requests with this HTTP method (``"PUT"``, ``"GET"``...), 0 if none."""
        with self._lock:
            return self._methods[method.upper()]

    @property
    def by_method(self) -> dict[str, int]:
        """A copy of the counts by HTTP method."""
        with self._lock:
            return dict(self._methods)

    @property
    def total(self) -> int:
        """The number of requests, all methods."""
        with self._lock:
            return sum(self._methods.values())

    @property
    def seen(self) -> list[tuple[str, str]]:
        """Every request as ``(method, path and query)``, in the order they arrived."""
        with self._lock:
            return list(self._seen)

    @property
    def bytes_in(self) -> int:
        """Bytes received in request bodies (refused requests included)."""
        with self._lock:
            return self._bytes_in

    @property
    def refused(self) -> int:
        """Requests answered with an error by :meth:`Faults.refuse`."""
        with self._lock:
            return self._refused

    @property
    def dropped(self) -> int:
        """Requests whose connection :meth:`Faults.drop` closed without an answer."""
        with self._lock:
            return self._dropped

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self._methods.clear()
            self._seen.clear()
            self._bytes_in = self._refused = self._dropped = 0

    def _record(self, method: str, target: str, body_bytes: int) -> None:
        with self._lock:
            self._methods[method] += 1
            self._seen.append((method, target))
            self._bytes_in += body_bytes

    def _count(self, action: Literal["refuse", "drop"]) -> None:
        with self._lock:
            if action == "refuse":
                self._refused += 1
            else:
                self._dropped += 1


@dataclass
class _Rule:
    action: Literal["refuse", "slow", "drop"]
    times: int | None
    methods: frozenset[str] | None
    match: re.Pattern[str] | None
    status: int = 503
    code: str = "SlowDown"
    message: str = ""
    seconds: float = 0.0

    def matches(self, method: str, target: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        return self.match is None or self.match.search(target) is not None


@dataclass
class _Decision:
    delay: float = 0.0
    answer: _Rule | None = None


class Faults:
    """Switches for what the proxy does to the requests it receives.

    Rules apply in the order they were added. Each rule covers the requests that have one of
    ``methods`` (all when ``None``) and whose path and query (as sent, URL-encoded, e.g.
    ``/bucket/runs/events.out?uploadId=...``) contain a match of the regular expression
    ``match`` (all when ``None``; a plain key fragment works). A rule with ``times=n`` covers the
    next ``n`` such requests and then ends; ``times=None`` covers them until :meth:`clear`.
    Every matching :meth:`slow` rule delays a request; the first matching :meth:`refuse` or
    :meth:`drop` rule answers it instead of moto.

    Example:
        >>> s3.faults.refuse(503, "SlowDown", times=2, methods={"PUT"})
        >>> s3.faults.slow(0.5, match=r"events\\.out")
        >>> s3.faults.clear()
    """

    def __init__(self, requests: RequestCounts | None = None) -> None:
        self.requests = requests if requests is not None else RequestCounts()
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []

    def refuse(
        self,
        status: int = 503,
        code: str = "SlowDown",
        times: int | None = None,
        methods: Iterable[str] | None = None,
        match: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the covered requests with ``status`` and an S3 XML error body of ``code``.

        Args:
            status: The HTTP status (503 for ``SlowDown``, 500 for ``InternalError``, 403 for
                ``AccessDenied``...).
            code: The S3 error code in the body (``<Error><Code>``); what botocore's
                ``ClientError`` reports and what s3fs decides its own retries by.
            times: How many requests to refuse; ``None`` until :meth:`clear`.
            methods: The HTTP methods covered (``{"PUT", "POST"}`` for writes); ``None``: all.
            match: A regular expression searched in the request's path and query; ``None``:
                all.
            message: The error message; S3's own for well-known codes by default.
        """
        self._add(
            _Rule(
                "refuse",
                times,
                _methods(methods),
                _pattern(match),
                status=status,
                code=code,
                message=message if message is not None else _MESSAGES.get(code, code),
            )
        )

    def slow(
        self,
        seconds: float,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        match: str | None = None,
    ) -> None:
        """Wait ``seconds`` (after reading the request) before answering the covered requests.

        Args:
            seconds: The delay.
            times: How many requests to delay; ``None`` until :meth:`clear`.
            methods: The HTTP methods covered; ``None``: all.
            match: A regular expression searched in the request's path and query; ``None``:
                all.
        """
        self._add(_Rule("slow", times, _methods(methods), _pattern(match), seconds=seconds))

    def drop(
        self,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        match: str | None = None,
    ) -> None:
        """Close the connection of the covered requests without answering (a network failure).

        Args:
            times: How many requests to drop; ``None`` until :meth:`clear`.
            methods: The HTTP methods covered; ``None``: all.
            match: A regular expression searched in the request's path and query; ``None``:
                all.
        """
        self._add(_Rule("drop", times, _methods(methods), _pattern(match)))

    def clear(self) -> None:
        """Remove every rule: requests go to moto unchanged again. The counts stay."""
        with self._lock:
            self._rules.clear()

    @property
    def active(self) -> bool:
        """Whether any rule is still in force."""
        with self._lock:
            return bool(self._rules)

    def _add(self, rule: _Rule) -> None:
        if rule.times is not None and rule.times <= 0:
            raise ValueError(f"times must be positive or None, not {rule.times}")
        with self._lock:
            self._rules.append(rule)

    def _decide(self, method: str, target: str) -> _Decision:
        decision = _Decision()
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(method, target):
                    continue
                if rule.action == "slow":
                    decision.delay += rule.seconds
                elif decision.answer is None:
                    decision.answer = rule
                else:
                    continue
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
        return decision


def _methods(methods: Iterable[str] | None) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str):
        methods = [methods]
    return frozenset(m.upper() for m in methods)


def _pattern(match: str | None) -> re.Pattern[str] | None:
    return None if match is None else re.compile(match)


def error_body(code: str, message: str, resource: str, request_id: str) -> bytes:
    """The XML body S3 answers an error with.

    Example:
        >>> error_body("SlowDown", "Please reduce your request rate.", "/b/k", "1")[:60]
        b'<?xml version="1.0" encoding="UTF-8"?>\\n<Error><Code>SlowDown'
    """
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>{escape(request_id)}</RequestId>"
        "</Error>"
    ).encode()


class _TrackedConnections(socketserver.ThreadingMixIn):
    """A threading server that remembers each open connection and its thread.

    ``close_connections`` shuts them (waking threads that wait on an idle keep-alive connection)
    and joins the threads, which ``ThreadingMixIn`` does not do for daemon threads.
    """

    daemon_threads = True
    thread_name = "connection"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._live: dict[Any, threading.Thread] = {}
        self._live_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"{self.thread_name} {self.server_address[1]} from {client_address[1]}",
            daemon=True,
        )
        with self._live_lock:
            self._live[request] = thread
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._live_lock:
                self._live.pop(request, None)

    def close_connections(self, timeout: float = 10.0) -> None:
        with self._live_lock:
            live = dict(self._live)
        for connection in live:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for thread in live.values():
            thread.join(max(0.0, deadline - time.monotonic()))


class _ProxyServer(_TrackedConnections, ThreadingHTTPServer):
    thread_name = "s3 proxy connection"

    def __init__(self, upstream: tuple[str, int], faults: Faults) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.faults = faults
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer (or a connection shut at the end) is no error.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and ``Expect: 100-continue`` answered
    timeout = 120  # an idle keep-alive connection ends after this
    # an answer is written in two parts (its head, its body): without this the client's delayed
    # acknowledgement holds the second for 40 ms (Nagle's algorithm), each request
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        method = self.command.upper()
        body = self._read_body()
        faults = self.server.faults
        faults.requests._record(method, self.path, len(body))
        decision = faults._decide(method, self.path)
        if decision.delay > 0 and self.server.stopping.wait(decision.delay):
            self.close_connection = True
            return
        rule = decision.answer
        if rule is not None and rule.action == "drop":
            faults.requests._count("drop")
            self.close_connection = True
            return
        if rule is not None:
            faults.requests._count("refuse")
            self._refuse(method, rule)
            return
        self._pass_on(method, body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _forward

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _refuse(self, method: str, rule: _Rule) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        resource = self.path.split("?", 1)[0]
        body = (
            b"" if method == "HEAD" else error_body(rule.code, rule.message, resource, request_id)
        )
        self.send_response(rule.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", request_id)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _pass_on(self, method: str, body: bytes) -> None:
        host, port = self.server.upstream
        upstream = http.client.HTTPConnection(host, port, timeout=60)
        try:
            upstream.putrequest(method, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            if body or method in ("PUT", "POST", "PATCH"):
                upstream.putheader("Content-Length", str(len(body)))
            try:
                upstream.endheaders(body or None)
                response = upstream.getresponse()
            except (OSError, http.client.HTTPException) as error:
                self._refuse(
                    method, _Rule("refuse", None, None, None, 502, "BadGateway", str(error))
                )
                return
            self._stream_back(method, response)
        finally:
            upstream.close()

    def _stream_back(self, method: str, response: http.client.HTTPResponse) -> None:
        headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        length = response.getheader("Content-Length")
        no_body = method == "HEAD" or response.status in (204, 304) or response.status < 200
        self.send_response_only(response.status, response.reason)
        for name, value in headers:
            self.send_header(name, value)
        if no_body:
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            return
        if length is None:  # moto answered without a length: read it all to give one
            data = response.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Content-Length", length)
        self.end_headers()
        while chunk := response.read(_CHUNK):
            self.wfile.write(chunk)


def _moto_server() -> Any:
    """Moto's S3 (and every other service) on a free port of 127.0.0.1, not started yet."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import ThreadedWSGIServer

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass

    class MotoServer(_TrackedConnections, ThreadedWSGIServer):
        thread_name = "moto connection"

    return MotoServer(
        "127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), handler=QuietHandler
    )


@dataclass
class LocalS3:
    """A running local S3: moto behind the fault-injecting proxy.

    Attributes:
        url: The proxy's ``http://127.0.0.1:PORT``: the endpoint clients use.
        moto_url: moto's own address, past the proxy (no faults, not counted).
        faults: What the proxy does to requests (:class:`Faults`).
    """

    url: str
    moto_url: str
    faults: Faults
    _admin: Any = field(repr=False)
    _names: Iterator[int] = field(repr=False, default_factory=lambda: itertools.count(1))

    @property
    def requests(self) -> RequestCounts:
        """What the proxy received: counts by method, ``bytes_in``, ``seen``, ``reset()``."""
        return self.faults.requests

    def bucket(self, name: str | None = None) -> str:
        """Create a new, empty bucket (straight at moto: no fault applies, nothing counted).

        Args:
            name: The bucket's name; by default a new unique one (``learnscope-N-XXXXXXXX``).

        Returns:
            The bucket's name, for ``s3://NAME/...``.

        Example:
            >>> bucket = s3.bucket()
            >>> fsspec.open(f"s3://{bucket}/runs/x", "wb")
        """
        if name is None:
            name = f"learnscope-{next(self._names)}-{uuid.uuid4().hex[:8]}"
        self._admin.create_bucket(Bucket=name)
        return name

    def client(self, through_proxy: bool = True, max_attempts: int | None = None) -> Any:
        """A new boto3 S3 client for this server (close it after use).

        Args:
            through_proxy: Talk to the proxy (faults apply, requests counted); ``False``: to
                moto directly.
            max_attempts: botocore's attempts per request (1: no retry); botocore's default
                by default.
        """
        return _boto3_client(self.url if through_proxy else self.moto_url, max_attempts)


def _boto3_client(endpoint: str, max_attempts: int | None = None) -> Any:
    import boto3
    from botocore.config import Config

    retries = {} if max_attempts is None else {"retries": {"max_attempts": max_attempts}}
    return boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).client("s3", endpoint_url=endpoint, config=Config(**retries))


@contextlib.contextmanager
def local_s3() -> Iterator[LocalS3]:
    """Start moto and the proxy on free ports of 127.0.0.1; stop both (and their threads) after.

    Example:
        >>> with local_s3() as s3:
        ...     bucket = s3.bucket()
    """
    moto = _moto_server()
    moto_thread = threading.Thread(target=moto.serve_forever, name="moto server", daemon=True)
    moto_thread.start()
    moto_host, moto_port = moto.server_address[:2]
    faults = Faults()
    proxy = _ProxyServer((moto_host, moto_port), faults)
    proxy_thread = threading.Thread(target=proxy.serve_forever, name="s3 proxy", daemon=True)
    proxy_thread.start()
    admin = _boto3_client(f"http://{moto_host}:{moto_port}")
    try:
        yield LocalS3(
            url=f"http://127.0.0.1:{proxy.server_address[1]}",
            moto_url=f"http://{moto_host}:{moto_port}",
            faults=faults,
            _admin=admin,
        )
    finally:
        proxy.stopping.set()
        proxy.shutdown()
        proxy.close_connections()
        proxy.server_close()
        proxy_thread.join(10)
        admin.close()
        moto.shutdown()
        moto.close_connections()
        moto_thread.join(10)  # its serve_forever closes the socket


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[LocalS3]:
    """The session's local S3 server (one per pytest-xdist worker). Sets no environment."""
    with local_s3() as s3:
        yield s3


# Environment variables that would send clients elsewhere or change their retries.
_AWS_UNSET = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL_S3",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
    "AWS_CA_BUNDLE",
)


def _clear_s3fs_cache() -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def client_environment(url: str) -> dict[str, str]:
    """The environment that points every S3 client (boto3, s3fs, TensorBoard) at ``url``."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "S3_ENDPOINT": url,
        "S3_USE_HTTPS": "0",
        "S3_VERIFY_SSL": "0",
    }


@contextlib.contextmanager
def pointed_local_s3() -> Iterator[LocalS3]:
    """The local S3 server with this process's clients pointed at it (for the benchmarks)."""
    with local_s3() as s3:
        os.environ.update(client_environment(s3.url))
        yield s3


@pytest.fixture
def s3_env(s3_endpoint: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalS3]:
    """The local S3 with every client pointed at it, no faults and counts from zero.

    Sets (for this process and the processes the test starts) ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` (boto3, s3fs),
    ``S3_ENDPOINT``, ``S3_USE_HTTPS``, ``S3_VERIFY_SSL`` (TensorBoard); hides ``~/.aws``; clears
    fsspec's cached S3 file systems. Afterwards clears the faults and that cache again.
    """
    for name in _AWS_UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in client_environment(s3_endpoint.url).items():
        monkeypatch.setenv(name, value)
    _clear_s3fs_cache()
    s3_endpoint.faults.clear()
    s3_endpoint.requests.reset()
    try:
        yield s3_endpoint
    finally:
        s3_endpoint.faults.clear()
        _clear_s3fs_cache()


@pytest.fixture
def s3_fail_fast(s3_env: LocalS3, monkeypatch: pytest.MonkeyPatch) -> LocalS3:
    """:func:`s3_env` where a failed S3 request is not retried: a refused write fails at once.

    botocore makes one attempt (``AWS_MAX_ATTEMPTS=1``, for clients made from now on, in this
    process and those the test starts) and s3fs one call (``S3FileSystem.retries = 1``, this
    process only).
    """
    import s3fs

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    _clear_s3fs_cache()
    return s3_env
