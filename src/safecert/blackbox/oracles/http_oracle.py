"""``http://host:port/path`` / ``https://...`` — a vendor policy behind an HTTP endpoint.

``POST`` with the JSON body ``{"observations": [[...], ...]}``; the reply body is
``{"actions": [[...], ...]}``. One request per batch.

A call is bounded by a *deadline*, not by per-read timeouts: the transport below (httpcore's
connection pool over :class:`DeadlineBackend`) gives every socket operation — name resolution,
connect, TLS handshake, each send and each receive — only the time left until the call's deadline,
so a vendor that trickles its reply one byte at a time fails the call when the deadline passes.
"""

from __future__ import annotations

import math
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import numpy as np

from safecert.blackbox.oracles import OracleSpec, expand_env
from safecert.blackbox.oracles.base import OracleFailure, health_check, json_call
from safecert.isolation import MAX_REPLY_BYTES

BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0


def backoff_s(attempt: int) -> float:
    """Sleep before retry ``attempt`` (1-based): ``0.05 * 2**(attempt-1)`` s, at most 2 s."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))


class HttpOracle:
    """A pooled keep-alive connection, TLS certificates verified, headers from the config.

    ``${VAR}`` in header values is expanded from the environment of the process that builds the
    oracle. ``timeout_s`` is the deadline of the whole call — connect, send, every byte of the reply,
    retries and their backoff together. Within it, an attempt that cannot connect or gets a 5xx or
    429 status is retried up to ``retries`` times with exponential backoff (:func:`backoff_s`); a
    retry whose backoff would end past the deadline is not made. A 4xx status is not retried (the
    request itself is wrong); a reply that is not the documented JSON fails the call without retry.
    Redirects are not followed (a redirect status is a failure).
    """

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self.headers = {k: expand_env(v, field=f"headers.{k}") for k, v in spec.headers}
        if not any(k.lower() == "content-type" for k in self.headers):
            self.headers["Content-Type"] = "application/json"
        self.attempts = 0  # total HTTP attempts made, retries included
        self._backend = DeadlineBackend()
        self._pool: httpcore.ConnectionPool | None = None  # built on first use

    def _http(self) -> httpcore.ConnectionPool:
        if self._pool is None:
            import httpx

            self._pool = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(),  # certifi, or SSL_CERT_FILE / SSL_CERT_DIR
                network_backend=self._backend,
                max_connections=4,
            )
        return self._pool

    def _post(self, body: bytes) -> bytes:
        pool = self._http()
        timeout_s = self.spec.timeout_s
        deadline = time.monotonic() + timeout_s
        self._backend.deadline = deadline
        headers = [(k.encode(), v.encode()) for k, v in self.headers.items()]
        last = ""
        tries = 0
        for attempt in range(self.spec.retries + 1):
            if attempt:
                pause = backoff_s(attempt)
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            self.attempts += 1
            tries += 1
            try:
                status, reason, content = self._attempt(pool, headers, body)
            except httpcore.TimeoutException:
                last = f"no complete reply within {timeout_s:g}s (deadline of the whole call)"
                break
            except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
                last = f"connection error ({type(exc).__name__}: {exc})"
                continue
            if status >= 500 or status == 429:
                last = f"HTTP {status} {reason}"
                continue
            if not 200 <= status < 300:
                hint = " (redirects are not followed; use the final URL)" * (300 <= status < 400)
                text = content[:120].decode(errors="replace")
                raise OracleFailure(f"HTTP {status} {reason}{hint}: {text}")
            return content
        raise OracleFailure(f"{self.spec.target}: {last} ({tries} attempt{'s' * (tries > 1)})")

    def _attempt(
        self, pool: httpcore.ConnectionPool, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, str, bytes]:
        """One POST: (status, reason phrase, body), the body read up to :data:`MAX_REPLY_BYTES`."""
        timeout_s = self.spec.timeout_s
        with pool.stream(
            "POST",
            self.spec.target,
            headers=headers,
            content=body,
            extensions={"timeout": dict.fromkeys(_PHASES, timeout_s)},
        ) as response:
            reason = response.extensions.get("reason_phrase", b"").decode(errors="replace")
            chunks, size = [], 0
            for chunk in response.iter_stream():
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise OracleFailure(f"reply body longer than {MAX_REPLY_BYTES >> 20} MiB")
                chunks.append(chunk)
        return response.status, reason, b"".join(chunks)

    def act(self, observations: np.ndarray) -> np.ndarray:
        return json_call(self._post, observations)

    def probe(self, observations: np.ndarray | None = None) -> None:
        """One real request (``observations``, or a zero-row batch) that must get a valid reply."""
        obs = np.zeros((0, 0)) if observations is None else observations
        health_check(
            self,
            obs,
            "vendor endpoint",
            fix="check the URL, that the server is up, and its headers",
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


_PHASES = ("connect", "read", "write", "pool")
_CHUNK = 1 << 16


def _remaining(deadline: float, timeout: float | None, error: type[Exception]) -> float:
    """Seconds an operation may take: the smaller of its own timeout and what is left until the
    deadline; raises ``error`` once the deadline has passed."""
    left = deadline - time.monotonic()
    if timeout is not None:
        left = min(left, timeout)
    if left <= 0:
        raise error("deadline passed")
    return left


class DeadlineStream(httpcore.NetworkStream):
    """A blocking socket whose every operation ends by the owning backend's deadline."""

    def __init__(self, sock: socket.socket, backend: DeadlineBackend) -> None:
        self._sock, self._backend = sock, backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._sock.settimeout(_remaining(self._backend.deadline, timeout, httpcore.ReadTimeout))
        try:
            return self._sock.recv(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("deadline passed") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        while view:
            left = _remaining(self._backend.deadline, timeout, httpcore.WriteTimeout)
            self._sock.settimeout(left)
            try:
                view = view[self._sock.send(view[:_CHUNK]) :]
            except TimeoutError:
                raise httpcore.WriteTimeout("deadline passed") from None
            except OSError as exc:
                raise httpcore.WriteError(str(exc)) from None

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> DeadlineStream:
        left = _remaining(self._backend.deadline, timeout, httpcore.ConnectTimeout)
        try:
            tls = ssl_context.wrap_socket(
                self._sock, server_hostname=server_hostname, do_handshake_on_connect=False
            )
            tls.settimeout(left)
            tls.do_handshake()
        except TimeoutError:
            self._sock.close()
            raise httpcore.ConnectTimeout("deadline passed during the TLS handshake") from None
        except OSError as exc:  # ssl.SSLError included: certificate verification failed, ...
            self._sock.close()
            raise httpcore.ConnectError(str(exc)) from None
        return DeadlineStream(tls, self._backend)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object" and isinstance(self._sock, ssl.SSLSocket):
            return getattr(self._sock, "_sslobj", None)  # what httpcore's own stream returns
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return _is_readable(self._sock)
        return None


def _is_readable(sock: socket.socket) -> bool:
    from safecert.procs import readable

    return readable(sock.fileno(), 0)


class DeadlineBackend(httpcore.NetworkBackend):
    """An httpcore network backend whose connections end every operation by ``deadline``
    (a ``time.monotonic()`` instant the oracle sets at the start of each call).

    Name resolution runs on a helper thread so that a stuck resolver also ends at the deadline
    (the thread is abandoned, not waited for)."""

    def __init__(self) -> None:
        self.deadline = math.inf

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> DeadlineStream:
        left = _remaining(self.deadline, timeout, httpcore.ConnectTimeout)
        addresses = _resolve(host, port, left)
        last: Exception = httpcore.ConnectError(f"cannot resolve {host}")
        for family, kind, proto, _, address in addresses:
            left = _remaining(self.deadline, timeout, httpcore.ConnectTimeout)
            sock = socket.socket(family, kind, proto)
            try:
                # without TCP_NODELAY, headers and body written separately wait ~40 ms for an ACK
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for option in socket_options or ():
                    sock.setsockopt(*option)
                if local_address:
                    sock.bind((local_address, 0))
                sock.settimeout(left)
                sock.connect(address)
                return DeadlineStream(sock, self)
            except TimeoutError:
                sock.close()
                last = httpcore.ConnectTimeout("deadline passed while connecting")
            except OSError as exc:
                sock.close()
                last = httpcore.ConnectError(str(exc))
        raise last

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> DeadlineStream:
        raise httpcore.ConnectError("unix sockets are not used by the HTTP oracle")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _resolve(host: str, port: int, timeout: float) -> list[Any]:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["out"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["err"] = exc

    thread = threading.Thread(target=work, name="safecert-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise httpcore.ConnectTimeout(f"resolving {host} did not finish by the deadline")
    if "err" in box:
        raise httpcore.ConnectError(f"cannot resolve {host}: {box['err']}")
    return list(box["out"])
