"""The learnscope tab in TensorBoard: the dynamic plugin and its search (:mod:`.plugin`)."""
