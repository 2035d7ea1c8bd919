"""What the encoder's capture hook costs a compiled training step, side by side in one process.

Two copies of the same transformer are compiled with the same backend: one bare, one with the
forward hook of learnscope's ``EncoderCapture`` on its encoder (joined by a callback-like
owner, told at every step that a batch starts and ends, as the callbacks do, and never armed:
an ordinary step). Their training steps (forward, backward, optimizer step) are timed in
alternation, so that drift in the machine's speed falls on both alike; the figure is each
copy's median step and their ratio, and the number of graphs torch compiled for each.

Run (CPU, Inductor compiles for about a minute first)::

    python benchmarks/compiled_capture.py --backend inductor --steps 400
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from overhead import SIZES, SmallTransformer
from torch._dynamo.utils import counters

from learnscope.lightning_glue.encoder_capture import EncoderCapture


class Hooked(SmallTransformer):
    """The same model under a training step of its own code, so that torch compiles it apart.

    (Dynamo keeps its compiled graphs per code object and, inlining modules, would run the bare
    model's graph, without the hook, for this one too.)
    """

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch, batch_idx)


@dataclass
class Compiled:
    """One copy of the model, its compiled training step, and what was measured of it."""

    model: SmallTransformer
    capture: EncoderCapture | None
    step: Any = None
    optimizer: Any = None
    graphs: int = 0
    times: list[float] = field(default_factory=list)

    def compile(self, backend: str, batch: tuple[torch.Tensor]) -> None:
        counters.clear()
        self.step = torch.compile(self.model.training_step, backend=backend)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4)
        self.run(batch)  # compiles
        self.graphs = counters["stats"]["unique_graphs"]

    def run(self, batch: tuple[torch.Tensor]) -> float:
        """One training step, as the callbacks would see it; its wall time."""
        start = time.perf_counter()
        if self.capture is not None:
            self.capture.batch_started()
        self.optimizer.zero_grad()
        self.step(batch, 0).backward()
        self.optimizer.step()
        if self.capture is not None:
            self.capture.batch_ended()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    size = SIZES["cpu"]
    batch = (torch.randint(0, size.vocab, (size.batch, size.seq + 1)),)
    torch.manual_seed(0)
    bare, hooked = SmallTransformer(size), Hooked(size)
    hooked.load_state_dict(bare.state_dict())
    owner, received = object(), []
    capture = EncoderCapture.of(hooked.encoder).join(owner, received.append)
    runs = {"bare": Compiled(bare, None), "with the capture hook": Compiled(hooked, capture)}
    for run in runs.values():
        run.compile(args.backend, batch)
    capture.arm(owner)  # one captured step: the hook is in the compiled graph
    runs["with the capture hook"].run(batch)
    if len(received) != 1:
        raise RuntimeError("the compiled step did not run the capture hook")
    for step in range(args.warmup + args.steps):
        for run in runs.values():  # alternating: drift falls on both alike
            seconds = run.run(batch)
            if step >= args.warmup:
                run.times.append(seconds)

    base = statistics.median(runs["bare"].times)
    print(f"{args.backend}, {size}, {args.steps} steps after {args.warmup}, 1 thread\n")
    print("| model | median step (ms) | ratio to bare | graphs compiled |")
    print("|---|---|---|---|")
    for name, run in runs.items():
        median = statistics.median(run.times)
        print(f"| {name} | {1000 * median:.2f} | {median / base:.3f} | {run.graphs} |")


if __name__ == "__main__":
    main()
