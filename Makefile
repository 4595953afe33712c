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

.PHONY: setup system-packages check-thread demo test soak bench install-tcl uninstall-tcl clean

# The system check runs every time (it is quick), so a machine that lost a
# package gets it back even when the Python environment is up to date.
setup: system-packages $(SETUP_STAMP) src/tclamp/.built

# Tcl's headers, tclsh, the Thread package, and wish with a virtual X
# server (a test host) come from Debian.  Each check exits non-zero when its
# thing is missing: `tclsh` reading a pipe exits 0 even after an error, so
# the Tcl checks say `exit [catch ...]`.
tcl_has = echo 'exit [catch {package require $(1)}]' | $(2) >/dev/null 2>&1
MISSING_DEBS = $(strip \
    $(if $(wildcard /usr/lib/tcl8.6/tclConfig.sh),,tcl8.6 tcl8.6-dev) \
    $(shell $(call tcl_has,Thread,$(TCLSH)) || echo tcl-thread) \
    $(shell command -v wish >/dev/null || echo tk8.6) \
    $(shell command -v Xvfb >/dev/null || echo xvfb))

system-packages:
	@missing='$(MISSING_DEBS)'; if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi
	@$(call tcl_has,Thread,$(TCLSH)) || { echo "the Tcl Thread package is still missing" >&2; exit 1; }

# Exit status 0 when $(TCLSH) has the Thread package (the tests rely on it).
check-thread:
	@$(call tcl_has,Thread,$(TCLSH))

$(SETUP_STAMP): pyproject.toml setup.py
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
	$(PY) bench/compare.py

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
