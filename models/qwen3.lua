-- models/qwen3.lua — Qwen3 dense: Llama's block plus per-head RMSNorm on q and k before rotary.
local nn = require "nn"
nn.architecture "qwen3"   -- its entry in models/lib/archs.lua: the weights it runs

local hp = nn.read_llama_hparams { bias = { hf = "attention_bias", default = false } }
local rope = nn.rope(hp.head_dim)
local W = nn.weights(nn.hf_names)

nn.decoder(hp, W, function(x, l, pos)
  local h = glm.rmsnorm(x, W(nn.blk(l, "attn_norm.weight"), { hp.n_embd }), hp.eps)
  x = x + nn.attention(h, l, hp, W, pos, rope, { bias = hp.bias, qk_norm = true })
  h = glm.rmsnorm(x, W(nn.blk(l, "ffn_norm.weight"), { hp.n_embd }), hp.eps)
  return x + nn.mlp(h, l, hp, W)
end)
