"""What following the trainable parameters adds to every optimizer step (a microbenchmark).

ModelAutocorrelation and TrainingHelper each poll a
:class:`~learnscope.model.trainable.TrainableWatch` in ``on_before_optimizer_step``: every
parameter's ``requires_grad`` and each optimizer's number of param groups, compared with the last
step's. This times, for models of several sizes:

* ``poll``: one :meth:`TrainableWatch.poll` when nothing changed (the cost of every step),
  and ``full scan``: reading every parameter's ``requires_grad`` (what a poll without the
  window would cost);
* ``TrainingHelper hook``: its whole ``on_before_optimizer_step`` on an ordinary (not check)
  step, with the watch and with it removed; the difference is what the watch adds there.

Run::

    python benchmarks/trainable_watch.py
"""

from __future__ import annotations

import timeit
from types import SimpleNamespace

import torch
from torch import nn

from learnscope.lightning_glue import TrainingHelper
from learnscope.model.trainable import TrainableWatch


def model_with(tensors: int) -> nn.Module:
    """``tensors // 2`` small linear layers: ``tensors`` parameter tensors."""
    return nn.Sequential(*(nn.Linear(4, 4) for _ in range(tensors // 2)))


def per_call(function: object, number: int = 20_000) -> float:
    """The fastest of 5 runs, in microseconds per call."""
    return min(timeit.repeat(function, number=number, repeat=5)) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    print(
        "| tensors | poll (us) | full scan (us) | TrainingHelper hook, with watch (us) | "
        "without (us) | added (us) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for tensors in (8, 28, 98, 400):
        model = model_with(tensors)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        watch = TrainableWatch(model.named_parameters(), [optimizer])
        poll = per_call(watch.poll)
        parameters = list(model.parameters())
        full = per_call(lambda parameters=parameters: [p.requires_grad for p in parameters])

        trainer = SimpleNamespace(global_step=1, is_global_zero=True, optimizers=[optimizer])
        helper = TrainingHelper(check_every_n_steps=1000, embedding_module=None)
        helper._unused.load_state_dict({"unused_checked": True})  # after the first round
        helper._gradients.note_step(optimizer)
        helper.on_train_batch_start(trainer, model, None, 0)  # an ordinary step's batch
        helper._watch = TrainableWatch(model.named_parameters(), [optimizer])

        def hook(
            helper: TrainingHelper = helper,
            trainer: SimpleNamespace = trainer,
            model: nn.Module = model,
            optimizer: torch.optim.Optimizer = optimizer,
        ) -> None:
            helper.on_before_optimizer_step(trainer, model, optimizer)

        with_watch = per_call(hook)
        helper._watch = None
        without = per_call(hook)
        print(
            f"| {tensors} | {poll:.2f} | {full:.2f} | {with_watch:.2f} | {without:.2f} | "
            f"{with_watch - without:.2f} |"
        )


if __name__ == "__main__":
    main()
