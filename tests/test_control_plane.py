"""benchmarks/control_plane.py at its smallest setting: the real loop over stand-in actors on real Ray. On a shared
box the numbers mean little; the keys, the files and the bounds do."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.ray


def test_the_smallest_setting_reports_overhead_busy_share_and_phases(ray_cluster, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import control_plane

    # its stand-in actors travel by value: Ray's workers cannot import a module from benchmarks/
    ray_cluster.cloudpickle.register_pickle_by_value(control_plane)
    setup = control_plane.Setup(steps=3, warmup=1, step_s=0.05, gen_s=0.05)
    report = control_plane.bench([2], [1], setup, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == report
    assert (tmp_path / "control_plane.png").stat().st_size > 1000 and "| 2 | 1 |" in (tmp_path / "table.md").read_text()
    (row,) = report["rows"]
    assert {"workers", "ranks", "wall_ms", "sleep_ms", "overhead_ms", "busy_share", "driver_cpu_ms", "phase_ms",
            "rest_ms"} <= row.keys()
    assert set(control_plane.PHASES) <= row["phase_ms"].keys()
    assert 0 < row["busy_share"] <= 1 and row["overhead_ms"] >= 0
    assert row["sleep_ms"] >= 50  # each rank slept its step_s once per step
