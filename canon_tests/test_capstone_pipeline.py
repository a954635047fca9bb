"""Acceptance tests for #60, the capstone pipeline (docs/contract.md #60, "Acceptance checks").

One default ``run_pipeline()`` (seed 0: the seed's budgets and recipes) is shared by the module fixture;
every behaviour below reads its report. The behaviour thresholds are the ones ``run_pipeline``'s
docstring states (the learner's stub shows it), each below the worst seed of the reference and of the
correct blind implementations (``python benchmarks/capstone_table.py`` prints the reference's). The
time budget is the spec's generous 20 s, scaled by ``MLCANON_TIME_FACTOR`` (default 1.0) for slow
machines, and checked on the process CPU time of the run, because on a shared CI machine the wall time
of the same run varies several-fold with the load (CPU time far less); the seed's 20 s wall-time limit
and our 10 s target are measured by ``benchmarks/capstone_pipeline.py`` and
``benchmarks/capstone_table.py``, not here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest
import torch

from canon_refs.capstone import pipeline, sft_stage, synthetic_task
from pytest_mlcanon.plugin import RUN_PLUGIN_NAME

pytestmark = pytest.mark.canon("capstone/agent")

# The plugin's run-time shape checks instrument every annotated statement of the capstone modules; on
# this pipeline they cost about +65% CPU (24.0 s against 14.6 s measured back to back), so a run with
# them on gets twice the budget. Whether they are on is the plugin's run's setting (no run: off).
BUDGET_S = 20.0 * float(os.environ.get("MLCANON_TIME_FACTOR", "1.0"))
# The thresholds are the ones run_pipeline's docstring (what the learner's stub shows) and docs/contract.md
# #60 state. The reference's default pipeline on seeds 0-4 (mean +- sd, worst seed; the seed's budgets:
# reward model and DPO 80 steps, GRPO 30, random-wrong-token fallback): sft - majority 0.274 +- 0.049
# (0.203); pair accuracy 0.701 +- 0.025 (0.672); DPO margin gain 3.37 +- 1.13 nats (1.86); the tool
# loop's jump over GRPO beyond the larger of DPO's and GRPO's jumps 0.470 +- 0.014 (0.464). Correct
# implementations written blind from the stubs (blind round, capstone) went lower: sft - majority 0.094
# (seed 1) and 0.115 (seed 0); a DPO margin gain of 0.709 (answer-only pairs without EOS); a tool-loop
# lead of 0.359. So SFT must beat the majority by 0.05, the reward model chance (0.5), DPO must raise
# the margin at all (a no-op DPO leaves it at exactly 0) and the tool loop must lead by 0.15: each
# below every correct run seen, each still failed by a stage that learns or helps nothing.
SFT_OVER_MAJORITY = 0.05
PAIR_ACCURACY_MIN = 0.5
DPO_MARGIN_GAIN = 0.0
TOOL_JUMP_LEAD = 0.15
REPORT_KEYS = {
    "accuracy": {"majority_baseline", "random_init", "sft", "dpo", "grpo", "tool_loop"},
    "dpo": {"margin_before", "margin_after", "loss_first", "loss_last"},
    "grpo": {"reward_first", "reward_last", "informative_group_rate", "groups_used"},
    "tool_loop": {"accuracy", "tool_call_rate", "mean_steps", "well_formed_rate"},
    "params": {"total", "vision", "projector", "lm"},
    "tokens": {"vocab_size", "visual_tokens_per_image", "patches_per_image", "supervised_tokens"},
    "wall_time_s": {"data", "sft", "reward_model", "dpo", "grpo", "tool_loop", "total"},
}
SMALL = {"n_train": 128, "n_eval": 64, "sft_steps": 30, "rm_steps": 5, "dpo_steps": 5, "grpo_steps": 3}


def _runtime_shape_checks_on(config: pytest.Config) -> bool:
    """Whether this session verifies shape comments at run time: the setting of the plugin's canon run
    (``pytest --canon-item=...``); a plain ``pytest canon_tests/...`` has no run and no checks."""
    canon_run = config.pluginmanager.get_plugin(RUN_PLUGIN_NAME)
    return canon_run is not None and bool(canon_run.settings.runtime_shapes)


@pytest.fixture(scope="module")
def run(request: pytest.FixtureRequest) -> dict[str, object]:
    threads_before = torch.get_num_threads()
    start, cpu_start = time.perf_counter(), time.process_time()
    report = pipeline.run_pipeline()
    cpu, elapsed = time.process_time() - cpu_start, time.perf_counter() - start
    return {"report": report, "cpu": cpu, "elapsed": elapsed, "threads": (threads_before, torch.get_num_threads()),
            "instrumented": _runtime_shape_checks_on(request.config)}


@pytest.fixture(scope="module")
def report(run) -> dict[str, object]:
    return run["report"]


def test_default_run_fits_the_budget(run, report):
    # CPU time, which machine load inflates far less than wall time (on the shared development machine
    # the same run took 15-100 s of wall time); the wall time is what the benchmark script reports
    budget = BUDGET_S * (2.0 if run["instrumented"] else 1.0)
    assert run["cpu"] < budget, (f"the default pipeline used {run['cpu']:.1f} s of CPU "
                                 f"({run['elapsed']:.1f} s wall), budget {budget:.0f} s "
                                 f"({'with' if run['instrumented'] else 'without'} run-time shape checks); "
                                 "set MLCANON_TIME_FACTOR on a slow machine")
    wall = report["wall_time_s"]
    assert set(wall) == REPORT_KEYS["wall_time_s"] and all(v >= 0 for v in wall.values())
    assert sum(v for k, v in wall.items() if k != "total") <= wall["total"] + 0.01
    assert wall["total"] <= run["elapsed"] + 0.01


def test_report_keys_and_json(report):
    assert set(report) == set(REPORT_KEYS) | {"sft", "reward_model", "config"}
    for key, fields in REPORT_KEYS.items():
        assert set(report[key]) == fields, key
    assert "supervised_tokens" in report["sft"] and "losses" not in report["sft"]
    assert "pair_accuracy" in report["reward_model"] and "losses" not in report["reward_model"]
    assert report["config"] == dataclasses.asdict(pipeline.PipelineConfig())
    assert json.loads(json.dumps(report)) == report


def test_accuracies_are_fractions(report):
    for stage, value in report["accuracy"].items():
        assert 0.0 <= value <= 1.0, stage
    assert report["accuracy"]["tool_loop"] == report["tool_loop"]["accuracy"]


def test_sft_beats_the_majority_baseline(report):
    acc = report["accuracy"]
    assert acc["sft"] > acc["majority_baseline"] + SFT_OVER_MAJORITY, acc


def test_dpo_raises_the_margin(report):
    dpo = report["dpo"]
    assert dpo["margin_after"] > dpo["margin_before"] + DPO_MARGIN_GAIN, dpo
    assert abs(dpo["margin_before"]) < 1e-5  # the policy starts equal to its reference


def test_reward_model_ranks_held_out_pairs(report):
    assert report["reward_model"]["pair_accuracy"] > PAIR_ACCURACY_MIN, report["reward_model"]


def test_grpo_reports_informative_groups(report):
    grpo, config = report["grpo"], report["config"]
    assert 0.0 < grpo["informative_group_rate"] <= 1.0
    assert 1 <= grpo["groups_used"] <= config["grpo_steps"] * config["grpo_prompts_per_step"]
    drawn = config["grpo_steps"] * config["grpo_prompts_per_step"] * config["grpo_oversample"]
    assert grpo["groups_used"] <= round(grpo["informative_group_rate"] * drawn)


def test_tool_loop_is_the_largest_jump_with_well_formed_trajectories(report):
    tool, acc = report["tool_loop"], report["accuracy"]
    # among the post-training stages the agent loop, which changes no weight, moves accuracy the most
    weight_stages = max(0.0, acc["dpo"] - acc["sft"], acc["grpo"] - acc["dpo"])
    assert acc["tool_loop"] - acc["grpo"] >= weight_stages + TOOL_JUMP_LEAD, acc
    assert tool["well_formed_rate"] == 1.0
    assert 0.0 <= tool["tool_call_rate"] <= 1.0
    assert 1.0 <= tool["mean_steps"] <= 2.0
    assert tool["mean_steps"] == pytest.approx(1.0 + tool["tool_call_rate"], abs=1e-9)


def test_parameters_and_tokens(report):
    params, tokens = report["params"], report["tokens"]
    assert params["total"] == params["vision"] + params["projector"] + params["lm"]
    assert params["total"] == sum(p.numel() for p in pipeline.build_model(pipeline.PipelineConfig()).parameters())
    assert tokens["patches_per_image"] == 16 and tokens["visual_tokens_per_image"] == 8
    assert tokens["vocab_size"] == synthetic_task.VOCAB_SIZE
    assert tokens["supervised_tokens"] == report["sft"]["supervised_tokens"] > 0


def test_format_report_table(report):
    text = pipeline.format_report(report)
    for stage in ("majority_baseline", "random_init", "sft", "dpo", "grpo", "tool_loop", "reward_model"):
        assert stage in text
    assert "parameters:" in text and "wall time:" in text
    # the stub fixes what a row shows, not its format: each value at 2 to 4 decimals, or as a percentage
    for value in (report["accuracy"]["tool_loop"], report["grpo"]["informative_group_rate"],
                  report["dpo"]["margin_after"]):
        shown = {f"{value:.{d}f}" for d in (2, 3, 4)} | {f"{100 * value:.{d}f}%" for d in (0, 1, 2)}
        assert any(form in text for form in shown), f"{value} is not in the report table"


def test_threads_restored(run):
    before, after = run["threads"]
    assert before == after


def test_threads_restored_on_error(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("stage failed")

    monkeypatch.setattr(pipeline, "run_sft", boom, raising=False)
    monkeypatch.setattr(sft_stage, "run_sft", boom)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="stage failed"):
            pipeline.run_pipeline(pipeline.PipelineConfig(**SMALL))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_reduced_config_is_deterministic():
    first = pipeline.run_pipeline(pipeline.PipelineConfig(**SMALL))
    second = pipeline.run_pipeline(pipeline.PipelineConfig(**SMALL))
    assert first["accuracy"] == second["accuracy"]
    assert first["dpo"] == second["dpo"] and first["grpo"] == second["grpo"]


def test_majority_baseline_and_build_model():
    train = synthetic_task.make_dataset(40, seed=1)
    evaluation = synthetic_task.make_dataset(30, seed=2)
    counts = {a: sum(ex.answer == a for ex in train) for a in {ex.answer for ex in train}}
    best = max(counts.values())
    winners = [a for a, c in counts.items() if c == best]
    expected = {sum(ex.answer == a for ex in evaluation) / 30 for a in winners}
    assert pipeline.majority_baseline(train, evaluation) in expected
    a = pipeline.build_model(pipeline.PipelineConfig(seed=3))
    b = pipeline.build_model(pipeline.PipelineConfig(seed=3))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert a.n_query_tokens == 8 and a.vocab_size == synthetic_task.VOCAB_SIZE


@pytest.mark.edge_case
@pytest.mark.parametrize(
    ("field", "value"),
    [("sft_steps", 0), ("rm_batch_size", -1), ("dpo_lr", 0.0), ("grpo_lr", -1e-3), ("n_train", 0),
     ("tool_fraction", 1.5), ("tool_confidence", -0.1), ("d_llm", 50), ("grpo_group_size", 0),
     ("negatives", "off-policy")],
)
def test_config_errors_raise_before_any_work(field, value, monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("validation must happen before any work")

    monkeypatch.setattr(synthetic_task, "make_dataset", no_data)
    threads = torch.get_num_threads()
    with pytest.raises(ValueError):
        pipeline.run_pipeline(pipeline.PipelineConfig(**{field: value}))
    assert torch.get_num_threads() == threads
