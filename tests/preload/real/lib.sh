# shellcheck shell=bash
# Helpers shared by the real-program tests (sourced, never run by itself).
#
# Each test script:
#   . "$(dirname "$0")/lib.sh"
#   real_init NAME PROGRAM...       # exit 77 (meson: skip) if a program is missing
#   real_check_binding CMD ARGS...  # LD_DEBUG=bindings: malloc must bind to $VMTEST_LIB
#   workload() { ...deterministic output on stdout... }
#   real_compare                    # run workload plain, then preloaded; diff stdout
#
# The library under test comes from $VMTEST_LIB (set by tests/preload/meson.build);
# nothing here knows which allocator it is.  In CI (CI non-empty) or with
# REAL_REQUIRE_PROGRAMS=1 a missing program is a failure, not a skip.
# REAL_KEEP=1 keeps the temp dir (outputs of both runs) for inspection.
set -euo pipefail

export LC_ALL=C TZ=UTC

REAL_NAME=
REAL_LIB=
REAL_TMP=
REAL_START=0
REAL_WORKLOAD_PID=
REAL_CLEANUPS=()

real_log() { printf '[real-%s] %s\n' "$REAL_NAME" "$*"; }
real_fail() {
    printf '[real-%s] FAIL: %s\n' "$REAL_NAME" "$*" >&2
    exit 1
}

# Microseconds since the epoch, and a duration in seconds with 2 decimals.
real_now() { local t=${EPOCHREALTIME/./}; printf '%s' "$((10#$t))"; }
real_secs() { local us=$(($2 - $1)); printf '%d.%02d' $((us / 1000000)) $((us % 1000000 / 10000)); }

# Register a command (a string run by eval) to run at exit, before the temp dir goes.
real_on_exit() { REAL_CLEANUPS+=("$1"); }

real_cleanup() {
    local rc=$? c
    trap - EXIT
    # Interrupted while a workload ran: stop its subshell (its children get the signal
    # from the process group when meson or a terminal sends it).
    if [[ -n $REAL_WORKLOAD_PID ]]; then
        kill "$REAL_WORKLOAD_PID" 2>/dev/null || true
        wait "$REAL_WORKLOAD_PID" 2>/dev/null || true
    fi
    for c in "${REAL_CLEANUPS[@]+"${REAL_CLEANUPS[@]}"}"; do
        eval "$c" || true
    done
    if [[ -n $REAL_TMP && -d $REAL_TMP ]]; then
        [[ -n ${REAL_KEEP:-} ]] || rm -rf -- "$REAL_TMP"
    fi
    exit "$rc"
}

real_init() {
    REAL_NAME=$1
    REAL_START=$(real_now)
    shift
    local p missing=()
    for p in "$@"; do
        command -v "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        if [[ -n ${CI:-} || ${REAL_REQUIRE_PROGRAMS:-0} == 1 ]]; then
            real_fail "not installed: ${missing[*]} (run scripts/deps)"
        fi
        real_log "SKIP: not installed: ${missing[*]}"
        exit 77
    fi

    # VMTEST_LIB is what tests/preload/meson.build sets; VMAPALLOC_LIB is accepted too.
    local lib=${VMTEST_LIB:-${VMAPALLOC_LIB:-}}
    [[ -n $lib ]] || real_fail "VMTEST_LIB is not set (run through 'meson test')"
    # Absolute, but keep the name as given (LD_DEBUG prints the path as preloaded).
    case $lib in
        /*) REAL_LIB=$lib ;;
        *) REAL_LIB=$PWD/$lib ;;
    esac
    [[ -f $REAL_LIB ]] || real_fail "VMTEST_LIB=$lib: no such file"
    # Neither run may see these: the library reads VMAPALLOC_* variables as options
    # (and warns about unknown ones).
    unset LD_PRELOAD VMTEST_LIB VMAPALLOC_LIB

    trap real_cleanup EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM
    REAL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vmapalloc-real-$REAL_NAME.XXXXXX")
    real_log "library: $REAL_LIB"
    real_log "temp dir: $REAL_TMP"
}

# Run CMD once with LD_PRELOAD and LD_DEBUG=bindings; malloc must be bound to the library.
real_check_binding() {
    local base pat log=$REAL_TMP/ld-debug.log rc=0
    base=$(basename -- "$REAL_LIB")
    pat="to .*$(printf '%s' "$base" | sed 's/[][\.*^$]/\\&/g').*symbol \`malloc'"
    LD_PRELOAD=$REAL_LIB LD_DEBUG=bindings "$@" >"$log" 2>&1 </dev/null || rc=$?
    if ((rc != 0)); then
        tail -n 20 "$log" >&2
        real_fail "binding check: '$*' under LD_PRELOAD exited $rc"
    fi
    if ! grep -q -- "$pat" "$log"; then
        grep -- "symbol \`malloc'" "$log" | head -n 5 >&2 || true
        real_fail "binding check: malloc in '$*' is not bound to $base"
    fi
    real_log "binding check: '$*' binds malloc to $base"
}

# Run the shell function `workload` in $REAL_TMP/$1 (plain|preload); stdout to $1.out.
real_run() {
    local mode=$1 dir=$REAL_TMP/$1 t0 t1 rc=0 pid
    mkdir -p -- "$dir"
    t0=$(real_now)
    # In the background and waited for, so that `set -e` stays in force inside.
    (
        cd -- "$dir"
        REAL_MODE=$mode
        export REAL_MODE
        if [[ $mode == preload ]]; then
            export LD_PRELOAD=$REAL_LIB
        fi
        workload
    ) >"$dir.out" 2>"$dir.err" </dev/null &
    pid=$!
    REAL_WORKLOAD_PID=$pid
    wait "$pid" || rc=$?
    REAL_WORKLOAD_PID=
    t1=$(real_now)
    if ((rc != 0)); then
        printf -- '--- stderr of the %s run (last 40 lines) ---\n' "$mode" >&2
        tail -n 40 "$dir.err" >&2
        printf -- '--- stdout of the %s run (last 10 lines) ---\n' "$mode" >&2
        tail -n 10 "$dir.out" >&2
        real_fail "$mode run exited $rc after $(real_secs "$t0" "$t1") s"
    fi
    real_log "$mode run: ok in $(real_secs "$t0" "$t1") s ($(wc -l <"$dir.out") lines of output)"
}

real_compare() {
    local plain=$REAL_TMP/plain.out pre=$REAL_TMP/preload.out
    real_run plain
    real_run preload
    [[ -s $plain ]] || real_fail "the plain run printed nothing"
    # A digest of nothing means a step of the workload itself printed nothing.
    if grep -n e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 "$plain" >&2; then
        real_fail "the plain run hashed an empty output (a broken workload step)"
    fi
    if ! cmp -s -- "$plain" "$pre"; then
        printf -- '--- diff plain preload (first 60 lines) ---\n' >&2
        diff -u --label plain --label preload -- "$plain" "$pre" | head -n 60 >&2 || true
        printf -- '--- stderr of the preload run (last 20 lines) ---\n' >&2
        tail -n 20 "$REAL_TMP/preload.err" >&2
        real_fail "outputs differ"
    fi
    # A backend asked for (VMAPALLOC_BACKEND) and not had says so in one line.
    if grep -- '^vmapalloc: VMAPALLOC_BACKEND=' "$REAL_TMP/preload.err" >&2; then
        real_fail "the backend asked for (${VMAPALLOC_BACKEND-}) was not used"
    fi
    real_log "outputs identical: $(wc -l <"$plain") lines, sha256 $(sha256sum <"$plain" | cut -c1-16)"
    real_log "PASS in $(real_secs "$REAL_START" "$(real_now)") s (whole script)"
}
