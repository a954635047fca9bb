"""Wall time of the capstone pipeline (issue: canon #60), per stage and in total, on one CPU thread.

Target: the default ``run_pipeline()`` finishes in <= 10 s (half the seed's 20 s). Each repeat runs in
a fresh subprocess so the import and the first-call warm-up are paid the way a learner pays them; the
figure is the median total over the repeats, and the per-stage medians are printed above it together
with the process CPU time (which machine load inflates less than wall time).

``--seeds 0 1 2 3 4`` instead runs the default pipeline once per seed and prints the behaviours the
pipeline test checks (mean and spread over the seeds): the numbers the test thresholds were frozen on.

Run: ``python benchmarks/capstone_pipeline.py [--repeats 3] [--seeds ...]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from _common import PYTHON, REPO, Figure

TARGET_S = 10.0
STAGES = ("data", "sft", "reward_model", "dpo", "grpo", "tool_loop", "total")

_CHILD = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from canon_refs.capstone.pipeline import PipelineConfig, run_pipeline
report = run_pipeline(PipelineConfig(seed=int(sys.argv[1])))
report["process"] = {"wall_with_import": time.perf_counter() - t0, "cpu": time.process_time() - c0}
print(json.dumps(report))
"""


def run_once(seed: int = 0) -> dict:
    """One default pipeline run in a fresh interpreter; the report plus its process wall and CPU time."""
    proc = subprocess.run([PYTHON, "-c", _CHILD, str(seed)], cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pipeline run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def timing(repeats: int) -> Figure:
    runs = [run_once() for _ in range(repeats)]
    for stage in STAGES:
        values = [r["wall_time_s"][stage] for r in runs]
        print(f"  {stage:<13} median {statistics.median(values):7.3f} s   (runs: {', '.join(f'{v:.2f}' for v in values)})")
    cpu = [r["process"]["cpu"] for r in runs]
    print(f"  {'process CPU':<13} median {statistics.median(cpu):7.3f} s   (import included)")
    return Figure("capstone default pipeline, total wall time", statistics.median(r["wall_time_s"]["total"] for r in runs),
                  TARGET_S, " s")


def behaviours(seeds: list[int]) -> None:
    rows: dict[str, list[float]] = {}
    for seed in seeds:
        r = run_once(seed)
        acc = r["accuracy"]
        values = {
            **{f"acc.{k}": v for k, v in acc.items()},
            "sft - majority": acc["sft"] - acc["majority_baseline"],
            "tool_loop - grpo": acc["tool_loop"] - acc["grpo"],
            "dpo.margin_before": r["dpo"]["margin_before"],
            "dpo.margin_after": r["dpo"]["margin_after"],
            "dpo.margin_gain": r["dpo"]["margin_after"] - r["dpo"]["margin_before"],
            "reward_model.pair_accuracy": r["reward_model"]["pair_accuracy"],
            "grpo.informative_group_rate": r["grpo"]["informative_group_rate"],
            "grpo.groups_used": r["grpo"]["groups_used"],
            "tool_loop.tool_call_rate": r["tool_loop"]["tool_call_rate"],
            "tool_loop.mean_steps": r["tool_loop"]["mean_steps"],
            "tool_loop.well_formed_rate": r["tool_loop"]["well_formed_rate"],
            "wall_time_s.total": r["wall_time_s"]["total"],
        }
        for key, value in values.items():
            rows.setdefault(key, []).append(float(value))
        print(f"  seed {seed}: " + ", ".join(f"{k}={v:.3f}" for k, v in acc.items()), flush=True)
    print(f"\n{'behaviour':<30}{'mean':>9}{'sd':>9}{'min':>9}{'max':>9}")
    for key, values in rows.items():
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{key:<30}{statistics.mean(values):>9.3f}{sd:>9.3f}{min(values):>9.3f}{max(values):>9.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="*")
    args = parser.parse_args()
    if args.seeds:
        behaviours(args.seeds)
        sys.exit(0)
    figure = timing(args.repeats)
    print(figure.line())
    sys.exit(0 if figure.passed else 1)
