from pathlib import Path

import pytest

from replay_rl.config import ConfigError, RunConfig

CONFIGS = sorted(Path(__file__).parents[2].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_parses(path):
    RunConfig.load(path)


def test_tiny_cpu_yaml_is_the_embedded_default():
    assert RunConfig.load(CONFIGS[0].with_name("tiny_cpu.yaml")) == RunConfig()


@pytest.mark.parametrize("replay_type", ["fifo", "lifo_once", "positive_bias"])
def test_each_replay_type_alone_fits_the_default_run(replay_type):
    # positive_bias's default capacity (128) once failed the default batch of 2 ranks × 64 with `-s replay.type=…`
    cfg = RunConfig.load(None, [f"replay.type={replay_type}"])
    assert cfg.replay.type == replay_type and cfg.replay.capacity >= cfg.learner.batch_size


def test_round_trip_through_resolved_json(tmp_path):
    cfg = RunConfig.load(None, ["replay.type=positive_bias", "replay.delta=0.2", "replay.capacity=160",
                                "learner.loss.type=asymre"])
    cfg.dump_json(tmp_path / "c.json")
    assert RunConfig.load(tmp_path / "c.json") == cfg  # JSON is YAML
    assert cfg.replay.delta == 0.2 and cfg.learner.loss.baseline_shift == -0.1


def test_dotted_overrides_and_derived_properties():
    cfg = RunConfig.load(None, ["replay.capacity=84", "cluster.learners=3", "learner.batch_size=60",
                                "cluster.generators=5"])
    assert cfg.replay.capacity == 84 and cfg.shard_capacity == 28 and cfg.rank_batch_size == 20
    # nested union sections default their `type` too, so a knob of the default member needs no type=
    assert RunConfig.load(None, ["learner.loss.eps_high=0.3"]).learner.loss.eps_high == 0.3
    with pytest.raises(ConfigError, match="generation.backend.enforce_eager: unknown key"):
        RunConfig.load(None, ["generation.backend.enforce_eager=true"])  # a vllm-only knob on transformers
    # a section the override enters keeps its default's other fields: the emulated cluster's W and T stay (5, 3)
    emulate = RunConfig.load(None, ["cluster.emulate.mu=2"]).cluster.emulate
    assert (emulate.mu, emulate.generators, emulate.learners) == (2, 5, 3)
    # ... but a union section does not take its default member's fields into another member
    assert RunConfig.load(None, ["replay.type=lifo_once"]).replay.type == "lifo_once"


@pytest.mark.parametrize("overrides, field, words", [
    (["replay.capacty=84"], "replay.capacty", "unknown key"),
    (["replay.capacity=abc"], "replay.capacity", "valid integer"),
    (["learner.batch_size=33"], "learner.batch_size", "multiple of 2"),
    (["replay.type=positive_bias", "replay.delta=1.0"], "replay.delta", "less than 1"),
    (["replay.type=positive_bias", "replay.delta=-0.1"], "replay.delta", "greater than or equal to 0"),
    (["replay.capacity=16"], "replay.capacity", "16 keeps 8 fresh items a shard, fewer than a rank's batch of 64"),
    (["replay.type=positive_bias", "replay.delta=0.2", "replay.capacity=128"], "replay.capacity",
     "keeps 51 fresh items a shard ((1−δ)N), fewer than a rank's batch of 64; use capacity ≥ 160"),
    (["replay.capacity=65"], "replay.capacity", "multiple of 2"),
    (["cluster.total_gpus=8", "cluster.gpus_per_generator=1", "cluster.gpus_per_learner=1",
      "cluster.generators=7"], "cluster", "does not fit cluster.total_gpus=8"),
    (["generation.backend.type=sglang"], "generation.backend", "tag"),
    (["generation.backend.type=vllm", "cluster.gpus_per_generator=2"], "cluster.gpus_per_generator",
     "one engine on one GPU"),
    (["generation.backend.type=vllm", "cluster.gpus_per_generator=0.5", "cluster.gpus_per_learner=0.5"],
     "generation.backend.gpu_memory_utilization", "0.85 of the GPU, but the generator has 0.5 of it"),
    (["model.tiny.hidden_size=102"], "model.tiny", "divide"),
])
def test_bad_values_name_the_field(overrides, field, words):
    with pytest.raises(ConfigError) as e:
        RunConfig.load(None, overrides)
    line = str(e.value).splitlines()[0]
    assert line.startswith(f"config error: {field}") and words in line, line


def test_bad_files_and_override_syntax(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        RunConfig.load(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        RunConfig.load(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="dotted.key=value"):
        RunConfig.load(None, ["replay.capacity"])


def test_config_is_frozen():
    with pytest.raises(Exception):
        RunConfig().replay.capacity = 3


def test_emulated_cluster_derives_the_replay_ratio_and_rejects_a_hand_set_one():
    cfg = RunConfig()
    assert cfg.cluster.emulate.mu == 5.28 and cfg.target_replay_ratio == pytest.approx(5.28 * 3 / 5)
    assert RunConfig.load(None, ["replay.type=lifo_once", "replay.capacity=1024"]).target_replay_ratio == 1.0
    assert RunConfig.load(None, ["cluster.emulate=null"]).target_replay_ratio is None
    with pytest.raises(ConfigError, match="replay.rate_limit: cluster.emulate derives"):
        RunConfig.load(None, ["replay.rate_limit={samples_per_insert: 2, tolerance: 300}"])
    with pytest.raises(ConfigError, match="cluster.emulate.mu"):
        RunConfig.load(None, ["cluster.emulate.mu=0"])


def test_compute_is_charged_from_the_counts_in_trainer_steps():
    from replay_rl.analysis.accounting import ComputeLedger

    ledger = ComputeLedger(5, 3, batch_size=60, mu_model=5.28)
    ledger.k_train, ledger.k_inf = 600, 600          # 10 on-policy steps: each rollout generated once, used once
    assert ledger.compute == pytest.approx(10 * 6.28) and ledger.summary()["compute"] == ledger.compute
    ledger.k_inf = 1000                              # 400 generated but never used are charged too
    assert ledger.compute == pytest.approx((600 + 5.28 * 1000) / 60)
    free = ComputeLedger(5, 3, batch_size=60)        # no cost model: μ estimated from the counts
    free.k_train, free.k_inf = 600, 300
    assert free.mu == pytest.approx((600 / 3) / (300 / 5)) and free.compute == pytest.approx(10 * (1 + 5 / 3))


def test_every_leaf_field_is_documented():
    from replay_rl.config.docs import undocumented_fields

    assert undocumented_fields(RunConfig) == []


def test_config_command_prints_a_documented_tree_that_loads_back(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "replay_rl.cli", "config", "-s", "replay.capacity=192",
                          "-s", "learner.loss.type=asymre"], capture_output=True, text=True, check=True).stdout
    assert "# N: total rollouts across all shards" in out and "capacity: 192" in out
    assert "baseline_shift: -0.1" in out and "eps_low" not in out  # the chosen loss variant, not every variant
    (tmp_path / "c.yaml").write_text(out)
    assert RunConfig.load(tmp_path / "c.yaml") == RunConfig.load(None, ["replay.capacity=192", "learner.loss.type=asymre"])


@pytest.mark.parametrize("template, says", [("What is {x}?", "must hold only {expr}"),
                                            ("no sum here", "must hold {expr}, where the sum goes")])
def test_a_prompt_template_that_cannot_ask_the_sum_is_refused_in_one_line(template, says):
    with pytest.raises(ConfigError) as e:
        RunConfig.load(None, [f"task.prompt_template={template}"])
    assert "task.prompt_template" in str(e.value) and says in str(e.value) and "\n" not in str(e.value)
    assert RunConfig.load(None, ["task.prompt_template=What is {expr}? Answer."]).task.prompt_template.startswith("What")


def test_union_tags_are_read_from_the_models_not_a_hand_kept_list():
    """config_errors drops these from an error's path; a new union member must be in the set without an edit."""
    from typing import Annotated, Literal, Union

    from pydantic import BaseModel, Field

    from replay_rl.config.root import union_tags

    assert union_tags(RunConfig) == {"fifo", "lifo_once", "positive_bias", "grpo", "asymre", "object_store", "nccl",
                                     "transformers", "vllm", "arithmetic", "countdown", "jsonl_math", "dataset"}

    class A(BaseModel):
        type: Literal["a"] = "a"

    class B(BaseModel):
        type: Literal["sglang"] = "sglang"

    class Inner(BaseModel):
        backend: Annotated[Union[A, B], Field(discriminator="type")] = A()

    class Outer(BaseModel):
        inner: Inner = Inner()

    assert union_tags(Outer) == {"a", "sglang"}


def test_a_flow_mapping_without_a_space_after_its_colon_is_told_how_to_write_it():
    # YAML reads {share:0.2} as one key "share:0.2" with no value; the line says how to write it
    with pytest.raises(ConfigError, match=r"^config error: generation.prompt_replay.share:0.2: unknown key; write "
                                          r"`share: 0.2`, with a space after the colon$"):
        RunConfig.load(None, ["generation.prompt_replay={share:0.2}"])


def test_the_evaluator_scores_on_transformers_unless_told_to_use_the_generators_engine():
    """Issue 45, item 2: the evaluator and `replay-rl eval` build their backend through the generation factory, from
    cfg.eval_generation; a new backend reaches evaluation with run.eval_backend=generation."""
    vllm = ["generation.backend.type=vllm", "generation.backend.gpu_memory_utilization=0.3"]
    assert RunConfig.load(None, vllm).eval_generation.backend.type == "transformers"
    chosen = RunConfig.load(None, [*vllm, "run.eval_backend=generation"]).eval_generation
    assert chosen.backend.type == "vllm" and chosen.backend.gpu_memory_utilization == 0.3
    with pytest.raises(ConfigError, match="run.eval_backend"):
        RunConfig.load(None, ["run.eval_backend=vlm"])
