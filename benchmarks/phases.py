#!/usr/bin/env python
"""Where one ``scripts/train.py`` run spends its time, phase by phase, in a process of its own.

    python benchmarks/phases.py --data.data_dir <MNIST root> --output_dir /tmp/run     # any train.py flags

Runs ``mnist_lightning.core.train.main`` as ``scripts/train.py`` does, with clocks around its phases: the imports,
parsing, building, fit (its setup, of which the data check, the sanity check, the training loop and, within it,
the checkpoint writes), test, the plots. Clocks wrap this project's own functions, the Trainer object's
public ``fit``/``test`` methods and a Callback's hooks; nothing inside Lightning is changed. The last line of
stdout is the phases as JSON. ``benchmarks/run.py`` runs this alternated with the plain ``scripts/train.py`` it
mirrors and adds the two phases only a parent sees: the interpreter's start (from ``$PHASES_SPAWN_TIME``, the
parent's clock when it started this process) and its exit (after ``main_returned_at``).
"""

import time

STARTED = time.time()  # the first line run: the interpreter (site-packages included) has started

import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

SECONDS: dict[str, float] = {}
MARKS: dict[str, float] = {}


def timed(name: str, function):
    """``function``, adding its wall time to ``SECONDS[name]`` at each call."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[name] = SECONDS.get(name, 0.0) + time.perf_counter() - start

    return wrapper


def main() -> int:
    start = time.perf_counter()
    from lightning.pytorch import Callback

    import mnist_lightning.core.plots as plots  # only with_plots
    import mnist_lightning.core.train as train_module
    from mnist_lightning.core import checkpoints
    from mnist_lightning.datamodule import MNISTDataModule

    SECONDS["imports"] = time.perf_counter() - start

    class Marks(Callback):
        """Clock readings at the borders of fit's stages (a callback with no per-step hooks)."""

        def on_sanity_check_start(self, trainer, pl_module):
            MARKS["sanity_start"] = time.perf_counter()

        def on_sanity_check_end(self, trainer, pl_module):
            MARKS["sanity_end"] = time.perf_counter()

        def on_train_start(self, trainer, pl_module):
            MARKS["train_start"] = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            MARKS["train_end"] = time.perf_counter()

    # This project's functions are looked up by name when called, so wrapping them here times every call.
    MNISTDataModule.prepare_data = timed("data check", MNISTDataModule.prepare_data)
    io = checkpoints.AtomicCheckpointIO
    io.save_checkpoint = timed("checkpoint writes", io.save_checkpoint)
    plots.save_plots = timed("plots", plots.save_plots)  # only with_plots
    train_module.parse_args = timed("parse", train_module.parse_args)
    build = timed("build", train_module.build)

    def fit(trainer_fit, *args, **kwargs):
        MARKS["fit_start"] = time.perf_counter()
        try:
            return trainer_fit(*args, **kwargs)
        finally:
            MARKS["fit_end"] = time.perf_counter()

    def build_and_clock(config, run):
        training = build(config, run)
        trainer = training.trainer
        trainer.callbacks.append(Marks())
        trainer.fit = functools.partial(fit, trainer.fit)
        trainer.test = timed("test", trainer.test)
        return training

    train_module.build = build_and_clock  # what train.run calls, after opening the run
    main_start = time.perf_counter()
    code = train_module.main(sys.argv[1:])
    returned = time.time()
    main_seconds = time.perf_counter() - main_start
    m = MARKS
    sanity = m.get("sanity_end", m["train_start"]) - m.get("sanity_start", m["train_start"])
    SECONDS.update(
        {
            "fit": m["fit_end"] - m["fit_start"],
            "fit: setup": m.get("sanity_start", m["train_start"]) - m["fit_start"],
            "fit: sanity check": sanity,
            "fit: training loop": m["train_end"] - m["train_start"],
            "fit: teardown": m["fit_end"] - m["train_end"],
        }
    )
    accounted = sum(SECONDS.get(name, 0.0) for name in ("parse", "build", "fit", "test", "plots"))
    SECONDS["rest of main (metrics.json, summary)"] = main_seconds - accounted
    SECONDS["startup"] = STARTED - float(os.environ.get("PHASES_SPAWN_TIME", STARTED))
    print("\n" + json.dumps({"seconds": SECONDS, "main_returned_at": returned}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
