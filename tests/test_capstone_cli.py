"""The capstone reference's command line, ``python -m canon_refs.capstone.pipeline`` (issue 20): each of the
seed's experiments is one switch away, over any list of seeds.

Every run here is the reduced configuration of the pipeline test (a few seconds of CPU in all); the
default-sized behaviours are the canon's tests and ``benchmarks/capstone_table.py``.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from canon_refs.capstone import pipeline

SMALL = {"n_train": 32, "n_eval": 16, "sft_steps": 2, "rm_steps": 1, "dpo_steps": 1, "grpo_steps": 1}


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list[pipeline.PipelineConfig]:
    """The configs the command line runs, each run reduced to ``SMALL``."""
    seen: list[pipeline.PipelineConfig] = []
    real = pipeline.run_pipeline

    def reduced(config: pipeline.PipelineConfig, verbose: bool = False) -> dict[str, object]:
        seen.append(config)
        return real(dataclasses.replace(config, **SMALL), verbose)

    monkeypatch.setattr(pipeline, "run_pipeline", reduced)
    return seen


def test_switches_set_the_config_of_every_seed(configs, capsys) -> None:
    argv = ["--seeds", "3", "4", "--negatives", "random", "--grpo-temperature", "1.0", "--grpo-group-size", "4",
            "--json"]
    pipeline._main(argv)
    reports = json.loads(capsys.readouterr().out)
    changed = {"negatives": "random", "grpo_temperature": 1.0, "grpo_group_size": 4}
    assert configs == [dataclasses.replace(pipeline.PipelineConfig(), seed=s, **changed) for s in (3, 4)]
    assert [r["config"] for r in reports] == [dataclasses.asdict(dataclasses.replace(c, **SMALL)) for c in configs]


def test_defaults_are_the_seeds(configs, capsys) -> None:
    pipeline._main(["--json"])
    assert configs == [pipeline.PipelineConfig()]
    assert (configs[0].negatives, configs[0].grpo_temperature, configs[0].grpo_group_size) == ("on-policy", 0.7, 8)
    assert (configs[0].rm_steps, configs[0].dpo_steps, configs[0].grpo_steps) == (80, 80, 30)


def test_one_seed_prints_its_report_and_several_a_table(configs, capsys) -> None:
    pipeline._main(["--seeds", "2"])
    single = capsys.readouterr().out
    assert single.startswith("capstone pipeline: seed 2,") and "wall time:" in single
    pipeline._main(["--seeds", "0", "1"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("capstone pipeline over seeds 0 1: negatives on-policy, GRPO temperature 0.7")
    rows = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert set(rows) == {"majority_baseline", "random_init", "sft", "reward_model", "dpo", "grpo", "tool_loop",
                         "total"}
    accuracy, sd, seconds, _, first, second = rows["sft"]
    assert float(accuracy) == pytest.approx((float(first) + float(second)) / 2, abs=1e-3)
    assert float(sd) >= 0 and float(seconds) > 0
    assert rows["reward_model"][0] == "-" and rows["total"][0] == "-"  # stages without an accuracy


def test_negatives_choose_who_samples_the_rejected_answers(monkeypatch) -> None:
    samplers = []
    real = pipeline.make_preference_pairs

    def recorded(examples, seed, policy=None):
        samplers.append(policy)
        return real(examples, seed, policy)

    monkeypatch.setattr(pipeline, "make_preference_pairs", recorded)
    for negatives in pipeline.NEGATIVES:
        pipeline.run_pipeline(pipeline.PipelineConfig(negatives=negatives, **SMALL))
    on_policy, random = samplers[:2], samplers[2:]
    assert all(isinstance(s, pipeline.TinyVLM) for s in on_policy) and random == [None, None]


@pytest.mark.parametrize("argv", [["--grpo-temperature", "0"], ["--grpo-group-size", "1"], ["--seeds", "0", "-1"],
                                  ["--negatives", "off-policy"]])
def test_a_value_that_cannot_run_exits_2_before_any_work(argv, configs, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pipeline._main(argv)
    assert exit_info.value.code == 2 and configs == []
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("python -m canon_refs.capstone.pipeline: error:")
