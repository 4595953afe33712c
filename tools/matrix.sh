#!/usr/bin/env bash
# The suite on the stacks besides the default one (`make test`: Debian 12's
# Tcl 8.6, Python 3.11, the pinned torch).  Each stack runs `make setup test`
# in its own copy of the checkout and its own Python environment, under
# MATRIX_DIR (default /var/tmp/tclamp-matrix), so stacks never share a
# build; the environments are kept for the next run.  Each runs a slice of
# the suite (SLICES below), chosen for what that stack changes, so that CI
# stays within its time.
#
#   tools/matrix.sh [STACK...]      all stacks when none is named
#
# Stacks:
#   py3.10 py3.12 py3.13   Tcl 8.6, pyenv's Python, torch from the index
#   torch2.4               Tcl 8.6, Python 3.11, the oldest torch pyproject allows
#   tcl9.0                 Debian 13's tclsh9.0 and Python 3.13, in a root made
#                          by tools/debian-root.sh (needs root)
#   py3.14 py3.15          Debian sid's Python, the newest torch with wheels for
#                          it, each slice run on sid's tclsh8.6 and tclsh9.0, in
#                          a sid root (tools/debian-root.sh, needs root)
#   wheel                  a wheel built here (pyenv's 3.13) and installed in a
#                          venv of Debian 13's own 3.13: package require and a
#                          bfloat16 matmul in its tclsh9.0 and tclsh8.6
#                          (tools/wheel-check.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
# Each stack's make runs as a user's would, not as a sub-make of `make matrix`.
unset MAKEFLAGS MAKELEVEL MFLAGS MAKEOVERRIDES
checkout=$PWD
# One directory for every checkout on this machine, so that a fresh clone
# (CI's) finds the environments (torch for each Python) that an earlier run
# made.  A run holds a stack's lock (flock below) while it runs that stack,
# so that two runs at once (CI's two lanes, say) never share a copy or an
# environment: they take turns at a stack both name.
matrix_dir=${MATRIX_DIR:-/var/tmp/tclamp-matrix}
trixie_root=${TRIXIE_ROOT:-/var/tmp/tclamp-trixie}
sid_root=${SID_ROOT:-/var/tmp/tclamp-sid}
pyenv_root=${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}

declare -A PYTHONS=(
    [py3.10]=$pyenv_root/versions/3.10.13/bin/python3
    [py3.12]=$pyenv_root/versions/3.12.1/bin/python3
    [py3.13]=$pyenv_root/versions/3.13.0/bin/python3
    [torch2.4]=$pyenv_root/versions/3.11.7/bin/python3
    [tcl9.0]=/usr/bin/python3
    [wheel]=$pyenv_root/versions/3.13.0/bin/python3
    [py3.14]=python3.14
    [py3.15]=python3.15
)
# torch 2.15.0: the newest, and the only one with wheels for Python 3.15.
declare -A TORCH=([torch2.4]=torch==2.4.1 [py3.14]=torch==2.15.0 [py3.15]=torch==2.15.0)
# The Tcls a stack runs its slice on, one after the other in one copy and
# one environment (the bridge is rebuilt for each).
declare -A TCLSHS=([tcl9.0]=tclsh9.0 [py3.14]="tclsh8.6 tclsh9.0" [py3.15]="tclsh8.6 tclsh9.0")
# Their Pythons' headers also compile the bridge as a free-threaded build
# (make free-threaded-build), for each Tcl.
declare -A FREE_THREADED_BUILD=([py3.14]=free-threaded-build [py3.15]=free-threaded-build)
# The stacks that run in a Debian root, and its suite.
declare -A SUITES=([tcl9.0]=trixie [wheel]=trixie [py3.14]=sid [py3.15]=sid)
declare -A ROOTS=([trixie]=$trixie_root [sid]=$sid_root)
# What each stack runs (pytest arguments, in the stack's copy of the
# checkout), chosen for what the stack changes:
#   Python 3.10, 3.12, 3.13: start-up and the C API of Python's lifetime and
#     threads (hosts, exit, thread::exit, interpreters, handles);
#   torch 2.4: every torch:: command (the tcltest files), the examples and
#     the ATen path (its functions and exit order are that torch's own);
#   Tcl 9.0: hosts, text and its UTF-8 writer, the py command, how words
#     are read (test_properties), sizes, the prompt, set-up, the pytest
#     plugin's tcltest driver, and the tcltest files of the bridge and
#     autocast;
#   Python 3.14, 3.15 (sid's Tcl 8.6.18 and 9.0.4, torch 2.15): start-up, the
#     Python face, threads, exit, hosts, interpreters, the private names of
#     CPython, the bridge's and autocast's tcltest files; on Tcl 9.0, 3.14
#     also every other tcltest file and the ATen path, and 3.15 the files
#     that compare tclamp with torch itself (SLICES_TCL9);
#   every stack with torch: each torch API point and ATen symbol tclamp uses.
# all.tcl's own run of every tcltest file without pytest (two minutes or
# more) is about Tcl, not Python: make test runs it, and the tcl9.0 stack.
ALL_TCL_ELSEWHERE="--deselect tests/test_startup.py::test_all_tcl_runs_the_tcltest_files_without_pytest"
declare -A SLICES=(
    [py3.10]="$ALL_TCL_ELSEWHERE tests/test_startup.py tests/test_python_face.py tests/test_hosts.py tests/test_threads.py tests/bridge.test"
    [py3.12]="tests/test_aten_path.py tests/test_hosts.py tests/test_exit.py tests/test_lifetimes.py tests/test_handles_and_values.py tests/test_ddp.py"
    [py3.13]="tests/test_threads.py tests/test_hosts.py tests/test_interps.py tests/test_exit.py tests/test_gc_attack_children.py tests/lifecycle.test"
    [torch2.4]="tests/*.test tests/test_aten_path.py tests/test_aten_attack.py tests/test_examples.py tests/test_python_face.py tests/test_scope_python.py"
    [tcl9.0]="tests/test_list_conversion.py tests/test_properties.py tests/test_speed_semantics.py tests/test_aten_path.py tests/test_aten_attack.py tests/test_hosts.py tests/test_prompt.py tests/test_python_face.py tests/test_lifetimes.py tests/test_text_conversion.py tests/test_py_command.py tests/test_setup.py tests/test_startup.py tests/test_plugin.py tests/autocast.test tests/bridge.test tests/scoped.test tests/lifecycle.test tests/cache.test"
    [wheel]="tools/wheel-check.sh (no pytest)"
    [py3.14]="$ALL_TCL_ELSEWHERE tests/test_startup.py tests/test_python_face.py tests/test_threads.py tests/test_exit.py tests/test_hosts.py tests/test_interps.py tests/test_gc_attack_children.py tests/test_pycompat.py tests/bridge.test tests/autocast.test"
    [py3.15]="$ALL_TCL_ELSEWHERE tests/test_startup.py tests/test_python_face.py tests/test_threads.py tests/test_exit.py tests/test_hosts.py tests/test_interps.py tests/test_pycompat.py tests/bridge.test tests/autocast.test"
)
# What a stack runs on Tcl 9.0 only, besides its slice: torch 2.15's turn,
# once, at every torch:: command and the ATen path (py3.14), and at the
# Python files that compare tclamp with torch itself (py3.15).
TORCH_PARITY="tests/test_docs.py tests/test_precision_parity.py tests/test_scaler_parity.py \
    tests/test_trace_python.py tests/test_trace_attack.py tests/test_amp_recipes.py \
    tests/test_autocast_state_attack.py tests/test_memo_switch.py tests/test_interrupts.py"
declare -A SLICES_TCL9=([py3.14]="tests/test_aten_path.py tests/*.test" [py3.15]="$TORCH_PARITY")
for stack in "${!SLICES[@]}"; do
    [ "$stack" = wheel ] || SLICES[$stack]+=" tests/test_torch_api.py"
done
ALL=(py3.10 py3.12 py3.13 torch2.4 tcl9.0 py3.14 py3.15 wheel)

# The checkout's files as git sees them (no environment, no build), with
# their times, so that a kept environment's stamps stay valid.
copy_checkout() {
    local tree=$1
    rm -rf "$tree"
    mkdir -p "$tree"
    git -C "$checkout" ls-files -z --cached --others --exclude-standard |
        (cd "$checkout" && xargs -0 cp --parents -p -t "$tree" 2>/dev/null)
}

run_stack() {
    local stack=$1 base tree python make_args pytest_args suite root tclsh extra
    python=${PYTHONS[$stack]}
    # -rs: the log says why each skipped test was skipped.
    # --durations: the log says where the stack's time went.
    pytest_args="-rs --durations=15 ${SLICES[$stack]}"
    make_args=(PYTHON="$python")
    [ -n "${TORCH[$stack]:-}" ] && make_args+=(TORCH_SPEC="${TORCH[$stack]}")
    base=$matrix_dir/$stack
    suite=${SUITES[$stack]:-}
    if [ -n "$suite" ]; then
        root=${ROOTS[$suite]}
        tools/debian-root.sh "$suite" "$root" || return 1
    fi
    if [ "$stack" = wheel ]; then
        copy_checkout "$base/tree"
        (cd "$base/tree" && tools/wheel-check.sh "$root" "$python")
    elif [ -n "$suite" ]; then
        copy_checkout "$root$base/tree"
        for tclsh in ${TCLSHS[$stack]}; do
            echo "== $stack on $tclsh"
            extra=
            [ "$tclsh" = tclsh9.0 ] && extra=${SLICES_TCL9[$stack]:-}
            tools/debian-root.sh "$suite" "$root" run make -C "$base/tree" setup test \
                ${FREE_THREADED_BUILD[$stack]:-} VENV="$base/venv" TCLSH="$tclsh" "${make_args[@]}" \
                PYTEST_ARGS="$pytest_args $extra" || return 1
        done
    else
        [ -x "$python" ] || { echo "$stack: no $python (pyenv install it)" >&2; return 1; }
        copy_checkout "$base/tree"
        make -C "$base/tree" setup test VENV="$base/venv" PYTEST_ARGS="$pytest_args" "${make_args[@]}"
    fi
}

stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=("${ALL[@]}")
for stack in "${stacks[@]}"; do
    [ -n "${PYTHONS[$stack]:-}" ] || { echo "unknown stack: $stack (stacks: ${ALL[*]})" >&2; exit 2; }
done
mkdir -p "$matrix_dir"
summary=()
failed=0
for stack in "${stacks[@]}"; do
    log=$matrix_dir/$stack.log
    echo "== $stack: ${SLICES[$stack]:-?} (log: $log)"
    exec 9>"$matrix_dir/$stack.lock"
    flock -w 7200 9 || { echo "another make matrix holds $stack" >&2; exit 1; }
    start=$SECONDS
    run_stack "$stack" > "$log" 2>&1
    status=$?
    # One summary per Tcl the stack ran on.
    result=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | tr -d '=' | sed 's/^ *//; s/ *$//' |
             paste -sd ';' | sed 's/;/; /g')
    summary+=("$(printf '%-9s %-6s %4ds  %s' "$stack" "$([ $status = 0 ] && echo ok || echo FAILED)" \
                 $((SECONDS - start)) "${result:-no pytest summary: see $log}")")
    echo "${summary[-1]}"
    [ $status = 0 ] || failed=1
done
echo "== matrix"
printf '%s\n' "${summary[@]}"
exit $failed
