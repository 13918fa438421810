"""Free loopback ports for the Baton processes the Python test suites start.

Each suite's pytest.ini puts this directory on `pythonpath`; the Rust harnesses pick
theirs with `baton_chaos::ports::free_port`, which explains the problem at length.
"""

from __future__ import annotations

import socket

_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on right now, never returned twice by this
    process: the kernel may hand out a just-released port again, and a node given the
    same API and peer port fails to bind."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
