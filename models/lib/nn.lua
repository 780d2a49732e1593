-- models/lib/nn.lua — the shared layer library that model descriptions are written against.
--
-- It holds what every decoder-only transformer repeats: reading hyperparameters from the checkpoint's
-- metadata through a per-model mapping, canonical (GGUF-style) parameter names with the per-format
-- name map, the attention and MLP blocks, and the tensor-parallel hints (column / row / replicated)
-- so that model files never mention parallelism.

local nn = {}

-- Read hyperparameters. spec maps our name to { hf = key or {keys...}, gguf = key or {keys...},
-- default = v, optional = true }. HF dotted keys walk nested objects ("rope_parameters.rope_theta");
-- in GGUF keys "{arch}" stands for general.architecture. Every value read is recorded in the plan as
-- hparam.<name>. A required key that is absent is an error naming the keys that were tried.
function nn.hparams(spec)
  local arch = glm.format == "gguf" and glm.meta("general.architecture") or nil
  local names = {}
  for name in pairs(spec) do names[#names + 1] = name end
  table.sort(names)
  local hp = {}
  for _, name in ipairs(names) do
    local s = spec[name]
    local keys = s[glm.format]
    if type(keys) == "string" then keys = { keys } end
    local v
    for i, k in ipairs(keys or {}) do
      if arch then k = k:gsub("{arch}", arch); keys[i] = k end
      v = glm.meta(k)
      if v ~= nil then break end
    end
    if v == nil then v = s.default end
    if v == nil and not s.optional then
      error(("hyperparameter '%s': none of [%s] is in the %s metadata"):format(
        name, table.concat(keys or {}, ", "), glm.format), 2)
    end
    hp[name] = v
    if v ~= nil and type(v) ~= "table" then glm.set_meta("hparam." .. name, tostring(v)) end
  end
  return hp
end

-- Canonical parameter names are GGUF's; this maps them to Hugging Face checkpoint names.
-- "blk.N." prefixes become "model.layers.N.".
nn.hf_names = {
  ["token_embd.weight"] = "model.embed_tokens.weight",
  ["output_norm.weight"] = "model.norm.weight",
  ["output.weight"] = "lm_head.weight",
  ["attn_norm.weight"] = "input_layernorm.weight",
  ["ffn_norm.weight"] = "post_attention_layernorm.weight",
  ["attn_q.weight"] = "self_attn.q_proj.weight",
  ["attn_k.weight"] = "self_attn.k_proj.weight",
  ["attn_v.weight"] = "self_attn.v_proj.weight",
  ["attn_q.bias"] = "self_attn.q_proj.bias",
  ["attn_k.bias"] = "self_attn.k_proj.bias",
  ["attn_v.bias"] = "self_attn.v_proj.bias",
  ["attn_output.weight"] = "self_attn.o_proj.weight",
  ["attn_q_norm.weight"] = "self_attn.q_norm.weight",
  ["attn_k_norm.weight"] = "self_attn.k_norm.weight",
  ["ffn_gate.weight"] = "mlp.gate_proj.weight",
  ["ffn_up.weight"] = "mlp.up_proj.weight",
  ["ffn_down.weight"] = "mlp.down_proj.weight",
}

-- The checkpoint's name for a canonical name, or an error naming it. GGUF names are the canonical ones.
function nn.source_name(map, canon)
  if glm.format == "gguf" then return canon end
  local layer, rest = canon:match("^blk%.(%d+)%.(.+)$")
  local src = map[rest or canon]
  if not src then
    error(("parameter '%s' has no %s name in the name map"):format(canon, glm.format), 3)
  end
  if layer then return ("model.layers.%s.%s"):format(layer, src) end
  return src
end

-- W(canon, shape, opts) declares a parameter, resolving its source name through `map`.
function nn.weights(map)
  return function(canon, shape, opts)
    local o = { source = nn.source_name(map, canon) }
    for k, v in pairs(opts or {}) do o[k] = v end
    return glm.param(canon, shape, o)
  end
end

-- Tensor-parallel hints on a [out, in] weight: column-parallel splits out, row-parallel splits in.
nn.column = { split = 1 }
nn.row = { split = 2 }

-- Rotary settings from HF metadata: rope_parameters (transformers 5) or rope_theta/rope_scaling (older
-- config.json files), partial_rotary_factor, and YaRN. Other scaling types are refused by name.
function nn.hf_rope(head_dim)
  local rp = glm.meta("rope_parameters") or glm.meta("rope_scaling") or {}
  local theta = rp.rope_theta or glm.meta("rope_theta") or 10000.0
  local partial = rp.partial_rotary_factor or glm.meta("partial_rotary_factor") or 1.0
  local r = { theta = theta, rot_dim = math.floor(head_dim * partial) }
  local kind = rp.rope_type or rp.type or "default"
  if kind == "yarn" then
    r.yarn = {
      factor = rp.factor,
      orig_ctx = rp.original_max_position_embeddings or glm.meta("max_position_embeddings"),
      beta_fast = rp.beta_fast, beta_slow = rp.beta_slow,
      mscale = rp.mscale, mscale_all_dim = rp.mscale_all_dim, attn_factor = rp.attention_factor,
    }
  elseif kind ~= "default" then
    error(("rope_type '%s' is not supported (default, yarn)"):format(kind), 2)
  end
  return r
end

local function blk(l, name) return ("blk.%d.%s"):format(l, name) end
nn.blk = blk

-- Rotary settings from GGUF metadata ({arch}.rope.*): the base, the rotated dims and YaRN.
function nn.gguf_rope(head_dim)
  local arch = glm.meta("general.architecture")
  local function m(k) return glm.meta(arch .. "." .. k) end
  local r = { theta = m("rope.freq_base") or 10000.0, rot_dim = m("rope.dimension_count") or head_dim }
  local kind = m("rope.scaling.type") or "none"
  if kind == "yarn" then
    r.yarn = { factor = m("rope.scaling.factor"), orig_ctx = m("rope.scaling.original_context_length"),
               beta_fast = m("rope.scaling.yarn_beta_fast"), beta_slow = m("rope.scaling.yarn_beta_slow") }
  elseif kind ~= "none" then
    error(("rope scaling '%s' is not supported (none, yarn)"):format(kind), 2)
  end
  return r
end

-- The rotary settings of whichever format the weights are in.
function nn.rope(head_dim)
  if glm.format == "gguf" then return nn.gguf_rope(head_dim) end
  return nn.hf_rope(head_dim)
end

-- Grouped-query attention block (covers MHA when kv_heads == heads), with optional qkv bias and
-- per-head q/k RMSNorm (Qwen3), rotary (split-half unless rope.interleaved), and a KV cache per layer.
-- hp: n_embd, n_head, n_kv, head_dim, eps; rope: nn.rope(); o: { bias = bool, qk_norm = bool,
-- unpermute_qk = bool }. unpermute_qk undoes the row permutation llama.cpp's converter applies to q and
-- k of llama-arch models (so split-half rotary applies, as in the Hugging Face original).
function nn.attention(x, l, hp, W, pos, rope, o)
  o = o or {}
  local C, H, G, D = hp.n_embd, hp.n_head, hp.n_kv, hp.head_dim
  local function proj(name, n, heads)
    local b = o.bias and W(blk(l, name .. ".bias"), { n }, nn.column) or nil
    local opts = { split = 1, unpermute = o.unpermute_qk and heads or nil }
    return glm.linear(x, W(blk(l, name .. ".weight"), { n, C }, opts), b)
  end
  local q, k, v = proj("attn_q", H * D, H), proj("attn_k", G * D, G), proj("attn_v", G * D)
  if o.qk_norm then
    q = glm.rmsnorm(q:view("T", H, D), W(blk(l, "attn_q_norm.weight"), { D }), hp.eps):view("T", H * D)
    k = glm.rmsnorm(k:view("T", G, D), W(blk(l, "attn_k_norm.weight"), { D }), hp.eps):view("T", G * D)
  end
  local function rot(t, heads)
    return glm.rope(t, pos, { heads = heads, head_dim = D, rot_dim = rope.rot_dim,
                              interleaved = rope.interleaved, theta = rope.theta, yarn = rope.yarn })
  end
  q, k = rot(q, H), rot(k, G)
  local kc, vc = glm.cache(blk(l, "k_cache"), { G * D }), glm.cache(blk(l, "v_cache"), { G * D })
  local a = glm.attention(q, k, v, kc, vc, pos, { heads = H, kv_heads = G, head_dim = D })
  return glm.linear(a, W(blk(l, "attn_output.weight"), { C, H * D }, nn.row))
end

-- SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
function nn.mlp(x, l, hp, W)
  local C, F = hp.n_embd, hp.n_ff
  local g = glm.linear(x, W(blk(l, "ffn_gate.weight"), { F, C }, nn.column))
  local u = glm.linear(x, W(blk(l, "ffn_up.weight"), { F, C }, nn.column))
  return glm.linear(glm.swiglu(g, u), W(blk(l, "ffn_down.weight"), { C, F }, nn.row))
end

-- The decoder-only skeleton shared by Llama-like models: embedding, pre-norm residual blocks,
-- final norm and LM head (tied to the embedding when the checkpoint says so).
function nn.decoder(hp, W, layer)
  local tokens, pos = glm.input("tokens"), glm.input("pos")
  local emb = W("token_embd.weight", { hp.vocab, hp.n_embd })
  local x = glm.embedding(emb, tokens)
  for l = 0, hp.n_layer - 1 do
    glm.layer(l)
    x = layer(x, l, pos)
  end
  glm.layer(-1)
  x = glm.rmsnorm(x, W("output_norm.weight", { hp.n_embd }), hp.eps)
  local head = hp.tie and emb or W("output.weight", { hp.vocab, hp.n_embd }, nn.column)
  glm.output("logits", glm.linear(x, head))
end

-- Hyperparameters every Llama-like HF config has.
nn.llama_hparams = {
  vocab = { hf = "vocab_size", gguf = "{arch}.vocab_size", optional = true },
  n_embd = { hf = "hidden_size", gguf = "{arch}.embedding_length" },
  n_layer = { hf = "num_hidden_layers", gguf = "{arch}.block_count" },
  n_head = { hf = "num_attention_heads", gguf = "{arch}.attention.head_count" },
  n_kv = { hf = "num_key_value_heads", gguf = "{arch}.attention.head_count_kv", optional = true },
  head_dim = { hf = "head_dim", gguf = "{arch}.attention.key_length", optional = true },
  n_ff = { hf = "intermediate_size", gguf = "{arch}.feed_forward_length" },
  eps = { hf = "rms_norm_eps", gguf = "{arch}.attention.layer_norm_rms_epsilon" },
  n_ctx = { hf = "max_position_embeddings", gguf = "{arch}.context_length" },
  tie = { hf = "tie_word_embeddings", optional = true },
  bos = { hf = "bos_token_id", gguf = "tokenizer.ggml.bos_token_id", optional = true },
  eos = { hf = "eos_token_id", gguf = "tokenizer.ggml.eos_token_id", optional = true },
}

-- Read the Llama-like hyperparameters and fill the derived defaults.
function nn.read_llama_hparams(extra)
  local spec = {}
  for k, v in pairs(nn.llama_hparams) do spec[k] = v end
  for k, v in pairs(extra or {}) do spec[k] = v end
  local hp = nn.hparams(spec)
  hp.n_kv = hp.n_kv or hp.n_head
  hp.head_dim = hp.head_dim or hp.n_embd // hp.n_head
  -- GGUF files often omit the vocabulary size and tie the head by leaving output.weight out.
  local emb = glm.weight_shape(nn.source_name(nn.hf_names, "token_embd.weight"))
  hp.vocab = hp.vocab or (emb and emb[1])
  if not hp.vocab then error("vocabulary size: no vocab_size key and no token_embd.weight tensor", 2) end
  if hp.tie == nil then hp.tie = glm.weight_shape(nn.source_name(nn.hf_names, "output.weight")) == nil end
  glm.set_meta("n_ctx", hp.n_ctx)
  glm.set_meta("vocab", hp.vocab)
  return hp
end

return nn
