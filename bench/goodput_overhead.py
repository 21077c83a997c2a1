"""What recording goodput costs training (issue 30), side by side in one run: the
quickstart's model (operator_client.examples.regression, a step of a few milliseconds on
CPU, so the recording's share is as large as it gets) fitted in one process, alternately with
the runtime's StepProfiler and with Lightning's default (no profiler), ROUNDS times each.
Prints:
- the calls Lightning makes into the profiler per step, and what one call costs beyond
  Lightning's default profiler, which it calls just the same (timed alone over the actions
  the fit made, each called as Lightning called it: profile() or start()/stop()): their
  product over the median step time is the recording's share of a step (goal < 0.5 %);
- the median step time with and without it, and their ratio (noisy on a shared machine: the
  share above is the steadier number).
Asserts nothing. Usage: python bench/goodput_overhead.py [STEPS] [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, ClassVar


def fit(steps: int, profiler: Any) -> float:
    """The median step time of one fit (seconds), from a callback's clock."""
    import lightning as L

    from operator_client.examples.regression import RegressionData, RegressionModel

    times: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            self.began = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            times.append(time.perf_counter() - self.began)

    L.seed_everything(7, verbose=False)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Clock()],
        profiler=profiler,
    )
    trainer.fit(RegressionModel(lr=0.05), datamodule=RegressionData(samples=2048, batch_size=32))
    return statistics.median(times[10:])


class Counting:
    """Wraps a StepProfiler to keep the actions Lightning profiles, each with how it was
    called: through profile() (most hooks) or start()/stop() directly (data fetches)."""

    def __init__(self) -> None:
        from operator_client.runtime.event_log import EventLog
        from operator_client.runtime.step_profiler import StepProfiler

        class Counted(StepProfiler):
            calls: ClassVar[list[tuple[str, bool]]] = []
            inside: ClassVar[set[str]] = set()

            def profile(self, action_name: str) -> Any:
                self.calls.append((action_name, True))
                self.inside.add(action_name)
                return super().profile(action_name)

            def start(self, action_name: str) -> None:
                if action_name not in self.inside:
                    self.calls.append((action_name, False))
                super().start(action_name)

        self.profiler = Counted(EventLog(0))
        self.calls = Counted.calls


def per_call(profiler: Any, calls: list[tuple[str, bool]]) -> float:
    """Seconds per call of `profiler` over these actions, each called as Lightning did."""
    began = time.perf_counter()
    for action, through_profile in calls:
        if through_profile:
            with profiler.profile(action):
                pass
        else:
            profiler.start(action)
            profiler.stop(action)
    return (time.perf_counter() - began) / len(calls)


def marginal(calls: list[tuple[str, bool]]) -> float:
    """What a call costs with the StepProfiler over what it costs with Lightning's default
    (PassThroughProfiler: Lightning calls it just the same), seconds; the best of 5."""
    from lightning.pytorch.profilers import PassThroughProfiler

    from operator_client.runtime.event_log import EventLog
    from operator_client.runtime.step_profiler import StepProfiler

    ours = min(per_call(StepProfiler(EventLog(0)), calls) for _ in range(5))
    default = min(per_call(PassThroughProfiler(), calls) for _ in range(5))
    return ours - default


def main(steps: int, rounds: int) -> None:
    counting = Counting()
    fit(steps, counting.profiler)
    calls = len(counting.calls) / steps
    cost = marginal(counting.calls * 20)
    with_it, without = [], []
    for _ in range(rounds):
        from operator_client.runtime.event_log import EventLog
        from operator_client.runtime.step_profiler import StepProfiler

        with_it.append(fit(steps, StepProfiler(EventLog(0))))
        without.append(fit(steps, None))
    step = statistics.median(without)
    print(
        f"profiler calls per step: {calls:.1f}, each {cost * 1e6:+.3f} us against "
        "Lightning's default profiler (negative: cheaper)"
    )
    print(
        f"median step: {step * 1e3:.3f} ms without recording, "
        f"{statistics.median(with_it) * 1e3:.3f} ms with it"
    )
    print(
        f"recording's share of a step (calls x cost / step): {calls * cost / step:.3%} "
        "(goal < 0.5%)"
    )
    print(f"step-time ratio with / without: {statistics.median(with_it) / step:.4f}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [300, 3][len(args) :]))
