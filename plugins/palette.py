"""The colours of categories, one file for the pictures and the tab: ``static/palette.json``.

The pictures (:mod:`learnscope.plugins.pipeline.figures`) read it here when they are imported; the
tab and the exported pages get it in ``colours.js``, where
:mod:`learnscope.plugins.views.view_modules` writes it when it serves or joins the modules (an ES
module cannot import JSON in every browser). So a point of a category has the same colour in the
Images tab and in the learnscope tab, and so does every point of no coloured category (``other``).

The file holds ``categories``, the colours of the first categories in order (matplotlib's
``tab10``), and ``other``, the grey of the rest; each as ``#rrggbb``. Nothing here imports torch.

Example:
    >>> len(PALETTE.categories), PALETTE.categories[0], PALETTE.other
    (10, '#1f77b4', '#c8c8c8')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PALETTE", "PALETTE_FILE", "Palette", "read_palette"]

PALETTE_FILE = Path(__file__).parent / "views" / "static" / "palette.json"
_HEX = re.compile(r"#[0-9a-f]{6}")


@dataclass(frozen=True)
class Palette:
    """The colours of categories.

    Attributes:
        categories: The colour of each of the first categories, in order.
        other: The colour of a point of any other category, or of none.

    Example:
        >>> Palette(("#1f77b4",), "#c8c8c8").as_json()
        '{"categories": ["#1f77b4"], "other": "#c8c8c8"}'
    """

    categories: tuple[str, ...]
    other: str

    def as_json(self) -> str:
        """The palette as palette.json holds it, on one line."""
        return json.dumps({"categories": list(self.categories), "other": self.other})


def read_palette(path: str | Path = PALETTE_FILE) -> Palette:
    """The palette in a JSON file (``{"categories": [...], "other": ...}``), checked.

    Raises:
        ValueError: When the file holds anything else, a colour that is not ``#rrggbb`` (lower
            case), or an ``other`` that is also a category's colour.

    Example:
        >>> read_palette().other
        '#c8c8c8'
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or set(data) != {"categories", "other"}:
        raise ValueError(f"{path}: want {{'categories': [...], 'other': ...}}, got {data!r}")
    categories, other = data["categories"], data["other"]
    if not isinstance(categories, list) or not categories:
        raise ValueError(f"{path}: 'categories' must be a non-empty list, got {categories!r}")
    for colour in [*categories, other]:
        if not isinstance(colour, str) or not _HEX.fullmatch(colour):
            raise ValueError(f"{path}: colours are written #rrggbb in lower case, got {colour!r}")
    if other in categories:
        raise ValueError(f"{path}: 'other' {other} is also a category's colour")
    return Palette(tuple(categories), other)


PALETTE = read_palette()
