"""Reading digits from files for prediction: pictures of any size, colours or polarity, and MNIST's IDX files.

Used by ``MNISTDataModule.read_file``, which ``predict.py`` calls for each file it is given. Each picture goes
through ``preprocessing.to_model_input``: its ink is told from the paper and the digit is made the way MNIST
made its own (cropped, scaled to 20 px, centred by mass on 28x28). IDX files already hold MNIST digits.
"""

import gzip
import tempfile
import warnings
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torchvision.datasets.mnist import read_image_file

from .preprocessing import STEPS, NoInkError, to_model_input

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


class NothingToPredict(ValueError):
    """A file given to predict.py holds no input (a blank picture, say): skipped, its note saying so."""


class UnreadableFile(ValueError):
    """A file that holds no picture or digits this reader can use; the message says why, in the user's terms."""


def is_idx(path: Path) -> bool:
    return "idx3" in path.name or path.suffix == ".idx"


def readable(path: Path) -> bool:
    """Whether a file in a folder given to predict.py is one of the kinds read here."""
    return path.suffix.lower() in IMAGE_SUFFIXES or is_idx(path)


def read_digits(path: Path, mean: float, std: float) -> Tensor:
    """Model inputs [n, 1, 28, 28]: every digit of an IDX file, or the one digit of a picture. A picture with no ink
    is NothingToPredict; any other failure is an UnreadableFile that says why."""
    try:
        if is_idx(path):
            return read_idx(path).unsqueeze(1).float().div(255).sub(mean).div(std)  # as the training data
        with warnings.catch_warnings():
            # Pillow only warns between its pixel limit and twice it; such a file is refused like a larger one.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                return to_model_input(image, mean, std).unsqueeze(0)
    except NoInkError as error:
        raise NothingToPredict(f"blank: {error}") from error
    except Exception as error:  # one bad file (of any kind of damage) is reported, and the others still count
        raise UnreadableFile(why_unreadable(error)) from error


def read_idx(path: Path) -> Tensor:
    """uint8 images [N, 28, 28] from an IDX image file (gzipped or not), parsed by torchvision."""
    if path.suffix != ".gz":
        return read_image_file(str(path))
    with tempfile.NamedTemporaryFile(suffix="-idx3-ubyte") as plain:
        plain.write(gzip.decompress(path.read_bytes()))
        plain.flush()
        return read_image_file(plain.name)


def why_unreadable(error: Exception) -> str:
    """What went wrong with a file, in the user's terms."""
    if isinstance(error, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return f"too large to decode safely, over Pillow's limit of {Image.MAX_IMAGE_PIXELS:,} pixels"
    if isinstance(error, UnidentifiedImageError):
        return "not an image that Pillow can read"
    if isinstance(error, OSError):
        return f"could not be read: {error}"
    return f"failed ({type(error).__name__}: {error})"


def with_picture_recipe(spec: dict) -> dict:
    """``spec`` (the data module's normalize step), and how to make the model's input from a picture before it, for
    export's preprocessing.json."""
    return spec | {
        "from_mnist_digit": "A digit already in MNIST's form (uint8 [28, 28], light ink on black, as in the IDX "
        "files) needs only the normalize step.",
        "from_picture": {
            "reference": "mnist_lightning.preprocessing.to_model_input (numpy, Pillow and torch; the file depends "
            "on nothing else in this project and can be copied on its own)",
            "no_ink": "A picture with no ink (blank, one colour, only noise) has no digit: report it as blank.",
            "steps": STEPS,
        },
    }
