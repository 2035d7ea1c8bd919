"""What a run directory holds, in the words of the writers and the views (no torch).

* ``file_names``: every name learnscope puts in a run directory.
* ``record``: the run record, append-only JSON lines, read by every view.
* ``endings``: how a run ended, and why a section of its view is empty.
* ``write_limits``: how long the end of a fit waits for writes, how much disk they leave free.
"""
