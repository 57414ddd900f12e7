"""Start a local Ray cluster, once more if Ray's own start-up fails under load.

A raylet gives its dashboard agent 15 s to write its port file and then aborts (Ray 2.60, not configurable:
RAY_raylet_start_wait_time_s does not change it). On a loaded 2-core box the agent's imports took longer, the head
died at start-up, and ray.init raised "The current node timed out during startup" after about 30 s. Seen in this
project's CI under load; reproduced by delaying the agent's start by 25 s. A second start usually finds the box's
page cache warm and the agent quicker.
"""

from __future__ import annotations

import sys

import ray

STARTUP_FAILURE = "timed out during startup"


def init_local(**kwargs) -> None:
    """ray.init(address="local", **kwargs), tried twice when the first start-up times out."""
    for attempt in (1, 2):
        try:
            ray.init(address="local", **kwargs)
            return
        except Exception as e:  # noqa: BLE001 - only Ray's start-up timeout is retried; anything else is raised
            if attempt == 2 or STARTUP_FAILURE not in str(e):
                raise
            ray.shutdown()
            print(f"Ray's local start-up failed ({str(e).splitlines()[0][:120]}); starting it once more",
                  file=sys.stderr, flush=True)
