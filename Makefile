# `make train` and `make test` do all the set-up themselves: the first use creates .venv and installs the
# project into it (pip install -e ".[dev]"); later uses reuse it. Extra arguments go in ARGS="...".
# `make test` skips the tests marked slow (each starts Python processes, which import torch and Lightning anew: a
# script run as a user runs it, DDP, kill -9, a run to resume); `make test-all` runs everything, as CI does.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The tests run in one process per core (pytest-xdist): a test spends most of its time on one core, in the Python
# processes it starts. ARGS="-n 0" runs them in one process.
PYTEST := -m pytest -n auto

# The lowest versions pyproject.toml allows of the libraries the template leans on; test-lowest runs the default
# suite against them in a venv of its own. That venv takes everything else (torch above all: gigabytes) from .venv
# through a .pth file instead of installing it again; its own site-packages come first on sys.path, so the pinned
# versions are the ones imported (pip says it is "not uninstalling" .venv's newer ones: they stay there, unused).
LOWEST := "lightning==2.6.0" "torchmetrics==1.7.0" "jsonargparse[signatures]==4.53.0" "filelock==3.30.0"

# The branch of the template's repository that cruft reads (.cruft.json records the template and the commit baked).
TEMPLATE_BRANCH ?= template

.PHONY: install train test test-all test-lowest lint format clean gpu-check gpu-check-cpu update-template check-template

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

train: install
	$(BIN)/python scripts/train.py $(ARGS)

test: install
	$(BIN)/python $(PYTEST) -m "not slow" $(ARGS)

test-all: install
	$(BIN)/python $(PYTEST) $(ARGS)

# Everything that needs an NVIDIA GPU, one command; results in gpu_check_gpu.json and .md (where: gpu_check.py --help).
# gpu-check-cpu runs the same steps on the CPU and skips what needs CUDA (tests/test_gpu.py runs it in CI).
gpu-check: install
	$(BIN)/python scripts/gpu_check.py $(ARGS)

gpu-check-cpu: install
	$(BIN)/python scripts/gpu_check.py --cpu $(ARGS)

test-lowest: install
	$(BIN)/python -m venv $(VENV)-lowest
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$$($(VENV)-lowest/bin/python \
		-c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/parent_venv.pth"
	$(VENV)-lowest/bin/python -m pip install -e ".[dev]" $(LOWEST)
	$(VENV)-lowest/bin/python $(PYTEST) -m "not slow" $(ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The template's changes since this project's commit of it, merged into your files with the answers in .cruft.json
# (cruft update; commit your work first); where you changed the same lines, git's conflict markers and an error
# naming the files. scripts/update_template.py says why it is more than `cruft update`.
update-template: install
	$(BIN)/python scripts/update_template.py --checkout $(TEMPLATE_BRANCH)

# Whether the template has changes that this project lacks (CI warns when it has).
check-template: install
	$(BIN)/python scripts/update_template.py --check --checkout $(TEMPLATE_BRANCH)

clean:
	rm -rf $(VENV) $(VENV)-lowest .pytest_cache .ruff_cache src/*.egg-info
