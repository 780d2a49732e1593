-- models/deepseek_v3.lua — DeepSeek-V3 (and V2): MLA attention over a latent cache, sigmoid-routed MoE
-- with group-limited choice and a shared expert, dense leading layers, YaRN rotary with mscale.
local nn = require "nn"
nn.architecture "deepseek_v3"   -- its entry in models/lib/archs.lua: the weights it runs

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
