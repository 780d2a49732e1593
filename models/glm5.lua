-- models/glm5.lua — GLM-5 (glm_moe_dsa; GGUF arch glm-dsa): MLA over a 576-value latent cache, DeepSeek
-- sparse attention (a lightning indexer picks index_topk cache positions per query token; within that
-- many tokens it is exactly dense attention), sigmoid-routed MoE with a shared expert, 3 dense layers.
-- Rotary: interleaved pairs for the attention and the indexer alike (transformers 5.17, which the fixture
-- pins down, agrees with vLLM and llama.cpp here). Exact ties among indexer scores (its relu makes rows of
-- zeros common) are broken as torch.topk breaks them (ops/ref.c).
local nn = require "nn"
nn.architecture "glm5"   -- its entry in models/lib/archs.lua: the weights it runs

local hp = nn.read_llama_hparams(nn.merge(nn.mla_hparams, nn.moe_hparams, {
  index_heads = { hf = "index_n_heads", gguf = "{arch}.attention.indexer.head_count" },
  index_dim = { hf = "index_head_dim", gguf = "{arch}.attention.indexer.key_length" },
  index_topk = { hf = "index_topk", gguf = "{arch}.attention.indexer.top_k" },
}))
local rope, scale, lora_eps = nn.mla_setup(hp, true)
local W = nn.weights(nn.hf_names)
nn.unused_mtp_layers(hp)   -- the multi-token-prediction layers: not part of one step
glm.set_meta("cache_values_per_token_per_layer", hp.kv_lora + hp.qk_rope + hp.index_dim)

nn.decoder(hp, W, function(x, l, pos)
  return nn.moe_layer(x, l, hp, W, function(h)
    local function indexer(q_latent) return nn.dsa_indexer(h, q_latent, l, hp, W, pos, rope) end
    return nn.mla_attention(h, l, hp, W, pos, rope, { scale = scale, lora_eps = lora_eps, indexer = indexer })
  end)
end)
