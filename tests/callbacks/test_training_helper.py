"""TrainingHelper in real ``Trainer.fit`` runs: planted bugs found and named, healthy runs quiet."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader

from learnscope.health import CoordinateRangeCheck
from learnscope.lightning_glue import TrainingHelper
from learnscope.plugins.pipeline.base import FINDING_COLUMNS
from tests.kit.models import Ring, TinyClassifier, Tokens, UnusedLayer, ZeroBranch, blobs, trainer
from tests.kit.readers import wandb_artifact_tables, wandb_history, wandb_run_dir


def train_loader(n: int = 96, batch_size: int = 16) -> DataLoader:
    return DataLoader(blobs(n, seed=0), batch_size=batch_size, shuffle=True)


def fit(
    tmp_path: Path, model: Any, helper: TrainingHelper, steps: int = 20, loggers: Any = False
) -> Any:
    run = trainer(tmp_path, loggers, [helper], max_steps=steps, max_epochs=-1)
    run.fit(model, train_loader())
    assert run.global_step == steps  # training completed
    return run


def found(helper: TrainingHelper) -> list[tuple[str, str]]:
    return [(f.code, f.subject) for f in helper.findings]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "learnscope" and r.levelno >= logging.WARNING
    ]


def test_healthy_model_emits_no_warning(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    helper = TrainingHelper(check_every_n_steps=10)
    run = trainer(tmp_path, False, [helper], max_steps=300, max_epochs=-1)
    run.fit(TinyClassifier(), train_loader(960))
    assert run.global_step == 300
    assert warnings_of(learnscope_log) == []
    assert helper.findings == [] and helper.switched_off == set()


def test_unused_layer_is_reported_once_by_name(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=5, warn_every_n_steps=5)
    fit(tmp_path, UnusedLayer(), helper)
    assert found(helper) == [("unused-parameter", "unused")]
    (message,) = warnings_of(learnscope_log)
    assert "unused-parameter unused: unused.weight, unused.bias got no gradient" in message


def test_branch_multiplied_by_zero_has_zero_gradient(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=5)
    fit(tmp_path, ZeroBranch(), helper)
    (finding,) = helper.findings
    assert (finding.code, finding.subject, finding.first_step) == ("zero-gradient", "branch", 5)
    assert finding.life == "found at steps 5-19; still holds"
    assert "branch.weight, branch.bias" in finding.message


def test_zero_initialised_head_is_not_a_zero_gradient(tmp_path: Path) -> None:
    """Upstream gradients are zero on step 0 only, as with ReZero or adaLN-zero."""
    model = TinyClassifier()
    nn.init.zeros_(model.head.weight)
    helper = TrainingHelper(check_every_n_steps=1)
    fit(tmp_path, model, helper, steps=5)
    assert helper.findings == []


class NanGradient(TinyClassifier):
    def on_after_backward(self) -> None:
        if self.global_step == 10:
            self.encoder[0].weight.grad[0, 0] = float("nan")


def test_nan_gradient_is_named_and_the_next_step_names_the_module(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=5, embedding_module=None)
    fit(tmp_path, NanGradient(), helper)
    first, second = helper.findings[:2]
    assert (first.code, first.subject, first.first_step) == ("non-finite-gradient", "encoder.0", 10)
    assert "encoder.0.weight (1 values)" in first.message
    assert (second.code, second.subject, second.first_step) == (
        "non-finite-output",
        "encoder.0",
        11,
    )
    assert "from finite inputs; 1 of its parameters are not finite" in second.message
    assert any("non-finite-output encoder.0" in m for m in warnings_of(learnscope_log))


class Fragile(nn.Module):
    """Turns bad at step 10: a log of negative numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 100).log() if self.broken else x


class NanOutput(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), Fragile(), nn.Linear(16, 8))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.encoder[1].broken = self.global_step >= 10

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        for p in self.parameters():  # skip bad updates, so the parameters stay finite
            torch.nan_to_num_(p.grad, nan=0.0, posinf=0.0, neginf=0.0)


def test_nan_output_names_the_module_that_made_it(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=5)
    fit(tmp_path, NanOutput(), helper)
    codes = found(helper)
    assert ("non-finite-gradient", "encoder.0") in codes
    (output,) = [f for f in helper.findings if f.code == "non-finite-output"]
    assert (output.subject, output.first_step) == ("encoder.1", 11)
    assert "encoder.1' gave a non-finite output from finite inputs" in output.message
    assert helper.switched_off == set()  # collapse checks skip the non-finite rows


class CollapsedEncoder(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = CollapsingNet()


class CollapsingNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(6, 8)
        self.register_buffer("offset", torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.offset + 1e-4 * self.net(x)  # near-identical rows


def test_encoder_returning_near_identical_rows_has_collapsed(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=10)
    fit(tmp_path, CollapsedEncoder(), helper)
    (finding,) = [f for f in helper.findings if f.code == "embedding-collapse"]
    # no verdict on the starting weights (step 0); the first check after training starts, at
    # step 10, adds the next step's rows to the 16 of its batch, as the ranks need 4 x 8 rows
    assert finding.subject == "encoder" and finding.first_step == 10 and finding.holds
    assert "cosine_spread" in finding.message
    assert "over 32 rows of dimension 8, from steps 10-11" in finding.message
    assert any(
        m.startswith("learnscope: embedding-collapse encoder") for m in warnings_of(learnscope_log)
    )


def test_token_outputs_count_each_token_as_a_row(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=10)
    seen: list[int] = []
    original = helper._judge_collapse
    helper._judge_collapse = lambda trainer, buffer, *cut: (  # type: ignore[method-assign]
        seen.append(helper._collapse.first_step),
        original(trainer, buffer, *cut),
    )
    fit(tmp_path, Tokens(4), helper)
    assert seen == [0, 10, 19]  # 16 x 4 token rows fill the 64-row buffer in one batch
    # (19: the fit's last step is a check step too)


class LargeHead(TinyClassifier):
    """A head a thousand times larger than the encoder that stays so: only the encoder trains."""

    def __init__(self) -> None:
        super().__init__()
        with torch.no_grad():
            self.head.weight.mul_(1000)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.encoder.parameters(), lr=1e-4)


def test_head_a_thousand_times_larger_than_the_encoder(tmp_path: Path) -> None:
    helper = TrainingHelper(check_every_n_steps=5)
    fit(tmp_path, LargeHead(), helper)
    (finding,) = [f for f in helper.findings if f.code == "head-dominates-encoder"]
    # the first check after the fit's first optimizer step: none on the starting weights
    assert finding.subject == "head" and finding.first_step == 5


class Atoms(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch["pos"].flatten(1)
        return nn.functional.cross_entropy(self(x), batch["y"])


def atom_batches(fractional: bool) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(96, 2, 3, generator=g)
    if not fractional:
        pos = pos @ (torch.eye(3) * 4.2)  # Cartesian, in Å
    data = [{"pos": pos[i], "y": torch.tensor(i % 3)} for i in range(96)]
    return DataLoader(data, batch_size=16)


def test_fractional_coordinates_are_flagged(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    for fractional in (False, True):
        helper = TrainingHelper(check_every_n_steps=5, input_checks=[CoordinateRangeCheck("pos")])
        run = trainer(tmp_path, False, [helper], max_steps=10, max_epochs=-1)
        run.fit(Atoms(), atom_batches(fractional))
        assert run.global_step == 10
        if fractional:  # squeezed inputs may give squeezed embeddings too
            assert ("input-range", "pos") in found(helper)
        else:
            assert found(helper) == []
    assert "fractional coordinates" in warnings_of(learnscope_log)[0]


def test_failing_input_check_is_switched_off_and_training_goes_on(
    lenient: None, tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    helper = TrainingHelper(check_every_n_steps=5, input_checks=[CoordinateRangeCheck("pos")])
    fit(tmp_path, TinyClassifier(), helper)  # tuple batches: no 'pos'
    errors = [r for r in learnscope_log.records if "switched off" in r.getMessage()]
    assert len(errors) == 1 and isinstance(errors[0].exc_info[1], KeyError)
    assert helper.switched_off == {"input checks"}


class NodeClassifier(TinyClassifier):
    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.encoder = Ring(rounds)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits = self.head(self.encoder(batch["x"], batch["edge_index"]))
        return nn.functional.cross_entropy(logits, batch["y"])


def graphs() -> DataLoader:
    nodes = torch.arange(64)
    ring = torch.cat(
        [torch.stack([nodes, (nodes + 1) % 64]), torch.stack([(nodes + 1) % 64, nodes])], 1
    )
    x, y = blobs(64 * 4).tensors
    data = [{"x": x[i::4], "y": y[i::4], "edge_index": ring} for i in range(4)]
    return DataLoader(data, batch_size=None)


@pytest.mark.parametrize("rounds", [1, 300])
def test_oversmoothing_needs_the_graph(tmp_path: Path, rounds: int) -> None:
    helper = TrainingHelper(check_every_n_steps=5, edge_index_fn=lambda batch: batch["edge_index"])
    run = trainer(tmp_path, False, [helper], max_steps=8, max_epochs=-1)
    run.fit(NodeClassifier(rounds), graphs())
    if rounds == 1:
        assert helper.findings == []
    else:
        assert ("oversmoothing", "encoder") in found(helper)


def test_module_names_are_checked_at_setup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match=r"no sub-module 'encodr' \(embedding_module\); available"):
        fit(tmp_path, TinyClassifier(), TrainingHelper(embedding_module="encodr"))
    with pytest.raises(ValueError, match=r"no sub-module 'heads' \(head_modules\)"):
        fit(tmp_path, TinyClassifier(), TrainingHelper(head_modules=["heads"]))

    class NoEncoder(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.body = self.encoder
            del self.encoder

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x))

    caplog.set_level(logging.INFO, logger="learnscope")
    helper = TrainingHelper(check_every_n_steps=5)
    fit(tmp_path, NoEncoder(), helper)
    (warning,) = [r for r in caplog.records if r.name == "learnscope"]
    assert warning.levelno == logging.WARNING and "no sub-module 'encoder'" in warning.getMessage()
    with pytest.raises(ValueError, match="check_every_n_steps"):
        TrainingHelper(check_every_n_steps=0)
    with pytest.raises(ValueError, match="small_grad_threshold"):
        TrainingHelper(small_grad_threshold=2.0)


def test_dashboards_get_histograms_scalars_and_the_findings_table(
    tmp_path: Path, wandb_dir: Path
) -> None:
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    wb = WandbLogger(project="t", save_dir=str(wandb_dir))
    helper = TrainingHelper(check_every_n_steps=5, histograms=True)
    fit(tmp_path, ZeroBranch(), helper, loggers=[tb, wb])

    events = EventAccumulator(tb.log_dir, size_guidance={"histograms": 0, "tensors": 0})
    events.Reload()
    histograms = events.Histograms("~learnscope/health/grad_norm")
    assert [h.step for h in histograms] == [0, 5, 10, 15, 19]  # and the fit's last step
    assert histograms[0].histogram_value.num == 8  # one norm per parameter
    assert histograms[0].histogram_value.min == 0  # the branch
    grad = events.Scalars("~learnscope/health/grad_norm/encoder")
    assert [s.step for s in grad] == [0, 5, 10, 15, 19] and all(s.value > 0 for s in grad)
    assert events.Scalars("~learnscope/health/grad_norm/branch")[0].value == 0
    assert [s.step for s in events.Scalars("~learnscope/health/collapse/encoder/rankme")] == [
        0,
        5,
        10,
        15,
        19,
    ]
    texts = events.Tensors("~learnscope/findings/text_summary")  # when found, and at the end
    assert len(texts) == 2 and texts[-1].step == 20
    for text in texts:
        table = text.tensor_proto.string_val[0].decode()
        assert "zero-gradient" in table and "branch.weight, branch.bias" in table

    wb.experiment.finish()
    run_dir = wandb_run_dir(wandb_dir)
    history = wandb_history(run_dir)
    norms = [h for h in history if "~learnscope/health/grad_norm/encoder" in h]
    assert [h["trainer/global_step"] for h in norms] == [0, 5, 10, 15, 19]
    hists = [h for h in history if "~learnscope/health/grad_norm" in h]
    assert hists and hists[0]["~learnscope/health/grad_norm"]["_type"] == "histogram"
    assert any("~learnscope/health/collapse/encoder/cosine_spread" in h for h in history)
    tables = wandb_artifact_tables(run_dir, "~learnscope/findings")
    assert len(tables) == 2
    for table in tables:
        assert table["columns"] == list(FINDING_COLUMNS)
        assert [row[2:4] for row in table["data"]] == [["zero-gradient", "branch"]]


def test_checkpoint_state_keeps_findings_from_warning_again(
    tmp_path: Path, learnscope_log: pytest.LogCaptureFixture
) -> None:
    first = TrainingHelper(check_every_n_steps=5)
    fit(tmp_path, UnusedLayer(), first, steps=5)
    state = first.state_dict()
    second = TrainingHelper(check_every_n_steps=5)
    second.load_state_dict(state)
    assert second.findings == first.findings
    fit(tmp_path, UnusedLayer(), second, steps=5)
    unused = [m for m in warnings_of(learnscope_log) if "unused-parameter" in m]
    assert len(unused) == 1


def test_no_host_sync_on_ordinary_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every .item()/.tolist()/.cpu()/bool() made by learnscope code falls on a check step."""
    helper = TrainingHelper(check_every_n_steps=10, input_checks=[CoordinateRangeCheck(0)])
    syncs: list[int] = []
    for method in ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, method)

        def spy(self: torch.Tensor, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("learnscope"):
                syncs.append(helper._clock.batch_step)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, spy)
    fit(tmp_path, TinyClassifier(), helper, steps=25)
    # check steps only (and the fit's last, 24): collapse is judged on the rows of the check
    # step when it is over, or of the next step too when the check step gave fewer rows than
    # the ranks need (16 rows of dimension 8: 32 are needed)
    assert syncs and set(syncs) <= {0, 10, 11, 20, 21, 24}
    assert np.isin([0, 10, 20], syncs).all()
