# The two commands of the README's quick start. Each sets up what it needs itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# cuda13 brings NVRTC and the CUDA headers as wheels, so kernels compile on a machine without a GPU.
EXTRAS ?= cuda13,dev

.PHONY: demo test lint venv studio

# Python writes each module's .pyc on its first import and reads it from then on; a caller's
# PYTHONDONTWRITEBYTECODE=1 would make every start of a tool or test process compile its imports
# again, so these recipes clear it (the .pyc files go to __pycache__/, ignored by git).
export PYTHONDONTWRITEBYTECODE :=

# uv resolves and downloads in parallel (pip does one package at a time); it is bootstrapped
# with pip into the venv itself, so nothing outside .venv is needed or changed. No
# --compile-bytecode: compiling all 11,500 installed files took 22 of the install's 32 s on 2
# cores, while the tests import about 4,200 of them and compiling those on first use cost no
# measurable CPU time (make test on a fresh clone: 131 s of CPU without, 134 s with).
# One stamp per extras value: `make demo EXTRAS=cuda12,dev` after a cuda13 install finds no
# stamp for its value, so .venv is made anew with those extras (installing over it would leave
# both CuPy wheels, cupy-cuda13x and cupy-cuda12x, fighting over the `cupy` module). A change
# of pyproject.toml with the same extras installs over the existing .venv, as before. Without
# the stamp, an existing .venv kept whatever extras came first.
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),+,$(EXTRAS))

$(STAMP): pyproject.toml
	if ls $(VENV)/.installed-* >/dev/null 2>&1 && [ ! -e $@ ]; then rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/uv pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

demo: venv
	$(BIN)/astra optimize silu_and_mul

# One test process per core (pytest-xdist) where no GPU is visible, one where one is (tests/conftest.py).
test: venv
	$(BIN)/ruff check src tests benchmarks graphs
	$(BIN)/mypy  # settings in pyproject.toml [tool.mypy]
	$(BIN)/python -m pytest -q -ra -n auto

# LangGraph Studio: serves the graph of langgraph.json on 127.0.0.1 (docs/STUDIO.md), offline.
STUDIO_PORT ?= 2024
studio: venv
	LANGGRAPH_CLI_NO_ANALYTICS=1 LANGGRAPH_NO_VERSION_CHECK=true LANGSMITH_TRACING=false \
		$(BIN)/langgraph dev --no-browser --host 127.0.0.1 --port $(STUDIO_PORT)
