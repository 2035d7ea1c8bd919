"""A SchNetPack-like model through every callback: a wrapper child, a dict output, input checks.

Like SchNetPack's ``AtomisticTask``, the LightningModule holds one child, ``model``, that holds
every parameter and returns ``{"energy": [molecules], "forces": [atoms, 3]}``; its
``representation`` returns the inputs with per-atom ``scalar_representation`` added. Real fits:
one rule in both callbacks for a module that gives no tensor, a suggestion that names the
candidates, parameter groups below the wrapper in both callbacks (also when parameters start
training later), and a run record that keeps an input check's settings.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader

from learnscope.health import CoordinateRangeCheck
from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from learnscope.run_directory.file_names import RECORD_FILE
from learnscope.run_directory.record import RecordReader
from tests.kit.models import Collect, trainer

FEATURES, ATOMS, MOLECULES = 8, 5, 4  # atoms per molecule, molecules per batch


def molecules(count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """``count`` batches of 4 molecules of 5 atoms: ``z``, ``pos``, ``idx_m``, targets."""
    g = torch.Generator().manual_seed(seed)
    atoms = ATOMS * MOLECULES
    return [
        {
            "z": torch.randint(1, 10, (atoms,), generator=g),
            "pos": 3 * torch.randn(atoms, 3, generator=g),
            "idx_m": torch.arange(MOLECULES).repeat_interleave(ATOMS),
            "energy": torch.randn(MOLECULES, generator=g),
            "forces": torch.randn(atoms, 3, generator=g),
        }
        for _ in range(count)
    ]


def molecule_loaders() -> tuple[DataLoader, DataLoader]:
    train, val = molecules(6, seed=0), molecules(2, seed=1)
    return DataLoader(train, batch_size=None), DataLoader(val, batch_size=None)


class Representation(nn.Module):
    """Per-atom features, returned in the inputs (as SchNetPack's representations do)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, FEATURES)
        self.interaction = nn.Sequential(
            nn.Linear(FEATURES + 3, FEATURES), nn.Tanh(), nn.Linear(FEATURES, FEATURES)
        )

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = self.embedding(inputs["z"])
        h = h + self.interaction(torch.cat([h, inputs["pos"]], dim=1))
        return {**inputs, "scalar_representation": h}


class Potential(nn.Module):
    """``representation``, then ``output_modules``: a dict of ``energy`` and ``forces``."""

    def __init__(self) -> None:
        super().__init__()
        self.representation = Representation()
        self.output_modules = nn.ModuleList([nn.Linear(FEATURES, 1), nn.Linear(FEATURES, 3)])

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = self.representation(inputs)["scalar_representation"]
        atomwise = self.output_modules[0](h).squeeze(-1)
        energy = torch.zeros(MOLECULES).index_add(0, inputs["idx_m"], atomwise)
        return {"energy": energy, "forces": self.output_modules[1](h)}


class AtomisticTask(pl.LightningModule):
    """Every parameter in ``model``; the loss has none."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Potential()
        self.loss_fn = nn.MSELoss()

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.model(batch)
        return self.loss_fn(out["energy"], batch["energy"]) + self.loss_fn(
            out["forces"], batch["forces"]
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), batch_size=MOLECULES)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.02)


def scalar_representation(out: dict[str, torch.Tensor]) -> torch.Tensor:
    return out["scalar_representation"]


# -- a module that gives a dict: one rule in both callbacks ---------------------------------------


def first_capture_error(tmp_path: Path, callback: Any) -> str:
    fit = trainer(tmp_path, False, [callback], max_steps=3, max_epochs=-1)
    with pytest.raises(TypeError) as raised:
        fit.fit(AtomisticTask(), *molecule_loaders())
    assert fit.global_step == 0  # it failed before the first optimizer step, not switched off
    return str(raised.value)


def test_a_module_that_gives_a_dict_fails_both_callbacks_with_one_message(
    lenient: None, tmp_path: Path
) -> None:
    helper = first_capture_error(
        tmp_path / "h", TrainingHelper(check_every_n_steps=2, embedding_module="model")
    )
    projector = first_capture_error(tmp_path / "p", EmbeddingProjector("model"))
    gave = (
        "module 'model' gave a dict with keys 'energy' (a tensor of shape (4,)), 'forces' (a "
        "tensor of shape (20, 3)), not a tensor. Pass select= a function that picks the "
        'embedding out of it, such as select=lambda out: out["forces"]; the embedding is a '
        "tensor [batch, dim], [nodes, dim] or [batch, tokens, dim]"
    )
    assert helper.startswith(f"TrainingHelper: {gave}")
    assert projector.startswith(f"EmbeddingProjector: {gave}")
    assert helper.removeprefix("TrainingHelper") == projector.removeprefix("EmbeddingProjector")


def test_a_select_that_gives_a_dict_is_named_in_both_callbacks(
    lenient: None, tmp_path: Path
) -> None:
    keep_all = {"select": lambda out: out}
    helper = TrainingHelper(embedding_module="model.representation", **keep_all)
    for callback in (helper, EmbeddingProjector("model.representation", **keep_all)):
        message = first_capture_error(tmp_path / type(callback).__name__, callback)
        assert "select gave a dict with keys 'z' (a tensor of shape (20,))" in message
        assert "'scalar_representation' (a tensor of shape (20, 8)), not a tensor" in message
        assert "from the output of module 'model.representation'" in message


def test_select_reads_the_per_atom_rows_and_training_is_unchanged(tmp_path: Path) -> None:
    def fit(callbacks: list[Any], logger: Any) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        task = AtomisticTask()
        trainer(tmp_path, logger, callbacks, max_epochs=1).fit(task, *molecule_loaders())
        return task.state_dict()

    sink = Collect()
    pick = {"select": scalar_representation}
    callbacks = [
        EmbeddingProjector("model.representation", **pick),
        TrainingHelper(check_every_n_steps=1, embedding_module="model.representation", **pick),
    ]
    watched = fit(callbacks, [sink])
    plain = fit([], False)
    assert all(torch.equal(watched[name], plain[name]) for name in plain)  # bit-identical
    ranks = [
        step
        for step, metrics in sink.metrics
        if "learnscope/health/collapse/model.representation/effective_rank" in metrics
    ]
    assert ranks == list(range(6))  # 20 atoms, 8 features: judged at every step


# -- the suggestion names the candidates, not a guess ---------------------------------------------


def test_the_missing_encoder_warning_names_the_modules_below_the_wrapper(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    fit = trainer(tmp_path, False, [TrainingHelper(check_every_n_steps=5)], max_epochs=1)
    fit.fit(AtomisticTask(), *molecule_loaders())
    (line,) = [r.getMessage() for r in learnscope_log.records if r.levelno >= logging.WARNING]
    assert "AtomisticTask has no sub-module 'encoder'" in line
    assert (
        "the modules with parameters are 'model.representation', 'model.output_modules', inside "
        "'model', which holds every parameter" in line
    )
    assert "a tensor [batch, dim], [nodes, dim] or [batch, tokens, dim]" in line
    assert "embedding_module=None" in line and "embedding_module='model'" not in line


# -- parameter groups below the wrapper, in both callbacks ----------------------------------------


def groups(sink: Collect, prefix: str, step: int | None = None) -> set[str]:
    """The groups of the scalars ``learnscope/<prefix>/<group>/...`` (at ``step``, if given)."""
    found = set()
    for at, metrics in sink.metrics:
        for name in metrics:
            if name.startswith(f"learnscope/{prefix}/") and (step is None or at == step):
                found.add(name.removeprefix(f"learnscope/{prefix}/").split("/")[0])
    return found - {"total"}


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (1, {"model.representation", "model.output_modules"}),
        (
            2,
            {
                "model.representation.embedding",
                "model.representation.interaction",
                "model.output_modules.0",
                "model.output_modules.1",
            },
        ),
    ],
)
def test_groups_are_taken_below_the_wrapper_in_both_callbacks(
    tmp_path: Path, depth: int, expected: set[str]
) -> None:
    sink = Collect()
    callbacks = [
        TrainingHelper(check_every_n_steps=1, embedding_module=None, group_depth=depth),
        ModelAutocorrelation(
            buffer_size=6, analyze_every_n_steps=6, lags=(1, 2), group_depth=depth
        ),
    ]
    trainer(tmp_path, [sink], callbacks, max_epochs=1).fit(AtomisticTask(), *molecule_loaders())
    assert groups(sink, "health/grad_norm") == expected
    assert groups(sink, "health/weight_norm") == expected
    assert groups(sink, "autocorrelation/params") == expected
    assert groups(sink, "autocorrelation/grads") == expected


class Unfreeze(pl.Callback):
    """Freezes ``model.representation`` before the fit; it trains from step ``at`` on."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        pl_module.model.representation.requires_grad_(False)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        if trainer.global_step == self.at:
            pl_module.model.representation.requires_grad_(True)


def test_groups_follow_the_parameters_that_train_in_both_callbacks(tmp_path: Path) -> None:
    sink = Collect()
    callbacks = [
        Unfreeze(at=4),  # before the learnscope callbacks, so they see the frozen model
        TrainingHelper(check_every_n_steps=1, embedding_module=None),
        ModelAutocorrelation(buffer_size=4, analyze_every_n_steps=2, lags=(1,)),
    ]
    fit = trainer(tmp_path, [sink], callbacks, max_epochs=2, limit_val_batches=0)
    fit.fit(AtomisticTask(), molecule_loaders()[0])
    # While only the output modules train, they are the module under which groups are taken.
    first = {"model.output_modules.0", "model.output_modules.1"}
    assert groups(sink, "health/grad_norm", step=0) == first
    assert groups(sink, "autocorrelation/params", step=4) == first  # its history of steps 0-3
    # Once the representation trains, both callbacks group below the wrapper.
    later = {"model.representation", "model.output_modules"}
    assert groups(sink, "health/grad_norm", step=11) == later
    assert groups(sink, "autocorrelation/params", step=12) == later


# -- the run record keeps every check's settings --------------------------------------------------


class PlainCheck:
    """An input check without a repr of its own."""

    def __call__(self, batch: Any) -> str | None:
        return None


def no_empty_batch(batch: Any) -> str | None:
    return "empty batch" if len(batch["z"]) == 0 else None


def test_the_run_record_keeps_every_input_checks_settings(tmp_path: Path) -> None:
    checks = [CoordinateRangeCheck(key="pos", max_width=0.5), PlainCheck(), no_empty_batch]
    helper = TrainingHelper(check_every_n_steps=2, embedding_module=None, input_checks=checks)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, tb, [helper], max_epochs=1).fit(AtomisticTask(), *molecule_loaders())
    entries = RecordReader(Path(tb.log_dir) / RECORD_FILE).read()
    (run,) = [entry for entry in entries if entry["kind"] == "run"]
    (settings,) = [c["settings"] for c in run["callbacks"] if c["name"] == "TrainingHelper"]
    assert settings["input_checks"] == [
        "CoordinateRangeCheck(key='pos', max_width=0.5)",
        f"{__name__}.PlainCheck",  # the class's dotted name, not a memory address
        f"{__name__}.no_empty_batch",
    ]
    assert " at 0x" not in str(run)
