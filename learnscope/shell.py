"""The commands learnscope prints for the user to paste into a shell, quoted for it.

Every command learnscope prints (the end of a fit's ``tensorboard --logdir`` and ``learnscope
export``, an offline run's ``wandb sync``, the demo's commands, the install a missing package
needs) is made by :func:`shell_command`, so a path with a space or a non-ASCII letter
(``runs dir/ü``) pastes into the shell as one argument.
"""

from __future__ import annotations

import os
import shlex


def shell_command(*words: str | os.PathLike[str]) -> str:
    """``words`` as one command line for a POSIX shell, each word quoted when it needs to be.

    Args:
        words: The program and its arguments; paths may be given as paths.

    Returns:
        The command line: ``shlex.split`` of it gives ``words`` back.

    Example:
        >>> print(shell_command("learnscope", "export", "runs dir/ü", "--html", "view.html"))
        learnscope export 'runs dir/ü' --html view.html
        >>> print(shell_command("pip", "install", "learnscope[tensorboard]"))
        pip install 'learnscope[tensorboard]'
    """
    return " ".join(shlex.quote(os.fspath(word)) for word in words)
