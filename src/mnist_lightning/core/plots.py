"""PNG plots of a finished run (needs the plots extra): learning curves and the test confusion matrix;
``python -m mnist_lightning.core.plots <run folder>`` draws them again from its metrics.json."""

import json
import sys
from pathlib import Path

import torch

from .errors import UserError, run_main
from .records import replaced


def save_plots(history: list[dict], confusion: torch.Tensor | list | None, output_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no window: works on servers and in CI
    import matplotlib.pyplot as plt
    from torchmetrics.classification import MulticlassConfusionMatrix

    panels = {}  # a panel per kind of metric the model logged: train/loss and val/loss together
    for name in dict.fromkeys(key for row in history for key in row if key not in ("epoch", "seconds")):
        panels.setdefault(name.rpartition("/")[2], []).append(name)
    figure, axes = plt.subplots(1, max(len(panels), 1), figsize=(10, 4), layout="constrained", squeeze=False)
    figures, epochs = {"curves.png": figure}, [row["epoch"] + 1 for row in history]
    for ax, (title, keys) in zip(axes[0], panels.items(), strict=False):  # (an empty panel without metrics)
        for key in keys:
            ax.plot(epochs, [row.get(key) for row in history], marker="o", label=key)
        ax.set(title=title, xlabel="epoch")
        ax.legend()
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if confusion is not None:  # torchmetrics draws its own metric: counts in every cell, any number of classes
        confusion = torch.as_tensor(confusion).cpu()
        figures["confusion_matrix.png"], ax = MulticlassConfusionMatrix(len(confusion)).plot(val=confusion)
        ax.set_title(f"Test confusion matrix ({100 * float(confusion.trace() / confusion.sum()):.2f} % correct)")
    for name, figure in figures.items():
        with replaced(output_dir / name) as file:  # whole or not at all; a failed write is a WriteError
            figure.savefig(file, format="png", dpi=120)
        plt.close(figure)
    return [output_dir / name for name in figures]


def main(argv: list[str] | None = None) -> int:
    metrics_file = Path(((sys.argv[1:] if argv is None else argv) or ["."])[0]) / "metrics.json"

    def draw() -> None:
        if not metrics_file.is_file():
            raise UserError(f"No {metrics_file}: pass the folder of a finished run, e.g. runs/<run>.")
        metrics = json.loads(metrics_file.read_text())
        for path in save_plots(metrics["history"], metrics.get("test/confusion_matrix"), metrics_file.parent):
            print(f"Plot: {path}")

    return run_main(draw, exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
