"""init_local: a local Ray whose start-up times out (a raylet aborts when its dashboard agent is slower than 15 s,
seen under load) is started once more; other errors are not retried. The second start is a real local Ray, in a
process of its own (this session may hold its own Ray already)."""

import subprocess
import sys
import textwrap

import pytest

# the first ray.init raises `error`; the rest are Ray's own
SCRIPT = textwrap.dedent("""
    import ray
    from replay_rl.driver import session

    calls, real = [], ray.init

    def init(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise {error}
        return real(**kwargs)

    ray.init = init
    try:
        session.init_local(num_cpus=1, include_dashboard=False, log_to_driver=False)
        print("starts", len(calls), "answer", ray.get(ray.remote(lambda: 41).remote()) + 1)
    except ValueError as e:
        print("starts", len(calls), "raised", e)
    finally:
        ray.shutdown()
""")
# Ray 2.60's words when the head's raylet died at start-up (ray/_private/node.py)
TIMED_OUT = ("The current node timed out during startup. This could happen because some of the raylet failed to "
             "startup or the GCS has become overloaded.")


def run(error: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(error=error)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.ray
def test_a_start_up_that_times_out_is_tried_once_more():
    proc = run(f"Exception({TIMED_OUT!r})")
    assert proc.returncode == 0 and "starts 2 answer 42" in proc.stdout, proc.stderr[-2000:]
    assert "Ray's local start-up failed (The current node timed out" in proc.stderr


def test_other_errors_are_not_retried():
    proc = run("ValueError('bad argument')")
    assert "starts 1 raised bad argument" in proc.stdout, proc.stderr[-2000:]
