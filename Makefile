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
# The Tcl the bridge is built for: TCLSH, its version (from its name when it
# is not installed yet), its wish, and its tclConfig.sh, which is found when
# a recipe runs (system-packages may have just installed it).
TCL_VERSION := $(or $(shell echo 'puts $$tcl_version' | $(TCLSH) 2>/dev/null),\
                    $(filter 8.6 9.0,$(patsubst tclsh%,%,$(notdir $(TCLSH)))),8.6)
WISH ?= $(shell echo '$(TCLSH)' | sed 's,tclsh\([^/]*\)$$,wish\1,')
TCL_CONFIG = $(shell $(TCLSH) tools/tcl-config.tcl 2>/dev/null)
# The choice (its tclConfig.sh), recorded for what builds or tests without
# make: setup.py (a later `pip install .`) and tests/conftest.py read it.
TCL_RECORD := $(VENV)/.tclamp-tcl-config
# The checkout's tcl/pkgIndex.tcl starts Python from the one named here.
PYTHON_RECORD := tcl/python-path
PREFIX ?= /usr/local
TCL_PKG_DIR ?= $(PREFIX)/lib/tcltk/tclamp
INSTALL_VENV ?= $(PREFIX)/lib/tclamp-python

export TCLLIBPATH := $(CURDIR)/tcl

.PHONY: setup system-packages check-thread demo test soak bench wheels install-tcl \
        uninstall-tcl matrix free-threaded-build gpu-pack gpu-check clean FORCE

# The system check runs every time (it is quick), so a machine that lost a
# package gets it back even when the Python environment is up to date.
setup: system-packages $(SETUP_STAMP) $(TCL_RECORD) $(BUILT_STAMP) $(PYTHON_RECORD) \
       tcl/pkgIndex.tcl

# Tcl's headers, tclsh, the Thread package, and wish with a virtual X
# server (a test host), and valgrind (the embed host's exit is checked
# under it), come from Debian, in the packages of TCLSH's version
# (Debian 12 has 8.6's, Debian 13 also 9.0's).  Each check exits non-zero
# when its thing is missing: `tclsh` reading a pipe exits 0 even after an
# error, so the Tcl checks say `exit [catch ...]`.
tcl_has = echo 'exit [catch {package require $(1)}]' | $(2) >/dev/null 2>&1
# Debian 13 names 9.0's Thread tcl9.0-thread; sid has one tcl-thread
# for both Tcls.  The recipe asks apt (once its lists are fresh) which it has.
THREAD_DEB = $(if $(filter 8.6,$(TCL_VERSION)),tcl-thread,tcl$(TCL_VERSION)-thread)
# Debian's own Python makes no venv without python3.X-venv (ensurepip) and
# builds no bridge without python3.X-dev (Python.h, and the libpython the
# loader opens); neither comes with python3.  A fresh machine with no
# python3 at all gets Debian's, with both.
# (Its version is read from a line of its own: a wrapper that prints more,
# or PYTHON empty or no Python, gives none, not words for apt-get.)
# Those packages serve Debian's Python alone: one whose sys.base_prefix is
# /usr and whose sysconfig has the install scheme Debian's patches add,
# deb_system (a venv made from it too, whose headers, ensurepip and
# sysconfig are its base's).  Another Python (pyenv's, a build in
# /usr/local, one built into /usr by hand) that lacks them gets nothing
# from apt: the set-up stops and says what it lacks.
PYTHON_VERSION = $(if $(strip $(PYTHON)),$(shell $(PYTHON) -c \
    'import sys; print("tclamp-python-version %d.%d" % sys.version_info[:2])' 2>/dev/null | \
    sed -n 's/^tclamp-python-version \([0-9]*\.[0-9]*\)$$/\1/p'))
python_lacks = ! $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not ($(1)))' >/dev/null 2>&1
# What PYTHON lacks, by name: ensurepip (only while the venv is still to
# make) and Python.h.
PYTHON_LACKS = $(if $(PYTHON_VERSION),$(strip \
    $(if $(wildcard $(PY)),,$(shell $(call python_lacks,__import__("importlib.util").util.find_spec("ensurepip")) && echo ensurepip)) \
    $(shell $(call python_lacks,os.path.exists(os.path.join(sysconfig.get_paths()["include"]$(comma) "Python.h"))) && echo Python.h)))
PYTHON_IS_DEBIANS = $(shell $(call python_lacks,sys.base_prefix == "/usr" and \
    "deb_system" in sysconfig.get_scheme_names()) || echo yes)
# Why it is not: its prefix, or, in /usr, the scheme it lacks.
PYTHON_NOT_DEBIANS = its sys.base_prefix is $(PYTHON_BASE_PREFIX)$(if $(filter /usr,$(PYTHON_BASE_PREFIX)),$(comma) \
    but its sysconfig has no deb_system scheme$(comma) which Debian's patches give Debian's python3,$(comma) not /usr)
PYTHON_BASE_PREFIX = $(if $(strip $(PYTHON)),$(shell $(PYTHON) -c \
    'import sys; print("tclamp-python-prefix", sys.base_prefix)' 2>/dev/null | sed -n 's/^tclamp-python-prefix //p'))
PYTHON_DEBS = $(if $(PYTHON_VERSION),\
    $(if $(PYTHON_IS_DEBIANS),$(patsubst ensurepip,python$(PYTHON_VERSION)-venv,\
        $(patsubst Python.h,python$(PYTHON_VERSION)-dev,$(PYTHON_LACKS)))),\
    $(if $(filter python3,$(PYTHON)),python3 python3-venv python3-dev))
# What a Python that is not Debian's lacks (empty for Debian's).
PYTHON_LACKS_UNSERVED = $(if $(PYTHON_VERSION),$(if $(PYTHON_IS_DEBIANS),,$(PYTHON_LACKS)))
comma := ,
# An empty PYTHON (an exported empty one beats the default) is said to be
# empty where it would make the environment $(1); it ran as `-m venv`.
python_named = test -n '$(strip $(PYTHON))' || \
    { echo 'make: PYTHON is empty: name the python3 that makes $(1) (PYTHON=python3)' >&2; exit 1; }
MISSING_DEBS = $(strip \
    $(PYTHON_DEBS) \
    $(if $(TCL_CONFIG),,tcl$(TCL_VERSION) tcl$(TCL_VERSION)-dev) \
    $(shell $(call tcl_has,Thread,$(TCLSH)) || echo $(THREAD_DEB)) \
    $(shell command -v $(WISH) >/dev/null || echo tk$(TCL_VERSION)) \
    $(shell command -v Xvfb >/dev/null || echo xvfb) \
    $(shell command -v valgrind >/dev/null || echo valgrind))

system-packages:
	@lacks='$(PYTHON_LACKS_UNSERVED)'; if [ -n "$$lacks" ]; then \
	    what=; for thing in $$lacks; do case $$thing in \
	        ensurepip) what="$${what:+$$what and }no ensurepip (python -m venv needs it to make $(VENV))";; \
	        Python.h) what="$${what:+$$what and }no Python.h (the bridge is built with it)";; \
	    esac; done; \
	    { echo "make: PYTHON=$(PYTHON) has $$what."; \
	      echo "It is not Debian's own Python ($(PYTHON_NOT_DEBIANS)):" \
	           "Debian's python$(PYTHON_VERSION)-venv and python$(PYTHON_VERSION)-dev would not serve it."; \
	      echo "Give that Python what it lacks (reinstall or rebuild it with its headers and ensurepip)," \
	           "or name one that has them, or Debian's own: PYTHON=/usr/bin/python3"; } >&2; \
	    exit 1; \
	fi
	@missing='$(MISSING_DEBS)'; if [ -n "$$missing" ]; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    if [ '$(THREAD_DEB)' != tcl-thread ] && ! apt-cache show '$(THREAD_DEB)' >/dev/null 2>&1; then \
	        missing=$$(echo " $$missing " | sed 's/ $(THREAD_DEB) / tcl-thread /; s/^ //; s/ $$//'); \
	    fi && \
	    echo "installing Debian packages: $$missing" && \
	    $$SUDO apt-get install -y -qq $$missing; \
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
	@test -x $(PY) || $(call python_named,$(VENV))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "setuptools>=68" wheel
	@echo "== $(TORCH_SPEC), numpy and the test tools (torch is large: this takes a while)"
	$(PY) -m pip install --disable-pip-version-check "$(TORCH_SPEC)" numpy pytest pytest-xdist hypothesis pexpect
	echo '$(TORCH_SPEC)' > $(TORCH_RECORD)
	touch $@

# Another Tcl than the one recorded makes the bridge build again.
ifneq ($(shell cat $(TCL_RECORD) 2>/dev/null),$(TCL_CONFIG))
$(TCL_RECORD): FORCE
endif
$(TCL_RECORD): $(SETUP_STAMP)
	@test -n '$(TCL_CONFIG)' || $(TCLSH) tools/tcl-config.tcl
	echo '$(TCL_CONFIG)' > $@

# The bridge is rebuilt whenever its C source or the Tcl changes, or its
# build is gone from the checkout (a fresh copy beside a kept environment).
ifeq ($(wildcard src/tclamp/_bridge*.so),)
$(BUILT_STAMP): FORCE
endif
$(BUILT_STAMP): $(SETUP_STAMP) $(TCL_RECORD) $(wildcard src/tclamp/*.c src/tclamp/*.h) src/tclamp/VERSION src/tclamp/pkgindex.py \
                setup.py pyproject.toml
	@echo "== building the bridge for Tcl $(TCL_VERSION), installing tclamp into $(VENV) (editable)"
	TCL_CONFIG='$(TCL_CONFIG)' $(PY) -m pip install -q --disable-pip-version-check \
	    --no-build-isolation --no-deps -e .
	touch $@

ifneq ($(shell cat $(PYTHON_RECORD) 2>/dev/null),$(abspath $(PY)))
$(PYTHON_RECORD): FORCE
endif
$(PYTHON_RECORD):
	@mkdir -p $(dir $@)
	echo '$(abspath $(PY))' > $@

# The checkout's package index, from the one template (src/tclamp/pkgindex.py).
tcl/pkgIndex.tcl: src/tclamp/pkgindex.py src/tclamp/VERSION
	@mkdir -p $(dir $@)
	$(PY) src/tclamp/pkgindex.py $@

demo: setup
	$(TCLSH) examples/train_amp.tcl

test: setup
	TCLSH='$(TCLSH)' WISH='$(WISH)' TCL_CONFIG='$(TCL_CONFIG)' $(PY) -m pytest $(PYTEST_ARGS)

soak: setup
	TCLSH='$(TCLSH)' TCLAMP_SOAK_SECONDS=600 $(PY) -m pytest -m soak $(PYTEST_ARGS)

# The bridge as a free-threaded Python's build compiles it (Py_GIL_DISABLED:
# see the threading notes in bridge.h), with no warning, for the Tcl of
# the set-up; object code is not kept.  Needs PYTHON 3.13 or newer (make
# matrix runs it on sid's 3.14 and 3.15).
free-threaded-build: setup
	for source in _bridge interp text_fast aten_programs lifecycle; do \
	    cc -c -o /dev/null -std=gnu11 -Wall -Wno-unused-parameter -Werror -DPy_GIL_DISABLED=1 \
	    -DUSE_TCL_STUBS=1 -DTCLAMP_VERSION='"$(shell cat src/tclamp/VERSION)"' \
	    -I$(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
	    $$(. '$(TCL_CONFIG)' && echo $$TCL_INCLUDE_SPEC) src/tclamp/$$source.c || exit 1; \
	done

# The suite on the other stacks this project supports (tools/matrix.sh says
# which, and what each runs): other Pythons, the oldest torch, Tcl 9.0 in a
# Debian 13 root, Pythons 3.14 and 3.15 with the newest torch in a sid root.
# MATRIX_STACKS picks some; root only (debootstrap).
MATRIX_STACKS ?=
matrix:
	tools/matrix.sh $(MATRIX_STACKS)

bench: setup
	$(PY) bench/train_step.py
	$(PY) bench/step_counts.py
	$(PY) bench/run.py
	$(PY) bench/compare.py
	$(TCLSH) bench/trace_overhead.tcl
	$(TCLSH) bench/chained_errors.tcl

# The suite on a GPU machine that has only python3 with a CUDA torch (see
# docs/matrix.md): gpu-pack here makes build/gpu-check (Tcl's Debian
# packages, the wheel for GPU_PYTHON's version, the test tools); gpu-check
# there runs tools/gpu-check.sh, which needs no make (OUT: where its log goes).
GPU_PYTHON ?=
gpu-pack:
	tools/gpu-pack.sh $(GPU_PYTHON)

gpu-check:
	tools/gpu-check.sh $(OUT)

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
# Each refuses an empty INSTALL_VENV or TCL_PKG_DIR: as a path prefix it
# would name /bin/python, and as install-tcl's word, no directory (the default).
# A single quote in one is refused too: it would end the quotes the recipes
# put around the name.  The name is printed in single quotes (in double
# ones, a ` or $( in it ran as a command).
install_dirs_named = $(if $(findstring ',$(INSTALL_VENV)$(TCL_PKG_DIR)),\
    { echo "make $@: INSTALL_VENV and TCL_PKG_DIR must not hold a ' (a single quote)" >&2; exit 1; },\
    test -n '$(strip $(INSTALL_VENV))' && test -n '$(strip $(TCL_PKG_DIR))' || \
    { echo "make $@: INSTALL_VENV and TCL_PKG_DIR must not be empty" >&2; exit 1; })
install-tcl: system-packages
	@$(install_dirs_named)
	@echo '== Python environment $(INSTALL_VENV)'
	@test -x '$(INSTALL_VENV)'/bin/python || $(call python_named,$(INSTALL_VENV))
	test -x '$(INSTALL_VENV)'/bin/python || \
	    { $(PYTHON) -m venv '$(INSTALL_VENV)' && touch '$(INSTALL_VENV)'/.made-by-tclamp; }
	@echo "== $(TORCH_SPEC), numpy and tclamp into" '$(INSTALL_VENV)'
	'$(INSTALL_VENV)'/bin/python -m pip install --disable-pip-version-check "setuptools>=68" wheel "$(TORCH_SPEC)" numpy
	TCL_CONFIG='$(TCL_CONFIG)' '$(INSTALL_VENV)'/bin/python -m pip install --disable-pip-version-check \
	    --no-build-isolation --no-deps .
	'$(INSTALL_VENV)'/bin/tclamp install-tcl '$(TCL_PKG_DIR)'

# Removes the index (with the directories install-tcl made for it), and the
# environment if install-tcl made it (else only tclamp from it).  The directories
# are quoted: a space in one must not make rm -rf remove two.  TCL_PKG_DIR
# loses only tclamp's index, and goes only when that leaves it empty: it may
# hold more (other packages, a user's files), which rm -rf removed with it.
# Another package's index is left to it without asking the environment's
# tclamp, which refuses it (and so stopped the uninstall with the
# environment kept), and so is an environment whose Python no longer runs
# (its base Python upgraded away); so is an index that starts another
# environment's Python that is there (a later make install-tcl with another
# INSTALL_VENV wrote it: removing the old environment removed the new one's
# index).  A TCL_PKG_DIR that is a symbolic link is the user's.  With the
# environment gone, the directories the index records as install-tcl's go
# too (each only when empty), by PYTHON running install_record.py alone.
uninstall-tcl:
	@$(install_dirs_named)
	dir='$(TCL_PKG_DIR)'; index="$$dir/pkgIndex.tcl"; left=; \
	if [ -L "$$index" ]; then left="its pkgIndex.tcl is a symbolic link, which install-tcl does not write"; \
	elif [ -f "$$index" ] && head -n 1 "$$index" | grep -q '^# tclamp .*written by `tclamp install-tcl`'; then \
	    started=$$(head -n 1 "$$index" | sed -n 's/.*, and Python starts from //p'); \
	    if [ -e "$$started" ] && ! [ "$$(dirname "$$(dirname "$$started")")" -ef '$(INSTALL_VENV)' ]; then \
	        left="its index starts $$started, another environment's tclamp"; \
	    elif [ -x '$(INSTALL_VENV)'/bin/tclamp ] && '$(INSTALL_VENV)'/bin/python -c '' 2>/dev/null; then \
	        '$(INSTALL_VENV)'/bin/tclamp uninstall-tcl "$$dir" || exit 1; \
	    elif $(PYTHON) -c '' 2>/dev/null; then \
	        $(PYTHON) -I src/tclamp/install_record.py "$$index" || exit 1; \
	    else rm -f "$$index" || exit 1; fi; fi; \
	if [ -L "$${dir%/}" ]; then echo "make uninstall-tcl: $$dir is a symbolic link: left there"; \
	elif [ -n "$$left" ]; then echo "make uninstall-tcl: $$dir: $$left: left there"; \
	elif [ -d "$$dir" ]; then rmdir "$$dir" 2>/dev/null || \
	    echo "make uninstall-tcl: $$dir holds more than tclamp's index: left there"; fi
	if [ -f '$(INSTALL_VENV)'/.made-by-tclamp ]; then rm -rf '$(INSTALL_VENV)'; \
	elif [ -x '$(INSTALL_VENV)'/bin/python ]; then \
	    '$(INSTALL_VENV)'/bin/python -m pip uninstall -y -q tclamp; fi

clean:
	rm -rf $(VENV) $(PYTHON_RECORD) tcl/pkgIndex.tcl build dist src/*.egg-info src/tclamp/_bridge*.so \
	    src/tclamp/_loader*.so src/tclamp/.built .pytest_cache .hypothesis
