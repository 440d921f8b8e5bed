"""A vendor policy behind HTTP (FastAPI + uvicorn), for safecert's http:// oracle.

``POST /act`` with ``{"observations": [[...], ...]}`` answers ``{"actions": [[...], ...]}``. The
policy is chosen with ``--policy`` as in ``exec_vendor.py`` (``onnx:FILE`` or ``point:NAME``).

For testing safecert the server can misbehave, chosen by the path (or for ``/act`` itself by
``--mode``): ``/fail`` always answers 500; ``/flaky`` answers 500 to the first ``--flaky-failures``
of every ``--flaky-failures + 1`` requests, then succeeds; ``/hang`` never answers; ``/garbage``
answers HTML; ``/wrong-shape`` drops a row; ``/nan`` answers NaN actions; ``/no-actions`` answers
JSON without ``"actions"``. ``/auth`` requires the header ``Authorization: Bearer $VENDOR_TOKEN``.
``GET /health`` answers ``{"ok": true}``.

Binds 127.0.0.1 on the given port (0 = an ephemeral one) and prints ``listening on URL`` once
ready; ``--certfile``/``--keyfile`` serve HTTPS instead::

    python3 http_vendor.py --policy onnx:cheetah_safe.onnx --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import sys
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exec_vendor import load_policy  # noqa: E402

MODES = ("act", "fail", "flaky", "hang", "garbage", "wrong-shape", "nan", "no-actions", "auth")


def create_app(policy_name: str, mode: str = "act", flaky_failures: int = 2):
    policy = load_policy(policy_name)
    app = FastAPI(title="safecert example vendor")
    seen = {"flaky": 0}

    def actions_for(body: dict) -> list:
        obs = np.asarray(body["observations"], dtype=np.float64)
        return np.asarray(policy(obs) if len(obs) else np.zeros((0,))).tolist()

    @app.get("/health")
    async def health() -> dict:
        return {"ok": True}

    @app.post("/{route}")
    async def serve(route: str, request: Request):
        chosen = mode if route == "act" else route
        if chosen not in MODES:
            return JSONResponse({"detail": "not found"}, status_code=404)
        body = await request.json()
        if chosen == "fail":
            return JSONResponse({"detail": "vendor error"}, status_code=500)
        if chosen == "flaky":
            seen["flaky"] += 1
            if seen["flaky"] % (flaky_failures + 1) != 0:
                return JSONResponse({"detail": "temporarily unavailable"}, status_code=503)
        if chosen == "hang":
            await asyncio.sleep(3600)
        if chosen == "garbage":
            return PlainTextResponse("<html>oops</html>")
        if chosen == "auth":
            expected = f"Bearer {os.environ.get('VENDOR_TOKEN', '')}"
            if request.headers.get("authorization") != expected:
                return JSONResponse({"detail": "unauthorized"}, status_code=401)
        actions = actions_for(body)
        if chosen == "wrong-shape":
            actions = actions[:-1]
        if chosen == "nan":
            return PlainTextResponse(
                '{"actions": ' + str([[math.nan] * 2 for _ in actions]).replace("nan", "NaN") + "}"
            )
        if chosen == "no-actions":
            return {"result": actions}
        return {"actions": actions}

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="point:hazard_avoider")
    parser.add_argument("--mode", default="act", choices=MODES)
    parser.add_argument("--flaky-failures", type=int, default=2)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--keyfile", help="the certificate's private key (PEM)")
    args = parser.parse_args()
    # proto=IPPROTO_TCP: asyncio only sets TCP_NODELAY on such sockets; without it every reply
    # waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # accept (queue) connections from the moment the URL is printed
    app = create_app(args.policy, args.mode, args.flaky_failures)
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=1,
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
    )
    server = uvicorn.Server(config)
    scheme = "https" if args.certfile else "http"
    print(f"listening on {scheme}://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
