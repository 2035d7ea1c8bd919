"""learnscope's callbacks configured from YAML with a real LightningCLI, and their config saved.

LightningCLI saves the parsed config into every run directory (``config.yaml``) and prints it
with ``--print_config``; each must run again as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lightning.pytorch.cli import LightningCLI

from tests.kit.cli_parts import BlobData
from tests.kit.models import TinyClassifier
from tests.kit.readers import ProjectorReader, parse_metadata

CALLBACKS = """
  callbacks:
    - class_path: learnscope.lightning_glue.EmbeddingProjector
      init_args:
        module: encoder
        select: tests.kit.cli_parts.features
        metadata_fn: tests.kit.cli_parts.labels
        ids_fn: dataset_index
        stages: [validate]
        max_points: 100
        tag: enc
        aligned_pca: true
        spatial: null
    - class_path: learnscope.lightning_glue.EmbeddingProjector
      init_args:
        module: encoder
        ids_fn: tests.kit.cli_parts.sample_ids
        mask_fn: tests.kit.cli_parts.every_row
        metadata_fn: tests.kit.cli_parts.labels
        tag: by_feature
    - class_path: learnscope.lightning_glue.TrainingHelper
      init_args:
        check_every_n_steps: 2
        input_checks:
          - class_path: learnscope.health.CoordinateRangeCheck
            init_args: {key: 0}
        select: tests.kit.cli_parts.features
        mask_fn: null
        collapse_thresholds: {min_mad_global: 0.02}
    - class_path: learnscope.lightning_glue.ModelAutocorrelation
      init_args: {buffer_size: 8, analyze_every_n_steps: 4, lags: [1, 2]}
"""


def config(save_dir: Path) -> str:
    return f"""
seed_everything: 0
trainer:
  max_epochs: 1
  accelerator: cpu
  enable_progress_bar: false
  enable_model_summary: false
  enable_checkpointing: false
  logger:
    class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args: {{save_dir: {save_dir}, name: tb}}
{CALLBACKS}"""


def cli(*args: str) -> LightningCLI:
    return LightningCLI(TinyClassifier, BlobData, args=list(args))


def test_callbacks_round_trip_through_the_saved_config_and_print_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "config.yaml"
    first.write_text(config(tmp_path))
    cli("fit", "--config", str(first))
    saved = tmp_path / "tb" / "version_0" / "config.yaml"
    text = saved.read_text()
    assert "Unable to serialize" not in text
    callbacks = yaml.safe_load(text)["trainer"]["callbacks"]
    projector = callbacks[0]["init_args"]
    assert projector["ids_fn"] == "dataset_index"
    assert projector["metadata_fn"] == "tests.kit.cli_parts.labels"
    assert callbacks[1]["init_args"]["ids_fn"] == "tests.kit.cli_parts.sample_ids"

    cli("fit", "--config", str(saved))  # again from the saved config: version_1
    names = ProjectorReader(tmp_path / "tb" / "version_1").names(".")
    assert names == ["enc/validate/step_000000006", "by_feature/validate/step_000000006"]
    header, rows = parse_metadata(
        ProjectorReader(tmp_path / "tb" / "version_1").metadata(".", names[1])
    )
    ids = [row[header.index("id")] for row in rows]
    assert len(ids) == 48 and all(len(i.split(".")[1]) == 6 for i in ids)  # from sample_ids

    with pytest.raises(SystemExit) as done:
        cli("fit", "--config", str(first), "--print_config")
    assert done.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "Unable to serialize" not in printed
    assert yaml.safe_load(printed)["trainer"]["callbacks"] == callbacks
    again = tmp_path / "printed.yaml"
    again.write_text(printed)
    cli("fit", "--config", str(again))  # version_2
    assert ProjectorReader(tmp_path / "tb" / "version_2").names(".") == names
