# Two commands do all the set-up (see README.md):
#   make serve   create .venv, install everything pinned, build the site and serve it on 127.0.0.1:8000
#   make test    create .venv if it is missing, then run every test
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Material prints a banner about its successor on every build; it is noise in test logs.
export NO_MKDOCS_2_WARNING := 1

.PHONY: sync-examples soak exit-soak preempt-soak serve test test-page test-fast test-torch lint build pdf audit bench check-upstream gpu-check lock chromium slurm slurm-check clean

# The lock pins every package, torch==2.13.0 (a CPU build) among them: an unpinned torch would pull
# a CUDA build of several GB. The stamp makes the install run again when the lock changes.
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

serve: $(STAMP)
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

build: $(STAMP)
	$(BIN)/mkdocs build --strict

# The whole site as one PDF, distdocs.pdf: its print page (mkdocs-print-site-plugin), printed to A4 by
# the same Chromium that the tests drive. Every page of the site starts a page of the PDF.
pdf: build chromium
	$(BIN)/python -m tools.browser pdf site distdocs.pdf

# Lighthouse's scores for a page of each kind, on a phone and a desktop, saved to measurements/lighthouse.*
# (the testing page shows them). Needs node; installs Lighthouse into .audit/ on first use. Not part of
# `make test`: it takes minutes, and the scores move with the machine's load.
audit: build chromium
	$(BIN)/python -m tools.saved_data run audit

# Three test processes side by side (pytest-xdist): most tests wait at times on the processes they start,
# so three keep two cores busy (docs/appendix/testing.md says what stays isolated). TEST_WORKERS=0 runs
# everything in one process, which takes about half as long again.
TEST_WORKERS ?= 3
# DeepSpeed's CPU op is compiled first, alone (tools/deepspeed_ops.py says why); once cached, this is quick.
test: $(STAMP) chromium slurm
	$(BIN)/python -m tools.deepspeed_ops
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

# The loop for one page: everything PAGE shows (its inline fences, its commands and output blocks, the
# examples it includes), then the fast tier. `make test-page PAGE=docs/lesson/collectives.md`.
test-page: $(STAMP)
	@test -f "$(PAGE)" || { echo "usage: make test-page PAGE=docs/SECTION/PAGE.md" >&2; exit 2; }
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxschedchunk 1 --page $(PAGE) tests $(PAGE) $(PYTEST_ARGS)

# The editing loop: every test that needs no process group, no torchrun, no browser and no site build
# (the `fast` tier: classifier, calculators, figures, saved-data claims, the pages' structure), in under
# a minute. `make test` stays the one gate.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m fast $(PYTEST_ARGS)

# What the examples repeat by design (the setup section, the timeout comment, log, now, usage_error,
# release_dtensor_caches) has one source, tools/example_blocks.py: stamp it into every copy. Only those
# blocks change; a fast test fails on a copy that differs. `python -m tools.sync_examples --check` only looks.
sync-examples: $(STAMP)
	$(BIN)/python -m tools.sync_examples

# ruff, configured in pyproject.toml: lint, then check that the code is formatted (`ruff format` fixes it).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Checks that need the network beyond the install, so not part of `make test`: whether the reason the
# launchers page gives for not running Horovod still holds, and whether the links to other sites answer.
check-upstream: $(STAMP)
	$(BIN)/python -m pytest -m upstream tests/test_upstream.py

# Every example under another release of torch, by the tests' rule (tools/torch_check.py): a second venv,
# .venv-torch-VERSION, and a report under measurements/. Not part of `make test`: several GB to install.
test-torch: $(STAMP)
	@test -n "$(VERSION)" || { echo "usage: make test-torch VERSION=2.14.1" >&2; exit 2; }
	$(BIN)/python -m tools.torch_check $(VERSION)

# The nccl half of every "runs unchanged on GPUs": on a CUDA machine, every GPU tab and every example,
# one process per GPU, reported in measurements/gpu-check.txt. Without CUDA it skips, saying so.
gpu-check: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/python -m tools.gpu_check

# Re-measure the data that the pages quote, with the machine recorded beside the numbers: every entry of
# measurements/saved-data.yml whose target is bench, in order (the list also says which pages and tests
# read each file).
bench: $(STAMP)
	$(BIN)/python -m tools.saved_data run bench

# Twenty kill points of the fault-tolerant example, drawn at random, each resumed to the same weights.
soak: $(STAMP)
	DISTDOCS_SOAK=20 $(BIN)/python -m pytest tests/test_fault_tolerance.py -k kill_point -v

# The exit soak: examples launched again and again under torchrun (8 of them, 125 times each, in turns),
# counting the launches in which a rank aborted at exit. Saved with the machine to measurements/exits-cpu.*;
# about an hour and a half on 2 cores. `make test` checks every run's exit directly (docexec/exit_probe).
exit-soak: $(STAMP)
	$(BIN)/python -m tools.saved_data run exit-soak

# The preemption soak: the SLURM job preempted fifty times (scancel --batch --signal=USR1), each job
# cancelled once it trains again, counting the runs in which the ranks did not save on SIGTERM. Saved
# with the machine to measurements/slurm-preempt-soak-cpu.*; about half an hour; root (a SLURM cluster in
# network namespaces). `make test` preempts the job once.
preempt-soak: $(STAMP) slurm
	$(BIN)/python -m tools.saved_data run preempt-soak

# The browser test drives Debian's chromium through Playwright's Python package. Never run
# `playwright install`: it downloads a browser, which this network does not allow.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "note: /usr/bin/chromium is missing and installing it needs root (apt-get install chromium);" \
	         "the browser test will be skipped"; \
	  fi; \
	fi

# SLURM's daemons, client and munge (Debian's 22.05), for tests/test_slurm.py: a cluster of network
# namespaces on this machine runs the launch page's job script. Installing them needs root, as the
# namespaces do; without root the SLURM tests are skipped.
SLURM_COMMANDS := slurmctld slurmd sbatch munged
slurm:
	@if [ "$$(command -v $(SLURM_COMMANDS) | wc -l)" != 4 ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null; \
	  else \
	    echo "note: SLURM is missing and installing it needs root (apt-get install slurmctld slurmd slurm-client munge);" \
	         "the SLURM tests will be skipped"; \
	  fi; \
	fi

# The SLURM round trip alone: start munged, slurmctld and three slurmd in namespaces, submit the job
# script, lose a node, preempt, check every result and that nothing is left running. Part of `make test`.
slurm-check: $(STAMP) slurm
	$(BIN)/python -m pytest tests/test_slurm.py -v

# Regenerate requirements.lock from requirements.in in a scratch venv.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet -r requirements.in
	{ echo "# Generated by 'make lock' from requirements.in: every package pinned. Do not edit by hand."; \
	  .lock-venv/bin/python -m pip freeze --all | sed -e 's/+cpu$$//' | grep -v -e '^pip==' ; } > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) site
