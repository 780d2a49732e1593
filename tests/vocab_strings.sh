# tests/vocab_strings.sh — sourced by tests/tok.sh and tests/smol.sh. vocab_strings LABEL GGUF INP OUT [FLAG...]
# runs `glmc tokenize GGUF FLAG...` on each string of INP through stdin and compares its ids with OUT's
# line (leading/trailing spaces ignored), then checks that --decode gives the string back. INP holds the
# strings separated by lines "__ggml_vocab_test__" (llama.cpp's vocab tests: the newline before such a line
# belongs to the marker, not the string). Prints "ok - LABEL: ..." lines and calls fail (the caller's) for
# each failure; uses the caller's $glmc and scratch folder $tmp.
vocab_strings() {
	local label=$1 gguf=$2 inp=$3 out=$4 sep=$'\n__ggml_vocab_test__\n' rest s exp i=0 bad=0 badrt=0
	shift 4
	# whole file, trailing newlines kept
	rest=$(cat "$inp"; printf x)
	rest=${rest%x}
	local -a want
	mapfile -t want <"$out"
	while [ -n "$rest" ]; do
		case $rest in
		*"$sep"*)
			s=${rest%%"$sep"*}
			rest=${rest#*"$sep"}
			;;
		*)
			s=$rest
			rest=
			;;
		esac
		printf '%s' "$s" >"$tmp/in"
		exp=${want[$i]:-}
		exp=${exp# }
		exp=${exp% }
		if ! "$glmc" tokenize "$gguf" "$@" <"$tmp/in" >"$tmp/ids" 2>"$tmp/err"; then
			fail "$label string $i: glmc tokenize failed: $(head -c 300 "$tmp/err" | tr '\n' ' ')"
			bad=$((bad + 1))
		elif [ "$(cat "$tmp/ids")" != "$exp" ]; then
			fail "$label string $i: $(printf '%q' "${s:0:80}"): got [$(cat "$tmp/ids")], expected [$exp]"
			bad=$((bad + 1))
		elif ! "$glmc" tokenize "$gguf" --decode <"$tmp/ids" >"$tmp/back" 2>"$tmp/err" || ! cmp -s "$tmp/in" "$tmp/back"; then
			fail "$label string $i: --decode did not give the string back $(head -c 300 "$tmp/err" | tr '\n' ' ')"
			badrt=$((badrt + 1))
		fi
		i=$((i + 1))
	done
	if [ "$i" -ne "${#want[@]}" ]; then
		fail "$label: $i strings in $inp but ${#want[@]} lines in $out"
	elif [ "$bad" -eq 0 ]; then
		echo "ok - $label: glmc tokenize gives the expected ids for all $i strings"
	else
		fail "$label: $bad of $i strings differ"
	fi
	[ "$bad" -eq 0 ] && [ "$badrt" -eq 0 ] && echo "ok - $label: glmc tokenize --decode gives all $i strings back"
	return 0
}
