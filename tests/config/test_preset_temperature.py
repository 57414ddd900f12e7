"""The SmolLM2 presets' sampling temperature is the one the pre-registered rule picks from the committed step-0
measurements (benchmarks/results/smollm2_learn/plan_temperature.md): the highest of 1.0, 0.8 and 0.6 whose sampled
pass@1 on training problems with transformers generators makes three unrewarded first steps (48 completions) at
most 2% likely. At 1.0, when a run's first reward came was luck on both engines (issue 40)."""

import json
from pathlib import Path

import pytest

from replay_rl.config import RunConfig

ROOT = Path(__file__).parents[2]
ROWS = ROOT / "benchmarks" / "results" / "smollm2_learn" / "temperature_rows.jsonl"


def rule_pick(rows: list[dict]) -> float | None:
    rates = {r["temperature"]: r["pass@1_sampled"] for r in rows
             if r["backend"] == "transformers" and r["split"] == "train" and r["samples"] == 8}
    assert set(rates) == {1.0, 0.8, 0.6}, rates  # the three the plan names, each measured once
    passing = [t for t, p in rates.items() if (1 - p) ** 48 <= 0.02]
    return max(passing) if passing else None


@pytest.mark.parametrize("preset", ["smollm2_135m_cpu", "smollm2_135m_gpu"])
def test_the_smollm2_presets_sample_at_the_temperature_the_rule_picks(preset):
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    assert rule_pick(rows) == 0.6
    assert RunConfig.load(ROOT / "configs" / f"{preset}.yaml", []).generation.temperature == rule_pick(rows)
