"""Canon #60, part 1: the synthetic task, boards of coloured shapes with questions answered by the scene graph.

A scene is a 4x4 board of 4x4-pixel cells (a 16x16 RGB image). Between two and nine cells hold a
shape: a red, green or blue square or circle of size 1, 2 or 3, exactly one of them of size 3 so that
"the largest shape" is unique. Four question families are asked about it:

* ``how many <colour> <kind>s``, ``how many <colour> shapes``, ``how many <kind>s``: count questions,
  answered by :func:`count_shapes` and therefore inside the tool's domain (``tool_query`` is the
  ``(colour, kind)`` filter, ``None`` standing for "any");
* ``what colour is the largest shape``: outside the tool's domain (``tool_query is None``).

The subtle point is where the labels come from: every answer is computed from the scene graph that
also drew the image, so the reward of an answer is verifiable exactly, with no annotator and no judge
model for a policy to please. The image is a rendering of the scene, never the other way round.

Shapes: ``(3, H, W)`` an image with ``H = W = IMAGE_SIZE = 16``; a cell is ``CELL x CELL = 4 x 4``
pixels, which is also the patch size of the vision encoder, so one patch sees one cell.

Trade-off: the vocabulary is 28 whole words (special tokens, question words, three colours, ten
digits) rather than a BPE, because every answer is then exactly one token, greedy exact match is one
argmax, and a GRPO group of G answers is G draws from a single categorical. Circles are drawn as
diamonds of 1, 5 and 11 pixels and squares as blocks of 4, 9 and 16, because on a 4x4 cell a round
disk of width 2 is the same 2x2 block as a square: every (kind, size) must give a distinct pattern.

What to test: ``make_dataset`` is deterministic per seed; images are ``(3, 16, 16)`` in [0, 1]; every
answer is a vocabulary token; :func:`count_shapes` agrees with a direct count over the scene; count
questions carry a ``tool_query`` that reproduces the answer; text round-trips through
:func:`encode_text` / :func:`decode_text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

IMAGE_SIZE: int = 16
CELL: int = 4
GRID: int = IMAGE_SIZE // CELL
MAX_SHAPES: int = 9
COLOURS: tuple[str, ...] = ("red", "green", "blue")
KINDS: tuple[str, ...] = ("square", "circle")
PLURALS: dict[str, str] = {"square": "squares", "circle": "circles"}
DIGITS: tuple[str, ...] = tuple(str(i) for i in range(MAX_SHAPES + 1))

ITOS: list[str] = [
    "<pad>", "<eos>", ":", "observation",
    "how", "many", "what", "colour", "is", "the", "largest", "shape", "shapes", "squares", "circles",
    *COLOURS, *DIGITS,
]
STOI: dict[str, int] = {token: i for i, token in enumerate(ITOS)}
VOCAB_SIZE: int = len(ITOS)
PAD_ID: int = 0
EOS_ID: int = STOI["<eos>"]
MAX_TEXT_LEN: int = 12
"""Longest sequence the model is built for: a count question with an observation
(``how many red squares observation : 3 :``, 8 tokens) plus the answer and EOS is 10."""

LARGEST_QUESTION = "what colour is the largest shape"


@dataclass(frozen=True)
class Shape:
    """One shape on the board: its cell ``(row, col)`` in ``0..3``, colour, kind and size in ``1..3``."""

    row: int
    col: int
    colour: str
    kind: str
    size: int


@dataclass(frozen=True)
class Scene:
    """The scene graph: between two and nine shapes in distinct cells, with a unique largest one."""

    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Example:
    """One task instance.

    ``image`` is the ``(3, 16, 16)`` float32 rendering of ``scene`` (left out of equality, because it is
    a function of the scene); ``answer`` is one vocabulary token; ``tool_query`` is the
    ``(colour, kind)`` filter of a count question and ``None`` for the largest-shape question.
    """

    image: Tensor = field(compare=False, repr=False)
    question: str
    answer: str
    scene: Scene
    tool_query: tuple[str | None, str | None] | None


def _pattern(kind: str, size: int) -> Tensor:
    """The ``(CELL, CELL)`` 0/1 pixel mask of a shape inside its cell.

    Squares are blocks of side ``size + 1`` (4, 9, 16 pixels); circles are diamonds
    ``|i - 1| + |j - 1| <= size - 1`` (1, 5, 11 pixels). All six patterns differ.
    """
    idx = torch.arange(CELL)                                             # (CELL,)
    rows, cols = torch.meshgrid(idx, idx, indexing="ij")                 # (CELL, CELL), (CELL, CELL)
    if kind == "square":
        side = size + 1
        offset = (CELL - side) // 2
        inside = (rows >= offset) & (rows < offset + side) & (cols >= offset) & (cols < offset + side)
    else:
        inside = (rows - 1).abs() + (cols - 1).abs() <= size - 1
    return inside.float()                                                # (CELL, CELL)


_PATTERNS: dict[tuple[str, int], Tensor] = {(k, s): _pattern(k, s) for k in KINDS for s in (1, 2, 3)}


def render(scene: Scene) -> Tensor:
    """Draw a scene: ``(3, 16, 16)`` float32 in [0, 1], colour ``c`` lit in channel ``COLOURS.index(c)``.

    Raises:
        ValueError: a shape outside the board, with an unknown colour or kind, or a size not in 1..3.
    """
    image = torch.zeros(3, IMAGE_SIZE, IMAGE_SIZE)                       # (3, 16, 16)
    for shape in scene.shapes:
        _check_shape(shape)
        r0, c0 = shape.row * CELL, shape.col * CELL
        channel = COLOURS.index(shape.colour)
        image[channel, r0:r0 + CELL, c0:c0 + CELL] = _PATTERNS[(shape.kind, shape.size)]
    return image                                                         # (3, 16, 16)


def _check_shape(shape: Shape) -> None:
    if not (0 <= shape.row < GRID and 0 <= shape.col < GRID):
        raise ValueError(f"scene has a shape outside the {GRID}x{GRID} board: {shape}")
    if shape.colour not in COLOURS or shape.kind not in KINDS or shape.size not in (1, 2, 3):
        raise ValueError(f"scene has an unknown colour, kind or size: {shape}")


def count_shapes(scene: Scene, colour: str | None = None, kind: str | None = None) -> int:
    """Number of shapes in ``scene`` matching ``colour`` and ``kind`` (``None`` matches any).

    Raises:
        ValueError: ``colour`` not in ``COLOURS`` or ``kind`` not in ``KINDS``.
    """
    if colour is not None and colour not in COLOURS:
        raise ValueError(f"colour must be one of {COLOURS} or None, got {colour!r}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None, got {kind!r}")
    return sum(1 for s in scene.shapes if (colour is None or s.colour == colour) and (kind is None or s.kind == kind))


def encode_text(text: str) -> list[int]:
    """Whitespace-split ``text`` into token ids (one word, one token).

    Raises:
        ValueError: ``text`` holds a word outside the vocabulary.
    """
    ids = []
    for word in text.split():
        if word not in STOI:
            raise ValueError(f"text holds {word!r}, which is not in the {VOCAB_SIZE}-token vocabulary")
        ids.append(STOI[word])
    return ids


def decode_text(ids: Sequence[int]) -> str:
    """Join the words of ``ids`` with spaces, skipping ``PAD_ID`` (accepts a list or a 1-D tensor).

    Raises:
        ValueError: an id outside ``0..VOCAB_SIZE-1``.
    """
    words = []
    for raw in ids:
        i = int(raw)
        if not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"ids holds {i}, outside the vocabulary 0..{VOCAB_SIZE - 1}")
        if i != PAD_ID:
            words.append(ITOS[i])
    return " ".join(words)


def _random_scene(rng: np.random.Generator) -> Scene:
    n = int(rng.integers(2, MAX_SHAPES + 1))
    cells = rng.choice(GRID * GRID, size=n, replace=False)               # (n,)
    colours = rng.integers(0, len(COLOURS), size=n)                      # (n,)
    kinds = rng.integers(0, len(KINDS), size=n)                          # (n,)
    sizes = rng.integers(1, 3, size=n)                                   # (n,)
    sizes[int(rng.integers(n))] = 3
    shapes = tuple(
        Shape(int(c) // GRID, int(c) % GRID, COLOURS[int(col)], KINDS[int(k)], int(s))
        for c, col, k, s in zip(cells, colours, kinds, sizes)
    )
    return Scene(shapes)


def _random_question(scene: Scene, rng: np.random.Generator) -> tuple[str, str, tuple[str | None, str | None] | None]:
    family = int(rng.integers(4))
    colour = COLOURS[int(rng.integers(len(COLOURS)))]
    kind = KINDS[int(rng.integers(len(KINDS)))]
    if family == 3:
        largest = max(scene.shapes, key=lambda s: s.size)
        return LARGEST_QUESTION, largest.colour, None
    query = ((colour, kind), (colour, None), (None, kind))[family]
    words = {0: f"{colour} {PLURALS[kind]}", 1: f"{colour} shapes", 2: PLURALS[kind]}[family]
    return f"how many {words}", str(count_shapes(scene, *query)), query


def make_dataset(n: int, seed: int) -> list[Example]:
    """``n`` examples drawn with ``np.random.default_rng(seed)``; the same seed gives the same list.

    The four question families are equally likely.

    Raises:
        ValueError: ``n < 1``.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(int(n)):
        scene = _random_scene(rng)
        question, answer, query = _random_question(scene, rng)
        examples.append(Example(render(scene), question, answer, scene, query))
    return examples
