-- models/glm4_moe.lua — GLM-4.5/4.6/4.7 (glm4_moe; GGUF arch glm4moe): GQA with qkv bias, per-head q/k
-- RMSNorm and partial rotary, then DeepSeek-style sigmoid-routed MoE with a shared expert.
local nn = require "nn"
nn.architecture "glm4_moe"   -- its entry in models/lib/archs.lua: the weights it runs

local hp = nn.read_llama_hparams(nn.merge(nn.moe_hparams, {
  bias = { hf = "attention_bias", default = false },
  qk_norm = { hf = "use_qk_norm", default = false },
}))
if glm.format == "gguf" then
  hp.bias = glm.weight_shape("blk.0.attn_q.bias") ~= nil
  hp.qk_norm = glm.weight_shape("blk.0.attn_q_norm.weight") ~= nil
end
local rope = nn.rope(hp.head_dim)
local W = nn.weights(nn.hf_names)
nn.unused_mtp_layers(hp)   -- the multi-token-prediction layers: not part of one step

nn.decoder(hp, W, function(x, l, pos)
  return nn.moe_layer(x, l, hp, W, function(h)
    return nn.attention(h, l, hp, W, pos, rope, { bias = hp.bias, qk_norm = hp.qk_norm })
  end)
end)
