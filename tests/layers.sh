#!/usr/bin/env bash
# tests/layers.sh — the include check: every quoted #include in compiler/, ops/, runtime/, tests/ and bench/
# is resolved to its file (beside the includer first, then the Makefile's -I folders in order), each file is
# mapped to its layer, and the check fails naming file:line for an include that goes to a higher layer, that
# cannot be resolved, or that closes a cycle between folders (top-level folders, and layer folders).
# Layers, lowest first (README "Layout" says what each holds):
#   ops (ops/) < core (runtime/core) < formats (runtime/formats) < gpu (runtime/gpu) < exec (runtime/exec)
#   < passes (compiler/passes) < cli (runtime/cli, compiler/cli) < tools and tests (compiler/tools, tests, bench).
# Usage: tests/layers.sh            check this tree, then show the check failing on a copy with bad includes
#        tests/layers.sh --root DIR check the tree at DIR only (exit 1 and one line per problem when it fails)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)

# The -I folders, in the Makefile's order, and each folder's layer rank and name.
INCDIRS="ops runtime/core runtime/formats runtime/gpu runtime/exec compiler/passes runtime/cli compiler/cli tests"
layer_of() {
	case $1 in
	ops/*) echo "0 ops" ;;
	runtime/core/*) echo "1 core" ;;
	runtime/formats/*) echo "2 formats" ;;
	runtime/gpu/*) echo "3 gpu" ;;
	runtime/exec/*) echo "4 exec" ;;
	compiler/passes/*) echo "5 passes" ;;
	runtime/cli/* | compiler/cli/*) echo "6 cli" ;;
	compiler/tools/* | tests/* | bench/*) echo "7 top" ;;
	*) echo "" ;;
	esac
}

# check ROOT: print one line per problem; exit status 1 when there is any.
check() {
	local root=$1 bad=0 f line inc dst d l1 l2 r1 r2
	local edges
	edges=$(mktemp)
	cd "$root" || return 1
	while IFS=: read -r f line inc; do
		inc=${inc#*\"}
		inc=${inc%%\"*}
		dst=
		# Beside the includer (C's rule for quoted includes), then the -I folders.
		if [ -f "$(dirname "$f")/$inc" ]; then
			dst=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
		else
			for d in $INCDIRS; do
				[ -f "$d/$inc" ] && { dst=$d/$inc; break; }
			done
		fi
		if [ -z "$dst" ]; then
			echo "$f:$line: includes \"$inc\", which is no file beside it or in the -I folders"
			bad=1
			continue
		fi
		l1=$(layer_of "$f")
		l2=$(layer_of "$dst")
		if [ -z "$l1" ] || [ -z "$l2" ]; then
			echo "$f:$line: includes $dst: ${l1:+$dst}${l1:-$f} is in no layer (put it in a layer folder)"
			bad=1
			continue
		fi
		r1=${l1%% *} r2=${l2%% *}
		if [ "$r2" -gt "$r1" ]; then
			echo "$f:$line: includes $dst (layer ${l2#* }), above its own layer ${l1#* }"
			bad=1
		fi
		# Folder edges, for the cycle check: the top-level folders and the layer folders.
		[ "${f%%/*}" != "${dst%%/*}" ] && echo "${f%%/*} ${dst%%/*} $f:$line" >>"$edges"
		[ "$(dirname "$f")" != "$(dirname "$dst")" ] && echo "$(dirname "$f") $(dirname "$dst") $f:$line" >>"$edges"
	done < <(find compiler ops runtime tests bench -type f \( -name '*.c' -o -name '*.h' -o -name '*.cuh' -o -name '*.cu' \
		-o -name '*.cc' \) 2>/dev/null | sort | xargs grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' /dev/null)
	# Every source file belongs to a layer (one with no includes at all too).
	for f in $(find compiler ops runtime -type f \( -name '*.[ch]' -o -name '*.cuh' \) | sort); do
		[ -n "$(layer_of "$f")" ] || { echo "$f:1: is in no layer (put it in a layer folder)"; bad=1; }
	done
	# tsort names the folders of a loop; each step of it is shown with one include that makes it.
	local loop
	loop=$(cut -d' ' -f1,2 "$edges" | sort -u | tsort 2>&1 >/dev/null | sed -n 's/^tsort: \([^:]*\)$/\1/p')
	if [ -n "$loop" ]; then
		local first prev=
		first=$(echo "$loop" | head -1)
		for d in $loop $first; do
			if [ -n "$prev" ]; then
				echo "$(awk -v a="$prev" -v b="$d" '$1 == a && $2 == b { print $3; exit }' "$edges"): includes from $prev into $d, round the cycle $(echo $loop | sed 's/ / -> /g') -> $first"
			fi
			prev=$d
		done
		bad=1
	fi
	rm -f "$edges"
	return $bad
}

if [ "${1:-}" = --root ]; then
	check "$2"
	exit $?
fi

ok=0
out=$(check "$here")
if [ -z "$out" ]; then
	echo "ok - layers: every include goes to its own layer or one below, and no folders include each other round a cycle"
else
	echo "$out" | sed 's/^/# /'
	echo "FAIL - layers: includes that break the layering (above)"
	ok=1
fi

# The same rule for calls: no archive's object uses a symbol that only a higher layer's archive defines (an
# include check cannot see a function declared in a low header and defined above it).
ARCHIVES="ops core formats gpu exec passes cli"
missing=
for l in $ARCHIVES; do
	[ -f "$here/build/lib$l.a" ] || missing="$missing build/lib$l.a"
done
if [ -n "$missing" ]; then
	echo "FAIL - layers: the archives are not built ($missing): run make first"
	ok=1
else
	up=$(cd "$here" && {
		r=0
		for l in $ARCHIVES; do
			nm -g --defined-only "build/lib$l.a" | awk -v r=$r -v l=$l 'NF == 3 { print "D", $3, r, l }'
			r=$((r + 1))
		done
		r=0
		for l in $ARCHIVES; do
			nm -u "build/lib$l.a" | awk -v r=$r -v l=$l '/\.o:$/ { o = $1; sub(/:$/, "", o) } $1 == "U" { print "U", $2, r, l, o }'
			r=$((r + 1))
		done
	} | awk '$1 == "D" { dr[$2] = $3; dl[$2] = $4; next } ($2 in dr) && dr[$2] > $3 {
		print "build/lib" $4 ".a(" $5 ") uses " $2 ", which only build/lib" dl[$2] ".a (higher) defines" }' | sort -u)
	if [ -z "$up" ]; then
		echo "ok - layers: no archive uses a symbol defined only in a higher layer's archive"
	else
		echo "$up" | sed 's/^/# /'
		echo "FAIL - layers: archives that call up (above)"
		ok=1
	fi
fi

# The check failing: a copy of the sources with an include from core up into exec, then one from glmrun's cli
# into glmc's (the same layer, so only the cycle check catches it: the top-level folders then include each other).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && find compiler ops runtime tests bench -type f \( -name '*.[ch]' -o -name '*.cuh' -o -name '*.cu' \
	-o -name '*.cc' \) -print0 | xargs -0 cp --parents -t "$tmp")
n=$(wc -l <"$tmp/runtime/core/arena.c")
echo '#include "engine.h"' >>"$tmp/runtime/core/arena.c"
out=$(check "$tmp")
rc=$?
want="runtime/core/arena.c:$((n + 1)): includes runtime/exec/engine.h (layer exec), above its own layer core"
# It also closes a cycle between runtime/core and runtime/exec, which the check names as well.
if [ $rc -ne 0 ] && [ "$(echo "$out" | head -1)" = "$want" ] &&
	echo "$out" | grep -q "^runtime/core/arena.c:$((n + 1)): includes from runtime/core into runtime/exec, round the cycle"; then
	echo "ok - layers: an upward include fails the check with its file:line"
else
	echo "FAIL - layers: an upward include: status $rc, got '$out', want '$want'"
	ok=1
fi
sed -i '$d' "$tmp/runtime/core/arena.c"
echo '#include "inspect.h"' >>"$tmp/runtime/cli/batch.c"
n=$(wc -l <"$tmp/runtime/cli/batch.c")
out=$(check "$tmp")
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "^runtime/cli/batch.c:$n: includes from runtime into compiler, round the cycle" &&
	echo "$out" | grep -q "^compiler/[a-z]*/[a-z_]*\.[ch]:[0-9]*: includes from compiler into runtime, round the cycle"; then
	echo "ok - layers: two folders including each other fail the check with both includes' file:line"
else
	echo "FAIL - layers: a folder cycle: status $rc, got '$out'"
	ok=1
fi
exit $ok
