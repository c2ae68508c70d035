#!/bin/sh
# readme_examples.sh -- runs the README's code blocks marked `sh no-gpu`
# (a fenced block opened by "```sh no-gpu"), each command as written, in a
# scratch folder where build/rap is the binary under test and plans/ this
# repository's; then checks what the block promises: its rap plan lines
# write the shipped schedules byte for byte. Exit 0 when every command
# exited 0 and the checks held, else 1 naming the command and its output.
# usage: tests/readme_examples.sh RAP_BINARY [README.md]
set -u
[ $# -ge 1 ] || { echo "usage: $0 RAP_BINARY [README.md]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
rap=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
readme=${2:-$repo/README.md}
[ -x "$rap" ] || { echo "readme examples: $rap is not built" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/rap_readme.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
mkdir "$work/build" && ln -s "$rap" "$work/build/rap" && ln -s "$repo/plans" "$work/plans" || exit 1

# the blocks' commands, one a line (backslash continuations joined)
awk '
    /^```sh no-gpu[ \t]*$/ { inb = 1; next }
    inb && /^```/ { inb = 0; next }
    inb {
        line = cmd $0
        if (line ~ /\\$/) { sub(/\\$/, "", line); cmd = line; next }
        cmd = ""
        if (line ~ /[^ \t]/) print line
    }' "$readme" > "$work/examples.txt"
total=$(wc -l < "$work/examples.txt")
[ "$total" -gt 0 ] || { echo "readme examples: no \`\`\`sh no-gpu block in $readme" >&2; exit 1; }

n=0 ran=0
while IFS= read -r cmd; do
    n=$((n + 1))
    case "$cmd" in
    mpirun*)
        if ! command -v mpirun >/dev/null 2>&1; then
            echo "readme example $n/$total: skipped (mpirun is not installed): $cmd"
            continue
        fi ;;
    esac
    t0=$(date +%s)
    (cd "$work" && sh -c "$cmd") > "$work/out.txt" 2>&1 < /dev/null
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "readme example $n/$total FAILED (exit $rc): $cmd"
        tail -n 40 "$work/out.txt"
        exit 1
    fi
    ran=$((ran + 1))
    echo "readme example $n/$total: ok ($(( $(date +%s) - t0 )) s): $cmd"
done < "$work/examples.txt"

# what the block says it makes: the shipped schedules
bad=0
for pair in "plan0.schedule plans/h200/plan0_4096.schedule" \
            "plan0.schedule.fusion plans/h200/plan0_4096.schedule.fusion" \
            "plan1.schedule plans/h200/plan1_4096.schedule" \
            "plan1.schedule.fusion plans/h200/plan1_4096.schedule.fusion"; do
    set -- $pair
    if [ -f "$work/$1" ] && ! cmp -s "$work/$1" "$repo/$2"; then
        echo "readme examples: $1 differs from the shipped $2"
        bad=1
    fi
done
[ $bad -eq 0 ] || exit 1
echo "readme examples: $ran of $total commands ran and exited 0; the plan lines wrote the shipped schedules"
