"""Every name learnscope puts in a run directory, in one place for the writers and the views.

A run directory (TensorBoard's ``version_0``, a wandb run's ``files/``) holds, from learnscope:

* ``learnscope_record.jsonl``: the run record (:mod:`learnscope.run_directory.record`), the one file
  the views (the learnscope tab, ``learnscope export``, the W&B ``~learnscope/view`` page) read; on
  an object store, the folder ``learnscope_record.d/`` of its immutable segments instead
  (:mod:`learnscope.storage.object_store`);
* on an object store only, ``learnscope_summary.json``: the record at a glance, kept by the
  record's writer so that the runs table need not read every segment
  (:mod:`learnscope.run_directory.summary_file`);
* for TensorBoard's own tabs: learnscope's event files (names ending in ``.learnscope``), the
  Projector's ``projector_config.pbtxt`` with the snapshots under ``projector/``, and the Custom
  Scalars layout kept in ``learnscope_custom_scalars.json``;
* in each snapshot's folder ``projector/<tag>/<stage>/step_<N>/``: ``tensor.bin`` (or
  ``tensor.tsv``), ``metadata.tsv`` and ``sprite.png``;
* briefly, on a local disk, short-lived files: ``.<name>.lock`` locks (:func:`lock_name`),
  ``.*.tmp`` temporaries of atomic writes, and ``.projector-refresh-*`` marker runs inside the
  run directory.

Nothing here imports torch: the views use it without loading a model's dependencies.

Example:
    >>> step_name(120)
    'step_000000120'
    >>> snapshot_name("encoder/validate", 120)
    'encoder/validate/step_000000120'
    >>> parse_snapshot_name("encoder/validate/step_000000120")
    ('encoder/validate', 120)
"""

from __future__ import annotations

import re

RECORD_FILE = "learnscope_record.jsonl"
RECORD_SEGMENTS = "learnscope_record.d"  # on an object store: the record as immutable segments
SUMMARY_FILE = "learnscope_summary.json"  # on an object store: the record at a glance
PROJECTOR_CONFIG = "projector_config.pbtxt"
PROJECTOR_FOLDER = "projector"
EVENTS_SUFFIX = ".learnscope"  # the end of the name of learnscope's own event files
LAYOUT_FILE = "learnscope_custom_scalars.json"
# A snapshot's files in its folder projector/<tag>/<stage>/step_<N>/:
TENSOR_FILE = "tensor.bin"  # raw little-endian float32
TENSOR_TEXT_FILE = "tensor.tsv"  # the same as text, when the raw bytes would read as UTF-8
METADATA_FILE = "metadata.tsv"
SPRITE_FILE = "sprite.png"
REFRESH_MARKER_PREFIX = ".projector-refresh-"
STEP_DIGITS = 9  # step_000000120: sorts as text up to 999,999,999 steps
_SNAPSHOT = re.compile(r"(?s)(.*)/step_(-?\d+)")


def lock_name(name: str) -> str:
    """The lock file of the shared file ``name`` while it is changed on a local disk.

    Example:
        >>> lock_name(PROJECTOR_CONFIG)
        '.projector_config.pbtxt.lock'
    """
    return f".{name}.lock"


def step_name(step: int) -> str:
    """The last part of a snapshot's name: the step, zero-padded so that names sort by step.

    Example:
        >>> step_name(120), step_name(1_000_000_000), step_name(-1)
        ('step_000000120', 'step_1000000000', 'step_-00000001')
    """
    return f"step_{step:0{STEP_DIGITS}d}"


def snapshot_name(key: str, step: int) -> str:
    """A snapshot's name: its key (``tag/stage``) and its step.

    Example:
        >>> snapshot_name("enc", 7)
        'enc/step_000000007'
    """
    return f"{key}/{step_name(step)}"


def parse_snapshot_name(name: str) -> tuple[str, int] | None:
    """``(key, step)`` of a snapshot's name, or ``None`` when it does not end in a step.

    Example:
        >>> parse_snapshot_name("a/b/step_20"), parse_snapshot_name("a/b")
        (('a/b', 20), None)
    """
    match = _SNAPSHOT.fullmatch(name)
    return (match[1], int(match[2])) if match else None
