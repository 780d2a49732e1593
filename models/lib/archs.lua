-- models/lib/archs.lua — which model file runs which checkpoint architecture.
--
-- A checkpoint names its architecture in its metadata: a GGUF file in general.architecture (llama.cpp's
-- names, src/llama-arch.cpp), a Hugging Face config.json in model_type and architectures. A model file
-- says which entry it is with nn.architecture(name) before it reads anything; glmc refuses weights its
-- entry does not list (glmc --force-model compiles them anyway, with a warning). Without a model file,
-- `glmc compile --weights PATH` takes the first entry that lists the weights' architecture; `file` is
-- relative to the models directory, the parent of this library.
--
-- llama.cpp converts DeepSeek-V2/V3 and GLM-4.7-Flash alike to deepseek2 (one graph runs both), so a
-- deepseek2 GGUF picks deepseek_v3.lua; glm4_moe_lite.lua, the same computation, accepts it too.
return {
  { name = "llama", file = "llama.lua",
    hf = { "llama", "LlamaForCausalLM" }, gguf = { "llama" } },
  { name = "qwen3", file = "qwen3.lua",
    hf = { "qwen3", "Qwen3ForCausalLM" }, gguf = { "qwen3" } },
  { name = "qwen3_moe", file = "qwen3_moe.lua",
    hf = { "qwen3_moe", "Qwen3MoeForCausalLM" }, gguf = { "qwen3moe" } },
  { name = "glm4_moe", file = "glm4_moe.lua",
    hf = { "glm4_moe", "Glm4MoeForCausalLM" }, gguf = { "glm4moe" } },
  { name = "deepseek_v3", file = "deepseek_v3.lua",
    hf = { "deepseek_v3", "DeepseekV3ForCausalLM" }, gguf = { "deepseek2" } },
  { name = "glm4_moe_lite", file = "glm4_moe_lite.lua",
    hf = { "glm4_moe_lite", "Glm4MoeLiteForCausalLM" }, gguf = { "deepseek2" } },
  { name = "glm5", file = "glm5.lua",
    hf = { "glm_moe_dsa", "GlmMoeDsaForCausalLM" }, gguf = { "glm-dsa" } },
}
