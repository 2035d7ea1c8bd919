"""The names learnscope's charts, pictures and tables have in the dashboards, in one place.

Every name starts with ``~learnscope/``. TensorBoard's Time Series, Scalars, Images and Text
tabs group charts by the part of a name before its first ``/`` and list the groups in name
order, and the Scalars tab opens the first group; a wandb workspace makes a section of each
such part. ``~`` sorts after every letter and digit, so learnscope's charts form one group
listed after the run's own metrics (``epoch``, ``train``, ``val/loss``, ...): the user's
metrics are the first screen.

Loggers other than TensorBoard and wandb get the names without the ``~``
(:func:`plain_name`): it only serves those two dashboards' order, and MLflow refuses it.

Example:
    >>> HEALTH, AUTOCORRELATION
    ('~learnscope/health', '~learnscope/autocorrelation')
    >>> embedding_picture("encoder/validate")
    '~learnscope/embeddings/encoder/validate/pca'
    >>> plain_name(f"{HEALTH}/loss")
    'learnscope/health/loss'
"""

from __future__ import annotations

ROOT = "~learnscope"
HEALTH = f"{ROOT}/health"
AUTOCORRELATION = f"{ROOT}/autocorrelation"
EMBEDDINGS = f"{ROOT}/embeddings"
FINDINGS = f"{ROOT}/findings"
VIEW = f"{ROOT}/view"
WANDB_STEP = "trainer/global_step"  # the step axis of Lightning's WandbLogger, and learnscope's


def embedding_picture(key: str, projection: str = "pca") -> str:
    """The name of the aligned ``projection`` picture of the snapshots of ``key`` (``tag/stage``).

    Example:
        >>> embedding_picture("gnn/test"), embedding_picture("gnn/test", "umap")
        ('~learnscope/embeddings/gnn/test/pca', '~learnscope/embeddings/gnn/test/umap')
    """
    return f"{EMBEDDINGS}/{key}/{projection}"


def plain_name(name: str) -> str:
    """``name`` without the leading ``~``, for loggers that accept only letters, digits, ``_-./``.

    Example:
        >>> plain_name("~learnscope/health/loss"), plain_name("train/loss")
        ('learnscope/health/loss', 'train/loss')
    """
    return name.removeprefix("~")
