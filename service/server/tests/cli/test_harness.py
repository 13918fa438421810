"""The harness's own promises that the other tests rely on."""

from __future__ import annotations

from baton_ports import free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    # A CI run once gave one node the same API and peer port (the kernel handed a
    # just-released port out again) and the node failed to bind. By the birthday
    # bound, 2,000 kernel picks repeat almost surely; the harness's must not.
    picks = [free_port() for _ in range(2000)]
    assert len(set(picks)) == len(picks)
