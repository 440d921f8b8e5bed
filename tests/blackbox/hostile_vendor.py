"""A hostile CartPole vendor for the deadline and process tests (run as a program, not imported).

exec mode (default): newline-delimited JSON on stdin/stdout, like examples/vendors/exec_vendor.py.
  --fork       at start, leave behind a ``setsid`` child and a double-forked daemon (its parent
               exits at once), both sleeping forever
  --scrub      at start, leave behind a double-forked ``setsid`` daemon that re-executes itself with
               an empty environment (``env -i``: no mark of ours survives), sleeping forever
  --hop        with --scrub: the daemon does not sit still at first; for 2 s it forks and lets its
               parent exit every 20 ms (writing ``hop PID`` to stderr each time), so its pid
               changes faster than a /proc scan under load can follow
  --attack SIG at start, send SIG (KILL or STOP) to every ancestor that runs safecert's supervisor,
               by pid (``kill``) and by ``/proc`` descriptor (``pidfd_send_signal``), telling on
               stderr what the kernel allowed (``attack HOW PID ok|errno``); then --fork/--scrub/--chain
  --chain N    at start, leave behind a daemon at the end of a chain of N double forks (each
               link calls ``setsid``, forks and exits)
  --drip S     after --drip-after replies, write each reply one byte every S seconds
  --hang       after --drip-after replies, never answer
  --flood      after --drip-after replies, write bytes without end (no newline)
http mode (--http): a real HTTP server on 127.0.0.1 (ephemeral port); prints ``listening on URL``;
  --drip S     after --drip-after requests, send each response one byte every S seconds
  --endless    with --drip: the body never ends (a huge Content-Length, bytes trickling forever)
  --flood      after --drip-after requests, a body without end, as fast as the socket takes it
--ppid-file F appends to F the pid of the process that started the vendor (under a supervisor: the
supervisor's parent). Every process it starts carries ``--tag`` on its command line, so tests find them in /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def actions(body: bytes) -> bytes:
    obs = json.loads(body)["observations"]
    acts = [[int(o[2] + 0.5 * o[3] > 0)] for o in obs]
    return json.dumps({"actions": acts}).encode()


def leave_children() -> None:
    if os.fork() == 0:  # a setsid child: escapes the vendor's process group and session
        os.setsid()
        while True:
            time.sleep(60)
    if os.fork() == 0:  # a classic daemon: setsid, fork again, the middle process exits
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(60)
        os._exit(0)


SCRUBBED = """
import os, sys, time
until = time.monotonic() + (2.0 if sys.argv[1] == "hop" else 0.0)
while time.monotonic() < until:  # a new pid every 20 ms for 2 s, each told on stderr
    if os.fork():
        os._exit(0)
    os.write(2, b"hop %d\\n" % os.getpid())
    time.sleep(0.02)
while True:
    time.sleep(60)
"""


def leave_scrubbed(tag: str, hop: bool) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # the middle process exits at once: the daemon is an orphan
            mode = "hop" if hop else "sleep"
            os.execve(sys.executable, [sys.executable, "-S", "-c", SCRUBBED, mode, tag], {})
        os._exit(0)


def leave_chain(links: int) -> None:
    """A daemon at the end of ``links`` double forks: every process in between has exited."""
    if os.fork() == 0:
        for _ in range(links):
            os.setsid()
            if os.fork():
                os._exit(0)
        while True:
            time.sleep(60)


def parent_of(pid: int) -> int:
    """The parent as /proc names it (``getppid`` says 0 or 1 inside a PID namespace)."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return int(fh.read().rpartition(b")")[2].split()[1])


def is_supervisor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"safecert/supervisor.py" in fh.read()
    except OSError:
        return False


def starter() -> int:
    """The process that started us: the nearest ancestor that is not safecert's supervisor."""
    pid = parent_of(int(os.readlink("/proc/self")))
    while is_supervisor(pid):
        pid = parent_of(pid)
    return pid


def attack(sig: signal.Signals) -> None:
    """Send ``sig`` to every supervisor above us, by every route a process of the same user has."""
    pid = parent_of(int(os.readlink("/proc/self")))
    targets = []
    while pid > 1 and is_supervisor(pid):
        targets.append(pid)
        pid = parent_of(pid)
    if os.getppid() > 1 and is_supervisor(os.getppid()):  # never whoever adopted us instead
        targets.append(os.getppid())
    for target in targets:
        for how in ("kill", "pidfd"):
            try:
                if how == "kill":
                    os.kill(target, sig)
                else:
                    fd = os.open(f"/proc/{target}", os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        signal.pidfd_send_signal(fd, sig)
                    finally:
                        os.close(fd)
                outcome = "ok"
            except OSError as exc:
                outcome = str(exc.errno)
            os.write(2, f"attack {how} {target} {outcome}\n".encode())


def drip(write, data: bytes, pause: float) -> None:
    for i in range(len(data)):
        write(data[i : i + 1])
        time.sleep(pause)


def serve_exec(args: argparse.Namespace) -> None:
    if args.ppid_file:
        with open(args.ppid_file, "a") as fh:
            fh.write(f"{starter()}\n")
    if args.attack:
        attack(signal.Signals[f"SIG{args.attack}"])
    if args.fork:
        leave_children()
    if args.scrub:
        leave_scrubbed(args.tag, args.hop)
    if args.chain:
        leave_chain(args.chain)
    out = sys.stdout.buffer
    for n, line in enumerate(sys.stdin.buffer):
        reply = actions(line) + b"\n"
        slow = n >= args.drip_after
        if slow and args.hang:
            while True:
                time.sleep(60)
        if slow and args.flood:
            while True:
                out.write(b"x" * (1 << 20))
        if slow and args.drip:

            def write(b: bytes) -> None:
                out.write(b)
                out.flush()

            drip(write, reply, args.drip)
        else:
            out.write(reply)
            out.flush()


def serve_http(args: argparse.Namespace) -> None:
    served = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            reply = actions(body)
            slow = served["n"] >= args.drip_after
            served["n"] += 1
            length = 10**12 if (slow and (args.endless or args.flood)) else len(reply)
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            data = head.encode() + reply

            def write(b: bytes) -> None:
                self.wfile.write(b)
                self.wfile.flush()

            try:
                if slow and args.flood:
                    write(head.encode())
                    while True:
                        write(b" " * (1 << 20))
                if not (slow and args.drip):
                    write(data)
                    return
                drip(write, data, args.drip)
                while args.endless:
                    drip(write, b" ", args.drip)
            except OSError:
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", action="store_true")
    ap.add_argument("--fork", action="store_true")
    ap.add_argument("--drip", type=float, default=0.0)
    ap.add_argument("--drip-after", type=int, default=0)
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--scrub", action="store_true")
    ap.add_argument("--hop", action="store_true")
    ap.add_argument("--attack", choices=["KILL", "STOP"], default="")
    ap.add_argument("--chain", type=int, default=0)
    ap.add_argument("--endless", action="store_true")
    ap.add_argument("--flood", action="store_true")
    ap.add_argument("--tag", default="")
    ap.add_argument("--ppid-file", default="")
    args = ap.parse_args()
    serve_http(args) if args.http else serve_exec(args)


if __name__ == "__main__":
    main()
