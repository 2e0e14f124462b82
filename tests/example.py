"""The example the template ships, as the tests of it see it: MNIST's data module, the SimpleNN network and the
Classifier. A test file of the example carries ``pytestmark = example.data`` (or ``.task``) and skips itself once the
project's default data module (or LightningModule) is its own, so that a project that replaced the example keeps a
suite about itself. The machinery's tests run on the tests' own task (conftest.py's ``task``) and need none of it."""

import importlib
import inspect

import pytest

from mnist_lightning.core import classes


def default_class(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def is_mnist_data() -> bool:
    """The project's default data module is still the example's: MNIST, FashionMNIST or KMNIST through torchvision."""
    arguments = inspect.signature(default_class(classes.DATA_MODULE)).parameters
    return {"data_dir", "dataset", "val_size"} <= arguments.keys()


def is_example_task() -> bool:
    """The project's LightningModule is still the example's: classification, the best epoch the highest val/acc."""
    model = classes.model_class()
    return getattr(model, "monitor", None) == "val/acc" and "num_classes" in inspect.signature(model).parameters


data = pytest.mark.skipif(not is_mnist_data(), reason="the project's data module is no longer the MNIST example")
task = pytest.mark.skipif(not is_example_task(), reason="the project's LightningModule is no longer the example's")
