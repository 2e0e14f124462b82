#!/usr/bin/env python
"""Predict digits for pictures (any size, colours or polarity), folders of them, or IDX files.

python scripts/predict.py --ckpt_path runs/<run>/checkpoints/last.ckpt digit.png photos/ t10k-images-idx3-ubyte.gz
python scripts/predict.py --ckpt_path <ckpt> photos/ --output predictions.csv --quiet true      # for scripts
"""

import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("mnist_lightning.core.predict"))
