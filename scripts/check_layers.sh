#!/bin/sh
# scripts/check_layers.sh [ROOT] -- which folder of src/ may include which
# (docs/ARCHITECTURE.md). Reads every #include "FOLDER/..." line of
# ROOT/src (default: this repository) and fails, printing file:line and the
# rule, when a folder includes one its row below does not list. "rap.h"
# (include/) counts as the folder `include`. A folder of src/ without a
# row fails too: a new folder takes its place in the table first.
#
#   scripts/check_layers.sh --self-test   plants a bad include in a
#                                         temporary tree and checks that
#                                         it is caught (make test runs both)
#
# The table: a folder may include itself and the folders on its line. It
# is closed under inclusion (what a folder may include, its headers may
# pull in): lower layers never name higher ones. sched is the contract
# between the planner (plan) and the runtime (run), below both.
set -u

RULES='
core:   include
data:   include core
model:  include core
prep:   include core
dist:   include core model
sched:  include core model prep dist
run:    include core data model prep dist sched
plan:   include core data model prep dist sched run
cli:    *
'

# check ROOT: prints the violations; exit status 1 when there is one.
check() {
    root=$1
    if [ ! -d "$root/src" ]; then
        echo "check_layers: $root/src: no such folder" >&2
        return 2
    fi
    files=$(cd "$root" && find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
    [ -n "$files" ] || return 0
    folders=$(cd "$root/src" && find . -mindepth 1 -maxdepth 1 -type d | sed 's#^\./##' | sort)
    (cd "$root" && awk -v rules="$RULES" -v folders="$folders" '
        BEGIN {
            n = split(rules, line, "\n")
            for (i = 1; i <= n; i++) {
                if (line[i] !~ /:/)
                    continue
                f = line[i]; sub(/:.*/, "", f); gsub(/[ \t]/, "", f)
                rest = line[i]; sub(/^[^:]*:/, "", rest)
                row[f] = 1
                allowed[f] = rest
                m = split(rest, tg, /[ \t]+/)
                for (j = 1; j <= m; j++)
                    if (tg[j] != "")
                        may[f, tg[j]] = 1
            }
            nf = split(folders, fl, "\n")
            for (i = 1; i <= nf; i++)
                if (fl[i] != "") {
                    isdir[fl[i]] = 1
                    if (!(fl[i] in row)) {
                        printf "src/%s: folder without a row in the layer table (scripts/check_layers.sh)\n", fl[i]
                        bad++
                    }
                }
        }
        FNR == 1 {
            split(FILENAME, part, "/")
            from = part[2]
        }
        /^[ \t]*#[ \t]*include[ \t]*"/ {
            inc = $0
            sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", inc)
            sub(/".*/, "", inc)
            if (inc ~ /(^|\/)\.\.\//) {
                printf "%s:%d: #include \"%s\": include by the folder path under src/, not ../\n", FILENAME, FNR, inc
                bad++
                next
            }
            to = ""
            if (inc == "rap.h")
                to = "include"
            else if (inc ~ /\//) {
                to = inc; sub(/\/.*/, "", to)
                if (!(to in isdir))
                    to = ""
            }
            if (to == "" || to == from || !(from in row))
                next
            if (may[from, "*"] || may[from, to])
                next
            a = allowed[from]; gsub(/^[ \t]+|[ \t]+$/, "", a); gsub(/[ \t]+/, " ", a)
            printf "%s:%d: #include \"%s\": %s may include (besides itself) %s; not %s\n", FILENAME, FNR, inc, from, a, to
            bad++
        }
        END { exit(bad > 0 ? 1 : 0) }
    ' $files)
}

# A temporary tree with a clean include, then a planted bad one, then a
# folder without a row: the first must pass, the others fail naming the
# file and line.
self_test() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_layers.XXXXXX") || return 2
    trap 'rm -rf "$tmp"' EXIT INT TERM
    mkdir -p "$tmp/src/core" "$tmp/src/run" "$tmp/src/plan" "$tmp/src/sched"
    printf '#include "rap.h"\n' > "$tmp/src/core/core.h"
    printf '#include "core/core.h"\n' > "$tmp/src/plan/search.h"
    printf '#include "core/core.h"\n#include "sched/schedule.h"\n#include <stdio.h>\n' > "$tmp/src/run/train.c"
    printf '#include "core/core.h"\n' > "$tmp/src/sched/schedule.h"
    printf '#include "run/train.h"\n#include "sched/schedule.h"\n' > "$tmp/src/plan/search.c"
    if ! out=$(check "$tmp"); then
        echo "check_layers --self-test: a clean tree failed:"; echo "$out"; return 1
    fi
    printf '#include "core/core.h"\n  # include "plan/search.h"\n' > "$tmp/src/run/train.c"
    if out=$(check "$tmp"); then
        echo "check_layers --self-test: run including plan/search.h was not caught"; return 1
    fi
    case $out in
    *'src/run/train.c:2: #include "plan/search.h": run may include (besides itself) '*'; not plan'*) ;;
    *) echo "check_layers --self-test: unexpected message: $out"; return 1 ;;
    esac
    printf '#include "../plan/search.h"\n' > "$tmp/src/run/train.c"
    if check "$tmp" > /dev/null; then
        echo "check_layers --self-test: a ../ include was not caught"; return 1
    fi
    printf '#include "core/core.h"\n' > "$tmp/src/run/train.c"
    mkdir -p "$tmp/src/extra"
    printf '#include "core/core.h"\n' > "$tmp/src/extra/x.c"
    if out=$(check "$tmp"); then
        echo "check_layers --self-test: a folder without a row was not caught"; return 1
    fi
    echo "check_layers --self-test: passed (a planted bad include is caught)"
    return 0
}

case ${1:-} in
--self-test) self_test; exit $? ;;
-h|--help) sed -n '2,16p' "$0"; exit 0 ;;
esac
root=${1:-$(dirname "$0")/..}
if ! check "$root"; then
    echo "check_layers: an include crosses the layer table (scripts/check_layers.sh)" >&2
    exit 1
fi
echo "check_layers: every #include of src/ keeps to the layer table"
