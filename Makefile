# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/switchyard
VENV ?= $(CACHE)/venv-$(shell cat pyproject.toml | sha256sum | cut -c1-16)
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test venv lint kafka-start kafka-stop clean

venv:
	@bash .ci/setup-venv $(VENV)

## make run: the local broker (fetched and started if needed), the worker, executors, a load
run: venv
	$(BIN)/switchyard demo

## make test: the whole suite against a real local broker (started if none runs)
test: venv
	$(BIN)/switchyard kafka start
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check app agents models runtimes bench tests
	$(BIN)/mypy app agents models runtimes

kafka-start: venv
	$(BIN)/switchyard kafka start

kafka-stop: venv
	$(BIN)/switchyard kafka stop

clean:
	rm -rf data .pytest_cache .mypy_cache .ruff_cache .hypothesis
