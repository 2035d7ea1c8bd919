"""Sampled parameters and gradients over training steps, and their autocorrelation.

* ``sampling_plan``: which elements of which parameters are sampled.
* ``sampled_columns``: where the sampled elements sit in the pieces a rank holds.
* ``ring_buffer``: the device-side buffer of the last steps' values.
* ``sampled_gradients``: what a step reads of the gradients (dense, sparse, zeros).
* ``sampled_history``: one sampled history of parameters and gradients.
* ``optimizer_histories``: one history per optimizer, and their summary.
* ``analysis``: the autocorrelation functions, tau, and the summary handed to the writers.
"""
