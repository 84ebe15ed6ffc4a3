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

.PHONY: soak exit-soak serve test test-fast lint build pdf audit bench check-upstream gpu-check lock chromium clean

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

# Lighthouse's scores for a page of each kind, on a phone and a desktop, saved to benchmarks/lighthouse.*
# (the testing page shows them). Needs node; installs Lighthouse into .audit/ on first use. Not part of
# `make test`: it takes minutes, and the scores move with the machine's load.
audit: build chromium
	$(BIN)/python -m tools.lighthouse_audit

# TEST_WORKERS=3 runs three test processes side by side (pytest-xdist): most tests wait on the processes
# they start, so three keep two cores busy; the site's tests stay together in one of them (one build,
# one browser). The default, 0, runs everything in one process, as CI does until three parallel runs
# in a row pass there.
TEST_WORKERS ?= 0
test: $(STAMP) chromium
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The editing loop: every test that needs no process group, no torchrun, no browser and no site build
# (the `fast` tier: classifier, calculators, figures, saved-data claims, the pages' structure), in under
# a minute. `make test` stays the one gate.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m fast $(PYTEST_ARGS)

# ruff, configured in pyproject.toml: lint, then check that the code is formatted (`ruff format` fixes it).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Checks that need the network beyond the install, so not part of `make test`: whether the reason the
# launchers page gives for not running Horovod still holds, and whether the links to other sites answer.
check-upstream: $(STAMP)
	$(BIN)/python -m pytest -m upstream tests/test_upstream.py

# The nccl half of every "runs unchanged on GPUs": on a CUDA machine, every GPU tab and every example,
# one process per GPU, reported in benchmarks/gpu-check.txt. Without CUDA it skips, saying so.
gpu-check: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/python -m tools.gpu_check

# Re-measure the data that the pages quote; the machine is recorded with the numbers.
bench: $(STAMP)
	$(BIN)/distdocs bench allreduce --world-sizes 2,4 --sizes 256K,4M,64M --iters 10 --repeat 5 --save benchmarks/allreduce-cpu --figure docs/assets/allreduce-cpu.svg
	$(BIN)/distdocs bench pipeline --microbatches 1,2,4,8 --width 1024 --batch 256 --steps 5 --save benchmarks/pipeline-cpu --figure docs/assets/pipeline-cpu.svg
	$(BIN)/distdocs bench ddp --batch 256 --width 1024 --steps 10 --save benchmarks/ddp-cpu
	$(BIN)/distdocs bench buckets --caps 1,5,25,100 --steps 28 --save benchmarks/ddp-buckets-cpu
	$(BIN)/distdocs bench precision --width 1024 --depth 4 --batch 256 --steps 10 --save benchmarks/precision-cpu
	$(BIN)/distdocs bench prediction --accumulation 1,4 --steps 8 --repeat 3 --save benchmarks/prediction-cpu --figure docs/assets/prediction-cpu.svg
	$(BIN)/distdocs bench scaling --world-sizes 1,2,4 --accumulation 1,4 --steps 8 --save benchmarks/scaling-cpu --figure docs/assets/scaling-cpu.svg
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/lr_scaling/step01_linear_rule.py --save benchmarks/lr-scaling-cpu.json
	$(BIN)/python -m distdocs.figures loss-curves benchmarks/lr-scaling-cpu.json docs/assets/lr-scaling-cpu.svg
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/sync_strategies/step01_local_sgd.py --save benchmarks/local-sgd-cpu.json
	$(BIN)/python -m distdocs.figures loss-curves benchmarks/local-sgd-cpu.json docs/assets/local-sgd-cpu.svg
	$(BIN)/python -m distdocs.figures tensor-parallel examples/tensor_parallel/step01_by_hand.py docs/assets/tensor-parallel.svg
	$(BIN)/python -m distdocs.figures sim-commands docs/practice/in-production.md docs/assets/in-production-speedups.svg
	out=$$(mktemp -d) && PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/profiling/step01_profile_ddp.py --out $$out --table benchmarks/profile-ddp-cpu.txt \
	  && cp $$out/trace_rank0.json benchmarks/profile-trace-cpu.json
	$(BIN)/python -m distdocs.figures profile-trace benchmarks/profile-trace-cpu.json docs/assets/profile-trace-cpu.svg
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/common_mistakes/step01_small_model_scaled_out.py 2>/dev/null > benchmarks/common-mistakes-small-model-cpu.txt
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/common_mistakes/step02_workers_instead_of_accumulation.py 2>/dev/null > benchmarks/common-mistakes-accumulation-cpu.txt
	$(BIN)/distdocs bench recovery --repeat 5 --save benchmarks/recovery-cpu
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/debugging/step01_slower_with_more_ranks.py 2>/dev/null > benchmarks/debugging-slower-cpu.txt
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/debugging/step03_straggler.py 2>/dev/null > benchmarks/debugging-straggler-cpu.txt
	PATH=$(BIN):$$PATH torchrun --standalone --nproc_per_node=2 examples/debugging/step06_data_loading.py 2>/dev/null > benchmarks/debugging-data-loading-cpu.txt
	( echo "# $$(uname -m), $$(nproc) cores, torch $$($(BIN)/python -c 'import torch; print(torch.__version__)'), $$(date +%F)"; \
	  PATH=$(BIN):$$PATH TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 \
	    examples/fault_tolerance/step01_resume_after_kill.py --kill-rank 1 --kill-at-step 13 --ckpt-dir $$(mktemp -d) 2>/dev/null ) \
	  > benchmarks/fault-tolerance-cpu.txt

# Twenty kill points of the fault-tolerant example, drawn at random, each resumed to the same weights.
soak: $(STAMP)
	DISTDOCS_SOAK=20 $(BIN)/python -m pytest tests/test_fault_tolerance.py -k kill_point -v

# The exit soak: examples launched again and again under torchrun (8 of them, 125 times each, in turns),
# counting the launches in which a rank aborted at exit. Saved with the machine to benchmarks/exits-cpu.*;
# about an hour and a half on 2 cores. `make test` checks every run's exit directly (docexec/exit_probe).
exit-soak: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/distdocs bench exits --save benchmarks/exits-cpu

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

# Regenerate requirements.lock from requirements.in in a scratch venv.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet -r requirements.in
	{ echo "# Generated by 'make lock' from requirements.in: every package pinned. Do not edit by hand."; \
	  .lock-venv/bin/python -m pip freeze --all | sed -e 's/+cpu$$//' | grep -v -e '^pip==' ; } > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) site
