-- models/qwen3_moe.lua — Qwen3 MoE: Qwen3 attention (per-head q/k RMSNorm) and a softmax-routed MoE
-- without shared experts; layers listed in mlp_only_layers (or off the sparse step) keep a dense MLP.
local nn = require "nn"
nn.architecture "qwen3_moe"   -- its entry in models/lib/archs.lua: the weights it runs

local hp = nn.read_llama_hparams(nn.merge(nn.moe_hparams, {
  sparse_step = { hf = "decoder_sparse_step", default = 1 },
  mlp_only = { hf = "mlp_only_layers", default = {} },
}))
if glm.format == "gguf" and glm.meta(glm.meta("general.architecture") .. ".expert_weights_norm") == nil then
  hp.norm_topk = true   -- llama.cpp's qwen3moe always renormalises the chosen experts' weights
end
local rope = nn.rope(hp.head_dim)
local W = nn.weights(nn.hf_names)
local dense = {}
for _, l in ipairs(hp.mlp_only) do dense[l] = true end

nn.decoder(hp, W, function(x, l, pos)
  local h = glm.rmsnorm(x, W(nn.blk(l, "attn_norm.weight"), { hp.n_embd }), hp.eps)
  x = x + nn.attention(h, l, hp, W, pos, rope, { qk_norm = true })
  h = glm.rmsnorm(x, W(nn.blk(l, "ffn_norm.weight"), { hp.n_embd }), hp.eps)
  if dense[l] or (l + 1) % hp.sparse_step ~= 0 then return x + nn.mlp(h, l, hp, W) end
  return x + nn.moe(h, l, hp, W, { func = "softmax" })
end)
