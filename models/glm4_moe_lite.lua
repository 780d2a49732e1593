-- models/glm4_moe_lite.lua — GLM-4.7-Flash (glm4_moe_lite; GGUF arch deepseek2): DeepSeek-V3's MLA and
-- MoE with GLM's sizes and plain rotary.
local nn = require "nn"
nn.architecture "glm4_moe_lite"   -- its entry in models/lib/archs.lua: the weights it runs

local hp = nn.read_llama_hparams(nn.merge(nn.mla_hparams, nn.moe_hparams,
  { interleave = { hf = "rope_interleave", default = true } }))
local rope, scale, lora_eps = nn.mla_setup(hp, hp.interleave)
local W = nn.weights(nn.hf_names)
nn.unused_mtp_layers(hp)   -- the multi-token-prediction layers: not part of one step
glm.set_meta("cache_values_per_token_per_layer", hp.kv_lora + hp.qk_rope)

nn.decoder(hp, W, function(x, l, pos)
  return nn.moe_layer(x, l, hp, W, function(h)
    return nn.mla_attention(h, l, hp, W, pos, rope, { scale = scale, lora_eps = lora_eps })
  end)
end)
