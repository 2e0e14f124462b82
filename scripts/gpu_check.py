#!/usr/bin/env python
"""Everything that needs an NVIDIA GPU, in one command: `python scripts/gpu_check.py --data_dir data`.

`--cpu` runs the same steps on the CPU and skips what needs CUDA (CI runs it). Results go to
benchmarks/results/gpu_check_gpu.json (or _cpu) and .md. See src/mnist_lightning/gpu_check.py.
"""

import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("mnist_lightning.gpu_check"))
