#!/usr/bin/env bash
# GNU sort under the preload: a generated 50 MB file sorted with a 200 MiB buffer
# (one big malloc), with --parallel=2 (threads), on numeric / general-numeric keys,
# unique and reversed, and with a tiny buffer that forces temp files and merging.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init sort sort awk sha256sum
real_log "program: $(sort --version | head -n 1)"
real_check_binding sort --version

# The input is generated once, without the preload: both runs sort the same bytes.
INPUT=$REAL_TMP/input.txt
t0=$(real_now)
awk 'BEGIN {
    srand(20240601)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    while (bytes < 50000000) {
        w = ""
        n = 4 + int(rand() * 10)
        for (k = 0; k < n; k++) w = w substr(letters, 1 + int(rand() * 52), 1)
        line = sprintf("%s %d %.6e %s", w, int(rand() * 1000000) - 500000, (rand() - 0.5) * 10 ^ int(rand() * 12), substr(letters, 1 + int(rand() * 40)))
        print line
        bytes += length(line) + 1
    }
}' >"$INPUT"
real_log "input: $(wc -c <"$INPUT") bytes, $(wc -l <"$INPUT") lines, generated in $(real_secs "$t0" "$(real_now)") s"

workload() {
    echo "input $(sha256sum <"$INPUT")"
    sort -S 200M "$INPUT" | sha256sum
    sort -S 200M --parallel=2 "$INPUT" -o sorted.txt
    echo "sorted $(sha256sum <sorted.txt)"
    sort -c sorted.txt && echo "check ok"
    sort -n -k2 -S 200M --parallel=2 "$INPUT" | sha256sum
    sort -k3,3g -k1,1 -S 200M --parallel=2 "$INPUT" | sha256sum
    sort -u -r -S 200M "$INPUT" | sha256sum
    sort -s -t ' ' -k4,4 -k2,2n --parallel=2 -S 200M "$INPUT" | sha256sum
    # 1 MiB buffer: many temp runs in ., merged with a small batch size.
    sort -S 1M -T . --batch-size=4 -k2,2n "$INPUT" | sha256sum
    sort -m sorted.txt sorted.txt | sha256sum
}

real_compare
