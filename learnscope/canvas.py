"""A tiny raster canvas drawn with numpy alone: points, lines, boxes and 3x5 pixel text.

Charts that learnscope puts into image panels (autocorrelation curves, embedding scatter plots)
are drawn with it, so no matplotlib is needed. Encode the result with
:func:`learnscope.png.encode_png` or hand it to a writer as a ``RenderedImage``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Color = tuple[int, int, int]

BLACK: Color = (0, 0, 0)
GREY: Color = (170, 170, 170)
WHITE: Color = (255, 255, 255)

# Categorical colours (Tableau 10, then 10 lighter companions).
_PALETTE = np.array(
    [
        (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
        (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
        (174, 199, 232), (255, 187, 120), (152, 223, 138), (255, 152, 150), (197, 176, 213),
        (196, 156, 148), (247, 182, 210), (199, 199, 199), (219, 219, 141), (158, 218, 229),
    ],
    np.uint8,
)  # fmt: skip

# 3x5 pixel glyphs, top row first; lowercase letters are drawn as uppercase.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001010010010", "8": "111101111101111",
    "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111",
    "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101",
    "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101",
    "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    "-": "000000111000000", ".": "000000000000010", "_": "000000000000111",
    "/": "001001010100100", ":": "000010000010000", "=": "000111000111000",
    "(": "001010010010001", ")": "100010010010100", "+": "000010111010000",
    ",": "000000000010100", "%": "101001010100101", "?": "111001010000010",
    " ": "000000000000000", "<": "001010100010001", ">": "100010001010100",
}  # fmt: skip


def palette(n: int) -> np.ndarray:
    """``n`` categorical colours as ``uint8 [n, 3]`` (repeating after 20).

    Example:
        >>> palette(3).tolist()[0]
        [31, 119, 180]
    """
    return _PALETTE[np.arange(n) % len(_PALETTE)]


def text_width(text: str, scale: int = 2) -> int:
    """Width in pixels of ``text`` drawn by :meth:`Canvas.text`.

    Example:
        >>> text_width("ab", scale=1)
        8
    """
    return len(text) * 4 * scale


class Canvas:
    """An RGB image to draw on, with integer pixel coordinates (x right, y down).

    Args:
        width: Width in pixels.
        height: Height in pixels.
        background: Fill colour.

    Example:
        >>> canvas = Canvas(40, 20)
        >>> canvas.line([0, 39], [10, 10], BLACK)
        >>> canvas.text(1, 1, "ACF 1", BLACK, scale=1)
        >>> canvas.pixels.shape, canvas.pixels[10, 20].tolist()
        ((20, 40, 3), [0, 0, 0])
    """

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.pixels = np.empty((height, width, 3), np.uint8)
        self.pixels[:] = background

    @property
    def width(self) -> int:
        """Width in pixels."""
        return self.pixels.shape[1]

    @property
    def height(self) -> int:
        """Height in pixels."""
        return self.pixels.shape[0]

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill the box from ``(x0, y0)`` to ``(x1, y1)``, both included, clipped to the canvas."""
        xa, xb = sorted((int(x0), int(x1)))
        ya, yb = sorted((int(y0), int(y1)))
        self.pixels[max(ya, 0) : max(yb + 1, 0), max(xa, 0) : max(xb + 1, 0)] = color

    def points(
        self, xs: np.ndarray, ys: np.ndarray, colors: np.ndarray | Color, radius: int = 1
    ) -> None:
        """Draw square dots of side ``2 * radius + 1``; later points cover earlier ones.

        Args:
            xs: Pixel x of each point (floats are rounded; points off the canvas are skipped).
            ys: Pixel y of each point.
            colors: One colour, or ``uint8 [N, 3]``, one per point.
            radius: Half the side of each dot.
        """
        x = np.rint(np.asarray(xs, np.float64)).astype(np.int64)
        y = np.rint(np.asarray(ys, np.float64)).astype(np.int64)
        rgb = np.broadcast_to(np.asarray(colors, np.uint8), (len(x), 3))
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                px, py = x + dx, y + dy
                ok = (px >= 0) & (px < self.width) & (py >= 0) & (py < self.height)
                self.pixels[py[ok], px[ok]] = rgb[ok]

    def line(self, xs: Sequence[float], ys: Sequence[float], color: Color, width: int = 1) -> None:
        """Draw a polyline through the points ``(xs[i], ys[i])``; NaN points break the line.

        Args:
            xs: Pixel x of each vertex.
            ys: Pixel y of each vertex.
            color: Line colour.
            width: Thickness in pixels (1 or more).
        """
        x = np.asarray(xs, np.float64)
        y = np.asarray(ys, np.float64)
        radius = max(width - 1, 0) // 2
        for i in range(len(x) - 1):
            if not np.isfinite([x[i], x[i + 1], y[i], y[i + 1]]).all():
                continue
            steps = int(max(abs(x[i + 1] - x[i]), abs(y[i + 1] - y[i]), 1)) + 1
            t = np.linspace(0.0, 1.0, steps)
            self.points(x[i] + t * (x[i + 1] - x[i]), y[i] + t * (y[i + 1] - y[i]), color, radius)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 2) -> None:
        """Write ``text`` with its top-left corner at ``(x, y)`` in a 3x5 pixel font.

        Letters are drawn as capitals; characters without a glyph are drawn as ``?``.

        Args:
            x: Left edge in pixels.
            y: Top edge in pixels.
            text: What to write.
            color: Text colour.
            scale: Pixels per font pixel.
        """
        for i, char in enumerate(text.upper()):
            glyph = _GLYPHS.get(char, _GLYPHS["?"])
            for bit, on in enumerate(glyph):
                if on == "1":
                    row, col = divmod(bit, 3)
                    gx = x + (i * 4 + col) * scale
                    gy = y + row * scale
                    self.fill(gx, gy, gx + scale - 1, gy + scale - 1, color)


class Axes:
    """A plotting area on a canvas that maps data coordinates to pixels, with a framed box.

    Args:
        canvas: Where to draw.
        box: ``(left, top, right, bottom)`` of the plotting area in pixels.
        xlim: Data range shown along x.
        ylim: Data range shown along y (upwards).

    Example:
        >>> axes = Axes(Canvas(100, 80), (10, 10, 90, 70), (0.0, 1.0), (-1.0, 1.0))
        >>> axes.to_pixels([0.0, 1.0], [1.0, -1.0])
        (array([10., 90.]), array([10., 70.]))
    """

    def __init__(
        self,
        canvas: Canvas,
        box: tuple[int, int, int, int],
        xlim: tuple[float, float],
        ylim: tuple[float, float],
    ) -> None:
        self.canvas = canvas
        self.box = box
        self.xlim = _widen(xlim)
        self.ylim = _widen(ylim)

    def to_pixels(self, xs: Sequence[float], ys: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates of data points."""
        left, top, right, bottom = self.box
        x = np.asarray(xs, np.float64)
        y = np.asarray(ys, np.float64)
        px = left + (x - self.xlim[0]) / (self.xlim[1] - self.xlim[0]) * (right - left)
        py = bottom - (y - self.ylim[0]) / (self.ylim[1] - self.ylim[0]) * (bottom - top)
        return px, py

    def frame(self, xticks: Sequence[float] = (), yticks: Sequence[float] = ()) -> None:
        """Draw the box and the tick labels (numbers printed compactly)."""
        left, top, right, bottom = self.box
        c = self.canvas
        c.line([left, right, right, left, left], [top, top, bottom, bottom, top], GREY)
        for value in xticks:
            px, _ = self.to_pixels([value], [self.ylim[0]])
            label = _number(value)
            c.line([px[0], px[0]], [bottom, bottom + 3], GREY)
            c.text(int(px[0]) - text_width(label, 1) // 2, bottom + 5, label, BLACK, 1)
        for value in yticks:
            _, py = self.to_pixels([self.xlim[0]], [value])
            label = _number(value)
            c.line([left - 3, left], [py[0], py[0]], GREY)
            c.text(left - 5 - text_width(label, 1), int(py[0]) - 2, label, BLACK, 1)

    def hline(self, y: float, color: Color = GREY) -> None:
        """A horizontal line across the area at data ``y``."""
        px, py = self.to_pixels(list(self.xlim), [y, y])
        self.canvas.line(px, py, color)


def _widen(lim: tuple[float, float]) -> tuple[float, float]:
    low, high = float(lim[0]), float(lim[1])
    if not np.isfinite([low, high]).all():
        return (0.0, 1.0)
    if high - low < 1e-12:
        return (low - 0.5, high + 0.5)
    return (low, high)


def _number(value: float) -> str:
    return f"{value:.2g}" if abs(value) < 1000 else f"{value:.0f}"
