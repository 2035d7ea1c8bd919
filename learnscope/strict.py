"""Strict mode: learnscope's own failures raise instead of being logged and switched off.

Diagnostics never stop a user's training: a failure inside learnscope is logged once and that
part is switched off. In learnscope's test suite that guard would hide learnscope's own bugs, so
``LEARNSCOPE_STRICT=1`` makes every guard re-raise.

Example:
    >>> strict_mode({"LEARNSCOPE_STRICT": "1"}), strict_mode({})
    (True, False)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

STRICT_ENV = "LEARNSCOPE_STRICT"


def strict_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``LEARNSCOPE_STRICT`` is set to a true value (``1``, ``true``, ``yes``, ``on``).

    Args:
        environ: Where to look; the process environment by default.

    Example:
        >>> strict_mode({"LEARNSCOPE_STRICT": "off"})
        False
    """
    value = (os.environ if environ is None else environ).get(STRICT_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")
