"""The child process the CLI tests run under `baton lock` / `baton elect`.

It records what it sees and does as JSON lines appended to a file (one write(2)
per line on an O_APPEND descriptor, so concurrent children never interleave):
`{"ev": "start"|"tick"|"end", "label": ..., "t": time_ns, "token": ..., "pid": ...}`.

    child.py OUT [--label L] [--hold S] [--until FILE] [--tick S] [--env FILE]
                 [--trap MARKER] [--trap-exit N] [--ready FILE] [--exit N]
                 [--kill-self SIGNAL]

--env FILE writes the BATON_* environment, pid and process group as JSON (atomically);
--trap MARKER: on SIGTERM/SIGINT/SIGHUP write the signal's name to MARKER and exit --trap-exit;
--ready FILE is created once everything above is in place; then the child holds for
--hold seconds or until --until FILE exists (at most 60 s), writing a tick every
--tick seconds, writes "end" and exits --exit (or kills itself with --kill-self).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def record(path: str, event: str, label: str) -> None:
    line = json.dumps({"ev": event, "label": label, "t": time.time_ns(),
                       "token": os.environ.get("BATON_FENCING_TOKEN"), "pid": os.getpid()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--label", default="")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--until")
    parser.add_argument("--tick", type=float)
    parser.add_argument("--env")
    parser.add_argument("--trap")
    parser.add_argument("--trap-exit", type=int, default=0)
    parser.add_argument("--ready")
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--kill-self")
    args = parser.parse_args()

    piddir = os.environ.get("BATON_TEST_PIDDIR")
    if piddir:  # lets the fixtures kill a child a failed test left behind
        open(os.path.join(piddir, str(os.getpid())), "w").close()

    if args.trap:
        def on_signal(signum: int, _frame) -> None:
            write_atomically(args.trap, signal.Signals(signum).name)
            record(args.out, "trapped", args.label)
            os._exit(args.trap_exit)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, on_signal)

    if args.env:
        seen = {k: v for k, v in os.environ.items() if k.startswith("BATON_") and k != "BATON_TEST_PIDDIR"}
        write_atomically(args.env, json.dumps({"env": seen, "pid": os.getpid(),
                                               "pgid": os.getpgid(0), "ppid": os.getppid()}))

    record(args.out, "start", args.label)
    if args.ready:
        write_atomically(args.ready, "ready")

    deadline = time.monotonic() + (60.0 if args.until else args.hold)
    step = args.tick if args.tick else 0.02
    while time.monotonic() < deadline:
        if args.until and os.path.exists(args.until):
            break
        time.sleep(min(step, max(0.0, deadline - time.monotonic())))
        if args.tick:
            record(args.out, "tick", args.label)

    record(args.out, "end", args.label)
    if args.kill_self:
        os.kill(os.getpid(), getattr(signal, args.kill_self))
        time.sleep(5)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
