"""A local Ray cluster's components get ports of their own: Ray refuses to start when two
are given one ("trying to use a port number ... that is used by other components"), and
two free_port() calls in a row can return the same port (it happened once in a full run,
to test_quiet_after_ray_restart's second head)."""

from __future__ import annotations

from collectors.localray import free_ports


def test_ports_picked_together_are_distinct() -> None:
    # Picked one by one (bind port 0, close), 300 ports from Linux's ~28,000 ephemeral
    # ones repeat one with a probability of about 0.8; held while picked, never.
    ports = free_ports(300)
    assert len(set(ports)) == len(ports) == 300
