#!/bin/sh
# embed.sh NAME FILE: prints a C file defining `const char NAME[]` holding the
# bytes of FILE plus a terminating 0 (used to build the default plan into rap).
set -e
echo "/* generated from $2 by scripts/embed.sh: do not edit */"
echo "const char $1[] = {"
od -An -v -tx1 "$2" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo "0};"
