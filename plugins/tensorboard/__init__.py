"""The TensorBoard writer and the files it writes: event files, Projector files, the layout.

``from learnscope.plugins.tensorboard import TensorBoardWriter`` is the writer; the modules are
:mod:`.writer`, :mod:`.event_file`, :mod:`.projector_files`, :mod:`.projector_refresh`,
:mod:`.layout` (Custom Scalars) and :mod:`.autocorrelation`.
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.plugins.tensorboard.writer import TensorBoardWriter, findings_markdown

__all__ = ["TensorBoardWriter", "findings_markdown"]

__getattr__ = lazy_names(__name__, {name: "writer" for name in __all__})
