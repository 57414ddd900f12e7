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


def test_a_full_disk_is_one_line_that_says_so_even_when_error_log_cannot_be_written():
    """A full disk fails the run, and then the write of error.log too: that used to raise from the failure path, a
    traceback on the terminal. /dev/full answers every write with ENOSPC."""
    import errno
    from pathlib import Path

    from replay_rl.driver.session import describe_failure

    line = describe_failure(OSError(errno.ENOSPC, "No space left on device"), Path("/dev/full"))
    assert line == ("OSError: [Errno 28] No space left on device; free space on the disk, then resume with "
                    "run.resume_from=auto (/dev/full could not be written (No space left on device))")
    # a learner rank's full disk reaches the driver as a RunFailed raised from Ray's error: the hint still comes
    from replay_rl.driver.failures import RunFailed

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/ckpt/step_8/optim.pt")
        except OSError as rank_error:
            raise RunFailed("learner rank 1 failed in the checkpoint of step 8: OSError: no space") from rank_error
    except RunFailed as failed:
        line = describe_failure(failed, Path("/dev/full"))
    assert "; free space on /ckpt/step_8/optim.pt's disk, then resume with run.resume_from=auto" in line


def test_an_exception_no_driver_thread_caught_is_one_line_and_its_traceback_in_error_log(tmp_path, capsys):
    """A library's own thread (TensorBoard's event writer, on a full disk) printed its traceback on the terminal."""
    import threading

    from replay_rl.driver.failures import one_line_thread_errors

    before = threading.excepthook
    try:
        one_line_thread_errors(tmp_path)

        def fail():
            raise ValueError("boom")

        thread = threading.Thread(target=fail, name="EventFileWriter")
        thread.start()
        thread.join()
    finally:
        threading.excepthook = before
    assert capsys.readouterr().err == (f"a background thread (EventFileWriter) failed: ValueError: boom (traceback: "
                                       f"{tmp_path / 'error.log'})\n")
    assert "raise ValueError(\"boom\")" in (tmp_path / "error.log").read_text()
