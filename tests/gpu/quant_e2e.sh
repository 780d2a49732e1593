#!/usr/bin/env bash
# tests/gpu/quant_e2e.sh — quantized weights end to end on the device machine: plans whose weights stay
# GGUF blocks on the GPU (ops/quant.cuh) give the logits of the CPU reference, which dequantizes the same
# blocks exactly; so --device cuda and --device cpu agree within 1e-4 (f32 activations; 2e-2 bf16).
#   1. the llama and qwen3_moe fixtures converted to Q8_0 (rows of 64: partial GEMV units, MoE experts);
#   2. 256-wide llama and qwen3_moe models (random, made here with transformers, float32) converted to
#      Q4_K, Q5_K and Q6_K with build/tools/mkgguf (K-quants need rows of 256);
#   3. --random-weights plans of the same shapes, every type, generated on the GPU and on the CPU: the
#      two generators must agree for the logits to agree, and --verify checks every layer; Q4_K and Q8_0
#      also with bf16 activations (Q8_0's 6- and 12-token prompts on the tensor cores, k_qgemv_tc);
#   4. longer prompts: 20 tokens run the prefill linears through k_qlinear_gemm, 40 through a
#      dequantized copy of the weight and cuBLASLt (runtime/exec/cuda.c lt_qweight, from 32 rows on);
#   5. GLM-5 (MLA, the DSA indexer, MoE with a shared expert) 256 wide (tests/data/glm5_q256.json), random
#      weights in the Q4_K_M mix and in Q8_0/Q5_K/Q6_K: the decode step (and prompts of up to 8 tokens)
#      run the fused kernels over blocks (ops/qfused.cuh k_qgemv_fused with an f32 router member,
#      k_qmoe_down_fused, or k_qmoe_down_mma where both down projections are Q4_K/Q6_K); parts 1-3 run
#      them too (every plan's GEMV groups and MoE ends read blocks).
# Needs bin/ and build/ from `make gpu-bundle` (carry bin and build) and python3 with torch and
# transformers for part 2. PARTS="1 5" runs only those parts (default: all). Prints a table and
# "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
FIX=${FIX:-build/fixtures}
OUT=${OUT:-/tmp/glm-quant}
mkdir -p "$OUT"
CMP=build/tools/cmplogits
MK=build/tools/mkgguf
rows=()
pass=0
fail=0
record() { # NAME STATUS DETAIL (also printed at once, so a run cut by a time limit still shows it)
	rows+=("$(printf '%-52s %-5s %s' "$1" "$2" "$3")")
	echo "row: ${rows[-1]}" 
	case "$2" in ok) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
}

# compare NAME PLAN TOKENS TOL: cuda vs cpu logits of every row (prompt + 4 decoded), then --verify.
compare() {
	local name=$1 plan=$2 toks=$3 tol=$4
	bin/glmrun "$plan" --device cuda --tokens "$toks" -n 5 --dump-logits "$OUT/g.f32" --stats >"$OUT/g.out" 2>"$OUT/g.err"
	local rg=$?
	bin/glmrun "$plan" --device cpu --tokens "$toks" -n 5 --dump-logits "$OUT/c.f32" >"$OUT/c.out" 2>"$OUT/c.err"
	local rc=$?
	if [ $rg != 0 ] || [ $rc != 0 ]; then
		record "$name cuda vs cpu" FAIL "$(tail -c 300 "$OUT/g.err") $(tail -c 200 "$OUT/c.err")"
		return
	fi
	local r
	r=$($CMP --pair "$OUT/g.f32" "$OUT/c.f32" "$tol" 2>&1)
	local st=$?
	record "$name cuda vs cpu logits (tol $tol)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$r; $(grep -o 'memory weights [^,]*' "$OUT/g.err" | head -1)"
	bin/glmrun "$plan" --device cuda --tokens "$toks" --verify >"$OUT/v.out" 2>&1
	record "$name --verify" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -1 "$OUT/v.out")"
}

PARTS=" ${PARTS:-1 2 3 5} "
part() { [[ $PARTS == *" $1 "* ]]; }
mid=$(seq -s, 3 22)
long=$(seq -s, 3 42)

# 1. fixtures in Q8_0
part 1 && for m in llama qwen3_moe; do
	model=$m
	$MK $FIX/$m "$OUT/$m-q8.gguf" --type q8_0 >/dev/null 2>"$OUT/err" &&
		bin/glmc compile models/$model.lua --weights "$OUT/$m-q8.gguf" -o "$OUT/$m-q8.plan" 2>"$OUT/err"
	if [ $? != 0 ]; then
		record "$m Q8_0 compile" FAIL "$(head -c 300 "$OUT/err")"
		continue
	fi
	compare "$m Q8_0 (fixture)" "$OUT/$m-q8.plan" "$($CMP --prompt $FIX/$m)" 1e-4
	compare "$m Q8_0 (fixture) 20-token prompt" "$OUT/$m-q8.plan" "$mid" 1e-4
	compare "$m Q8_0 (fixture) 40-token prompt" "$OUT/$m-q8.plan" "$long" 1e-4
done

# 2. 256-wide models in K-quants
part 2 && python3 - "$FIX" "$OUT" >"$OUT/py.log" 2>&1 <<'EOF'
import sys, torch, transformers
fix, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
for m in ("llama", "qwen3_moe"):
    cfg = transformers.AutoConfig.from_pretrained(f"{fix}/{m}")
    cfg.hidden_size, cfg.intermediate_size, cfg.head_dim = 256, 512, 64
    if m == "qwen3_moe":
        cfg.moe_intermediate_size = 256
    model = transformers.AutoModelForCausalLM.from_config(cfg).float()
    with torch.no_grad():  # wider weights than the default init, so the logits are not all alike
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
    model.save_pretrained(f"{out}/{m}256", safe_serialization=True)
print("ok")
EOF
if ! part 2; then
	:
elif [ "$(tail -1 "$OUT/py.log")" != ok ]; then
	record "256-wide HF models (python3 + transformers)" FAIL "$(tail -3 "$OUT/py.log" | tr '\n' ' ')"
else
	for m in llama qwen3_moe; do
		for q in q4_k q5_k q6_k; do
			$MK "$OUT/${m}256" "$OUT/$m-$q.gguf" --type $q >/dev/null 2>"$OUT/err" &&
				bin/glmc compile models/$m.lua --weights "$OUT/$m-$q.gguf" -o "$OUT/$m-$q.plan" 2>"$OUT/err"
			if [ $? != 0 ]; then
				record "$m 256 $q compile" FAIL "$(head -c 300 "$OUT/err")"
				continue
			fi
			compare "$m 256-wide ${q^^}" "$OUT/$m-$q.plan" 1,5,9,200,33,7 1e-4
		done
		compare "$m 256-wide Q4_K 20-token prompt" "$OUT/$m-q4_k.plan" "$mid" 1e-4
		compare "$m 256-wide Q6_K 40-token prompt" "$OUT/$m-q6_k.plan" "$long" 1e-4
	done
fi

# 3. random weights, generated on each device
part 3 && python3 - "$FIX" "$OUT" <<'EOF'
import json, sys
fix, out = sys.argv[1], sys.argv[2]
for m in ("llama", "qwen3_moe"):
    c = json.load(open(f"{fix}/{m}/config.json"))
    c.update(hidden_size=256, intermediate_size=512, head_dim=64)
    if m == "qwen3_moe":
        c["moe_intermediate_size"] = 256
    json.dump(c, open(f"{out}/{m}256.json", "w"))
EOF
part 3 && for m in llama qwen3_moe; do
	for q in q8_0 q4_k q5_k q6_k bf16; do
		plan=$OUT/$m-rnd-$q.plan
		if ! bin/glmc compile models/$m.lua --config "$OUT/${m}256.json" --random-weights $q -o "$plan" 2>"$OUT/err"; then
			record "$m random $q compile" FAIL "$(head -c 300 "$OUT/err")"
			continue
		fi
		compare "$m random ${q^^}" "$plan" 1,5,9,200,33,7 1e-4
	done
	if bin/glmc compile models/$m.lua --config "$OUT/${m}256.json" --random-weights q4_k --dtype bf16 -o "$OUT/$m-rnd-bf.plan" 2>"$OUT/err"; then
		compare "$m random Q4_K, bf16 activations" "$OUT/$m-rnd-bf.plan" "$long" 2e-2
	else
		record "$m random Q4_K bf16 compile" FAIL "$(head -c 300 "$OUT/err")"
	fi
	# Q8_0 with bf16 activations: prompts of 2..16 tokens run k_qgemv_tc (one column set at 6, two at 12)
	if bin/glmc compile models/$m.lua --config "$OUT/${m}256.json" --random-weights q8_0 --dtype bf16 -o "$OUT/$m-rnd-q8bf.plan" 2>"$OUT/err"; then
		compare "$m random Q8_0, bf16 activations" "$OUT/$m-rnd-q8bf.plan" 1,5,9,200,33,7 2e-2
		compare "$m random Q8_0, bf16 activations, 12-token prompt" "$OUT/$m-rnd-q8bf.plan" "$(seq -s, 3 14)" 2e-2
	else
		record "$m random Q8_0 bf16 compile" FAIL "$(head -c 300 "$OUT/err")"
	fi
done

# 5. GLM-5 256 wide, random weights: the fused decode kernels over blocks
part 5 && for q in q4_k_m q8_0 q5_k q6_k; do
	plan=$OUT/glm5-rnd-$q.plan
	if ! bin/glmc compile models/glm5.lua --config tests/data/glm5_q256.json --random-weights $q -o "$plan" 2>"$OUT/err"; then
		record "glm5 random $q compile" FAIL "$(head -c 300 "$OUT/err")"
		continue
	fi
	record "glm5 random ${q^^}: fused kernels over blocks in the plan" \
		"$(bin/glmc dump models/glm5.lua --config tests/data/glm5_q256.json --random-weights $q --after emit 2>/dev/null |
			grep -c 'k_qgemv_fused\|k_qmoe_down_fused' | awk '{ print ($1 > 0) ? "ok" : "FAIL" }')" ""
	compare "glm5 256-wide random ${q^^}" "$plan" 1,5,9,200,33,7 1e-4
done
part 5 && compare "glm5 256-wide random Q4_K_M 20-token prompt" "$OUT/glm5-rnd-q4_k_m.plan" "$mid" 1e-4
if part 5 && bin/glmc compile models/glm5.lua --config tests/data/glm5_q256.json --random-weights q4_k_m --dtype bf16 -o "$OUT/glm5-rnd-bf.plan" 2>"$OUT/err"; then
	compare "glm5 random Q4_K_M, bf16 activations" "$OUT/glm5-rnd-bf.plan" 1,5,9,200,33,7 2e-2
else
	record "glm5 random Q4_K_M bf16 compile" FAIL "$(head -c 300 "$OUT/err")"
fi

echo
printf '%-52s %-5s %s\n' CHECK RESULT DETAIL
printf '%s\n' "${rows[@]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
