"""Either Lightning package, no side effects on import, copies of callbacks, and fast_dev_run.

``learnscope.lightning_glue`` serves ``lightning.pytorch``, ``learnscope.lightning_glue.
pytorch_lightning`` serves ``pytorch_lightning``: the same callbacks, made once from one
definition each. The import tests run in a fresh interpreter, so that nothing else has imported a
Lightning package (or learnscope) before.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from learnscope.lightning_glue import EmbeddingProjector, ModelAutocorrelation, TrainingHelper
from tests.kit.models import TinyClassifier, loaders, trainer

pytestmark = pytest.mark.slow

# A tiny fit with Lightning's info lines silenced; prints what the parent asserts on.
FIT = """
import logging, sys, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Tiny({pl}.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.encoder(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
logging.getLogger({package!r}).setLevel(logging.ERROR)
callbacks = [ModelAutocorrelation(buffer_size=4, lags=(1,)), TrainingHelper(), EmbeddingProjector()]
fit = {pl}.Trainer(max_steps=2, logger=False, callbacks=callbacks, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
fit.fit(Tiny(), data)
print("steps", fit.global_step)
print("modules", sorted(m for m in ("lightning", "pytorch_lightning") if m in sys.modules))
print("rank zero logger", rank_zero.log.name)
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LEARNSCOPE_STRICT": "1", "PYTHONWARNINGS": "ignore"},
    )


NAMESPACES = {
    "lightning.pytorch": "learnscope.lightning_glue",
    "pytorch_lightning": "learnscope.lightning_glue.pytorch_lightning",
}


def _imports(package: str) -> str:
    return textwrap.dedent(f"""
        import lightning_utilities.core.rank_zero as rank_zero
        import {package} as pl
        before = rank_zero.log.name
        import learnscope.lightning_glue
        from {NAMESPACES[package]} import EmbeddingProjector, ModelAutocorrelation
        from {NAMESPACES[package]} import TrainingHelper
        import learnscope.lightning_glue.cli, learnscope.lightning_glue.session
        import learnscope.plugins, learnscope.plugins.pipeline.loggers
        assert rank_zero.log.name == before, (before, rank_zero.log.name)
        assert issubclass(ModelAutocorrelation, pl.Callback)  # as LightningCLI checks it
    """)


@pytest.mark.parametrize(
    ("package", "other"),
    [("lightning.pytorch", "pytorch_lightning"), ("pytorch_lightning", "lightning")],
)
def test_only_the_users_lightning_is_imported_and_its_logs_stay_put(
    package: str, other: str
) -> None:
    code = _imports(package) + FIT.format(pl="pl", package=package)
    done = _run(code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "steps 2" in lines
    assert f"modules {sorted({package.split('.')[0]})}" in lines, lines
    assert f"rank zero logger {package}.utilities.rank_zero" in lines, lines
    # setLevel(ERROR) on the package's logger silences its info lines.
    assert "GPU available" not in done.stderr, done.stderr
    assert "Trainer(" not in done.stderr, done.stderr


def test_no_lightning_imported_until_a_namespace_is_and_then_its_own_only() -> None:
    code = textwrap.dedent("""
        import sys
        def lightning():
            return sorted(m for m in ("lightning", "pytorch_lightning") if m in sys.modules)
        import learnscope, learnscope.lightning_glue, learnscope.lightning_glue.base
        import learnscope.lightning_glue.model_autocorrelation as definitions
        import learnscope.lightning_glue.session, learnscope.lightning_glue.cli
        import learnscope.plugins.pipeline.loggers, learnscope.plugins.views.view_page
        definition = definitions.ModelAutocorrelation()  # a definition is no callback yet
        assert lightning() == [], lightning()
        from learnscope.lightning_glue.pytorch_lightning import ModelAutocorrelation
        assert lightning() == ["pytorch_lightning"], lightning()
        import pytorch_lightning as pl
        assert isinstance(ModelAutocorrelation(), pl.Callback)
        from learnscope.lightning_glue import ModelAutocorrelation
        assert lightning() == ["lightning", "pytorch_lightning"], lightning()
    """)
    done = _run(code)
    assert done.returncode == 0, done.stderr


def test_each_namespace_derives_from_its_package_only_whatever_was_imported_first() -> None:
    """No class changes its bases: both packages imported, each callback is one package's."""
    import lightning.pytorch as lp
    import pytorch_lightning as pl

    from learnscope.lightning_glue import (
        embedding_projector,
        model_autocorrelation,
        training_helper,
    )
    from learnscope.lightning_glue import pytorch_lightning as for_pl

    definitions = (
        embedding_projector.EmbeddingProjector,
        model_autocorrelation.ModelAutocorrelation,
        training_helper.TrainingHelper,
    )
    ours = (EmbeddingProjector, ModelAutocorrelation, TrainingHelper)
    theirs = (for_pl.EmbeddingProjector, for_pl.ModelAutocorrelation, for_pl.TrainingHelper)
    for definition, mine, other in zip(definitions, ours, theirs, strict=True):
        assert mine.__bases__ == (definition, lp.Callback)
        assert other.__bases__ == (definition, pl.Callback)
        assert mine.__qualname__ == other.__qualname__ == definition.__qualname__
        assert mine.__module__ == "learnscope.lightning_glue"
        assert other.__module__ == "learnscope.lightning_glue.pytorch_lightning"
        assert isinstance(mine(), lp.Callback) and not isinstance(mine(), pl.Callback)
        assert isinstance(other(), pl.Callback) and not isinstance(other(), lp.Callback)
        assert not issubclass(definition, (lp.Callback, pl.Callback))


@pytest.mark.parametrize(
    ("missing", "code", "names"),
    [
        (
            "pytorch_lightning",
            "import learnscope.lightning_glue.pytorch_lightning",
            "with lightning.pytorch, use: from learnscope.lightning_glue import EmbeddingProjector",
        ),
        (
            "lightning",
            "from learnscope.lightning_glue import TrainingHelper",
            "with pytorch_lightning, use: from learnscope.lightning_glue.pytorch_lightning import",
        ),
    ],
)
def test_with_one_package_the_other_namespace_names_the_one_to_use(
    missing: str, code: str, names: str
) -> None:
    hide = textwrap.dedent(f"""
        import sys
        class Uninstalled:  # as if {missing!r} were not installed
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name.partition(".")[0] == {missing!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Uninstalled)
        try:
            {code}
        except ModuleNotFoundError as error:
            print("ERROR", error)
    """)
    done = _run(hide)
    assert done.returncode == 0, done.stderr
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert f"and {missing}" in said and "cannot be imported" in said and names in said, said


def test_a_definition_given_to_a_trainer_fails_naming_the_callbacks(tmp_path: Path) -> None:
    from learnscope.lightning_glue.training_helper import TrainingHelper as Definition

    with pytest.raises(TypeError, match=r"use learnscope\.lightning_glue\.TrainingHelper"):
        trainer(tmp_path, False, [Definition()], max_steps=1).fit(TinyClassifier(), *loaders())


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: ModelAutocorrelation(buffer_size=8, lags=(1, 2)), "ModelAutocorrelation"),
        (lambda: TrainingHelper(check_every_n_steps=3), "TrainingHelper"),
        (
            lambda: EmbeddingProjector("encoder", tag="enc"),
            "EmbeddingProjector{'module': 'encoder', 'tag': 'enc'}",
        ),
    ],
)
def test_copies_keep_class_state_key_and_arguments(make: Any, key: str) -> None:
    import lightning.pytorch as lp

    callback = make()
    kind = {c.__name__: c for c in (ModelAutocorrelation, TrainingHelper, EmbeddingProjector)}[
        key.split("{")[0]
    ]
    assert type(callback) is kind and issubclass(kind, lp.Callback)
    assert callback.state_key == key  # the checkpoint key of earlier versions
    for copied in (copy.deepcopy(callback), pickle.loads(pickle.dumps(callback))):
        assert type(copied) is kind and copied is not callback
        assert copied.state_key == key
        assert vars(copied).keys() == vars(callback).keys()
        for name in ("lags", "buffer_size", "check_every_n_steps", "module", "tag"):
            assert getattr(copied, name, None) == getattr(callback, name, None)


def test_fast_dev_run_says_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="learnscope")
    callbacks = [
        ModelAutocorrelation(buffer_size=4, analyze_every_n_steps=1, lags=(1,)),
        TrainingHelper(check_every_n_steps=1),
        EmbeddingProjector("encoder"),
    ]
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit = trainer(tmp_path, logger, callbacks, fast_dev_run=True)
    fit.fit(TinyClassifier(), *loaders())
    said = [r for r in caplog.records if r.name == "learnscope" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in said] == [
        "learnscope: fast_dev_run is on, so Lightning's loggers are off and learnscope writes "
        "nothing in this run"
    ]
    assert not (tmp_path / "tb").exists()
