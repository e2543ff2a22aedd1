#!/usr/bin/env bash
# gcc under the preload (the driver, cc1, as, collect2, ld all inherit LD_PRELOAD):
# a generated 2000-line C file compiled at -O2 and -O3; the objects must be
# bit-identical, the disassembly too, and the linked program must print the same.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init gcc gcc objdump awk sha256sum
real_log "program: $(gcc --version | head -n 1)"
real_check_binding gcc --version

# 112 functions of about 17 lines each, a table, and a main that chains them.
gen_source() {
    awk 'function rnd() { seed = (seed * 16807) % 2147483647; return seed }
    BEGIN {
        seed = 12345; nf = 112
        print "#include <stdio.h>"
        print "#include <string.h>"
        print "static const unsigned tbl[64] = {"
        for (i = 0; i < 64; i++) printf "  %uu,\n", rnd()
        print "};"
        for (f = 0; f < nf; f++) {
            printf "__attribute__((noinline)) static unsigned f%d(unsigned x) {\n", f
            printf "  unsigned a = x * %uu + %uu, b = x ^ %uu;\n", rnd() % 65536 * 2 + 1, rnd(), rnd()
            printf "  char buf[%d];\n", 16 + rnd() % 48
            print  "  memset(buf, (int)(x & 0x7f), sizeof buf);"
            printf "  for (unsigned i = 0; i < (x & %d) + %d; i++) {\n", 2 ^ (2 + f % 3) - 1, 1 + rnd() % 5
            print  "    a = (a << 5) ^ (a >> 3) ^ b;"
            printf "    switch ((a + i) %% %d) {\n", 3 + f % 3
            printf "    case 0: b += a * %uu; break;\n", rnd() % 1000 + 1
            printf "    case 1: b ^= a >> (i & %d); break;\n", 1 + rnd() % 15
            print  "    case 2: b -= tbl[(a ^ i) & 63]; break;"
            print  "    default: b = (b << 1) | (b >> 31); buf[i % sizeof buf] ^= (char)b; break;"
            print  "    }"
            print  "  }"
            printf "  return a ^ b ^ (unsigned)buf[%d %% sizeof buf]%s;\n", rnd() % 64, (f ? sprintf(" ^ f%d(a & 7)", (f * 7 + 3) % f) : "")
            print  "}"
            print  ""
        }
        print "int main(void) {"
        print "  unsigned acc = 1;"
        print "  for (unsigned r = 0; r < 1000; r++) {"
        for (f = 0; f < nf; f++) printf "    acc = acc * 31u + f%d(acc + r);\n", f
        print "    if (r % 100 == 0) printf(\"round %u acc %08x\\n\", r, acc);"
        print "  }"
        print "  printf(\"final %08x\\n\", acc);"
        print "  return 0;"
        print "}"
        for (l = 0; l < 30; l++) printf "/* padding comment line %d */\n", l
    }'
}

workload() {
    gen_source >gen.c
    echo "source $(wc -l <gen.c) lines $(sha256sum <gen.c)"
    local flags=(-g0 -frandom-seed=vmapalloc-real -fno-ident -Wall -Wextra)
    gcc -O2 "${flags[@]}" -c gen.c -o gen-O2.o
    gcc -O3 -funroll-loops "${flags[@]}" -c gen.c -o gen-O3.o
    gcc -O2 "${flags[@]}" -S gen.c -o gen-O2.s
    gcc -O1 -g -fdebug-prefix-map="$PWD"=/src -frandom-seed=vmapalloc-real -c gen.c -o gen-g.o
    for o in gen-O2.o gen-O3.o gen-O2.s gen-g.o; do
        echo "$o $(sha256sum <"$o")"
    done
    echo "objdump-O2 $(objdump -d gen-O2.o | sha256sum)"
    echo "objdump-O3 $(objdump -d gen-O3.o | sha256sum)"
    echo "preprocessed $(printf '#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <math.h>\n#include <pthread.h>\n' | gcc -E -P - | sha256sum)"
    gcc -O2 gen-O2.o -o gen-O2
    gcc gen-O3.o -o gen-O3
    echo "binary-O2 $(sha256sum <gen-O2)"
    ./gen-O2
    ./gen-O3 | sha256sum
}

real_compare
