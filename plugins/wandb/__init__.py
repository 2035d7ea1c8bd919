"""The W&B writers: tables, scalars and pictures with the run record, and the view page.

``from learnscope.plugins.wandb import WandbWriter, WandbPageWriter``: the modules are
:mod:`.writer`, :mod:`.autocorrelation`, :mod:`.scatter` and :mod:`.page_writer`.
"""

from typing import TYPE_CHECKING

from learnscope.optional import lazy_names

if TYPE_CHECKING:
    from learnscope.plugins.wandb.page_writer import WandbPageWriter
    from learnscope.plugins.wandb.writer import WandbWriter, disabled_by, run_mode

__all__ = ["WandbPageWriter", "WandbWriter", "disabled_by", "run_mode"]

__getattr__ = lazy_names(
    __name__,
    {
        "WandbPageWriter": "page_writer",
        "WandbWriter": "writer",
        "disabled_by": "writer",
        "run_mode": "writer",
    },
)
