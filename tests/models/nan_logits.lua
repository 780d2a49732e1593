-- tests/models/nan_logits.lua — llama with its hidden state scaled by 0/0 before the head: every logit is NaN.
local nn = require "nn"

local hp = nn.read_llama_hparams { bias = { hf = "attention_bias", default = false } }
local rope = nn.rope(hp.head_dim)
local W = nn.weights(nn.hf_names)

nn.decoder(hp, W, function(x, l, pos)
  local h = glm.rmsnorm(x, W(nn.blk(l, "attn_norm.weight"), { hp.n_embd }), hp.eps)
  x = x + nn.attention(h, l, hp, W, pos, rope, { bias = hp.bias, unpermute_qk = glm.format == "gguf" })
  h = glm.rmsnorm(x, W(nn.blk(l, "ffn_norm.weight"), { hp.n_embd }), hp.eps)
  x = x + nn.mlp(h, l, hp, W)
  if l == hp.n_layer - 1 then
    x = glm.scale(x, 0 / 0)
  end
  return x
end)
