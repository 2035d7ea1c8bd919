"""CoordinateRangeCheck on synthetic but realistic batches of molecules and crystals.

Fractional coordinates ([0, 1), centred in [-0.5, 0.5), shifted, or unwrapped with a few atoms
just outside) are flagged; Cartesian positions (Å) of small organic molecules and of crystal
cells are not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learnscope.health import CoordinateRangeCheck

TETRAHEDRAL = math.radians(109.5)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def bond_direction(rng: np.random.Generator, previous: np.ndarray | None) -> np.ndarray:
    """A unit vector at about the tetrahedral angle to ``previous`` (any direction without)."""
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    if previous is None:
        return direction
    axis = -previous / np.linalg.norm(previous)
    side = direction - axis * (direction @ axis)
    side /= np.linalg.norm(side)
    angle = TETRAHEDRAL + rng.normal(scale=0.05)
    return math.cos(math.pi - angle) * -axis + math.sin(math.pi - angle) * side


def molecule(rng: np.random.Generator, heavy: int) -> np.ndarray:
    """A small organic molecule: a tree of ``heavy`` atoms (bonds 1.2-1.5 Å) with hydrogens
    (1.0-1.1 Å) filling each atom up to four bonds, no two atoms closer than 1.0 Å; randomly
    rotated, centred on its centroid as data sets usually store them."""
    atoms = [np.zeros(3)]
    bonds: list[list[np.ndarray]] = [[]]
    targets = [(i, 1.2, 1.5) for i in range(heavy - 1)] + [(-1, 1.0, 1.1)] * (2 * heavy + 2)
    for parent, low, high in targets:
        for _ in range(50):
            anchor = parent if parent >= 0 else int(rng.integers(0, heavy))
            if anchor >= len(atoms) or len(bonds[anchor]) >= 4:
                break
            previous = bonds[anchor][-1] if bonds[anchor] else None
            position = atoms[anchor] + rng.uniform(low, high) * bond_direction(rng, previous)
            if min(np.linalg.norm(position - a) for a in atoms) >= 1.0:
                bonds[anchor].append(position - atoms[anchor])
                atoms.append(position)
                bonds.append([atoms[anchor] - position])
                break
    pos = np.array(atoms)
    return (pos - pos.mean(axis=0)) @ random_rotation(rng).T


def tiny_molecules(rng: np.random.Generator) -> list[np.ndarray]:
    """Water, ammonia and methane, the smallest molecules of organic data sets."""
    water = np.array([[0, 0, 0], [0.958, 0, 0], [-0.240, 0.927, 0]])
    h = 1.09 / math.sqrt(3)
    methane = np.array([[0, 0, 0], [h, h, h], [h, -h, -h], [-h, h, -h], [-h, -h, h]])
    ammonia = np.array([[0, 0, 0.38], [0.94, 0, 0], [-0.47, 0.814, 0], [-0.47, -0.814, 0]])
    return [(m - m.mean(axis=0)) @ random_rotation(rng).T for m in (water, ammonia, methane)]


def crystal(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A cell with edges of 3-10 Å and angles of 60-120 degrees, 1-8 atoms at least 1.5 Å
    apart: (fractional coordinates in [0, 1), lattice rows)."""
    a, b, c = rng.uniform(3, 10, size=3)
    alpha, beta, gamma = np.radians(rng.uniform(60, 120, size=3))
    cx = math.cos(beta)
    cy = (math.cos(alpha) - math.cos(beta) * math.cos(gamma)) / math.sin(gamma)
    cz = math.sqrt(max(1 - cx**2 - cy**2, 0.05))
    lattice = np.array(
        [[a, 0, 0], [b * math.cos(gamma), b * math.sin(gamma), 0], [c * cx, c * cy, c * cz]]
    )
    frac = [np.zeros(3) if rng.random() < 0.5 else rng.random(3)]
    for _ in range(int(rng.integers(0, 8)) * 20):
        if len(frac) == 8:
            break
        candidate = rng.random(3)
        shifts = np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1])).reshape(3, -1).T
        near = min(
            np.linalg.norm(((candidate - f)[None] + shifts) @ lattice, axis=1).min() for f in frac
        )
        if near >= 1.5:
            frac.append(candidate)
    return np.array(frac), lattice


def batch(parts: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """A PyTorch Geometric style batch: the structures' positions concatenated."""
    return {"pos": torch.tensor(np.concatenate(parts), dtype=torch.float32)}


def molecule_batches(seed: int, count: int) -> list[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        size = int(rng.integers(2, 33))
        out.append(batch([molecule(rng, int(rng.integers(1, 10))) for _ in range(size)]))
    return out


def tiny_molecule_batches(seed: int, count: int) -> list[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        size = int(rng.integers(2, 9))
        out.append(batch([tiny_molecules(rng)[int(rng.integers(0, 3))] for _ in range(size)]))
    return out


def crystal_batches(
    seed: int, count: int, kind: str, structures: tuple[int, int] = (2, 17)
) -> list[dict[str, torch.Tensor]]:
    """Batches of crystals as Cartesian positions or fractional coordinates of a given kind."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        parts = []
        cells = [crystal(rng) for _ in range(int(rng.integers(*structures)))]
        shift = rng.uniform(0.1, 0.9)
        for frac, lattice in cells:
            if kind == "cartesian":
                parts.append(frac @ lattice)
            elif kind == "unit":  # [0, 1)
                parts.append(frac)
            elif kind == "centred":  # [-0.5, 0.5)
                parts.append((frac + 0.5) % 1.0 - 0.5)
            elif kind == "shifted":  # [-shift, 1 - shift)
                parts.append((frac + shift) % 1.0 - shift)
            else:  # "unwrapped": a few atoms just outside [0, 1), as after a relaxation
                parts.append(frac.copy())
        if kind == "unwrapped":
            flat = np.concatenate(parts)
            outside = rng.choice(flat.size, size=min(3, flat.size), replace=False)
            flat.reshape(-1)[outside] = rng.choice([1.02, -0.03, 1.01, -0.02], size=len(outside))
            parts = [flat]
        out.append(batch(parts))
    return out


@pytest.mark.parametrize("kind", ["unit", "centred", "shifted", "unwrapped"])
def test_fractional_coordinates_at_any_offset_are_flagged(kind: str) -> None:
    check = CoordinateRangeCheck()
    batches = crystal_batches(1, 200, kind)
    messages = [check(b) for b in batches]
    assert all(m is not None and "fractional coordinates" in m for m in messages)
    low = min(float(b["pos"].min()) for b in batches)
    high = max(float(b["pos"].max()) for b in batches)
    if kind == "centred":
        assert low < -0.4 and high < 0.5
    if kind == "unwrapped":
        assert low <= -0.02 and high >= 1.01


def test_cartesian_molecules_and_crystals_are_not_flagged() -> None:
    check = CoordinateRangeCheck()
    for batches in (
        molecule_batches(2, 300),
        tiny_molecule_batches(3, 300),
        crystal_batches(4, 300, "cartesian"),
    ):
        assert [check(b) for b in batches] == [None] * len(batches)


def test_the_rule_in_numbers() -> None:
    check = CoordinateRangeCheck(max_width=1.1)
    edge = torch.tensor([[0.0, 0.5, 0.2], [1.09, 0.3, 0.0]])  # every coordinate within 1.1
    assert check({"pos": edge}) is not None
    assert check({"pos": edge + 7.0}) is not None  # at any offset
    assert check({"pos": torch.tensor([[0.0, 0.5, 0.2], [1.11, 0.3, 0.0]])}) is None
    wider = torch.tensor([[0.0, 1.4, 0.2], [0.3, 0.1, 0.5]])
    assert check({"pos": wider}) is None
    assert CoordinateRangeCheck(max_width=1.5)({"pos": wider}) is not None
    # One position, or every position the same: nothing to judge.
    assert check({"pos": torch.tensor([[0.2, 0.5, 0.9]])}) is None
    assert check({"pos": torch.full((5, 3), 0.25)}) is None
    message = check({"pos": torch.tensor([[-0.03, 0.5, 0.2], [1.02, 0.3, math.nan]])})
    assert message is not None
    assert message.startswith(
        "every coordinate in 'pos' lies within a range of 1.05 <= 1.1 over 2 positions (from "
        "-0.03 to 1.02): these look like fractional coordinates"
    )
    with pytest.raises(ValueError, match="max_width must be a positive number, got 0"):
        CoordinateRangeCheck(max_width=0)
