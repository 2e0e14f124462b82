#!/usr/bin/env python
"""Predict with a trained checkpoint: on files its data module reads, or (no files given) on its predict set.

python scripts/predict.py --ckpt_path runs/<run>/checkpoints/last.ckpt --output predictions.csv   # else CSV on stdout
"""
# with_digit_photos:
# Pictures of digits (any size, colours or polarity), folders of them, or IDX files:
#   python scripts/predict.py --ckpt_path runs/<run>/checkpoints/last.ckpt digit.png photos/ t10k-images-idx3-ubyte.gz
# end with_digit_photos

import sys

try:  # Ctrl-C while torch and Lightning import (seconds): the shell's status, not the import machinery's traceback
    from mnist_lightning.core.predict import main
except KeyboardInterrupt:
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
