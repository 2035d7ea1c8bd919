"""The model's parameters as every analysis sees them.

* ``parameter_names``: names without the wrappers' inserted parts, the owning module, the group.
* ``parameter_shards``: sharded parameters (FSDP2, FSDP1): the original names, what a rank holds.
* ``ranks``: the collectives over the ranks of the default process group.
* ``trainable``: which parameters train, and when fine-tuning changes that.
"""
