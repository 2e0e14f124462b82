#!/usr/bin/env python
"""Predict digits for images, folders of images or IDX files.

python scripts/predict.py --ckpt_path runs/<run>/checkpoints/last.ckpt digit.png folder/ t10k-images-idx3-ubyte.gz
"""

import sys

from mnist_lightning.predict import main

if __name__ == "__main__":
    sys.exit(main())
