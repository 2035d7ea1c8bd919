"""Where learnscope's pictures are rasterised: one drawing thread per run, and PNG encoding.

matplotlib (Agg) is imported only when a picture is drawn, and never through ``pyplot``, so
drawing touches no global state and may run off the training thread. Without matplotlib (a
core-only install), pictures are skipped (:func:`missing_pictures` gives the words the write
pipeline says once per run, with what to install), and everything else is still written.

**Who draws.** matplotlib keeps the font files it opens per drawing thread (its font cache is
keyed by the thread), so a thread that draws and ends would leave a set of open font files
behind. A :class:`Drawing` owns one drawing thread (``learnscope-draw``, started by its first
picture); closing it stops the thread and lets go of the fonts. A run's writers
(:class:`~learnscope.plugins.pipeline.background.BackgroundWriters`) own one and hand it to their
picture stage, so every picture of a fit is drawn on its one thread (which pictures, drawn once per
record for every writer: :mod:`learnscope.plugins.pipeline.pictures`; the charts:
:mod:`learnscope.plugins.pipeline.figures`). Without a :class:`Drawing` (a function called
directly), a picture is rasterised on the calling thread and the fonts are let go at once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import io
import queue
import sys
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "Drawing",
    "figure_pixels",
    "missing_pictures",
    "pictures_available",
    "png_bytes",
]

INSTALL = "pip install 'learnscope[tensorboard]' (or 'learnscope[wandb]')"
DRAWING_THREAD = "learnscope-draw"
CLOSE_WAIT_S = 30.0  # how long closing a Drawing waits for the picture being drawn


def missing_pictures() -> str | None:
    """Why pictures are skipped, in the words of one warning; ``None`` when they can be drawn.

    They need matplotlib (and Pillow, which it needs). Saying it is the business of the
    pipeline that asks for pictures (:class:`~learnscope.plugins.pipeline.fanout.Writers` says it
    once per run).

    Example:
        >>> missing_pictures() is None
        True
    """
    try:
        import matplotlib  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as error:
        return (
            f"learnscope: matplotlib could not be imported ({error}), so pictures are skipped: "
            "ACF charts, PCA scatter images, projector thumbnails; everything else is written. "
            f"To get them: {INSTALL}"
        )
    return None


def pictures_available() -> bool:
    """Whether pictures can be drawn: matplotlib and Pillow import (:func:`missing_pictures`).

    Example:
        >>> pictures_available()
        True
    """
    return missing_pictures() is None


def png_bytes(pixels: np.ndarray, compress_level: int = 6) -> bytes:
    r"""Encode ``uint8`` pixels ``[H, W]`` or ``[H, W, C]`` (``C`` from 1 to 4) as PNG (Pillow).

    Args:
        pixels: The image.
        compress_level: zlib level, 0 (fastest) to 9 (smallest).

    Returns:
        The PNG file's bytes.

    Raises:
        ValueError: If the array is not an 8-bit image.
        ModuleNotFoundError: Without Pillow; the message says what to install.

    Example:
        >>> png_bytes(np.zeros((2, 3, 3), np.uint8))[:8]
        b'\x89PNG\r\n\x1a\n'
    """
    from learnscope.optional import import_optional

    image_module = import_optional("PIL.Image", "tensorboard")
    pixels = np.asarray(pixels)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if pixels.dtype != np.uint8 or not (
        pixels.ndim == 2 or (pixels.ndim == 3 and pixels.shape[2] in (2, 3, 4))
    ):
        raise ValueError(f"expected a uint8 image [H, W, C<=4], got {pixels.dtype} {pixels.shape}")
    buffer = io.BytesIO()
    image_module.fromarray(np.ascontiguousarray(pixels)).save(
        buffer, format="PNG", compress_level=compress_level
    )
    return buffer.getvalue()


class Drawing:
    """One drawing thread: what one run's writers draw with.

    Its thread (``learnscope-draw``, a daemon) is started by the first picture and rasterises
    every picture asked of this drawing, one at a time, whichever thread asks. :meth:`close`
    stops the thread once the pictures asked for before are drawn, and lets go of the font
    files matplotlib opened for it. The module's functions draw here when they are given it
    (``drawing=``: :func:`figure_pixels`, :func:`acf_images`), on the calling thread otherwise.

    Example:
        >>> from matplotlib.figure import Figure
        >>> with Drawing() as drawing:
        ...     drawing.pixels(Figure(figsize=(2, 1), dpi=50)).shape
        (50, 100, 3)
        >>> drawing.running
        False
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()  # (work, future); None: stop
        self._thread: threading.Thread | None = None  # started by the first picture
        self._closed = False

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """Whether the drawing thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def pixels(self, figure: Figure) -> np.ndarray:
        """Rasterise ``figure`` with Agg on the drawing thread into ``uint8 [H, W, 3]`` pixels.

        Raises:
            RuntimeError: The drawing is closed.
        """
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(figure)
        if threading.current_thread() is self._thread:
            return _rasterise(canvas)
        done: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("learnscope: this Drawing is closed")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=_draw_until_stopped, args=(self._jobs,), name=DRAWING_THREAD, daemon=True
                )
                self._thread.start()
            self._jobs.put((functools.partial(_rasterise, canvas), done))
        return done.result()

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Stop the drawing thread once what was asked of it is drawn; later calls do nothing.

        Pictures asked for afterwards raise ``RuntimeError``.

        Args:
            timeout_s: The longest wait for the thread to end (a picture being drawn); past it
                the thread is left to end on its own, as a daemon.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)


def figure_pixels(figure: Figure, drawing: Drawing | None = None) -> np.ndarray:
    """Rasterise ``figure`` with Agg into ``uint8 [H, W, 3]`` pixels.

    With a ``drawing`` it is drawn on that drawing's thread; without, on the calling thread,
    letting go of the font files at once.

    Example:
        >>> from matplotlib.figure import Figure
        >>> figure_pixels(Figure(figsize=(2, 1), dpi=50)).shape
        (50, 100, 3)
    """
    if drawing is not None:
        return drawing.pixels(figure)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    try:
        return _rasterise(FigureCanvasAgg(figure))
    finally:
        _forget_fonts()


def _rasterise(canvas: Any) -> np.ndarray:
    canvas.draw()
    return np.array(np.asarray(canvas.buffer_rgba())[:, :, :3])


def _draw_until_stopped(jobs: queue.SimpleQueue[Any]) -> None:
    """A drawing thread: run each ``(work, future)`` until ``None``, then let go of the fonts."""
    try:
        while (job := jobs.get()) is not None:
            work, done = job
            try:
                done.set_result(work())
            except BaseException as error:  # handed to the caller, who raises it
                done.set_exception(error)
    finally:
        _forget_fonts()


def _forget_fonts() -> None:
    """Drop matplotlib's cache of open fonts (kept per drawing thread), closing their files.

    Fonts in use by a picture being drawn elsewhere stay open until it is drawn; a later picture
    opens its fonts again.
    """
    font_manager = sys.modules.get("matplotlib.font_manager")
    clear = getattr(getattr(font_manager, "_get_font", None), "cache_clear", None)
    if clear is not None:
        clear()
