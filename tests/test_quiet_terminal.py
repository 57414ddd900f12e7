"""Ray's own lines reach run_dir/ray.log, never the terminal: the cluster's errors that Ray's driver thread prints
(a "(raylet) Task ... failed" line when a failed run kills its actors) and its loggers' warnings."""

import inspect
import logging

import ray

from replay_rl.driver.session import log_ray_to_file


def test_ray_driver_lines_go_to_ray_log(tmp_path, monkeypatch, capsys):
    worker = ray._private.worker
    # the thread that prints errors published by the cluster calls this name at each line: replacing it is enough
    assert "print_to_stdstream(" in inspect.getsource(worker.listen_error_messages)
    monkeypatch.setattr(worker, "print_to_stdstream", worker.print_to_stdstream)  # put back after the test
    for name in ("ray", "ray._private"):
        logger = logging.getLogger(name)
        for attr in ("handlers", "level", "propagate"):
            monkeypatch.setattr(logger, attr, getattr(logger, attr))
    log_ray_to_file(tmp_path / "run" / "ray.log")
    worker.print_to_stdstream({"lines": ["Task ReplayShardActor.sample failed: killed by ray.kill"],
                               "pid": "raylet", "is_err": False}, ignore_prefix=False)
    logging.getLogger("ray.actor").warning("an actor warning")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    text = (tmp_path / "run" / "ray.log").read_text()
    assert "(raylet) Task ReplayShardActor.sample failed: killed by ray.kill" in text and "an actor warning" in text
