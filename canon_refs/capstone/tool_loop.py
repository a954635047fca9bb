"""Canon #60, part 9: the agent loop, propose, call ``count_shapes`` when unsure, answer, and log it all.

An agent is a policy that may act before it answers. Here there are two actions and at most two
steps per episode:

* ``call_tool``: run ``count_shapes(colour, kind)`` on the scene and put the result back into the
  prompt as ``observation : <n>`` (the format SFT taught with ``tool_fraction`` of its rows);
* ``answer``: emit one answer token and stop.

The controller is deterministic and readable: the model proposes an answer, and the loop calls the
tool only when the top-token probability is below ``confidence_threshold`` *and* the question lies
in the tool's domain (``example.tool_query is not None``). Every episode becomes a
:class:`Trajectory`, what production systems log and what RL on tool use replays.

The subtle point is the tool's domain. ``count_shapes`` cannot answer "what colour is the largest
shape", so those questions are never gated, however unsure the model is; calling the tool there
would add a step and an observation the model was never trained to read, for no information.

Shapes: ``B`` examples in the batch, ``B_g`` of them gated to the tool, ``V`` vocabulary; the first
pass yields ``(B, V)`` answer-slot logits, the second ``(B_g, V)``.

Trade-off: the loop is batched, one forward pass for all proposals and one for all gated examples,
rather than one episode at a time, because at this size a forward pass costs the same for 1 row as
for 50 (the overhead is per call), so per-example episodes would be about ``B`` times slower. The
threshold trades tool calls (cost) for accuracy: 0 never calls, anything above 1 calls on every
count question.

What to test: threshold 0 makes no call; threshold 1.01 calls on exactly the examples with a
``tool_query``; never more than two forward passes; ``model.training`` is restored; every trajectory
is well formed; :meth:`Trajectory.is_well_formed` rejects empty, misnumbered, unknown-action,
two-answer and answer-not-last trajectories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from canon_refs.capstone import synthetic_task as task
from canon_refs.capstone.multimodal_model import TinyVLM
from canon_refs.capstone.reward_stage import verifier_reward
from canon_refs.capstone.sft_stage import next_token_logits

TOOL_NAME = "count_shapes"
ACTIONS = ("call_tool", "answer")


def count_shapes_tool(scene: task.Scene, colour: str | None = None, kind: str | None = None) -> str:
    """The agent's one tool: the count of matching shapes, as the string token that goes into the prompt.

    Raises:
        ValueError: unknown ``colour`` or ``kind`` (from ``count_shapes``).
    """
    return str(task.count_shapes(scene, colour, kind))


@dataclass
class ToolStep:
    """One turn: the context entering it, the model's thought, the action, its input and its result."""

    index: int
    observation: str
    thought: str
    action: str
    action_input: str
    result: str


@dataclass
class Trajectory:
    """One episode: steps, final answer, the verifier's reward, and whether the tool was used."""

    question: str
    gold_answer: str
    steps: list[ToolStep] = field(default_factory=list)
    final_answer: str = ""
    reward: float = 0.0
    used_tool: bool = False

    def is_well_formed(self) -> bool:
        """True when there are steps, indexed ``0 .. n-1``, every action is known, and exactly the
        last step answers."""
        if not self.steps:
            return False
        if [s.index for s in self.steps] != list(range(len(self.steps))):
            return False
        actions = [s.action for s in self.steps]
        if any(a not in ACTIONS for a in actions):
            return False
        return actions.count("answer") == 1 and actions[-1] == "answer"


@torch.no_grad()
def run_episodes(model: TinyVLM, examples: list[task.Example],
                 confidence_threshold: float = 0.9) -> list[Trajectory]:
    """Run one episode per example with at most two batched forward passes; restores ``model.training``.

    Pass 1 proposes an answer for every example. Examples with ``p(top) < confidence_threshold`` and
    a ``tool_query`` call the tool; pass 2 re-reads only those, with the observation in the prompt,
    and its argmax is their answer. Everyone else answers the proposal at step 0.

    Raises:
        ValueError: empty ``examples``; ``confidence_threshold`` not finite or negative.
    """
    if not examples:
        raise ValueError("examples must be a non-empty list")
    if not (math.isfinite(confidence_threshold) and confidence_threshold >= 0):
        raise ValueError(f"confidence_threshold must be finite and >= 0, got {confidence_threshold!r}")
    was_training = model.training
    model.eval()
    try:
        logits = next_token_logits(model, examples)                      # (B, V)
        confidence, proposal = torch.softmax(logits, dim=-1).max(dim=-1)  # (B,), (B,)
        trajectories: list[Trajectory] = []
        gated: list[int] = []
        results: list[str] = []
        for i, ex in enumerate(examples):
            guess, p = task.ITOS[int(proposal[i])], float(confidence[i])
            traj = Trajectory(question=ex.question, gold_answer=ex.answer)
            seen = f"image + question: {ex.question}"
            if ex.tool_query is not None and p < confidence_threshold:
                colour, kind = ex.tool_query
                result = count_shapes_tool(ex.scene, colour, kind)
                traj.steps.append(ToolStep(0, seen, f"best guess {guess!r} at p={p:.2f} is below "
                                           f"{confidence_threshold:g} and the tool covers this question",
                                           "call_tool", f"{TOOL_NAME}(colour={colour}, kind={kind})", result))
                traj.used_tool = True
                gated.append(i)
                results.append(result)
            else:
                why = "confident enough" if p >= confidence_threshold else "the tool cannot answer this question"
                traj.steps.append(ToolStep(0, seen, f"best guess {guess!r} at p={p:.2f}: {why}", "answer", guess, ""))
                traj.final_answer = guess
            trajectories.append(traj)
        if gated:
            second = next_token_logits(model, [examples[i] for i in gated], results)  # (B_g, V)
            for slot, i in enumerate(second.argmax(dim=-1).tolist()):
                answer = task.ITOS[i]
                traj = trajectories[gated[slot]]
                traj.steps.append(ToolStep(1, f"observation : {results[slot]}",
                                           "re-read the question with the tool result in context",
                                           "answer", answer, ""))
                traj.final_answer = answer
        for traj, ex in zip(trajectories, examples):
            traj.reward = verifier_reward(traj.final_answer, ex)
    finally:
        model.train(was_training)
    return trajectories


def run_episode(model: TinyVLM, example: task.Example, confidence_threshold: float = 0.9) -> Trajectory:
    """:func:`run_episodes` on a single example."""
    return run_episodes(model, [example], confidence_threshold)[0]


def trajectory_report(trajectories: list[Trajectory]) -> dict[str, float]:
    """``accuracy`` (mean reward), ``tool_call_rate``, ``mean_steps`` and ``well_formed_rate``.

    Raises:
        ValueError: empty ``trajectories``.
    """
    if not trajectories:
        raise ValueError("trajectories must be a non-empty list")
    n = len(trajectories)
    return {
        "accuracy": sum(t.reward for t in trajectories) / n,
        "tool_call_rate": sum(t.used_tool for t in trajectories) / n,
        "mean_steps": sum(len(t.steps) for t in trajectories) / n,
        "well_formed_rate": sum(t.is_well_formed() for t in trajectories) / n,
    }


def render_trajectory(traj: Trajectory) -> str:
    """A readable transcript of one episode (question, each step's context, thought, action, result)."""
    lines = [f"Q: {traj.question}   (gold {traj.gold_answer})"]
    for step in traj.steps:
        lines.append(f"  [{step.index}] context  {step.observation}")
        lines.append(f"      thought  {step.thought}")
        lines.append(f"      action   {step.action}: {step.action_input}")
        if step.result:
            lines.append(f"      result   {step.result}")
    lines.append(f"  final answer {traj.final_answer!r}   reward {traj.reward:g}")
    return "\n".join(lines)
