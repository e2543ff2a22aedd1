#!/usr/bin/env bash
# sqlite3 under the preload: 200k rows inserted in one transaction (plus 20k parsed
# INSERT statements), an index, aggregates with GROUP BY / ORDER BY, a large
# group_concat, a big page cache, VACUUM and an integrity check.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init sqlite3 sqlite3 awk
real_log "program: sqlite3 $(sqlite3 --version | cut -d' ' -f1-2)"
real_check_binding sqlite3 :memory: 'select 1;'

workload() {
    awk 'BEGIN {
        print "BEGIN;"
        for (i = 0; i < 20000; i++)
            printf "INSERT INTO extra(id, k, txt) VALUES (%d, %d, '\''%s-%d'\'');\n", i, (i * 7919) % 1009, substr("qwertyuiopasdfghjklzxcvbnm", 1 + i % 26), i * 3
        print "COMMIT;"
    }' >extra.sql

    sqlite3 -batch test.db <<'EOF'
PRAGMA cache_size = -200000;
PRAGMA journal_mode = DELETE;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, pad BLOB);
CREATE TABLE extra(id INTEGER PRIMARY KEY, k INTEGER, txt TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, (x * 7919) % 997, 'name' || ((x * 31) % 5003), (x % 1000) / 7.0,
                     zeroblob(x % 300) FROM c;
COMMIT;
.read extra.sql
CREATE INDEX t_grp ON t(grp, name);
CREATE INDEX extra_k ON extra(k);
SELECT 'rows', count(*), sum(id), total(length(pad)) FROM t;
SELECT grp, count(*), printf('%.4f', sum(val)), min(name), max(name), total(length(pad))
  FROM t GROUP BY grp ORDER BY count(*) DESC, grp LIMIT 40;
SELECT name, count(*) AS n, printf('%.3f', avg(val)) FROM t WHERE grp BETWEEN 100 AND 200
  GROUP BY name HAVING n > 3 ORDER BY n DESC, name LIMIT 30;
SELECT 'concat', length(group_concat(name, ',')), sum(length(name)) FROM t;
SELECT 'join', count(*), sum(t.id % 1000) FROM t JOIN extra ON t.grp = extra.k;
SELECT e.k, count(*), group_concat(e.txt, '|') FROM extra e WHERE e.k < 5 GROUP BY e.k ORDER BY e.k;
SELECT 'distinct', count(DISTINCT name), count(DISTINCT grp) FROM t;
UPDATE t SET name = upper(name) || '-' || id WHERE id % 7 = 0;
DELETE FROM t WHERE id % 11 = 0;
SELECT 'after', count(*), max(length(name)), sum(grp) FROM t;
SELECT id, name FROM t ORDER BY name DESC, id LIMIT 20;
VACUUM;
PRAGMA integrity_check;
EOF
    sqlite3 -batch test.db 'SELECT * FROM t ORDER BY id;' | sha256sum
    sqlite3 -batch test.db .dump | sha256sum
}

real_compare
