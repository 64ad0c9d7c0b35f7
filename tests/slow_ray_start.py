"""Make the next local Ray start time out the way it does on a busy machine, once.

Ray's ``Node`` starts the GCS and the raylet, then polls ``ray._private.services.get_node`` until the raylet has
registered, for at most 30 s of ``time.monotonic()`` (``ray/_private/node.py``), then raises "The current node timed
out during startup". :func:`arm` makes the first poll fail and moves ``node.py``'s clock past those 30 s, so Ray's
own timeout fires at once, after the real GCS and raylet processes were started (which a retry must end). Later
polls are Ray's own. Used in process by tests/test_first_hour_e2e_on_cpu.py and, in a ``python -c`` child, by
the suite's shared maze run (tests/verl_runs.py).
"""

from __future__ import annotations

import time as _time

STATE = {"timeouts": 0}


class _Clock:
    """``time`` for ray/_private/node.py: the real module, with ``monotonic`` ahead by ``offset`` seconds."""

    offset = 0.0

    def __getattr__(self, name):
        return getattr(_time, name)

    def monotonic(self):
        return _time.monotonic() + self.offset


def arm() -> None:
    import ray._private.node as node
    import ray._private.services as services

    real_get_node = services.get_node
    clock = _Clock()
    node.time = clock

    def get_node(*args, **kwargs):
        if STATE["timeouts"] == 0:
            STATE["timeouts"] += 1
            clock.offset = 3600.0  # Ray's 30 s are over: the busy machine's raylet never registered in time
            raise RuntimeError("injected: the raylet has not registered with the GCS yet")
        return real_get_node(*args, **kwargs)

    services.get_node = get_node
