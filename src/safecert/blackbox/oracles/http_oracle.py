"""``http://host:port/path`` / ``https://...`` — a vendor policy behind an HTTP endpoint.

``POST`` with the JSON body ``{"observations": [[...], ...]}``; the reply body is
``{"actions": [[...], ...]}``. One request per batch.
"""

from __future__ import annotations

import time

import numpy as np

from safecert.blackbox.oracles import OracleSpec, expand_env
from safecert.blackbox.oracles.base import OracleFailure, health_check, json_call

BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0


def backoff_s(attempt: int) -> float:
    """Sleep before retry ``attempt`` (1-based): ``0.05 * 2**(attempt-1)`` s, at most 2 s."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))


class HttpOracle:
    """A pooled ``httpx.Client`` (keep-alive), TLS certificates verified, headers from the config.

    ``${VAR}`` in header values is expanded from the environment of the process that builds the
    oracle. Each attempt has the timeout ``timeout_s`` (connect, read, write, pool — each); an
    attempt that times out, cannot connect, or gets a 5xx or 429 status is retried up to ``retries`` times
    with exponential backoff (:func:`backoff_s`), so a call takes at most about
    ``(retries + 1) * timeout_s`` plus the backoff. A 4xx status is not retried (the request itself
    is wrong). A reply that is not the documented JSON fails the call without retry. Redirects are
    not followed (a redirect status is a failure).
    """

    def __init__(self, spec: OracleSpec) -> None:
        self.spec = spec
        self.headers = {k: expand_env(v, field=f"headers.{k}") for k, v in spec.headers}
        if not any(k.lower() == "content-type" for k in self.headers):
            self.headers["Content-Type"] = "application/json"
        self.attempts = 0  # total HTTP attempts made, retries included
        self._client = None

    def _http(self):  # -> httpx.Client
        if self._client is None:
            import socket

            import httpx

            # TCP_NODELAY: httpx writes headers and body separately; with Nagle's algorithm and
            # the server's delayed ACK every request would wait ~40 ms on loopback.
            transport = httpx.HTTPTransport(
                verify=True, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            )
            self._client = httpx.Client(
                timeout=httpx.Timeout(self.spec.timeout_s),
                headers=self.headers,
                transport=transport,
            )
        return self._client

    def _post(self, body: bytes) -> bytes:
        import httpx

        client = self._http()
        last = ""
        for attempt in range(self.spec.retries + 1):
            if attempt:
                time.sleep(backoff_s(attempt))
            self.attempts += 1
            try:
                response = client.post(self.spec.target, content=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.spec.timeout_s}s"
                continue
            except httpx.TransportError as exc:
                last = f"connection error ({type(exc).__name__}: {exc})"
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last = f"HTTP {response.status_code} {response.reason_phrase}"
                continue
            if not 200 <= response.status_code < 300:
                hint = " (redirects are not followed; use the final URL)" * response.is_redirect
                raise OracleFailure(
                    f"HTTP {response.status_code} {response.reason_phrase}{hint}: "
                    f"{response.text[:120]}"
                )
            return response.content
        tries = self.spec.retries + 1
        raise OracleFailure(f"{self.spec.target}: {last} ({tries} attempt{'s' * (tries > 1)})")

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
        if self._client is not None:
            self._client.close()
            self._client = None
