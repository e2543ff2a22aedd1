#!/usr/bin/env bash
# redis under the preload: a server (and its clients) on a free loopback port,
# a 10 MB value, DEBUG POPULATE, lists/hashes/sorted sets, an RDB save+reload, and a
# short bounded redis-benchmark; DBSIZE / DEBUG DIGEST / value digests must match a
# plain server's, and the benchmark must succeed.  Traffic stays on 127.0.0.1.
# REAL_MODE (plain|preload) is set by lib.sh in the subshell that runs workload.
# shellcheck disable=SC2031
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init redis redis-server redis-cli redis-benchmark sha256sum
real_log "program: $(redis-server --version)"
real_check_binding redis-server --version

REDIS_PID=
REDIS_PORT=

stop_server() {
    rm -f -- "$REAL_TMP/redis-${REAL_MODE:-}.pid"
    if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        local n
        for ((n = 0; n < 50; n++)); do
            kill -0 "$REDIS_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    REDIS_PID=
}

# The servers are children of the workload subshells: at exit, also kill any left behind
# (e.g. after a timeout) by the pid each recorded.
kill_leftover_servers() {
    local f pid
    for f in "$REAL_TMP"/redis-*.pid; do
        [[ -f $f ]] || continue
        pid=$(<"$f")
        if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]]; then
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
}
real_on_exit kill_leftover_servers

port_in_use() {
    # Anything listening, or answering, on the port: /dev/tcp connects only if so.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Start redis-server (inheriting LD_PRELOAD, if set) on a free port in 6390..7389.
start_server() {
    local try n
    for ((try = 0; try < 10; try++)); do
        REDIS_PORT=$((6390 + RANDOM % 1000))
        port_in_use "$REDIS_PORT" && continue
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize no --dir "$PWD" --dbfilename dump.rdb --logfile "$PWD/redis.log" \
            --enable-debug-command local --protected-mode yes --io-threads 1 &
        REDIS_PID=$!
        echo "$REDIS_PID" >"$REAL_TMP/redis-$REAL_MODE.pid"
        for ((n = 0; n < 100; n++)); do
            if ! kill -0 "$REDIS_PID" 2>/dev/null; then
                break
            fi
            if [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; then
                echo "server up" >&2
                return 0
            fi
            sleep 0.1
        done
        echo "redis-server did not come up on port $REDIS_PORT; log:" >&2
        tail -n 20 redis.log >&2 || true
        stop_server
    done
    echo "could not start redis-server" >&2
    return 1
}

rc() { redis-cli -p "$REDIS_PORT" "$@"; }

check_state() {
    echo "$1 dbsize $(rc DBSIZE)"
    echo "$1 digest $(rc DEBUG DIGEST)"
    echo "$1 big $(rc STRLEN big) $(rc --raw GET big | sha256sum)"
    echo "$1 big-digest $(rc DEBUG DIGEST-VALUE big)"
    echo "$1 list $(rc LLEN biglist) $(rc LINDEX biglist 777)"
    echo "$1 hash $(rc HLEN bighash) $(rc HGET bighash field4242)"
    echo "$1 zset $(rc ZCARD bigzset) $(rc ZRANGE bigzset 0 2 WITHSCORES | tr '\n' ' ')"
    echo "$1 keys $(rc --scan | sort | sha256sum)"
}

workload() {
    trap stop_server EXIT
    trap 'exit 143' TERM INT
    start_server
    rc FLUSHALL >/dev/null

    # A 10 MB value, set through stdin, read back, then changed with APPEND/SETRANGE.
    awk 'BEGIN {
        s = "0123456789abcdefghijklmnopqrstuvwxyz"
        for (n = 0; n + length(s) <= 10485760; n += length(s)) printf "%s", s
        printf "%s", substr(s, 1, 10485760 - n)
    }' >big.bin
    echo "big-file $(sha256sum <big.bin)"
    echo "set $(rc -x SET big <big.bin)"
    echo "append $(rc APPEND big tail-of-the-big-value)"
    echo "setrange $(rc SETRANGE big 5000000 MIDDLE)"

    echo "populate $(rc DEBUG POPULATE 100000 key 200)"
    awk 'BEGIN {
        for (i = 0; i < 20000; i++) {
            printf "RPUSH biglist item-%d-%d\n", i, i * 7919 % 10007
            v = sprintf("%*s", i % 300, ""); gsub(/ /, "v", v)
            printf "HSET bighash field%d value-%d-%s\n", i, i * 31, v
            printf "ZADD bigzset %d member%d\n", i * 7919 % 100003, i
        }
    }' | rc >/dev/null
    rc LTRIM biglist 0 14999 >/dev/null
    check_state before

    # Save the RDB and load it back into a fresh keyspace (frees everything, rebuilds it).
    echo "reload $(rc DEBUG RELOAD)"
    check_state reloaded

    # Throughput is not compared, only that the benchmark completes cleanly.
    local bench=$REAL_TMP/bench-$REAL_MODE.txt
    redis-benchmark -p "$REDIS_PORT" -q -n 20000 -c 10 -t set,get,lpush,lpop -d 1000 -P 4 >"$bench" 2>&1
    echo "benchmark lines: $(grep -c 'requests per second' "$bench")" >&2
    cat "$bench" >&2
    if [[ $(grep -c 'requests per second' "$bench") -ne 4 ]] || grep -qi 'error' "$bench"; then
        echo "redis-benchmark failed" >&2
        return 1
    fi
    echo "benchmark ok"
    # It leaves key:__rand_int__ ('x' x 1000) and mylist (LPUSH/LPOP counts may differ).
    echo "bench-key $(rc --raw GET key:__rand_int__ | sha256sum)"
    rc DEL key:__rand_int__ mylist >/dev/null
    check_state after

    rc FLUSHALL >/dev/null
    echo "flushed dbsize $(rc DBSIZE)"
    echo "ping $(rc PING)"
    rc SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    local code=0
    wait "$REDIS_PID" || code=$?
    REDIS_PID=
    rm -f -- "$REAL_TMP/redis-$REAL_MODE.pid"
    if ((code != 0)); then
        echo "redis-server exited $code; log:" >&2
        tail -n 30 redis.log >&2
        return 1
    fi
    echo "server exit 0"
}

real_compare
