"""The mini study's wall time on the 3-node loopback cluster of the tests, with two and with one concurrent trial.

    python benchmarks/study_loopback.py MODEL_PATH [OUT]    # MODEL_PATH: the tiny warm model (runs/models/arith2-warm-330)

Submits `cluster/submit.py --study mini` with the tests' node placement (two learner_node workers), once with
--max-concurrent 2 and once with 1, and prints each job's wall time, submit to end."""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from loopback import PLACED, bring_up, stop_nodes, submit_command

model = sys.argv[1]
root = Path(sys.argv[2] if len(sys.argv) > 2 else "runs/bench/study_loopback")
root.mkdir(parents=True, exist_ok=True)
up = bring_up(Path(tempfile.mkdtemp(prefix="loopmeasure")))
try:
    for cap in (2, 1):
        out = str((root / f"loop{cap}").resolve())
        subprocess.run(["rm", "-rf", out])
        t0 = time.monotonic()
        p = subprocess.run(submit_command(up.address, "--study", "mini", "--out", out, "-s", f"model.path={model}", *PLACED,
                                          "-s", "run.stall_timeout_s=300", "--max-concurrent", str(cap)),
                           capture_output=True, text=True, timeout=1500)
        print(f"max-concurrent {cap}: rc {p.returncode}, {time.monotonic() - t0:.0f} s", flush=True)
        (root / f"loop{cap}.out").write_text(p.stdout + p.stderr)
finally:
    stop_nodes(up.nodes)
