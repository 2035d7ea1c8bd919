"""The views: every one reads only the run record (and the files it names) through a RunFolder.

Finding runs (:mod:`.run_search`), one run's view model (:mod:`.run_view` with its folds),
two runs compared (:mod:`.compare_runs`), the standalone page (:mod:`.view_page`) and its ES
modules (:mod:`.view_modules`, ``static/``). Nothing here imports torch.
"""
