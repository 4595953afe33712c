# tclamp: `make demo` and `make test` do the whole set-up on a fresh machine.
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
TCLSH ?= tclsh
PYTEST_ARGS ?=
SETUP_STAMP := $(VENV)/.tclamp-setup
PREFIX ?= /usr/local
TCL_PKG_DIR ?= $(PREFIX)/lib/tcltk/tclamp

export TCLLIBPATH := $(CURDIR)/tcl

.PHONY: setup system-packages demo test soak bench install-tcl uninstall-tcl clean

setup: $(SETUP_STAMP) src/tclamp/.built

# Tcl's headers, tclsh and the Thread package come from Debian.
system-packages:
	@if ! [ -f /usr/lib/tcl8.6/tclConfig.sh ] || ! echo 'package require Thread' | $(TCLSH) >/dev/null 2>&1; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq tcl8.6 tcl8.6-dev tcl-thread; \
	fi

$(SETUP_STAMP): pyproject.toml setup.py
	@$(MAKE) --no-print-directory system-packages
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "setuptools>=61" wheel
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)" numpy pytest hypothesis pexpect
	touch $@

# The bridge is rebuilt whenever its C source changes.
src/tclamp/.built: $(SETUP_STAMP) src/tclamp/_bridge.c setup.py
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

demo: setup
	$(TCLSH) examples/train_amp.tcl

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

soak: setup
	TCLAMP_SOAK_SECONDS=60 $(PY) -m pytest -m soak $(PYTEST_ARGS)

bench: setup
	$(PY) bench/run.py

# For a system tclsh without TCLLIBPATH: a pkgIndex.tcl with absolute paths.
install-tcl: setup
	mkdir -p $(TCL_PKG_DIR)
	printf '%s\n' '# tclamp, installed from $(CURDIR)' \
	    'namespace eval ::tclamp [list variable python {$(abspath $(PY))}]' \
	    'set dir {$(CURDIR)/src/tclamp}' \
	    'source [file join $$dir pkgIndex.tcl]' > $(TCL_PKG_DIR)/pkgIndex.tcl
	@echo "installed $(TCL_PKG_DIR)/pkgIndex.tcl"

uninstall-tcl:
	rm -rf $(TCL_PKG_DIR)

clean:
	rm -rf $(VENV) build src/*.egg-info src/tclamp/_bridge*.so src/tclamp/.built .pytest_cache .hypothesis
