# tclamp: `make demo` and `make test` do the whole set-up on a fresh machine.
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
TCLSH ?= tclsh
PYTEST_ARGS ?=
SETUP_STAMP := $(VENV)/.tclamp-setup
BUILT_STAMP := $(VENV)/.tclamp-built
TORCH_RECORD := $(VENV)/.tclamp-torch
# The checkout's tcl/pkgIndex.tcl starts Python from the one named here.
PYTHON_RECORD := tcl/python-path
PREFIX ?= /usr/local
TCL_PKG_DIR ?= $(PREFIX)/lib/tcltk/tclamp
INSTALL_VENV ?= $(PREFIX)/lib/tclamp-python

export TCLLIBPATH := $(CURDIR)/tcl

.PHONY: setup system-packages check-thread demo test soak bench wheels install-tcl uninstall-tcl \
        clean FORCE

# The system check runs every time (it is quick), so a machine that lost a
# package gets it back even when the Python environment is up to date.
setup: system-packages $(SETUP_STAMP) $(BUILT_STAMP) $(PYTHON_RECORD) tcl/pkgIndex.tcl

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

# Another TORCH_SPEC than the one installed (recorded in the environment)
# makes the set-up run again, and so install that torch.
ifneq ($(shell cat $(TORCH_RECORD) 2>/dev/null),$(TORCH_SPEC))
$(SETUP_STAMP): FORCE
endif
$(SETUP_STAMP): pyproject.toml setup.py
	@echo "== Python environment $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "setuptools>=68" wheel
	@echo "== $(TORCH_SPEC), numpy and the test tools (torch is large: this takes a while)"
	$(PY) -m pip install --disable-pip-version-check "$(TORCH_SPEC)" numpy pytest hypothesis pexpect
	echo '$(TORCH_SPEC)' > $(TORCH_RECORD)
	touch $@

# The bridge is rebuilt whenever its C source changes.
$(BUILT_STAMP): $(SETUP_STAMP) $(wildcard src/tclamp/*.c src/tclamp/*.h) src/tclamp/VERSION setup.py pyproject.toml
	@echo "== building the bridge, installing tclamp into $(VENV) (editable)"
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

ifneq ($(shell cat $(PYTHON_RECORD) 2>/dev/null),$(abspath $(PY)))
$(PYTHON_RECORD): FORCE
endif
$(PYTHON_RECORD):
	echo '$(abspath $(PY))' > $@

# The checkout's package index, from the one template (src/tclamp/pkgindex.py).
tcl/pkgIndex.tcl: src/tclamp/pkgindex.py src/tclamp/VERSION
	$(PY) src/tclamp/pkgindex.py $@

demo: setup
	$(TCLSH) examples/train_amp.tcl

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

soak: setup
	TCLAMP_SOAK_SECONDS=600 $(PY) -m pytest -m soak $(PYTEST_ARGS)

bench: setup
	$(PY) bench/run.py
	$(PY) bench/compare.py
	$(TCLSH) bench/trace_overhead.tcl

# A release: one manylinux wheel per Python in WHEEL_PYTHONS, each with the
# bridge for Tcl 8.6 and for Tcl 9.0 (their headers come from Debian's -dev
# packages, unpacked into build/tcl), in dist/.  See docs/install.md.
WHEEL_PYTHONS ?= $(PY)
wheels:
	tools/wheels.sh $(WHEEL_PYTHONS)

# For any tclsh, independent of this checkout: torch and tclamp (not
# editable) in INSTALL_VENV, and its `tclamp install-tcl` writes the Tcl
# package index to TCL_PKG_DIR.  The build uses the environment's own
# setuptools (--no-build-isolation), so pip fetches nothing more for it.
install-tcl: system-packages
	@echo "== Python environment $(INSTALL_VENV)"
	test -x $(INSTALL_VENV)/bin/python || \
	    { $(PYTHON) -m venv $(INSTALL_VENV) && touch $(INSTALL_VENV)/.made-by-tclamp; }
	@echo "== $(TORCH_SPEC), numpy and tclamp into $(INSTALL_VENV)"
	$(INSTALL_VENV)/bin/python -m pip install --disable-pip-version-check "setuptools>=68" wheel "$(TORCH_SPEC)" numpy
	$(INSTALL_VENV)/bin/python -m pip install --disable-pip-version-check --no-build-isolation --no-deps .
	$(INSTALL_VENV)/bin/tclamp install-tcl $(TCL_PKG_DIR)

# Removes the index, and the environment if install-tcl made it (else
# only tclamp from it).
uninstall-tcl:
	rm -rf $(TCL_PKG_DIR)
	if [ -f $(INSTALL_VENV)/.made-by-tclamp ]; then rm -rf $(INSTALL_VENV); \
	elif [ -x $(INSTALL_VENV)/bin/python ]; then \
	    $(INSTALL_VENV)/bin/python -m pip uninstall -y -q tclamp; fi

clean:
	rm -rf $(VENV) $(PYTHON_RECORD) tcl/pkgIndex.tcl build dist src/*.egg-info src/tclamp/_bridge*.so \
	    src/tclamp/_loader*.so src/tclamp/.built .pytest_cache .hypothesis
