#!/usr/bin/env bash
# git under the preload: 200 commits of generated files with fixed identities and
# dates (so every object id is fixed), gc, repack, clone, and listings of the result.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init git git awk sha256sum
real_log "program: $(git --version)"
real_check_binding git --version

COMMITS=200

# Commit i rewrites two of 40 files (a few hundred lines each, most lines unchanged so
# that deltas exist), adds a note file, and every 25 commits removes an old note.
gen_commit() {
    local i=$1
    awk -v i="$i" 'BEGIN {
        for (k = 0; k < 2; k++) {
            f = (i * (k ? 13 : 7) + k) % 40
            file = sprintf("files/f%02d.txt", f)
            n = 200 + (i * 37 + f) % 150
            for (j = 0; j < n; j++) {
                v = (j * j + f * 7) % 1009
                if (j % 17 == i % 17) v = (v * i + j) % 100003
                printf "f%02d line %04d value %6d %s\n", f, j, v, substr("abcdefghijklmnopqrstuvwxyz", 1 + (j + i) % 26) > file
            }
            close(file)
        }
        note = sprintf("notes/n%03d.txt", i)
        for (j = 0; j < 10 + i % 20; j++) printf "note %d line %d\n", i, j * i > note
        close(note)
    }'
    if ((i % 25 == 0 && i > 25)); then
        git rm -q "notes/n$(printf '%03d' $((i - 25))).txt"
    fi
}

workload() {
    export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
    export GIT_AUTHOR_NAME='Real Test' GIT_AUTHOR_EMAIL='real@vmapalloc.invalid'
    export GIT_COMMITTER_NAME='Real Test' GIT_COMMITTER_EMAIL='real@vmapalloc.invalid'
    unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY

    git init -q -b main repo
    cd repo
    git config user.name 'Real Test'
    git config user.email 'real@vmapalloc.invalid'
    git config gc.auto 0
    git config commit.gpgsign false
    git config core.autocrlf false
    mkdir -p files notes

    local i date
    for ((i = 1; i <= COMMITS; i++)); do
        gen_commit "$i"
        git add -A
        date="@$((1700000000 + i * 3600)) +0000"
        GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date git commit -q -m "commit $i" -m "body of commit $i"
    done

    echo "head $(git rev-parse HEAD)"
    echo "tree $(git rev-parse 'HEAD^{tree}')"
    git gc -q
    echo "log-stat $(git log --stat | sha256sum)"
    echo "log-patch $(git log -p --format='%H %an %ad %s' | sha256sum)"
    git count-objects -v | grep -E '^(count|in-pack|packs|garbage):'
    echo "objects $(git cat-file --batch-all-objects --batch-check | sort | sha256sum)"
    echo "objects-count $(git cat-file --batch-all-objects --batch-check | wc -l)"
    git fsck --full --strict --no-progress 2>&1
    echo "fsck-after-gc ok"
    git diff --stat HEAD~150 HEAD | tail -n 1
    echo "blame $(git blame -s files/f07.txt | sha256sum)"
    echo "archive $(git archive --format=tar HEAD | sha256sum)"
    echo "grep $(git grep -c 'value  1' HEAD | sha256sum)"
    git repack -q -a -d -f --window=50 --depth=50
    git fsck --full --strict --no-progress 2>&1
    echo "fsck-after-repack ok"
    cd ..
    git clone -q --no-local repo clone
    echo "clone-head $(git -C clone rev-parse HEAD)"
    git -C clone fsck --full --no-progress 2>&1
    echo "clone-log $(git -C clone log --format='%H %T %P' | sha256sum)"
}

real_compare
