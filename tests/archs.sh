#!/usr/bin/env bash
# tests/archs.sh — model files and the weights' architecture (models/lib/archs.lua):
#   - glmc without a model file takes the one archs.lua names for the weights (the seven Hugging Face
#     fixtures and their GGUF conversions), from any working directory, and says which on stderr;
#   - a model file given weights of another architecture is refused with one line naming both, unless
#     --force-model;
#   - mlp_layer_types against first_k_dense_replace: the layers transformers builds (which key it follows
#     per model_type was checked against transformers itself by tests/tools/check_mlp_layer_types.py);
#   - DeepSeek-V3 GGUF files from llama.cpp's converter before its MLA conversion (attn_kv_b whole,
#     per-head key_length / value_length, no *_mla keys) give the fixture's logits;
#   - the MTP layers a model declares unused are not reported, other unused tensors still are.
# Most checks stop after binding (glmc dump --after bind): a compile with -o also builds the kernels with
# NVRTC, seconds per plan; only the runs against the fixtures' logits compile.
# Prints "ok - NAME" / "FAIL - NAME: why" lines for tests/run.sh to count.
set -u
cd "$(dirname "$0")/.."
root=$PWD
FIX=$root/../shared/fixtures/hf
CMP=build/tools/cmplogits
MKGGUF=build/tools/mkgguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1: $2"; }

model_of() { case $1 in glm_moe_dsa) echo glm5 ;; *) echo "$1" ;; esac; }
# the model file archs.lua picks for a fixture's GGUF conversion (deepseek2 -> deepseek_v3.lua)
gguf_model_of() { case $1 in glm_moe_dsa) echo glm5 ;; glm4_moe_lite) echo deepseek_v3 ;; *) echo "$1" ;; esac; }

# expect_fail NAME SUBSTRING... -- CMD...: CMD exits non-zero, not by a signal, with exactly one line on
# stderr holding every SUBSTRING.
expect_fail() {
	local name=$1 want=()
	shift
	while [ "$1" != -- ]; do want+=("$1"); shift; done
	shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$? w
	if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
		bad "$name" "status $rc: $(head -c 300 "$tmp/err")"
		return
	fi
	[ "$(wc -l <"$tmp/err")" -eq 1 ] || { bad "$name" "not one line: $(head -c 400 "$tmp/err")"; return; }
	for w in "${want[@]}"; do
		grep -qF -- "$w" "$tmp/err" || { bad "$name" "'$(cat "$tmp/err")' lacks '$w'"; return; }
	done
	ok "$name"
}

# run_logits NAME PLAN FIXTURE: the fixture prompt through the plan on the CPU; its greedy tokens and
# logits within 1e-5 of the fixture's.
run_logits() {
	local out want r=""
	want=$($CMP --greedy "$FIX/$3")
	out=$(bin/glmrun "$2" --device cpu --tokens "$($CMP --prompt "$FIX/$3")" -n 12 --dump-logits "$tmp/l.f32" 2>"$tmp/err")
	if [ "$out" = "$want" ] && r=$($CMP "$tmp/l.f32" "$FIX/$3" 1e-5); then
		ok "$1 ($r)"
	else
		bad "$1" "tokens '$out' (want '$want'); ${r:-$(tail -1 "$tmp/err")}"
	fi
}

# --- no model file: archs.lua's choice, from another directory ---
FIXTURES="llama qwen3 qwen3_moe glm4_moe deepseek_v3 glm4_moe_lite glm_moe_dsa"
for m in $FIXTURES; do
	$MKGGUF $FIX/$m "$tmp/$m.gguf" --type f32 2>/dev/null || bad "$m GGUF conversion" "mkgguf failed"
done
for m in $FIXTURES; do
	for w in hf gguf; do
		if [ $w = hf ]; then weights=$FIX/$m want=$(model_of $m); else weights=$tmp/$m.gguf want=$(gguf_model_of $m); fi
		if (cd "$tmp" && "$root/bin/glmc" dump --weights "$weights" --after bind >/dev/null 2>"$tmp/err"); then
			got=$(sed -n 's|^glmc: model file \(.*\), for architecture .*|\1|p' "$tmp/err")
			[ "$got" = "$(realpath models/$want.lua)" ] && ok "$m ($w): no model file takes models/$want.lua" ||
				bad "$m ($w): no model file takes models/$want.lua" "$(head -1 "$tmp/err")"
		else
			bad "$m ($w): builds without a model file" "$(tail -1 "$tmp/err")"
		fi
	done
done
# a compile with the model file picked computes the fixture (llama's GGUF q/k rows are permuted, so the
# model file matters)
if (cd "$tmp" && "$root/bin/glmc" compile --weights "$tmp/llama.gguf" -o "$tmp/p.plan" 2>"$tmp/err"); then
	run_logits "llama GGUF compiled without a model file: fixture tokens and logits" "$tmp/p.plan" llama
else
	bad "llama GGUF compiled without a model file" "$(tail -1 "$tmp/err")"
fi
echo '{"hidden_size": 64}' >"$tmp/noarch.json"
expect_fail "weights without architecture metadata and no model file: one line" "names no architecture" \
	"give a model file" -- bin/glmc compile --config "$tmp/noarch.json" --random-weights f32 -o "$tmp/p.plan"

# --- a model file on weights of another architecture ---
# model file, weights, the weights' architecture as the error names it
while read -r model weights arch; do
	case $weights in *.gguf) weights=$tmp/$weights ;; *) weights=$FIX/$weights ;; esac
	expect_fail "models/$model.lua on $arch weights: one line naming both" "models/$model.lua:" "'$model'" "'$arch'" \
		"--force-model" -- bin/glmc compile models/$model.lua --weights "$weights" -o "$tmp/p.plan"
done <<LIST
llama qwen3 qwen3
qwen3 llama llama
qwen3_moe glm4_moe glm4_moe
glm4_moe qwen3_moe qwen3_moe
deepseek_v3 glm_moe_dsa glm_moe_dsa
glm4_moe_lite deepseek_v3 deepseek_v3
glm5 glm4_moe_lite glm4_moe_lite
llama qwen3.gguf qwen3
qwen3_moe glm4_moe.gguf glm4moe
glm5 deepseek_v3.gguf deepseek2
deepseek_v3 glm_moe_dsa.gguf glm-dsa
LIST
if bin/glmc dump models/llama.lua --weights $FIX/qwen3 --force-model --after bind >/dev/null 2>"$tmp/err"; then
	grep -q "warning: models/llama.lua:.*'qwen3'.*--force-model" "$tmp/err" &&
		ok "--force-model builds models/llama.lua on qwen3 weights, with a warning" ||
		bad "--force-model warns" "$(head -2 "$tmp/err")"
else
	bad "--force-model builds models/llama.lua on qwen3 weights" "$(tail -1 "$tmp/err")"
fi
# glm4_moe_lite.lua takes llama.cpp's deepseek2 conversion of GLM-4.7-Flash too (archs.lua lists deepseek2)
bin/glmc dump models/glm4_moe_lite.lua --weights "$tmp/glm4_moe_lite.gguf" --after bind >/dev/null 2>"$tmp/err" &&
	ok "models/glm4_moe_lite.lua takes its deepseek2 GGUF" ||
	bad "models/glm4_moe_lite.lua takes its deepseek2 GGUF" "$(tail -1 "$tmp/err")"

# --- mlp_layer_types and first_k_dense_replace (the fixtures: layer 0 dense, layers 1 and 2 experts) ---
# edit FIXTURE SED: a copy of the fixture with config.json edited, in $tmp/FIXTURE-edit
edit() {
	rm -rf "$tmp/$1-edit" && mkdir "$tmp/$1-edit" && ln -s $FIX/$1/model.safetensors "$tmp/$1-edit/" &&
		sed "$2" $FIX/$1/config.json >"$tmp/$1-edit/config.json"
}
# dense_layers WEIGHTS: the layers bound with a dense MLP (blk.N.ffn_gate.weight), comma-separated
dense_layers() {
	bin/glmc dump --weights "$1" --after bind 2>"$tmp/err" |
		sed -n 's/.*param "blk\.\([0-9]*\)\.ffn_gate\.weight".*/\1/p' | paste -sd,
}
# fixture | config edit | the key glmc must follow (named in its warning)
while IFS='|' read -r m sedexpr follows; do
	edit $m "$sedexpr"
	d=$(dense_layers "$tmp/$m-edit")
	if [ "$d" = 0 ] && grep -q "warning: .*mlp_layer_types makes layer .*following $follows" "$tmp/err"; then
		ok "$m, mlp_layer_types and first_k_dense_replace disagree: follows $follows as transformers, warns"
	else
		bad "$m, mlp_layer_types and first_k_dense_replace disagree: follows $follows" \
			"dense layers '$d'; $(grep -v '^glmc: model file' "$tmp/err" | head -2)"
	fi
done <<'LIST'
glm4_moe_lite|s/"first_k_dense_replace": 1/"first_k_dense_replace": 2/|mlp_layer_types
glm_moe_dsa|s/"first_k_dense_replace": 1/"first_k_dense_replace": 0/|mlp_layer_types
deepseek_v3|s/^{$/{"mlp_layer_types":["dense","dense","sparse"],/|first_k_dense_replace
glm4_moe|s/^{$/{"mlp_layer_types":["sparse","sparse","sparse"],/|first_k_dense_replace
LIST
edit glm4_moe_lite 's/"first_k_dense_replace": 1/"first_k_dense_replace": 2/'
if bin/glmc compile --weights "$tmp/glm4_moe_lite-edit" -o "$tmp/p.plan" 2>/dev/null &&
	[ "$(bin/glmc dump "$tmp/p.plan" | sed -n 's/^meta hparam.dense_layers = //p')" = 0 ]; then
	run_logits "glm4_moe_lite, first_k_dense_replace 2 against mlp_layer_types: transformers' logits" "$tmp/p.plan" glm4_moe_lite
else
	bad "glm4_moe_lite, first_k_dense_replace 2 against mlp_layer_types" "no compile, or hparam.dense_layers is not 0"
fi
# mlp_layer_types alone: followed without a word
edit glm_moe_dsa '/"first_k_dense_replace"/d'
d=$(dense_layers "$tmp/glm_moe_dsa-edit")
[ "$d" = 0 ] && ! grep -q warning "$tmp/err" && ok "glm_moe_dsa, mlp_layer_types alone: its layers, no warning" ||
	bad "glm_moe_dsa, mlp_layer_types alone" "dense layers '$d'; $(tail -1 "$tmp/err")"
edit glm_moe_dsa 's/"mlp_layer_types": \[/"mlp_layer_types": ["dense", /'
expect_fail "mlp_layer_types longer than num_hidden_layers: one line" "config.json: mlp_layer_types has 4 entries" \
	"num_hidden_layers is 3" -- bin/glmc compile models/glm5.lua --weights "$tmp/glm_moe_dsa-edit" -o "$tmp/p.plan"
edit glm4_moe_lite '0,/"sparse"/s/"sparse"/"moe"/'
expect_fail "mlp_layer_types entry neither dense nor sparse: one line" "mlp_layer_types[1] is 'moe'" -- \
	bin/glmc compile models/glm4_moe_lite.lua --weights "$tmp/glm4_moe_lite-edit" -o "$tmp/p.plan"

# --- DeepSeek-V3 GGUF in the layout of llama.cpp's converter before its MLA conversion ---
$MKGGUF $FIX/deepseek_v3 "$tmp/old.gguf" --type f32 --kv-b merged 2>/dev/null
bin/glmc inspect "$tmp/old.gguf" >"$tmp/inspect"
if grep -qE "deepseek2\.attention\.key_length +uint32 += 24" "$tmp/inspect" &&
	grep -qE "deepseek2\.attention\.value_length +uint32 += 16" "$tmp/inspect" &&
	grep -qE "blk\.0\.attn_kv_b\.weight +F32 +\[128, 32\]" "$tmp/inspect" &&
	! grep -q "_mla\|attn_k_b\|attn_v_b" "$tmp/inspect"; then
	ok "deepseek_v3 -> GGUF, older layout: attn_kv_b [128, 32], key_length 24, value_length 16, no *_mla keys"
else
	bad "deepseek_v3 -> GGUF, older layout" "$(grep -E 'length|kv_b|k_b|v_b' "$tmp/inspect" | head -5)"
fi
if bin/glmc compile --weights "$tmp/old.gguf" -o "$tmp/old.plan" 2>"$tmp/err"; then
	run_logits "deepseek_v3 GGUF, older layout (attn_kv_b whole): fixture tokens and logits" "$tmp/old.plan" deepseek_v3
else
	bad "deepseek_v3 GGUF, older layout compiles" "$(tail -1 "$tmp/err")"
fi
build/tools/ggufedit "$tmp/old.gguf" "$tmp/nokeys.gguf" --del deepseek2.attention.key_length \
	--del deepseek2.attention.value_length 2>/dev/null
expect_fail "MLA GGUF with neither the *_mla keys nor key_length / value_length: one line" "key_length_mla" \
	"key_length and value_length" -- bin/glmc compile models/deepseek_v3.lua --weights "$tmp/nokeys.gguf" -o "$tmp/p.plan"

# --- MTP layers: declared unused, never reported; other unused tensors still are ---
# GGUF (glm4moe counts its MTP block in block_count, nextn_predict_layers 1: blk.3) and Hugging Face
# (model.layers.3 after the 3 decoder layers of a config with num_nextn_predict_layers 1)
build/tools/ggufedit "$tmp/glm4_moe.gguf" "$tmp/mtp.gguf" --copy blk.3.nextn.eh_proj.weight=blk.0.attn_q.weight \
	--copy blk.3.attn_norm.weight=blk.0.attn_norm.weight --copy blk.0.stray.weight=blk.0.attn_norm.weight 2>"$tmp/err" ||
	bad "ggufedit --copy" "$(cat "$tmp/err")"
build/tools/mkhf $FIX/deepseek_v3 "$tmp/mtp-hf" --copy model.layers.3.eh_proj.weight=model.layers.0.self_attn.q_a_proj.weight \
	--copy model.layers.3.input_layernorm.weight=model.layers.0.input_layernorm.weight \
	--copy model.layers.0.stray.weight=model.layers.0.input_layernorm.weight 2>"$tmp/err" || bad "mkhf --copy" "$(cat "$tmp/err")"
for w in "$tmp/mtp.gguf blk glm4_moe" "$tmp/mtp-hf model.layers deepseek_v3"; do
	read -r weights pre model <<<"$w"
	if bin/glmc dump --weights "$weights" --after bind >/dev/null 2>"$tmp/err"; then
		[ "$(grep -c 'warning' "$tmp/err")" = 1 ] && grep -q "tensor '$pre.0.stray.weight' is not used" "$tmp/err" &&
			ok "${weights##*/}: the MTP layer's tensors are not reported, a stray tensor is" ||
			bad "${weights##*/}: MTP tensors not reported, the stray one is" "$(grep warning "$tmp/err" | head -3)"
	else
		bad "${weights##*/} binds" "$(tail -1 "$tmp/err")"
	fi
	expect_fail "${weights##*/} --strict: fails on the stray tensor, not the MTP layer's" "'$pre.0.stray.weight' is not used" -- \
		bin/glmc compile models/$model.lua --weights "$weights" --strict -o "$tmp/p.plan"
done
exit 0
