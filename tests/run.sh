#!/usr/bin/env bash
# tests/run.sh — the CPU test suite (CI runs it through `make test`). Runs every build/tests/test_*
# program and the CLI checks in tests/cli.sh, counts "ok"/"FAIL" lines, ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	echo "== $t"
	"$t" 2>&1 | tee -a "$log" | grep -v '^ok - ' || true
	rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ] && ! grep -q "^FAIL - " "$log"; then
		echo "FAIL - $t exited with status $rc" | tee -a "$log"
	fi
done
if [ -x tests/cli.sh ]; then
	echo "== tests/cli.sh"
	tests/cli.sh 2>&1 | tee -a "$log" | grep -v '^ok - ' || true
fi
pass=$(grep -c '^ok - ' "$log")
fail=$(grep -c '^FAIL - ' "$log")
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
