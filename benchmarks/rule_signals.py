"""The adaptive reuse rules' signals and actions in a study's run folders, as numbers: for every run that logged
`reuse/*` or `trust/*` keys, each key's mean over the first and the last third of the run's learner steps, and
over the whole run. Prints JSON (the rules findings page quotes it).

    python benchmarks/rule_signals.py STUDY_OUT/arithmetic > rule_signals.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from replay_rl.metrics import read_metrics

PREFIXES = ("reuse/", "trust/")


def thirds(values: list[float]) -> dict[str, float]:
    third = max(1, len(values) // 3)
    return {"first_third": float(np.mean(values[:third])), "last_third": float(np.mean(values[-third:])),
            "run": float(np.mean(values))}


def run_signals(metrics: Path) -> dict[str, dict[str, float]]:
    rows = read_metrics(metrics, "train")
    keys = sorted({k for r in rows for k in r if k.startswith(PREFIXES)})
    return {k: thirds([r[k] for r in rows if isinstance(r.get(k), (int, float))]) for k in keys}


def main() -> None:
    task = Path(sys.argv[1])
    out = {}
    for metrics in sorted(task.glob("*/lr*/seed*/metrics.jsonl")):
        signals = run_signals(metrics)
        if signals:
            row, lr, seed = metrics.parts[-4:-1]
            out[f"{row}/{lr}/{seed}"] = signals
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
