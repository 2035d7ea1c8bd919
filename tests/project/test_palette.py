"""One palette for the pictures and the tab: ``plugins/views/static/palette.json``.

The pictures (``figures.py``) read it at import; the tab's ``colours.js`` gets its content when
``view_modules`` serves or joins the modules. No other copy of a category colour, or of the
"other" grey, is left in the front end's modules or in ``figures.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from learnscope.plugins.palette import PALETTE, PALETTE_FILE, read_palette
from learnscope.plugins.pipeline import figures
from learnscope.plugins.views import view_modules

ROOT = Path(__file__).parents[2]
STATIC = ROOT / "plugins" / "views" / "static"
NODE = shutil.which("node")
# What the served colours.js gives, printed by node: the colour of the first categories and more.
_READ_COLOURS = """
import { OTHER_COLOUR, PLAIN_COLOUR, categoryColour, colourScheme } from './colours.mjs';
const n = %d;
const column = { kind: 'categorical', categories: ['a', 'b'], codes: [0, 1, -1], coloured: [0, 1] };
console.log(JSON.stringify({
  categories: Array.from({ length: n }, (_, i) => categoryColour(i)),
  beyond: categoryColour(n),
  other: OTHER_COLOUR,
  plain: PLAIN_COLOUR,
  scheme: colourScheme(column, 3).colours,
}));
"""


def palette_file() -> dict[str, object]:
    return json.loads(PALETTE_FILE.read_text(encoding="utf-8"))


def test_the_palette_file_is_the_shipped_one_and_is_well_formed() -> None:
    assert PALETTE_FILE == STATIC / "palette.json"
    data = palette_file()
    assert read_palette() == PALETTE and list(PALETTE.categories) == data["categories"]
    assert PALETTE.other == data["other"] and len(PALETTE.categories) == 10


def test_the_pictures_use_the_palette_file() -> None:
    data = palette_file()
    assert list(figures.COLOURS) == data["categories"]
    assert data["other"] == figures.OTHER_COLOUR


def test_the_served_and_joined_modules_hold_the_palette_file() -> None:
    on_disk = (STATIC / "colours.js").read_text(encoding="utf-8")
    assert on_disk.count(view_modules.PALETTE_SLOT) == 1
    filled = view_modules.PALETTE_SLOT.replace("{}", PALETTE.as_json())
    served = view_modules.module_sources()
    assert served["colours.js"] == on_disk.replace(view_modules.PALETTE_SLOT, filled)
    joined = view_modules.joined_source()
    assert joined.count(filled) == 1 and view_modules.PALETTE_SLOT not in joined


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_the_served_colours_module_gives_the_palettes_colours(tmp_path: Path) -> None:
    (tmp_path / "colours.mjs").write_text(view_modules.module_sources()["colours.js"], "utf-8")
    script = tmp_path / "read.mjs"
    script.write_text(_READ_COLOURS % len(PALETTE.categories), "utf-8")
    done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["categories"] == list(PALETTE.categories)
    assert shown["beyond"].startswith("hsl(")  # past the palette: hues by the golden angle
    assert shown["other"] == PALETTE.other and shown["plain"] == PALETTE.categories[0]
    assert shown["scheme"] == [*PALETTE.categories[:2], PALETTE.other]


def test_a_palette_file_with_another_colour_is_served_with_it(tmp_path: Path) -> None:
    for source in STATIC.glob("*.js"):
        shutil.copy(source, tmp_path)
    data = {**palette_file(), "other": "#123456"}
    (tmp_path / "palette.json").write_text(json.dumps(data), "utf-8")
    assert '"other": "#123456"' in view_modules.module_sources(tmp_path)["colours.js"]
    (tmp_path / "palette.json").write_text(json.dumps({**data, "other": "grey"}), "utf-8")
    with pytest.raises(ValueError, match="#rrggbb"):
        view_modules.module_sources(tmp_path)


@pytest.mark.parametrize(
    "path",
    [*sorted(STATIC.glob("*.js")), ROOT / "plugins" / "pipeline" / "figures.py"],
    ids=lambda path: path.name,
)
def test_no_other_copy_of_a_palette_colour(path: Path) -> None:
    """Grep: no category colour, and not the "other" grey, is written out anywhere else."""
    text = path.read_text(encoding="utf-8").lower()
    colours = [*PALETTE.categories, PALETTE.other]
    found = [c for c in colours if re.search(re.escape(c) + r"(?![0-9a-f])", text)]
    assert not found, f"{path.name} copies {found}: use the palette (colours.js, palette.py)"
