# bench/shapes.sh — the benchmark shapes of bench/ab.sh and bench/ncu.sh, sourced: shape_vars NAME DTYPE
# sets model (models/NAME.lua), cfg (its config), extra (glmc flags) and act (the activation dtype: bf16
# for GGUF block types, else DTYPE); returns 1 for an unknown name.
# (bench/decode.sh keeps its own table, with the peer's flags.)
shape_vars() {
	act=$2
	case $2 in q*) act=bf16 ;; esac
	case $1 in
	llama3_8b) model=llama cfg=models/configs/llama3_8b.json extra="" ;;
	glm4_7_flash) model=glm4_moe_lite cfg=models/configs/glm4_7_flash.json extra="" ;;
	glm5_slice) model=glm5 cfg=models/configs/glm5.json extra="--layers 8" ;;
	*) return 1 ;;
	esac
}
