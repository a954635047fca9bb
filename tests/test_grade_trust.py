"""Unit tests of the grader's trust boundary (issue 23 points 1-4) that need no child process: the
channel's protocol and limits, the answers' codec, the parent's comparison and trust policy, the
redirect's forgetting, the zygote's refusal to fork with an answer in memory, the uid sweep."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from pytest_mlcanon import catalog, redirect
from pytest_mlcanon.evidence import Status
from pytest_mlcanon.grade import assess, channel, compare, config, recheck, replay, uids, values, zygote
from pytest_mlcanon.grade.gradebook import GradedTest, ItemResult, Recheck
from pytest_mlcanon.grade.render import csvfile, feedback, gradescope, markdown
from pytest_mlcanon.grade.render.table import summary_cell
from pytest_mlcanon.grade.verifier import Calibration
from pytest_mlcanon.rubric.model import Verdict

DPO = catalog.get("posttrain/dpo")


# -- the channel: numbered frames in the protocol's order, bounded nesting -------------------------------------


def _frames(*frames: tuple[str, dict]) -> list[dict]:
    return [{"kind": kind, "seq": n, **payload} for n, (kind, payload) in enumerate(frames)]


HONEST = (("hello", {}), ("phase", {"name": "recheck"}), ("start", {"test": "recheck::f[0]"}),
          ("recheck", {"index": 0}), ("start", {"test": "recheck::f[1]"}), ("recheck", {"index": 1}),
          ("collected", {}), ("start", {"test": "t1"}), ("outcome", {"outcome": {"nodeid": "t1"}}),
          ("violation", {}), ("outcome", {"outcome": {"nodeid": "t1"}}), ("start", {"test": "t2"}),
          ("outcome", {"outcome": {"nodeid": "t2"}}), ("evidence", {}), ("done", {}))


def _check(frames: list[dict]) -> str:
    protocol = channel.Protocol()
    for frame in frames:
        if not protocol.feed(frame):
            break
    return protocol.error


def test_the_protocol_accepts_the_frames_a_writer_numbers() -> None:
    read, write = os.pipe()
    writer = channel.ChannelWriter(write)
    for kind, payload in HONEST:
        writer.send(kind, **payload)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    frames = []
    while data:
        (size,) = channel.HEADER.unpack_from(data)
        frame, error = channel.parse(data[channel.HEADER.size:channel.HEADER.size + size])
        assert frame is not None and not error
        frames.append(frame)
        data = data[channel.HEADER.size + size:]
    assert [f["kind"] for f in frames] == [kind for kind, _ in HONEST] and [f["seq"] for f in frames] == list(
        range(len(HONEST)))
    assert _check(frames) == ""


@pytest.mark.parametrize(("change", "words"), [
    (lambda f: f[:8] + [f[7]] + f[8:], "numbered"),  # a frame sent twice
    (lambda f: f[:3] + f[5:], "numbered"),  # a gap
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:8] + [f[7]] + f[8:])], "started twice"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:12] + [f[8]] + f[12:])], "while 't2' runs"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:3] + f[4:])], "started twice"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:3] + [{**f[3], "index": 5}] + f[4:])], "case 0 was due"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f + [f[-2]])], "after the job ended"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[1:])], "before hello"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:8] + [f[3]] + f[8:])], "re-check answer out of order"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:1] + f[6:7] + f[1:6] + f[7:])], "out of order"),
    (lambda f: [{**x, "seq": n} for n, x in enumerate(f[:-2] + [f[1]] + f[-2:])], "out of order"),
    (lambda f: [{**x, "seq": True} if n == 0 else x for n, x in enumerate(f)], "numbered"),
])
def test_a_duplicate_missing_or_out_of_order_frame_breaks_the_protocol(change: object, words: str) -> None:
    frames = change(_frames(*HONEST))  # type: ignore[operator]
    assert words in _check(frames)


@pytest.mark.parametrize("depth", [channel.MAX_JSON_DEPTH + 1, 100_000])
def test_a_deeply_nested_frame_is_an_error_never_an_exception(depth: int) -> None:
    body = b'{"kind":"evidence","seq":0,"evidence":' + b"[" * depth + b"]" * depth + b"}"
    read, write = os.pipe()
    os.set_blocking(read, False)
    reader = channel.FrameReader(read)
    frames = []
    data = channel.HEADER.pack(len(body)) + body
    while data:  # the pipe holds 64 KiB: write and read in turns
        written = os.write(write, data[:1 << 15])
        data = data[written:]
        frames += reader.read()
    os.close(write)
    while not reader.eof:
        frames += reader.read()
    os.close(read)
    assert frames == [] and f"deeper than {channel.MAX_JSON_DEPTH}" in reader.error


def test_a_frame_at_the_depth_a_job_needs_is_accepted() -> None:
    nested: object = 1.5
    for _ in range(values.MAX_DEPTH):
        nested = [nested]
    body = json.dumps({"kind": "recheck", "seq": 0, "result": values.encode(nested)}).encode()
    frame, error = channel.parse(body)
    assert error == "" and frame is not None


# -- the answers' codec ------------------------------------------------------------------------------------------


class _Sneaky(torch.Tensor):
    """A tensor subclass: it could answer each reader differently."""


def test_a_tensor_subclass_is_opaque_and_a_module_travels_as_its_parameters() -> None:
    sneaky = torch.zeros(2).as_subclass(_Sneaky)
    assert values.decode(values.encode_result(sneaky)) == values.Opaque("_Sneaky")
    layer = torch.nn.Linear(2, 1).eval()
    layer.bias.requires_grad_(False)
    decoded = values.decode(values.encode_result(layer))
    assert isinstance(decoded, values.Module) and decoded.type == "Linear" and not decoded.training
    assert set(decoded.parameters) == {"weight", "bias"} and not decoded.parameters["bias"].requires_grad
    np.testing.assert_array_equal(decoded.parameters["weight"].values, layer.weight.detach().numpy())


@pytest.mark.parametrize("tag", values.RECIPES)
def test_the_parent_never_builds_a_recipe(tag: str) -> None:
    with pytest.raises(values.CodecError):
        values.decode({"$": tag, "data": "gASVAAAAAAAAAAA="})
    assert isinstance(values.decode({"$": tag, "data": ""}, to_torch=True), values.Recipe)


# -- the parent's comparison -------------------------------------------------------------------------------------


def _enc(value: object) -> object:
    return values.decode(values.encode_result(value))


def test_python_floats_from_float32_inputs_get_float32_tolerance() -> None:
    step = {"function": "f", "args": values.encode((torch.tensor([12.0], dtype=torch.float32),)),
            "kwargs": values.encode({})}
    context = compare.Context.of("a/b", {"function": "f", "steps": [step]})
    assert context.precision == "float32" and context.scale == 12.0
    assert compare.compare(0.0752918, 0.0753918, "r", context) == []
    assert compare.compare(0.0752918, 0.0753918, "r") != []  # float64 inputs: that is far off
    assert compare.compare(0.0752918, 0.0852918, "r", context) != []


def test_neither_a_masks_sentinel_nor_a_low_precision_input_loosens_a_float32_answer() -> None:
    """Red team: scores holding a -1e9 beside real values made every answer of the case "a difference of inputs
    as large as 1e9", and a bfloat16 input gave a float32 answer bfloat16's allowance times 16 (5.78 on
    values of 0.02). Sentinels are no magnitude; a float32 answer is rounded in float32."""
    def context(*inputs: torch.Tensor) -> compare.Context:
        step = {"function": "f", "args": values.encode(inputs), "kwargs": values.encode({})}
        return compare.Context.of("a/b", {"function": "f", "steps": [step]})

    scores = context(torch.tensor([[0.3, -1e9, 1.2], [-0.7, 0.1, -1e9]]))
    assert scores.scale == pytest.approx(1.2)
    assert compare.compare(_enc(torch.tensor([0.25, 0.5])), _enc(torch.tensor([0.26, 0.5])), "r", scores) != []
    low = context(torch.tensor([289.0, -3.0], dtype=torch.bfloat16))
    want = torch.tensor([0.0213, -0.0187])
    assert compare.compare(_enc(want), _enc(want + 0.5), "r", low) != []
    assert compare.compare(_enc(want), _enc(want * (1 + 1e-6)), "r", low) == []
    assert compare.compare(_enc(want.bfloat16()), _enc((want * 1.002).bfloat16()), "r", low) == []  # bf16 answer


def test_a_float64_answer_is_compared_near_float32_spacing_not_looser() -> None:
    """The tests' float32-spacing floor stays out of the re-check's own allowance (COND), which would
    otherwise multiply it into a tolerance above the value itself."""
    assert compare.compare(0.5, 0.5 * (1 + 1e-8), "r") == []
    assert compare.compare(0.5, 0.5 * (1 + 1e-5), "r") != []
    assert compare.compare(0.5, 0.6, "r") != []


def test_a_masked_value_is_the_same_as_minus_infinity() -> None:
    masked = torch.tensor([0.5, float("-inf")])
    lowest = torch.tensor([0.5, torch.finfo(torch.float32).min])
    assert compare.compare(_enc(masked), _enc(lowest)) == [] == compare.compare(_enc(lowest), _enc(masked))
    assert compare.compare(_enc(masked), _enc(torch.tensor([0.5, -1e30]))) != []


def test_a_module_is_compared_parameter_by_parameter_with_its_mode_and_flags() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    expected = _enc(layer.eval())
    same = _enc(layer)
    assert compare.compare(expected, same) == []
    assert "training mode" in compare.compare(expected, _enc(layer.train()))[0]
    assert compare.compare(expected, _enc(layer), context=compare.Context(argument=True)) == []
    with torch.no_grad():
        layer.weight.add_(0.01)
    assert "weight: off by" in compare.compare(expected, _enc(layer.eval()))[0]
    assert "expected a Linear module" in compare.compare(expected, _enc(torch.nn.Identity()))[0]


def test_kmeans_clusters_compare_up_to_a_relabelling() -> None:
    from canon_refs.classical.kmeans import KMeansResult

    centroids = np.array([[0.0, 0.0], [5.0, 5.0]])
    want = KMeansResult(centroids, np.array([0, 0, 1]), 1.0, 3, [2.0, 1.0])
    relabelled = KMeansResult(centroids[::-1].copy(), np.array([1, 1, 0]), 1.0, 2, [1.0])
    wrong = KMeansResult(centroids[::-1].copy(), np.array([1, 0, 0]), 1.0, 2, [1.0])
    context = compare.Context(canonical="clusters")
    assert compare.compare(_enc(want), _enc(relabelled), context=context) == []
    assert compare.compare(_enc(want), _enc(wrong), context=context) != []
    assert compare.compare(_enc(want), _enc(relabelled)) != []  # only in its canonical form


def test_pca_projections_compare_up_to_their_signs() -> None:
    z = np.array([[1.0, -2.0], [3.0, 0.5]])
    expected, flipped = _enc([z]), _enc([z * np.array([-1.0, 1.0])])
    assert compare.compare(expected, flipped, context=compare.Context(canonical="signs")) == []
    assert compare.compare(expected, _enc([z * 1.1]), context=compare.Context(canonical="signs")) != []


def test_a_numpy_scalar_a_0d_array_and_a_float_are_the_same_number() -> None:
    """``sigmoid(0.0)`` as ``np.array(0.5)`` where the reference returns ``0.5`` (blind trial: flagged INT010 as
    a forgery); the value is still compared, and a 0-d tensor or a 1-element array is not a number."""
    assert compare.compare(_enc(0.5), _enc(np.array(0.5))) == [] == compare.compare(_enc(np.array(0.5)), _enc(0.5))
    assert compare.compare(_enc(0.5), _enc(np.float64(0.5))) == []
    assert compare.compare(_enc(0.5), _enc(np.array(0.51))) != []
    assert compare.compare(_enc(0.5), _enc(np.array([0.5]))) != [] and compare.compare(_enc(0.5), _enc(torch.tensor(0.5))) != []
    assert compare.compare(_enc(1.0), _enc(np.array(True))) != []  # a bool is no number


def test_int8_codes_one_step_off_at_a_few_rounding_ties_are_the_same_codes() -> None:
    """``round(w * (127 / max))`` for the contract's ``round(w / scale)`` rounds a value within float spacing of a
    half the other way (blind trial: one code of many, INT010); a floor for a round is off in half of them."""
    codes = torch.randint(-127, 128, (40, 50), generator=torch.Generator().manual_seed(0)).to(torch.int8)
    scale = torch.rand(40)
    context = compare.Context(canonical="rounded codes")
    one_off, many_off, two_off = codes.clone(), codes.clone(), codes.clone()
    one_off[3, 7] += 1
    many_off[:, :5] -= 1
    two_off[3, 7] -= 2
    assert compare.compare(_enc((codes, scale)), _enc((one_off, scale)), context=context) == []
    assert compare.compare(_enc((codes, scale)), _enc((many_off, scale)), context=context) != []
    assert compare.compare(_enc((codes, scale)), _enc((two_off, scale)), context=context) != []
    assert compare.compare(_enc((codes, scale)), _enc((one_off, scale))) != []  # only in its canonical form


def test_an_empty_gmm_components_mean_is_any_finite_one() -> None:
    """The contract asks only for a finite mean where a component has no responsibility (blind trial: the
    data mean failed the re-check against the reference's 0); every other mean is still compared."""
    weights, covs = np.array([1.0, 1e-16]), np.stack([np.eye(2)] * 2)
    want = _enc((weights, np.array([[1.0, 2.0], [0.0, 0.0]]), covs))
    context = compare.Context(canonical="empty components")

    def got(means: list[list[float]]) -> object:
        return _enc((weights, np.array(means), covs))

    assert compare.compare(want, got([[1.0, 2.0], [-0.3, 5.0]]), context=context) == []
    assert compare.compare(want, got([[1.0, 2.0], [np.nan, 0.0]]), context=context) != []
    assert compare.compare(want, got([[1.1, 2.0], [0.0, 0.0]]), context=context) != []
    assert compare.compare(want, got([[1.0, 2.0], [-0.3, 5.0]])) != []  # only in its canonical form


def test_an_answer_under_another_choice_the_contract_accepts_passes_and_no_other() -> None:
    """PPO's stub accepts the population or the sample std for normalised advantages: the verifier answers
    under both (``recheck.CHOICES``), the parent takes either (blind trial: the sample std failed), and an
    answer that is neither (advantages left as they came) still fails."""
    from canon_refs.rl import ppo

    item = catalog.get("rl/ppo")
    recorder = recheck.Recorder((item,))
    inputs = tuple(torch.randn(6, generator=torch.Generator().manual_seed(n)) for n in range(5))
    recorder._keep_call(item.slug, "rl/ppo", "ppo_loss", ppo.ppo_loss, inputs,  # noqa: SLF001
                        {"normalize_advantages": True})
    case = recorder.cases(20240607)[item.slug][0]
    assert len(case["alternatives"]) == 1 and "alternatives" not in recheck.child_cases([case])[0]
    assert ppo._ADVANTAGE_STD_CORRECTION == 0  # noqa: SLF001 - restored after the verifier's second answer
    context = compare.Context.of(item.slug, case)
    sample = values.decode(case["alternatives"][0])
    assert compare.compare(values.decode(case["expected"]), sample, "loss", context) != []
    assert assess._closest(case, sample, "loss", context) == []  # noqa: SLF001
    job = recheck.child_cases([case])[0]
    raw = replay.run_case({**job, "steps": [{**job["steps"][0], "kwargs": values.encode({})}]},
                          replay.import_module)  # no normalisation: neither choice
    assert assess._closest(case, values.decode(raw.result), "loss", context) != []  # noqa: SLF001


def test_a_method_of_an_object_the_recheck_cannot_rebuild_is_held() -> None:
    """Red team, round 2: attention built with a rope (another item's model, which no case carries) was paid
    for its rope tests because ``forward`` was verified by name on other objects. A method call counts by
    its object's constructor arguments' kind; an object no script follows verifies nothing."""
    from canon_refs.nn import mlp

    item = catalog.get("nn/mlp")
    with _recording(item.slug, mlp, "t.py::test_forward") as recorder:
        mlp.MLP([3, 4, 2], seed=3).forward(np.random.default_rng(0).normal(size=(5, 3)))  # from a seed: no script
    assert not recorder.scripts or all(s.cls != "MLP" for s in recorder.scripts.values())
    assert recorder.held(recorder.cases(20240607))[item.slug] == {"t.py::test_forward": ["MLP.forward"]}


def test_fresh_inputs_the_reference_refuses_are_drawn_again_keeping_equal_values_equal() -> None:
    """Red team, round 2: a zero-width box ``[1, 1, 1, 5]`` came out inverted half the time under independent
    noise, the reference refused it, its kind had no case, and an honest grade moved with the seed."""
    from canon_refs.detection import boxes

    item = catalog.get("detection/boxes")
    for seed in range(1, 9):
        recorder = recheck.Recorder((item,))
        recorder._keep_call(item.slug, "detection/boxes", "box_area", boxes.box_area,  # noqa: SLF001
                            (torch.tensor([[1.0, 1.0, 1.0, 5.0], [0.0, 0.0, 2.0, 3.0]]),), {})
        (case,) = recorder.cases(seed)[item.slug]  # a case in every run (a first draw may be valid as it is)
        drawn = values.decode(case["steps"][0]["args"])[0].values
        assert drawn[0, 2] >= drawn[0, 0] and not case["fixed"], (seed, drawn)
    tied = recheck._Tied(np.random.default_rng(0))  # noqa: SLF001
    again = recheck.perturb(np.array([[1.0, 1.0, 1.0, 5.0]]), tied)
    assert again[0, 0] == again[0, 1] == again[0, 2] != 1.0


def test_a_bootstrap_interval_by_any_quantile_definition_passes() -> None:
    """The harness's contract says "the quantiles" of the resampled statistics: Efron's order statistics
    (``inverted_cdf``) failed the re-check against NumPy's default and were flagged INT010 (blind trial)."""
    import numpy.random

    from canon_refs.evaluation import harness

    item = catalog.get("evaluation/harness")
    recorder = recheck.Recorder((item,))
    recorder._keep_call(item.slug, "evaluation/harness", "bootstrap_ci", harness.bootstrap_ci,  # noqa: SLF001
                        (numpy.random.default_rng(0).random(30),), {"n_resamples": 50})
    case = recorder.cases(20240607)[item.slug][0]
    assert harness._QUANTILE_METHOD == "linear" and len(case["alternatives"]) >= 5  # noqa: SLF001
    job = recheck.child_cases([case])[0]
    context = compare.Context.of(item.slug, case)
    harness._QUANTILE_METHOD = "inverted_cdf"  # noqa: SLF001 - the learner's choice
    try:
        efron = values.decode(replay.run_case(job, replay.import_module).result)
    finally:
        harness._QUANTILE_METHOD = "linear"  # noqa: SLF001
    assert compare.compare(values.decode(case["expected"]), efron, "ci", context) != []
    assert assess._closest(case, efron, "ci", context) == []  # noqa: SLF001
    shifted = [efron[0], efron[1] + 0.01, efron[2]]
    assert assess._closest(case, shifted, "ci", context) != []  # noqa: SLF001


def test_an_edge_case_a_nudge_flips_only_sometimes_is_evidence_in_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team: an nms edge case counted as fixed in one run in three (two draws that happened to agree),
    so an honest grade moved with the seed. A case is fixed only when its answer is the tests' own answer
    on every one of several draws; the first draw that answers otherwise is the case."""
    from canon_refs.transformer import masks

    def edge(x: float) -> bool:
        return x > 1.0

    monkeypatch.setattr(masks, "edge", edge, raising=False)
    item = catalog.get("transformer/masks")
    for seed in range(1, 12):
        recorder = recheck.Recorder((item,))
        recorder._keep_call(item.slug, "transformer/masks", "edge", edge, (1.004,), {})  # noqa: SLF001
        case = recorder.cases(seed)[item.slug][0]
        assert not case["fixed"] and values.decode(case["steps"][0]["args"])[0] < 1.0, (seed, case)


def test_pcas_fitted_attributes_are_compared_after_its_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit`` returns ``self``, compared by its type's name only: a PCA that zeroed its explained variance
    passed (red team). The attributes its contract states are compared after the steps (``replay.FITTED``)."""
    from canon_refs.classical import pca

    item = catalog.get("classical/pca")
    with _recording(item.slug, pca, "t.py::test_fit") as recorder:
        pca.PCA(2).fit(np.random.default_rng(0).normal(size=(20, 4)))
    case = recorder.cases(20240607)[item.slug][0]
    assert case["kind"] == "script" and set(values.decode(case["mutated"]["fitted"])) == set(replay.FITTED[
        (item.slug, "PCA")])
    job = recheck.child_cases([case])[0]
    honest = replay.run_case(job, replay.import_module)
    context = compare.Context.of(item.slug, case).for_argument()
    expected = values.decode(case["mutated"]["fitted"])
    assert compare.compare(expected, values.decode(honest.after["fitted"]), "fitted", context) == []
    fit = pca.PCA.fit

    def zeroed(self: object, X: object) -> object:
        fit(self, X)
        self.explained_variance_ = np.zeros_like(self.explained_variance_)  # type: ignore[attr-defined]
        return self

    monkeypatch.setattr(pca.PCA, "fit", zeroed)
    forged = replay.run_case(job, replay.import_module)
    assert "explained_variance_" in compare.compare(expected, values.decode(forged.after["fitted"]), "fitted",
                                                    context)[0]


def test_a_fixed_cases_sizes_are_stirred_by_even_steps() -> None:
    """``causal_mask(4)`` answers the same on any draw (integers are never nudged): a case the public answers,
    learned by heart, would pass. Drawn again with its sizes moved up by even steps, it verifies."""
    from canon_refs.transformer import masks

    rng = np.random.default_rng(3)
    for _ in range(20):
        moved = recheck.stir_sizes(((4, True, 0, -100, [3]), {"d": 6}), rng)
        (size, flag, zero, ignore, (inner,)), kwargs = moved
        assert (flag, zero, ignore) == (True, 0, -100) and size % 2 == 0 and inner % 2 == 1 and kwargs["d"] % 2 == 0
        assert (size, inner, kwargs["d"]) != (4, 3, 6) and max(size - 4, inner - 3, kwargs["d"] - 6) <= 8
    item = catalog.get("transformer/masks")
    recorder = recheck.Recorder((item,))
    recorder._keep_call(item.slug, "transformer/masks", "causal_mask", masks.causal_mask, (4,), {})  # noqa: SLF001
    case = recorder.cases(20240607)[item.slug][0]
    size = values.decode(case["steps"][0]["args"])[0]
    assert case["stirred"] and not case["fixed"] and size in (6, 8, 10, 12), case
    assert not compare.proves_nothing(case) and "stirred" not in recheck.child_cases([case])[0]


# -- running a case: the same code on both sides ------------------------------------------------------------------


def test_a_case_runs_the_same_on_the_verifiers_and_the_jobs_side() -> None:
    from canon_refs.posttrain import dpo

    case = {"kind": "call", "module": "posttrain/dpo", "function": "dpo_loss", "opaque": [False],
            "steps": [{"function": "dpo_loss", "args": values.encode((-12.0, -11.5, -13.0, -10.8)),
                       "kwargs": values.encode({"beta": 0.1})}]}
    verifier = replay.run_case(case, replay.import_module, report_all=True)
    job = replay.run_case({**case, "mutated": []}, lambda path: dpo)
    assert not verifier.raised and verifier.result == job.result
    assert values.decode(job.result).type == "DPOOutput"


def test_parameters_named_otherwise_make_a_case_unverifiable_not_failed() -> None:
    class Renamed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

    with pytest.raises(replay.Unverifiable, match="missing weight"):
        replay.load_parameters(Renamed(), {"weight": torch.ones(2)}, training=False)
    layer = torch.nn.Linear(2, 1)
    replay.load_parameters(layer, {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}, training=False)
    assert torch.equal(layer.weight, torch.ones(1, 2)) and not layer.training


def test_an_item_with_a_case_it_could_not_set_up_is_unverified_whatever_else_passed() -> None:
    """A module whose parameters are named otherwise (a wrong model, renamed so the verifier cannot load it)
    beside functions that pass: the item is unverified for that student (the teacher's policy), not passed."""
    from pytest_mlcanon.grade.verifier import Calibration

    ordinary = _dpo_case(0.3, probe=False)
    renamed = {**ordinary, "function": "sequence_logprob", "steps": [{
        "function": "sequence_logprob", "kwargs": values.encode({}),
        "args": values.encode((_GPT_WITH_PARAMETERS, torch.zeros(1, 3, dtype=torch.long)))}]}
    answers = [{"kind": "recheck", "seq": 0, "index": 0,
                "result": replay.run_case({**ordinary, "mutated": []}, replay.import_module).result},
               {"kind": "recheck", "seq": 1, "index": 1, "result": values.encode_unverifiable("renamed parameters")}]
    check = assess._recheck(DPO, Calibration(cases={DPO.slug: [ordinary, renamed]}), assess.read_frames(answers),  # noqa: SLF001
                            config.GradeConfig())
    assert check.status == "unverified" and check.policy == "review" and "sequence_logprob" in check.unverified, check


#: A model argument the job builds from its own class and gives the verifier's parameters (a recipe).
_GPT_WITH_PARAMETERS = values.Recipe("instance", {
    "module": "transformer/gpt", "class": "GPT", "init": [values.encode(()), values.encode({})],
    "state": values.encode({"wte.weight": torch.zeros(4, 2)}), "training": False})


def test_a_case_that_gives_no_module_parameters_cannot_be_excused_as_unverifiable() -> None:
    """Only giving a module the verifier's parameters can fail to set a case up; any other case always
    runs, so a job that answers ``unverifiable`` there (its code raised the harness's own exception, from a
    constructor or a module ``__getattr__`` the re-check calls outside the call it makes) forged an excuse
    to turn a verified item into one its teacher's ``unverified`` policy may award: a difference."""
    from pytest_mlcanon.grade.verifier import Calibration

    ordinary = _dpo_case(0.3, probe=False)
    answers = [{"kind": "recheck", "seq": 0, "index": 0, "result": values.encode_unverifiable("renamed parameters")}]
    award = dataclasses.replace(config.GradeConfig(), unverified="award")
    check = assess._recheck(DPO, Calibration(cases={DPO.slug: [ordinary]}), assess.read_frames(answers), award)  # noqa: SLF001
    assert check.status == "failed" and "could not be set up" in check.problems[0], check
    assert not assess.gives_parameters(ordinary)
    renamed = {**ordinary, "steps": [{"function": "sequence_logprob", "kwargs": values.encode({}),
                                      "args": values.encode((_GPT_WITH_PARAMETERS,))}]}
    assert assess.gives_parameters(renamed)
    assert assess.gives_parameters({"kind": "script", "state": values.encode({"w": torch.zeros(1)})})
    assert not assess.gives_parameters({"kind": "script", "state": None, "init": [values.encode(()), values.encode({})]})


def test_training_calls_are_shortened_to_their_first_steps_and_one_batch() -> None:
    from canon_refs.posttrain import dpo

    call = recheck.Call("posttrain/dpo", "posttrain/dpo", "run_dpo", dpo.run_dpo, ("policy", "ref", [1, 2, 3]),
                        {"steps": 20, "lr": 0.01})
    args, kwargs = recheck._shorten(call, recheck.SHORTEN[("posttrain/dpo", "run_dpo")])  # noqa: SLF001
    assert args == ("policy", "ref", [1]) and kwargs == {"steps": 2, "lr": 0.01}


def test_kinds_of_call_tell_scalars_tensors_batches_and_dtypes_apart() -> None:
    kinds = {recheck.kind(((x,), {})) for x in (1.0, torch.zeros(3), torch.zeros(2, 3), torch.zeros(3).double(),
                                                  torch.zeros(4), np.zeros(3))}
    assert len(kinds) == 5  # zeros(3) and zeros(4): the same kind


def test_an_options_value_and_a_flags_are_kinds_of_their_own() -> None:
    """``reduction="sum"`` and ``reduction="none"`` are two branches of a loss: when only the first was a kind,
    a sum that was a mean went unchecked by the re-check. Texts (with spaces), sizes and values are not kinds."""
    def of(**kwargs: object) -> str:
        return recheck.kind(((torch.zeros(3),), kwargs))

    assert of(reduction="sum") != of(reduction="none") and of(return_weights=True) != of(return_weights=False)
    assert of(text="the cat sat") == of(text="on the mat, twice") and of(k=3) == of(k=5) and of(p=0.1) == of(p=0.5)


# -- the trust policy for what cannot be verified ------------------------------------------------------------------


def _scored(check: Recheck, policy: str) -> ItemResult:
    result = ItemResult(DPO.slug, DPO.number, DPO.title, Status.SCORED, axes={a: True for a in
                        ("correctness", "shapes", "numerics", "api", "explanation")}, score=5,
                        tests=[GradedTest("t1", "passed"), GradedTest("t2", "passed")], recheck=check, max_points=10)
    settings = config.from_table({"recheck": {"unverified": policy}})
    check.policy = policy if check.status == "unverified" else ""
    assess._award(result, settings)  # noqa: SLF001
    return result


@pytest.mark.parametrize(("policy", "correctness", "withheld"), [("award", 6.0, 0.0), ("review", 0.0, 6.0),
                                                                    ("zero", 0.0, 0.0)])
def test_what_an_unverified_item_earns_is_the_teachers_choice(policy: str, correctness: float,
                                                              withheld: float) -> None:
    result = _scored(Recheck("unverified", "no case"), policy)
    assert result.axis_points["correctness"] == pytest.approx(correctness)
    assert result.recheck.withheld == pytest.approx(withheld)
    assert result.points == pytest.approx(correctness + 4.0)
    verified = _scored(Recheck("passed", "ok", 3), policy)
    assert verified.axis_points["correctness"] == pytest.approx(6.0) and verified.recheck.withheld == 0.0


@contextlib.contextmanager
def _recording(slug: str, module: ModuleType, test: str) -> Iterator[recheck.Recorder]:
    """The verifier's recorder wrapped around the public names of ``module`` (item ``slug``'s own), as
    while ``test`` of that item runs; unwrapped at the end."""
    recorder = recheck.Recorder((catalog.get(slug),))
    recorder._wrap_module((slug,), slug, module)  # noqa: SLF001
    recorder._current, recorder._test = slug, test  # noqa: SLF001
    try:
        yield recorder
    finally:
        recorder.pytest_sessionfinish(None)  # type: ignore[arg-type]


def _partly(policy: str) -> ItemResult:
    """A passing re-check that left ``init`` unverified, and two passing tests, the first of which calls it."""
    result = ItemResult(DPO.slug, DPO.number, DPO.title, Status.SCORED, axes={a: True for a in
                        ("correctness", "shapes", "numerics", "api", "explanation")}, score=5,
                        tests=[GradedTest("test_init", "passed"), GradedTest("test_loss", "passed")],
                        recheck=Recheck("passed", "4 calls agree", 4, unverified=["init"]), max_points=10)
    calibration = Calibration(held={DPO.slug: {"a/test_posttrain_dpo.py::test_init": ["init"]}})
    settings = config.from_table({"recheck": {"unverified": policy}})
    assess._mark_unverified(DPO, calibration, result, settings)  # noqa: SLF001
    assess._award(result, settings)  # noqa: SLF001
    result.verdict = assess._verdict(result, "", Verdict("yes"))  # noqa: SLF001
    return result


@pytest.mark.parametrize(("policy", "correctness", "withheld", "said"), [
    ("award", 6.0, 0.0, "awarded as the tests claim"), ("review", 3.0, 3.0, "3 points held for review"),
    ("zero", 3.0, 0.0, "no points for them")])
def test_on_a_partly_verified_item_a_test_calling_an_unverified_name_earns_what_the_policy_says(
        policy: str, correctness: float, withheld: float, said: str) -> None:
    """The child alone says such a test passed (an empty k-means forging the outcomes of the tests that
    call its init would be paid in full): it is paid like an unverified item; the others are verified."""
    result = _partly(policy)
    assert [t.unverified for t in result.tests] == [True, False]
    assert result.axis_points["correctness"] == pytest.approx(correctness)
    assert result.recheck.withheld == pytest.approx(withheld)
    assert (f"correctness partly verified: 1 passing test(s) call init in a way no fresh-input case checks ({said})"
            in result.verdict) and result.recheck.label() == "passed (partly)"
    if policy != "award":
        from pytest_mlcanon.grade.gradebook import Gradebook, StudentResult

        book = Gradebook([DPO.slug], {DPO.slug: DPO.title}, [StudentResult("ann", items=[result])], config={})
        entry = next(e for e in gradescope.results(book, book.students[0])["tests"] if e["name"].endswith("test_init"))
        assert "check what this test calls on fresh inputs" in entry["output"] and entry["score"] == 0


def test_the_verifier_records_the_public_names_each_test_calls_itself() -> None:
    """Only the outermost call counts: ``kmeans`` seeding through its own ``kmeans_plus_plus_init`` is verified
    with ``kmeans``; a test calling the init itself reaches it."""
    from canon_refs.classical import kmeans

    item = catalog.get("classical/kmeans")
    x = np.random.default_rng(0).normal(size=(12, 2))
    with _recording(item.slug, kmeans, "t.py::test_fit") as recorder:
        kmeans.kmeans(x, 2)
        recorder._test = "t.py::test_init"  # noqa: SLF001
        kmeans.kmeans_plus_plus_init(x, 2, np.random.default_rng(1))
        kmeans.assign(x, x[:2])
    names = {test: sorted(token.split(recheck.TOKEN_SEP)[0] for token in tokens)
             for test, tokens in recorder.reaches[item.slug].items()}
    assert names == {"t.py::test_fit": ["kmeans"], "t.py::test_init": ["assign", "kmeans_plus_plus_init"]}


def test_a_test_is_held_for_each_call_whose_kind_no_case_verifies_and_for_its_fixtures_calls() -> None:
    """Red team: nms answered from a table for every kind but one, and k-means without its seeded paths, were
    paid because *some* case verified the name. A test is paid on the verifier's evidence only where every
    call it makes (itself, or in a fixture it uses, module-scoped ones included) is of a kind a case whose
    answer fresh inputs change verifies; a seeded call has no case."""
    from canon_refs.classical import kmeans

    item = catalog.get("classical/kmeans")
    x = np.random.default_rng(0).normal(size=(12, 2))
    with _recording(item.slug, kmeans, "t.py::test_assign") as recorder:
        kmeans.assign(x, x[:2])
        recorder._test = "t.py::test_seeded"  # noqa: SLF001
        kmeans.kmeans(x, 2, seed=3)
        recorder._test, recorder._fixtures = "t.py::test_first", ["fitted"]  # noqa: SLF001
        kmeans.kmeans(x, 2, seed=4)  # a module-scoped fixture's setup, during the first test that uses it
        recorder._fixtures, recorder._fixturenames = [], ("fitted",)  # noqa: SLF001
        recorder.pytest_runtest_logfinish("t.py::test_first", None)
        recorder._current, recorder._fixturenames = item.slug, ("fitted", "tmp_path")  # noqa: SLF001
        recorder.pytest_runtest_logfinish("t.py::test_second_reads_the_fixture", None)
    cases = recorder.cases(20240607)
    held = recorder.held(cases)[item.slug]
    assert held == {"t.py::test_seeded": ["kmeans"], "t.py::test_first": ["kmeans"],
                    "t.py::test_second_reads_the_fixture": ["kmeans"]}, held
    assert [c["function"] for c in cases[item.slug]] == ["assign"] and "reach" not in recheck.child_cases(
        cases[item.slug])[0]


def test_unverified_is_said_in_every_output() -> None:
    from pytest_mlcanon.grade.gradebook import Gradebook, StudentResult

    result = _scored(Recheck("unverified", "no call the re-check can carry"), "review")
    result.verdict = assess._verdict(result, "", Verdict("yes"))  # noqa: SLF001
    book = Gradebook([DPO.slug], {DPO.slug: DPO.title}, [StudentResult("ann", items=[result])], config={})
    student = book.students[0]
    assert "correctness unverified (6 points held for review)" in result.verdict
    assert "UNVERIFIED" in summary_cell(result)
    assert "unverified (review)" in csvfile.render(book) and "unverified (review)" in markdown.render(book)
    assert "unverified (review)" in feedback.render(book, student)
    entries = gradescope.results(book, student)["tests"]
    assert any(e["name"].endswith("seeded re-check") and e["output"].startswith("unverified (review)")
               for e in entries)
    assert json.loads(json.dumps(book.to_dict()))["students"][0]["items"][0]["recheck"]["policy"] == "review"


def test_the_default_policy_is_review() -> None:
    assert config.GradeConfig().unverified == "review" == config.from_table({}).unverified
    with pytest.raises(config.ConfigError, match="unverified"):
        config.from_table({"recheck": {"unverified": "maybe"}})


# -- nothing of the answer in a job's process ------------------------------------------------------------------------


def test_forgetting_canon_modules_removes_them_from_their_package_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import canon_refs.posttrain as area

    stale = ModuleType("canon_refs.posttrain.dpo")
    monkeypatch.setitem(sys.modules, "canon_refs.posttrain.dpo", stale)
    before = area.__dict__.get("dpo")  # the real module when an earlier test of this worker imported it
    area.dpo = stale  # type: ignore[attr-defined]
    try:
        redirect._forget_canon_modules()  # noqa: SLF001
        assert "canon_refs.posttrain.dpo" not in sys.modules and not hasattr(area, "dpo")
    finally:  # not monkeypatch: its undo would delete an attribute the code under test already removed
        if before is not None:
            area.dpo = before  # type: ignore[attr-defined]


def test_the_zygote_sees_a_canon_module_it_must_not_fork_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "canon_refs.posttrain.dpo", ModuleType("canon_refs.posttrain.dpo"))
    assert "canon_refs.posttrain.dpo" in zygote.canon_modules()
    monkeypatch.delitem(sys.modules, "canon_refs.posttrain.dpo")
    monkeypatch.setitem(sys.modules, "canon_tests.test_x", ModuleType("canon_tests.test_x"))
    assert zygote.canon_modules() == ["canon_tests.test_x"]


def test_the_child_sees_inputs_only() -> None:
    case = {"item": "a/b", "module": "a/b", "kind": "call", "function": "f", "args": [], "kwargs": {},
            "expected": 1, "mutated": {"0": 2}}
    (shown,) = recheck.child_cases([case])
    assert "expected" not in shown and shown["mutated"] == ["0"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_sweep_removes_a_uids_files_from_the_shared_folders(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "dir").mkdir(parents=True)
    (shared / "dir" / "inner").write_text("x")
    (shared / "file").write_text("x")
    (shared / "mine").write_text("x")
    for path in (shared / "dir", shared / "dir" / "inner", shared / "file"):
        os.chown(path, 61999, 61999)
    assert uids.remove_files(61999, (str(shared),)) == 2
    assert sorted(p.name for p in shared.iterdir()) == ["mine"]


def test_a_backward_pass_is_replayed_after_its_forward_pass_and_the_cache_never_compared() -> None:
    from canon_refs.nn import normalization

    x = values.encode((np.random.default_rng(0).normal(size=(4, 3)), np.ones(3), np.zeros(3)))
    dy = values.Recipe("step", {"step": 0, "index": 1})
    case = {"kind": "call", "module": "nn/normalization", "function": "layernorm_backward", "opaque": [True, False],
            "steps": [{"function": "layernorm_forward", "args": x, "kwargs": values.encode({})},
                      {"function": "layernorm_backward",
                       "args": values.encode((np.ones((4, 3)), dy)), "kwargs": values.encode({})}]}
    answer = replay.run_case(case, lambda path: normalization, report_all=True)
    forward, backward = values.decode(answer.result)
    assert not answer.raised and isinstance(forward[1], values.Ignored) and isinstance(forward[0], values.Array)
    assert len(backward) == 3 and all(isinstance(g, values.Array) for g in backward)


# -- the verification table ---------------------------------------------------------------------------------------


def test_the_verification_document_is_generated_from_the_code_table() -> None:
    from pytest_mlcanon.grade import verification

    assert verification.DOC.read_text(encoding="utf-8") == verification.render(), (
        "docs/verification.md is stale: run python -m pytest_mlcanon.grade.verification --write")


def test_the_verification_table_covers_every_item_of_the_canon() -> None:
    from pytest_mlcanon.grade import verification
    from pytest_mlcanon.run import in_canon

    assert set(verification.TABLE) == {item.slug for item in catalog.all_items() if in_canon(item)}
    for slug, coverage in verification.TABLE.items():
        assert coverage, slug
        for name, how in coverage.items():
            assert how.split(":")[0] in ("verified", "unverified", recheck.UNTESTED), (slug, name, how)


def test_the_parent_holding_the_calibration_is_undumpable_while_it_does() -> None:
    import ctypes

    from pytest_mlcanon.grade import batch

    prctl = ctypes.CDLL(None).prctl
    assert batch._undumpable()  # noqa: SLF001
    try:
        assert prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE: no other process of the user may read its memory
    finally:
        batch._set_dumpable(True)  # noqa: SLF001
    assert prctl(3, 0, 0, 0, 0) == 1


def test_types_are_exact_but_a_floating_result_may_have_another_precision() -> None:
    expected = _enc(torch.tensor([0.25, 0.75], dtype=torch.float16))
    assert compare.compare(expected, _enc(torch.tensor([0.25, 0.75], dtype=torch.float32))) == []
    assert "got a float32 ndarray" in compare.compare(expected, _enc(np.array([0.25, 0.75], dtype=np.float32)))[0]
    assert "got a float32 tensor" in compare.compare(_enc(torch.tensor([1, 2])), _enc(torch.tensor([1.0, 2.0])))[0]
    assert compare.compare(_enc(torch.tensor([0.25], dtype=torch.float16)), _enc(torch.tensor([0.3]))) != []



def test_a_floating_answer_may_not_choose_a_precision_below_the_references_and_its_inputs() -> None:
    expected = _enc(torch.tensor([1.0, -2.0, 3.0]))
    wrong = torch.tensor([1.08, -2.16, 3.24])  # 8 % off: within 16 ulps of bfloat16, never of float32
    assert compare.compare(expected, _enc(wrong)) != []
    assert "bfloat16" in compare.compare(expected, _enc(wrong.to(torch.bfloat16)))[0]
    assert compare.compare(expected, _enc(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float16))) != []
    assert compare.compare(_enc(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)), expected) == []  # float32
    half_inputs = compare.Context(precision="float16")  # float16 inputs: a float16 answer is the contract's
    assert compare.compare(expected, _enc(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float16)), context=half_inputs) == []

# -- forbidden shortcuts seen by what runs ------------------------------------------------------------------------


def _attention(q: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(q @ q.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return weights @ q


SDPA = "torch.nn.functional.scaled_dot_product_attention"


@pytest.mark.parametrize(("forbidden", "call"), [
    (SDPA, lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q)),
    (SDPA, lambda q: torch._C._nn.scaled_dot_product_attention(q, q, q)),  # noqa: SLF001
    (SDPA, lambda q: torch.ops.aten.scaled_dot_product_attention(q, q, q)),
    (SDPA, lambda q: torch.ops.aten.scaled_dot_product_attention.default(q, q, q)),
    (SDPA, lambda q: getattr(torch.nn.functional, "scaled_dot_product_" + "attention")(q, q, q)),
    (SDPA, lambda q: torch._native_multi_head_attention(  # noqa: SLF001 - identity projections: attention itself
        q, q, q, 4, 1, torch.eye(4).repeat(3, 1), torch.zeros(12), torch.eye(4), torch.zeros(4), need_weights=False)),
    ("torch.nn.functional.rms_norm", lambda q: torch.rms_norm(q, [q.shape[-1]])),
    ("torch.nn.functional.rms_norm", lambda q: torch.ops.aten.rms_norm(q, [q.shape[-1]])),
    ("torch.nn.functional.rms_norm", lambda q: torch.nn.functional.rms_norm(q, [q.shape[-1]])),
], ids=["functional", "c_nn", "aten_packet", "aten_overload", "getattr", "native_mha", "torch_rms_norm", "aten_rms_norm",
        "functional_rms_norm"])
def test_a_forbidden_kernel_is_seen_whichever_name_reaches_it(forbidden: str, call: object) -> None:
    from pytest_mlcanon.grade.forbidden import Detector

    detector = Detector((forbidden,))
    q = torch.randn(2, 3, 4, requires_grad=True)
    with detector.case() as hits:
        with detector.learner():
            call(q)  # type: ignore[operator]
    assert hits == [forbidden]
    with detector.case() as hits:
        with detector.learner():
            _attention(q)
            torch.nn.functional.layer_norm(q, [4])
    assert hits == [], "attention and a norm written from their formulas use no forbidden kernel"


def test_processes_the_child_saw_left_in_its_pid_namespace_are_flagged() -> None:
    """In a PID namespace the kernel kills what a job left as the job ends, before the parent's sweep:
    the child's count in its ``done`` frame still flags them (INT110), and a forged count costs only
    the job that sent it."""
    from pytest_mlcanon.grade.runner import JobRun

    claims = assess.read_frames([{"kind": "done", "seq": 0, "left_running": 2}])
    assert claims.left_running == 2
    assert [f.code for f in assess._integrity([], claims, JobRun())] == ["INT110"]  # noqa: SLF001
    for forged in (-5, "many", None, 1.5):
        assert assess.read_frames([{"kind": "done", "seq": 0, "left_running": forged}]).left_running == 0
    assert assess._integrity([], assess.read_frames([{"kind": "done", "seq": 0}]), JobRun(leftovers=1))[0].code == "INT110"  # noqa: SLF001


def test_an_item_still_the_stub_is_not_implemented_yet(tmp_path: Path) -> None:
    """The stub ``mlcanon stubs`` writes carries the reference's docstrings: graded, it would earn
    Explanation and API points for nothing. An item whose files are all still the stub is not
    implemented yet, the one status a learner's run gives it too (a missing file is not attempted)."""
    from types import SimpleNamespace

    from pytest_mlcanon import stubs
    from pytest_mlcanon.grade import batch, discover
    from pytest_mlcanon.grade.gradebook import StudentResult
    from pytest_mlcanon.impl import Impl

    stubs.write_stub(tmp_path / "ann", "posttrain/dpo")
    (tmp_path / "bo" / "posttrain").mkdir(parents=True)
    subs = [discover.Submission(name, tmp_path / name, tmp_path / name) for name in ("ann", "bo")]
    (tmp_path / "snap").mkdir()
    cells: dict = {}
    jobs, _ = batch._plan(subs, [StudentResult(sub.student) for sub in subs], cells, (DPO,), tmp_path / "snap" / "all", config.GradeConfig(),  # noqa: SLF001
                          SimpleNamespace(size=1), {}, None)  # type: ignore[arg-type]
    assert jobs == []
    stub, absent = cells[("ann", DPO.slug)], cells[("bo", DPO.slug)]
    assert stub.status is Status.NOT_IMPLEMENTED and stub.points == 0.0
    assert stub.verdict == ("not implemented yet: posttrain/dpo.py still the stub (every function raises "
                            "NotImplementedError)")
    assert absent.status is Status.NOT_ATTEMPTED and absent.verdict == "not attempted: no posttrain/dpo.py"
    tmp_path = tmp_path / "ann"
    impl = Impl(tmp_path, "--impl")
    assert "still the stub" in batch.still_stub(impl, DPO)
    written = tmp_path / "posttrain" / "dpo.py"
    written.write_text(written.read_text(encoding="utf-8") + "\n\ndef helper():\n    return 1\n", encoding="utf-8")
    assert batch.still_stub(impl, DPO) == ""
    written.write_text("_DEEP = " + " + ".join(["1"] * 100_000) + "\n", encoding="utf-8")
    assert batch.still_stub(impl, DPO) == "", "too deep to parse: not a stub (the job and the scan say why)"


# -- the numerics probes' calls: Numerics evidence, never a forgery ---------------------------------------------------


def _naive_dpo() -> ModuleType:
    """DPO as ``-log(sigmoid(margin))``: right on ordinary margins, infinite where the sigmoid underflows."""
    import dataclasses

    from canon_refs.posttrain import dpo

    def dpo_loss(*args: object, **kwargs: object) -> object:
        out = dpo.dpo_loss(*args, **kwargs)
        losses = -torch.log(torch.sigmoid(out.margin))
        return dataclasses.replace(out, losses=losses, loss=losses.mean())

    module = ModuleType("naive_dpo")
    module.dpo_loss = dpo_loss  # type: ignore[attr-defined]
    return module


def _dpo_case(margin: float, probe: bool) -> dict:
    case = {"item": DPO.slug, "kind": "call", "module": "posttrain/dpo", "function": "dpo_loss", "opaque": [False],
            "probe": probe, "steps": [{"function": "dpo_loss", "kwargs": values.encode({"beta": 1.0}),
                                       "args": values.encode((torch.tensor([margin, 0.5]), torch.zeros(2),
                                                              torch.zeros(2), torch.zeros(2)))}]}
    expected = replay.run_case(case, replay.import_module, report_all=True)
    return {**case, "expected": expected.result, "mutated": {}}


def _recheck_of(cases: list[dict]) -> Recheck:
    from pytest_mlcanon.grade.verifier import Calibration

    naive = _naive_dpo()
    answers = [{"kind": "recheck", "seq": n, "index": n,
                "result": replay.run_case({**case, "mutated": []}, lambda path: naive).result}
               for n, case in enumerate(recheck.child_cases(cases))]
    claims = assess.read_frames(answers)
    return assess._recheck(DPO, Calibration(cases={DPO.slug: cases}), claims, config.GradeConfig())  # noqa: SLF001


def test_a_difference_on_a_numerics_probes_call_is_numerics_evidence_not_a_failed_recheck() -> None:
    ordinary, extreme = _dpo_case(0.3, probe=False), _dpo_case(-1000.0, probe=True)
    check = _recheck_of([ordinary, extreme])
    assert check.status == "passed" and check.problems == []
    assert check.numerics and "infinities differ" in check.numerics[0]
    unmarked = _recheck_of([ordinary, {**extreme, "probe": False}])  # the same call, were it a correctness case
    assert unmarked.status == "failed" and unmarked.numerics == []
    assert "probe" not in recheck.child_cases([extreme])[0], "the job cannot tell a probe's case from another"


AUTOGRAD = catalog.get("nn/autograd")


def _value_case(method: str) -> dict:
    """A script case of autograd's ``Value``: built from a float, one method called; its answer is a Value."""
    case = {"item": AUTOGRAD.slug, "kind": "script", "module": "nn/autograd", "function": "Value", "probe": False,
            "init": [values.encode((0.7,)), values.encode({})], "state": None, "training": True,
            "steps": [{"method": method, "args": values.encode(()), "kwargs": values.encode({})}]}
    expected = replay.run_case(case, replay.import_module, report_all=True)
    return {**case, "expected": expected.result, "mutated": {}}


def _wrong_autograd() -> ModuleType:
    from canon_refs.nn import autograd

    class Value(autograd.Value):
        def exp(self) -> autograd.Value:  # wrong: always 0
            return Value(0.0)

    module = ModuleType("wrong_autograd")
    module.Value = Value  # type: ignore[attr-defined]
    return module


def test_an_answer_compared_by_its_type_only_verifies_nothing() -> None:
    """A ``Value`` is not data the codec carries: it is compared by its type's name, so any Value passes.
    Such a case is no evidence: the item is unverified (the teacher's policy), never verified by it."""
    from pytest_mlcanon.grade.verifier import Calibration

    case = _value_case("exp")
    assert compare.evidence(case) == "a Value" and compare.evidence(_dpo_case(0.3, probe=False)) == ""
    wrong = _wrong_autograd()
    answers = [{"kind": "recheck", "seq": 0, "index": 0,
                "result": replay.run_case({**recheck.child_cases([case])[0]}, lambda path: wrong).result}]
    check = assess._recheck(AUTOGRAD, Calibration(cases={AUTOGRAD.slug: [case]}), assess.read_frames(answers),  # noqa: SLF001
                            config.GradeConfig())
    assert check.status == "unverified" and check.policy == "review", check
    recorder = recheck.Recorder((AUTOGRAD,))
    recorder.publics[AUTOGRAD.slug] = ["Value.exp"]
    recorder._called.add((AUTOGRAD.slug, "Value.exp"))  # noqa: SLF001
    assert recorder.coverage({AUTOGRAD.slug: [case]})[AUTOGRAD.slug] == {
        "Value.exp": "unverified: its answers are a Value, which the re-check cannot compare"}


def test_an_answer_no_draw_of_fresh_inputs_changes_verifies_nothing() -> None:
    """Masks from integer sizes keep their inputs (the re-check never perturbs an integer or a boolean), so
    the public calls' answers, learned by heart, pass every such case (a table of them earned the whole
    masks item, "19 calls agree with the reference on fresh inputs"): the verifier draws a case's fresh
    inputs twice, and a case whose answers are the same both times is no evidence, as a hollow one."""
    from canon_refs.posttrain import dpo
    from canon_refs.transformer import masks
    from pytest_mlcanon.grade.verifier import Calibration

    item = catalog.get("transformer/masks")
    recorder = recheck.Recorder((item, DPO))
    allow = torch.tensor([[False, True, True], [True, True, True]])  # no integer to stir (``stir_sizes``)
    recorder._keep_call(item.slug, "transformer/masks", "positions_from_mask", masks.positions_from_mask,  # noqa: SLF001
                        (allow,), {})
    recorder._keep_call(item.slug, "transformer/masks", "mask_to_bias", masks.mask_to_bias, (allow,), {})  # noqa: SLF001
    recorder._keep_call(DPO.slug, "posttrain/dpo", "dpo_loss", dpo.dpo_loss,  # noqa: SLF001
                        (torch.tensor([-12.0]), torch.tensor([-11.5]), torch.tensor([-13.0]), torch.tensor([-10.8])), {})
    cases = recorder.cases(20240607)
    assert [c["fixed"] for c in cases[item.slug]] == [True, True] and [c["fixed"] for c in cases[DPO.slug]] == [False]
    assert all("fixed" not in c for c in recheck.child_cases(cases[item.slug]))
    assert compare.proves_nothing(cases[item.slug][0]) == compare.FIXED and not compare.proves_nothing(cases[DPO.slug][0])
    learned = [{"kind": "recheck", "seq": n, "index": n, "result": case["expected"]}
               for n, case in enumerate(cases[item.slug])]  # the answers of the public calls, by heart
    check = assess._recheck(item, Calibration(cases=cases), assess.read_frames(learned), config.GradeConfig())  # noqa: SLF001
    assert check.status == "unverified" and check.detail == compare.FIXED, check
    recorder.publics[item.slug] = ["mask_to_bias"]
    recorder._called.add((item.slug, "mask_to_bias"))  # noqa: SLF001
    assert recorder.coverage(cases)[item.slug] == {"mask_to_bias": f"unverified: {compare.FIXED}"}


def test_a_model_the_call_leaves_as_it_came_is_no_answer_to_tell_draws_apart() -> None:
    """A model argument is always sent back, but one the call leaves unchanged is the job's own input echoed:
    a count of trainable parameters is the same on every draw (a constant learned by heart), a soft update
    that moves the target is not."""
    from canon_refs.finetune import lora
    from canon_refs.rl import dqn

    count, soft = catalog.get("finetune/lora"), catalog.get("rl/dqn")
    recorder = recheck.Recorder((count, soft))
    recorder._keep_call(count.slug, "finetune/lora", "count_trainable_parameters",  # noqa: SLF001
                        lora.count_trainable_parameters, (torch.nn.Linear(3, 2),), {})
    recorder._keep_call(soft.slug, "rl/dqn", "soft_update", dqn.soft_update,  # noqa: SLF001
                        (torch.nn.Linear(3, 2), torch.nn.Linear(3, 2), 0.25), {})
    cases = recorder.cases(20240607)
    assert [c["fixed"] for c in cases[count.slug]] == [True] and [c["fixed"] for c in cases[soft.slug]] == [False]
    assert all(recheck.ANSWER not in c for found in cases.values() for c in found)


def test_a_hyperparameter_of_another_size_is_a_case_of_its_own_after_the_kinds() -> None:
    """``soft_update(tau=0.5)`` after ``tau=0.25`` was the same kind and never re-checked, so code honest at
    a quarter and wrong at a half needed only its test's outcome forged. Scalars of another sign or power
    of two are a second tier: cases after every kind of the function, as the item's cap allows."""
    from canon_refs.rl import dqn

    item = catalog.get("rl/dqn")
    recorder = recheck.Recorder((item,))
    for tau in (0.25, 0.3, 0.5, 0.5):
        recorder._keep_call(item.slug, "rl/dqn", "soft_update", dqn.soft_update,  # noqa: SLF001
                            (torch.nn.Linear(3, 2), torch.nn.Linear(3, 2), tau), {})
    assert [c.args[2] for c in recorder.calls] == [0.25] and [c.args[2] for c in recorder.later] == [0.5]
    assert recheck.kind((0.25,)) == recheck.kind((0.5,)) and recheck.kind((0.25,), sizes=True) != recheck.kind(
        (0.5,), sizes=True) and recheck.kind((0.25,), sizes=True) == recheck.kind((0.3,), sizes=True)
    cases = recorder.cases(20240607)[item.slug]
    assert len(cases) == 2 and 0.45 < values.decode(cases[1]["steps"][-1]["args"]["items"][2]) < 0.55, cases


def test_a_numerics_probes_call_is_a_kind_of_its_own() -> None:
    from canon_refs.posttrain import dpo

    recorder = recheck.Recorder((DPO,))
    args = (torch.tensor([0.3]), torch.zeros(1), torch.zeros(1), torch.zeros(1))
    for probe in (False, True, True):
        recorder._probe = probe  # noqa: SLF001
        recorder._keep_call(DPO.slug, "posttrain/dpo", "dpo_loss", dpo.dpo_loss, args, {})  # noqa: SLF001
    assert [call.probe for call in recorder.calls] == [False, True]
