"""PNG plots of a finished run: learning curves and the test confusion matrix (needs the plots extra).

``python -m mnist_lightning.plots <run folder>`` draws them again from its metrics.json (after a stop while they
were being drawn, say).
"""

import json
import sys
from pathlib import Path

import torch
from torch import Tensor


def save_plots(history: list[dict], confusion: Tensor | None, output_dir: Path) -> list[Path]:
    """Write curves.png (and confusion_matrix.png when given one); returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no window: works on servers and in CI
    import matplotlib.pyplot as plt

    paths = []
    epochs = [row["epoch"] + 1 for row in history]
    figure, (loss_axes, acc_axes) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for key, label in (("train/loss", "training"), ("val/loss", "validation")):
        loss_axes.plot(epochs, [row.get(key) for row in history], marker="o", label=label)
    loss_axes.set(title="Cross-entropy loss", xlabel="epoch", ylabel="loss")
    loss_axes.legend()
    acc_axes.plot(epochs, [100 * row.get("val/acc", float("nan")) for row in history], marker="o", color="tab:green")
    acc_axes.set(title="Validation accuracy", xlabel="epoch", ylabel="accuracy (%)")
    for axes in (loss_axes, acc_axes):
        axes.grid(alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
    paths.append(output_dir / "curves.png")
    figure.savefig(paths[-1], dpi=120)
    plt.close(figure)

    if confusion is not None:
        # torchmetrics draws its own metric: counts in every cell, any number of classes.
        from torchmetrics.classification import MulticlassConfusionMatrix

        figure, axes = MulticlassConfusionMatrix(num_classes=len(confusion)).plot(val=confusion.cpu())
        accuracy = 100 * float(confusion.trace() / confusion.sum())
        axes.set_title(f"Test confusion matrix ({accuracy:.2f} % correct)")
        paths.append(output_dir / "confusion_matrix.png")
        figure.savefig(paths[-1], dpi=120)
        plt.close(figure)
    return paths


def main(argv: list[str] | None = None) -> int:
    run_dir = Path((argv if argv is not None else sys.argv[1:] or ["."])[0])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    confusion = metrics.get("test/confusion_matrix")
    for path in save_plots(metrics["history"], torch.tensor(confusion) if confusion else None, run_dir):
        print(f"Plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
