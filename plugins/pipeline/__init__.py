"""The write pipeline: the fan-out to the writers, its worker thread, the picture stage.

Which writers a logger gets (:mod:`.loggers`), the :class:`~.base.Writer` base, the fan-out
with its failure isolation (:mod:`.fanout`), the worker thread (:mod:`.background`), the pictures
drawn once per record (:mod:`.pictures`, :mod:`.figures`), the run record's writer and the
free-space reserve. Nothing here imports a dashboard until a writer is made.
"""
