-- models/lib/nn.lua — the shared layer library that model descriptions are written against.
--
-- It holds what every decoder-only transformer repeats: reading hyperparameters from the checkpoint's
-- metadata through a per-model mapping, canonical (GGUF-style) parameter names with the per-format
-- name map, the attention and MLP blocks, and the tensor-parallel hints (column / row / replicated)
-- so that model files never mention parallelism.

local nn = {}

-- Hyperparameters that count something (layers, widths, heads, positions): positive integers.
nn.counts = { n_layer = true, n_embd = true, n_head = true, n_kv = true, head_dim = true, n_ff = true,
  n_ctx = true, vocab = true }
-- ... and those that are positive numbers.
nn.positive = { eps = true }

-- A value read from the metadata must have the type its spec implies (a count, or the default's type);
-- the error names the metadata file (config.json or the GGUF) and the key, not this library's line.
function nn.check_hparam(name, key, v, default)
  local want
  if nn.counts[name] then
    if math.type(v) == "integer" and v > 0 then return end
    want = "a positive integer"
  elseif nn.positive[name] then
    if type(v) == "number" and v > 0 then return end
    want = "a positive number"
  elseif default ~= nil and type(v) ~= type(default) then
    want = "a " .. type(default)
  else
    return
  end
  error(("%s: key '%s' (hyperparameter %s) must be %s, got %s"):format(glm.meta_file or "metadata", key, name,
    want, type(v) == "string" and ("'" .. v .. "'") or tostring(v)), 0)
end

-- Read hyperparameters. spec maps our name to { hf = key or {keys...}, gguf = key or {keys...},
-- default = v, optional = true (or a format name: optional in that format only) }. HF dotted keys walk nested objects ("rope_parameters.rope_theta");
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
    local v, k_used
    for i, k in ipairs(keys or {}) do
      if arch then k = k:gsub("{arch}", arch); keys[i] = k end
      v = glm.meta(k)
      k_used = k
      if v ~= nil then break end
    end
    if v ~= nil then nn.check_hparam(name, k_used, v, s.default) end
    if v == nil then v = s.default end
    if v == nil and s.optional ~= true and s.optional ~= glm.format then
      error(("hyperparameter '%s': none of [%s] is in the %s metadata"):format(
        name, table.concat(keys or {}, ", "), glm.format), 2)
    end
    hp[name] = v
    if v ~= nil and type(v) ~= "table" then glm.set_meta("hparam." .. name, tostring(v)) end
  end
  return hp
end

-- The weights' architecture names, each with where it came from: a GGUF file's general.architecture,
-- a config.json's model_type and architectures.
local function weights_archs()
  local found = {}
  local function add(v, key)
    if type(v) == "string" then found[#found + 1] = { name = v, from = key } end
  end
  if glm.format == "gguf" then
    add(glm.meta("general.architecture"), "general.architecture")
  else
    add(glm.meta("model_type"), "model_type")
    local list = glm.meta("architectures")
    for _, a in ipairs(type(list) == "table" and list or {}) do add(a, "architectures") end
  end
  return found
end

-- The first of the weights' names that an archs.lua entry lists, or nil.
local function listed(entry, found)
  for _, f in ipairs(found) do
    for _, n in ipairs(entry[glm.format == "gguf" and "gguf" or "hf"]) do
      if n == f.name then return f end
    end
  end
end

local function describe(found)
  local t = {}
  for _, f in ipairs(found) do t[#t + 1] = ("'%s' (%s)"):format(f.name, f.from) end
  return table.concat(t, ", ") .. " in " .. glm.meta_file
end

-- glmc without a model file: the model file archs.lua gives for the weights, and why (one line).
function nn.pick_model()
  local found = weights_archs()
  if #found == 0 then
    error(("%s names no architecture (%s); give a model file"):format(glm.meta_file,
      glm.format == "gguf" and "general.architecture" or "model_type, architectures"), 0)
  end
  for _, e in ipairs(require "archs") do
    local f = listed(e, found)
    if f then return e.file, ("architecture %s"):format(describe { f }) end
  end
  error(("%s/archs.lua has no model file for architecture %s; give a model file"):format(glm.library,
    describe(found)), 0)
end

-- A model file's first call: which archs.lua entry it is. Weights of an architecture the entry does
-- not list are an error naming both (a warning under glmc --force-model).
function nn.architecture(name)
  local entry
  for _, e in ipairs(require "archs") do
    if e.name == name then entry = e end
  end
  if not entry then error(("architecture '%s' has no entry in %s/archs.lua"):format(name, glm.library), 2) end
  glm.set_meta("arch", name)
  local found = weights_archs()
  if listed(entry, found) then return end
  local fmt = glm.format == "gguf" and "gguf" or "hf"
  local runs = ("%s/archs.lua: '%s' runs %s %s"):format(glm.library, name, fmt == "gguf" and "GGUF" or "Hugging Face",
    table.concat(entry[fmt], ", "))
  local msg = #found == 0 and ("%s names no architecture; the model file is not checked (%s)"):format(glm.meta_file, runs)
    or ("the model file is for another architecture than the weights: %s; the weights are %s"):format(runs,
      describe(found))
  if #found == 0 then glm.warn(msg); return end
  if glm.options.force_model then glm.warn(msg .. "; compiling it anyway (--force-model)"); return end
  error(msg .. "; give their model file (or none, and glmc picks it) or --force-model", 2)
end

-- Checkpoint tensors a model knowingly leaves unused (whole layers, named by prefix): glmc neither
-- warns about them nor fails under --strict. The plan records them as weights.known_unused.
local known_unused = {}
function nn.unused_layers(first, count)
  local prefix = glm.format == "gguf" and "blk.%d." or "model.layers.%d."
  for l = first, first + count - 1 do known_unused[#known_unused + 1] = prefix:format(l) end
  glm.set_meta("weights.known_unused", table.concat(known_unused, " "))
end

-- The MTP (multi-token prediction, "nextn") layers that follow the decoder's in DeepSeek-V3 and GLM
-- checkpoints: speculative decoding would read them, one forward step does not (nor does llama.cpp's).
function nn.unused_mtp_layers(hp)
  if (hp.nextn or 0) > 0 then nn.unused_layers(hp.n_layer_all, hp.nextn) end
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
  -- MLA (DeepSeek-V2/V3, GLM-4.7-Flash, GLM-5); kv_b is read as two row slots per head
  ["attn_q_a.weight"] = "self_attn.q_a_proj.weight",
  ["attn_q_a_norm.weight"] = "self_attn.q_a_layernorm.weight",
  ["attn_q_b.weight"] = "self_attn.q_b_proj.weight",
  ["attn_kv_a_mqa.weight"] = "self_attn.kv_a_proj_with_mqa.weight",
  ["attn_kv_a_norm.weight"] = "self_attn.kv_a_layernorm.weight",
  ["attn_k_b.weight"] = "self_attn.kv_b_proj.weight",
  ["attn_v_b.weight"] = "self_attn.kv_b_proj.weight",
  -- DeepSeek sparse-attention indexer (GLM-5)
  ["indexer.attn_q_b.weight"] = "self_attn.indexer.wq_b.weight",
  ["indexer.attn_k.weight"] = "self_attn.indexer.wk.weight",
  ["indexer.k_norm.weight"] = "self_attn.indexer.k_norm.weight",
  ["indexer.k_norm.bias"] = "self_attn.indexer.k_norm.bias",
  ["indexer.proj.weight"] = "self_attn.indexer.weights_proj.weight",
  -- MoE: the router, its selection bias, experts stacked from per-expert tensors, shared experts
  ["ffn_gate_inp.weight"] = "mlp.gate.weight",
  ["exp_probs_b.bias"] = "mlp.gate.e_score_correction_bias",
  ["ffn_gate_exps.weight"] = "mlp.experts.%d.gate_proj.weight",
  ["ffn_up_exps.weight"] = "mlp.experts.%d.up_proj.weight",
  ["ffn_down_exps.weight"] = "mlp.experts.%d.down_proj.weight",
  ["ffn_gate_shexp.weight"] = "mlp.shared_experts.gate_proj.weight",
  ["ffn_up_shexp.weight"] = "mlp.shared_experts.up_proj.weight",
  ["ffn_down_shexp.weight"] = "mlp.shared_experts.down_proj.weight",
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
-- config.json files), partial_rotary_factor, and the scaling of the inverse frequencies: YaRN, llama3
-- (Llama 3.1+) or linear. Other scaling types are refused by name.
function nn.hf_rope(head_dim)
  local rp = glm.meta("rope_parameters") or glm.meta("rope_scaling") or {}
  local theta = rp.rope_theta or glm.meta("rope_theta") or 10000.0
  local partial = rp.partial_rotary_factor or glm.meta("partial_rotary_factor") or 1.0
  local r = { theta = theta, rot_dim = math.floor(head_dim * partial) }
  local kind = rp.rope_type or rp.type or "default"
  local function need(key)
    if rp[key] == nil then
      error(("%s: rope_type '%s' needs '%s'"):format(glm.meta_file, kind, key), 3)
    end
    return rp[key]
  end
  if kind == "yarn" then
    r.yarn = {
      factor = rp.factor,
      orig_ctx = rp.original_max_position_embeddings or glm.meta("max_position_embeddings"),
      beta_fast = rp.beta_fast, beta_slow = rp.beta_slow,
      mscale = rp.mscale, mscale_all_dim = rp.mscale_all_dim, attn_factor = rp.attention_factor,
    }
  elseif kind == "llama3" then
    r.llama3 = { factor = need("factor"), low_freq_factor = need("low_freq_factor"),
                 high_freq_factor = need("high_freq_factor"), orig_ctx = need("original_max_position_embeddings") }
  elseif kind == "linear" then
    r.linear = { factor = need("factor") }
  elseif kind ~= "default" then
    error(("%s: rope_type '%s' is not supported (default, linear, llama3, yarn)"):format(glm.meta_file, kind), 2)
  end
  return r
end

local function blk(l, name) return ("blk.%d.%s"):format(l, name) end
nn.blk = blk

-- Rotary settings from GGUF metadata ({arch}.rope.*): the base, the rotated dims, YaRN, linear scaling
-- and per-frequency divisors. As llama.cpp reads them: an absent rope.scaling.type means linear, whose
-- factor is rope.scaling.factor (or the older rope.scale_linear; none or 0 is 1), "none" never scales;
-- rope_freqs.weight (Llama 3.1+: llama.cpp's converter writes the llama3 scaling as one divisor per
-- frequency, with no scaling key) divides the frequencies whenever the file holds it.
function nn.gguf_rope(head_dim)
  local arch = glm.meta("general.architecture")
  local function m(k) return glm.meta(arch .. "." .. k) end
  local r = { theta = m("rope.freq_base") or 10000.0, rot_dim = m("rope.dimension_count") or head_dim }
  local kind = m("rope.scaling.type") or "linear"
  if kind == "yarn" then
    -- attn_factor: the cos/sin magnitude scale when the file gives one; without it the rope op uses
    -- YaRN's default 0.1·ln(factor) + 1, as ggml does (DeepSeek-style MLA overrides it, nn.mla_setup).
    r.yarn = { factor = m("rope.scaling.factor"), orig_ctx = m("rope.scaling.original_context_length"),
               beta_fast = m("rope.scaling.yarn_beta_fast"), beta_slow = m("rope.scaling.yarn_beta_slow"),
               attn_factor = m("rope.scaling.attn_factor") }
  elseif kind == "linear" then
    local f = m("rope.scaling.factor") or m("rope.scale_linear") or 0
    if f ~= 0 and f ~= 1 then r.linear = { factor = f } end
  elseif kind ~= "none" then
    error(("%s: rope scaling '%s' is not supported (none, linear, yarn)"):format(glm.meta_file, kind), 2)
  end
  if glm.weight_shape("rope_freqs.weight") then
    r.freqs = glm.param("rope_freqs.weight", { r.rot_dim // 2 }, { source = "rope_freqs.weight" })
  end
  return r
end

-- The rotary settings of whichever format the weights are in.
function nn.rope(head_dim)
  if glm.format == "gguf" then return nn.gguf_rope(head_dim) end
  return nn.hf_rope(head_dim)
end

-- Rotary of t ([T, heads·head_dim]) at positions pos with the settings of nn.rope (rot_dim defaults to
-- head_dim).
function nn.rotate(t, pos, rope, heads, head_dim, rot_dim)
  return glm.rope(t, pos, { heads = heads, head_dim = head_dim, rot_dim = rot_dim, interleaved = rope.interleaved,
                            theta = rope.theta, yarn = rope.yarn, llama3 = rope.llama3, linear = rope.linear,
                            freqs = rope.freqs })
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
  q, k = nn.rotate(q, pos, rope, H, D, rope.rot_dim), nn.rotate(k, pos, rope, G, D, rope.rot_dim)
  local kc, vc = glm.cache(blk(l, "k_cache"), { G * D }), glm.cache(blk(l, "v_cache"), { G * D })
  local a = glm.attention(q, k, v, kc, vc, pos, { heads = H, kv_heads = G, head_dim = D })
  return glm.linear(a, W(blk(l, "attn_output.weight"), { C, H * D }, nn.row))
end

-- SwiGLU feed-forward: down(silu(gate(x)) * up(x)). suffix selects the shared expert ("_shexp") and
-- F overrides the width.
function nn.mlp(x, l, hp, W, suffix, F)
  local C, sfx = hp.n_embd, suffix or ""
  F = F or hp.n_ff
  local g = glm.linear(x, W(blk(l, "ffn_gate" .. sfx .. ".weight"), { F, C }, nn.column))
  local u = glm.linear(x, W(blk(l, "ffn_up" .. sfx .. ".weight"), { F, C }, nn.column))
  return glm.linear(glm.swiglu(g, u), W(blk(l, "ffn_down" .. sfx .. ".weight"), { C, F }, nn.row))
end

-- Mixture of experts: a router over n_expert experts picks n_expert_used per token (softmax scores for
-- Qwen3, sigmoid plus a selection-only bias and group-limited choice for DeepSeek/GLM), the chosen
-- experts' SwiGLU outputs are summed with their weights, and the shared experts (if any) are added
-- unweighted. Only the chosen experts' weights are read. o: { func = "softmax"|"sigmoid", bias = bool }.
function nn.moe(x, l, hp, W, o)
  local C, E, F = hp.n_embd, hp.n_expert, hp.n_ff_exp
  local gating = ({ softmax = 1, sigmoid = 2 })[o.func]
  if hp.gating and hp.gating ~= gating then
    error(("expert_gating_func is %d in the weights, but this model routes with %s (%d)"):format(
      hp.gating, o.func, gating), 2)
  end
  local logits = glm.linear(x, W(blk(l, "ffn_gate_inp.weight"), { E, C }))
  local bias = o.bias and W(blk(l, "exp_probs_b.bias"), { E }) or nil
  local ids = glm.moe_route(logits, bias, { k = hp.n_expert_used, groups = hp.n_group or 1,
                                            topk_groups = hp.topk_group or hp.n_group or 1, func = o.func })
  local w = glm.moe_weights(logits, ids, { func = o.func, norm = hp.norm_topk, scale = hp.routed_scale or 1.0 })
  -- Hugging Face checkpoints hold one tensor per expert; GGUF holds them stacked. Tensor parallelism
  -- inside the experts: every rank holds a slice of each expert's hidden width F.
  local parts = glm.format ~= "gguf" and E or nil
  local y = glm.moe_ffn(x, ids, w,
    W(blk(l, "ffn_gate_exps.weight"), { E, F, C }, { parts = parts, split = 2 }),
    W(blk(l, "ffn_up_exps.weight"), { E, F, C }, { parts = parts, split = 2 }),
    W(blk(l, "ffn_down_exps.weight"), { E, C, F }, { parts = parts, split = 3 }))
  if (hp.n_shared or 0) > 0 then
    y = y + nn.mlp(x, l, hp, W, "_shexp", F * hp.n_shared)
  end
  return y
end

-- Hyperparameters of MoE models.
nn.moe_hparams = {
  n_expert = { hf = { "n_routed_experts", "num_experts", "num_local_experts" }, gguf = "{arch}.expert_count" },
  n_expert_used = { hf = "num_experts_per_tok", gguf = "{arch}.expert_used_count" },
  n_ff_exp = { hf = "moe_intermediate_size", gguf = "{arch}.expert_feed_forward_length" },
  n_shared = { hf = "n_shared_experts", gguf = "{arch}.expert_shared_count", default = 0 },
  n_group = { hf = "n_group", gguf = "{arch}.expert_group_count", default = 1 },
  topk_group = { hf = "topk_group", gguf = "{arch}.expert_group_used_count", default = 1 },
  norm_topk = { hf = "norm_topk_prob", gguf = "{arch}.expert_weights_norm", default = false },
  routed_scale = { hf = "routed_scaling_factor", gguf = "{arch}.expert_weights_scale", default = 1.0 },
  first_dense = { hf = "first_k_dense_replace", gguf = "{arch}.leading_dense_block_count", default = 0 },
  mlp_types = { hf = "mlp_layer_types", optional = true },   -- transformers 5: "dense" / "sparse" per layer
  -- GGUF: llama_expert_gating_func_type (1 softmax, 2 sigmoid), checked against the model's routing
  gating = { gguf = "{arch}.expert_gating_func", optional = true },
}

-- Hyperparameters of MLA attention.
nn.mla_hparams = {
  q_lora = { hf = "q_lora_rank", gguf = "{arch}.attention.q_lora_rank", optional = true },
  kv_lora = { hf = "kv_lora_rank", gguf = "{arch}.attention.kv_lora_rank" },
  qk_nope = { hf = "qk_nope_head_dim", optional = true },
  qk_rope = { hf = "qk_rope_head_dim", gguf = "{arch}.rope.dimension_count" },
  qk_mla = { gguf = "{arch}.attention.key_length_mla", optional = true },
  v_head = { hf = "v_head_dim", gguf = "{arch}.attention.value_length_mla", optional = "gguf" },
  -- GGUF: the per-head key and value widths in files without the two *_mla keys (nn.mla_setup)
  k_len = { gguf = "{arch}.attention.key_length", optional = true },
  v_len = { gguf = "{arch}.attention.value_length", optional = true },
  -- eps of the two latent norms; not a llama.cpp key (tests/tools/mkgguf.c writes it), see nn.mla_setup
  lora_eps = { gguf = "{arch}.attention.lora_layer_norm_rms_epsilon", optional = true },
}

-- Read a spec table made of several groups of hyperparameters.
function nn.merge(...)
  local spec = {}
  for _, t in ipairs({ ... }) do
    for k, v in pairs(t) do spec[k] = v end
  end
  return spec
end

-- Multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash, GLM-5) in the absorbed form, prefill and
-- decode alike: the cache holds, per token, the normalised latent c (kv_lora values) and the rotated
-- shared key k_pe (qk_rope values) — kv_lora + qk_rope values per token per layer, never per-head K/V.
--   ql_h = W_UK[h]ᵀ q_nope_h;  score = scale · [ql_h ; q_pe_h] · [c ; k_pe];  o_h = W_UV[h] (Σ p · c)
-- W_UK and W_UV are row slots of kv_b (per head: qk_nope rows of k, then v_head rows of v) in Hugging
-- Face checkpoints and older GGUF files (attn_kv_b, hp.kv_b_merged), and the split attn_k_b (stored
-- transposed) / attn_v_b tensors in GGUF files since llama.cpp's MLA conversion.
-- o: { scale = softmax scale, lora_eps = eps of the two latent norms, indexer = function(q_latent) giving
-- the DSA selection, or nil for dense attention }.
function nn.mla_attention(x, l, hp, W, pos, rope, o)
  local C, H, L, Dn, Dr, Dv = hp.n_embd, hp.n_head, hp.kv_lora, hp.qk_nope, hp.qk_rope, hp.v_head
  local Dq = Dn + Dr
  local q, qc
  if hp.q_lora then
    qc = glm.rmsnorm(glm.linear(x, W(blk(l, "attn_q_a.weight"), { hp.q_lora, C })),
                     W(blk(l, "attn_q_a_norm.weight"), { hp.q_lora }), o.lora_eps)
    q = glm.linear(qc, W(blk(l, "attn_q_b.weight"), { H * Dq, hp.q_lora }, nn.column))
  else
    q = glm.linear(x, W(blk(l, "attn_q.weight"), { H * Dq, C }, nn.column))
  end
  local qn, qr = glm.split(q:view("T", H, Dq), 3, { Dn, Dr })
  local function rot(t, heads) return nn.rotate(t, pos, rope, heads, Dr) end
  qr = rot(qr:view("T", H * Dr), H)
  local c, kr = glm.split(glm.linear(x, W(blk(l, "attn_kv_a_mqa.weight"), { L + Dr, C })), 2, { L, Dr })
  c = glm.rmsnorm(c, W(blk(l, "attn_kv_a_norm.weight"), { L }), o.lora_eps)
  local latent = glm.concat({ c, rot(kr, 1) }, 2)
  local split = glm.format == "gguf" and not hp.kv_b_merged
  local kv_b = glm.format == "gguf" and blk(l, "attn_kv_b.weight") or nil   -- nil: the name map's
  local function slot(offset) return { split = 1, source = kv_b, rows = { stride = Dn + Dv, offset = offset } } end
  local wk = split and W(blk(l, "attn_k_b.weight"), { H, L, Dn }, nn.split1)
                    or W(blk(l, "attn_k_b.weight"), { H, Dn, L }, slot(0))
  local wv = split and W(blk(l, "attn_v_b.weight"), { H, Dv, L }, nn.split1)
                    or W(blk(l, "attn_v_b.weight"), { H, Dv, L }, slot(Dn))
  local ql = glm.matmul(qn:permute { 2, 1, 3 }, wk, { transpose_b = split })      -- [H, T, L]
  local qabs = glm.concat({ ql:permute { 2, 1, 3 }, qr:view("T", H, Dr) }, 3)   -- [T, H, L + Dr]
  local cache = glm.cache(blk(l, "kv_latent"), { L + Dr })
  local sel = o.indexer and o.indexer(qc) or nil
  local ol = glm.mla(qabs:view("T", H * (L + Dr)), latent, cache, pos, sel,
                     { heads = H, dk = L + Dr, dv = L, scale = o.scale })
  local oh = glm.matmul(ol:view("T", H, L):permute { 2, 1, 3 }, wv, { transpose_b = true })  -- [H, T, Dv]
  return glm.linear(oh:permute { 2, 1, 3 }:view("T", H * Dv), W(blk(l, "attn_output.weight"), { C, H * Dv }, nn.row))
end

-- Derived MLA settings: the nope width, the softmax scale (qk_head_dim^-0.5, times mscale² under
-- DeepSeek YaRN), the eps of the two latent norms and the rotary layout (interleaved pairs unless
-- hf_interleave says otherwise for HF checkpoints).
-- The latent-norm eps: Hugging Face builds q_a_layernorm and kv_a_layernorm with its RMSNorm default
-- 1e-6 (whatever rms_norm_eps says); llama.cpp uses the file's rms eps. GGUF files converted from HF
-- by tests/tools/mkgguf.c carry what the reference computed in {arch}.attention.lora_layer_norm_rms_epsilon;
-- other GGUF files fall back to attention.layer_norm_rms_epsilon, as llama.cpp does.
-- GGUF YaRN (DeepSeek style, rope.scaling.yarn_log_multiplier = 0.1·mscale_all_dim): llama.cpp puts
-- mscale² into the softmax scale and cancels ggml's built-in cos/sin magnitude scaling (attn_factor
-- 1/(1 + 0.1·ln factor)), so the rotation itself is unscaled — HF's mscale/mscale_all_dim ratio, which
-- is 1 for DeepSeek-V3 (mscale = mscale_all_dim).
-- GGUF layouts, told apart by the keys as llama.cpp tells them (both *_mla keys, or not): llama.cpp's
-- MLA conversion (April 2025 on) splits kv_b into attn_k_b / attn_v_b and writes key_length_mla =
-- qk_nope + qk_rope and value_length_mla = v_head (key_length / value_length are then the latent's
-- kv_lora + qk_rope and kv_lora); older files keep kv_b whole (attn_kv_b, [H * (qk_nope + v_head),
-- kv_lora] as in Hugging Face) and key_length / value_length are the per-head qk_nope + qk_rope and
-- v_head (hp.kv_b_merged).
function nn.mla_setup(hp, hf_interleave)
  local gguf = glm.format == "gguf"
  if gguf and not (hp.qk_mla and hp.v_head) then
    local arch = glm.meta("general.architecture")
    if not (hp.k_len and hp.v_len) then
      error(("hyperparameters 'qk_mla', 'v_head': the gguf metadata has neither %s.attention.key_length_mla and "
        .. "value_length_mla nor key_length and value_length"):format(arch), 2)
    end
    hp.kv_b_merged, hp.qk_mla, hp.v_head = true, hp.k_len, hp.v_len
    glm.set_meta("hparam.v_head", hp.v_head)
    glm.set_meta("mla.kv_b", "merged (attn_kv_b, before llama.cpp's MLA conversion)")
  end
  if gguf then
    hp.qk_nope = hp.qk_nope or (hp.qk_mla - hp.qk_rope)
  end
  local rope = nn.rope(hp.qk_rope)
  rope.interleaved = gguf or hf_interleave
  local scale = (hp.qk_nope + hp.qk_rope) ^ -0.5
  local y = rope.yarn
  if y and y.factor and y.factor > 1 then
    local m
    if gguf then
      local mul = glm.meta(glm.meta("general.architecture") .. ".rope.scaling.yarn_log_multiplier")
      if mul and mul ~= 0 then
        m = 1.0 + mul * math.log(y.factor)
        y.attn_factor = y.attn_factor or 1.0
      end
    elseif y.mscale_all_dim and y.mscale_all_dim ~= 0 then
      m = 0.1 * y.mscale_all_dim * math.log(y.factor) + 1.0
    end
    if m then scale = scale * m * m end
  end
  return rope, scale, gguf and (hp.lora_eps or hp.eps) or 1e-6
end

-- Which layers have a dense MLP rather than experts (dense[l] for l = 0 .. n_layer - 1), as transformers
-- builds them. GGUF files give leading_dense_block_count. A config.json may give first_k_dense_replace
-- (the first k layers dense) and, written by transformers 5, mlp_layer_types ("dense" or "sparse" per
-- layer; its length must be num_hidden_layers, as transformers checks). transformers 5 builds GLM-5
-- (glm_moe_dsa) and GLM-4.7-Flash (glm4_moe_lite) from mlp_layer_types alone (first_k_dense_replace only
-- fills it in when absent), but DeepSeek-V2/V3 and GLM-4.5 (glm4_moe) from first_k_dense_replace alone.
-- glmc does the same; when both keys are given and disagree it says which one it followed. Where only
-- mlp_layer_types is given, it is followed.
local reads_first_k_only = { deepseek_v2 = true, deepseek_v3 = true, glm4_moe = true }
function nn.dense_layers(hp)
  local dense, types = {}, hp.mlp_types
  for l = 0, hp.n_layer - 1 do dense[l] = l < hp.first_dense end
  if types == nil then return dense end
  local where = glm.meta_file .. ": mlp_layer_types"
  if type(types) ~= "table" or #types ~= hp.n_layer_all then
    error(("%s has %s entries, but num_hidden_layers is %d"):format(where,
      type(types) == "table" and #types or "no", hp.n_layer_all), 0)
  end
  local differ
  for i, t in ipairs(types) do
    if t ~= "dense" and t ~= "sparse" then
      error(("%s[%d] is '%s', not 'dense' or 'sparse'"):format(where, i - 1, tostring(t)), 0)
    end
    if differ == nil and (t == "dense") ~= (i - 1 < hp.first_dense) then differ = i - 1 end
  end
  local mt = glm.meta("model_type")
  if differ and glm.meta("first_k_dense_replace") ~= nil then
    local msg = ("%s makes layer %d %s, first_k_dense_replace = %d does not"):format(where, differ,
      types[differ + 1], hp.first_dense)
    if reads_first_k_only[mt] then
      glm.warn(msg .. ("; following first_k_dense_replace, as transformers' %s does"):format(mt))
      return dense
    end
    glm.warn(msg .. "; following mlp_layer_types, as transformers does")
  end
  for l = 0, hp.n_layer - 1 do dense[l] = types[l + 1] == "dense" end
  return dense
end

-- The dense layers as plan metadata (hparam.dense_layers, "0,1"), for glmc dump and tests.
local function record_dense(hp, dense)
  local t = {}
  for l = 0, hp.n_layer - 1 do
    if dense[l] then t[#t + 1] = tostring(l) end
  end
  glm.set_meta("hparam.dense_layers", table.concat(t, ","))
end

-- The DeepSeek-style decoder layer: (MLA | GQA) attention, then a dense MLP in the dense layers
-- (nn.dense_layers) and a sigmoid-routed MoE with shared experts in the others.
function nn.moe_layer(x, l, hp, W, attn)
  local C = hp.n_embd
  local h = glm.rmsnorm(x, W(blk(l, "attn_norm.weight"), { C }), hp.eps)
  x = x + attn(h, l)
  h = glm.rmsnorm(x, W(blk(l, "ffn_norm.weight"), { C }), hp.eps)
  if not hp.dense then
    hp.dense = nn.dense_layers(hp)
    record_dense(hp, hp.dense)
  end
  if hp.dense[l] then return x + nn.mlp(h, l, hp, W) end
  return x + nn.moe(h, l, hp, W, { func = "sigmoid", bias = true })
end
nn.split1 = { split = 1 }

-- The DeepSeek sparse-attention (DSA) lightning indexer: per query token, the index_topk cache positions
-- with the highest Σ_h w_h · relu(q_h · k) (keys normalised by a LayerNorm, rotary on their first qk_rope
-- dims), with its own per-layer key cache. Returns the selection for nn.mla_attention.
function nn.dsa_indexer(x, qc, l, hp, W, pos, rope)
  local C, Hi, Di, Dr = hp.n_embd, hp.index_heads, hp.index_dim, hp.qk_rope
  local function rot(t, heads) return nn.rotate(t, pos, rope, heads, Di, Dr) end
  local q = rot(glm.linear(qc, W(blk(l, "indexer.attn_q_b.weight"), { Hi * Di, hp.q_lora })), Hi)
  local k = glm.layernorm(glm.linear(x, W(blk(l, "indexer.attn_k.weight"), { Di, C })),
                          W(blk(l, "indexer.k_norm.weight"), { Di }), W(blk(l, "indexer.k_norm.bias"), { Di }), 1e-6)
  k = rot(k, 1)
  local w = glm.linear(x, W(blk(l, "indexer.proj.weight"), { Hi, C })) * (Hi ^ -0.5)
  local kc = glm.cache(blk(l, "index_keys"), { Di })
  return glm.indexer(q, k, w, kc, pos, { heads = Hi, dim = Di, topk = hp.index_topk, scale = Di ^ -0.5 })
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
  -- MTP layers after the decoder's: llama.cpp's glm4moe and glm-dsa conversions count them in
  -- block_count, Hugging Face's num_hidden_layers does not
  nextn = { hf = "num_nextn_predict_layers", gguf = "{arch}.nextn_predict_layers", optional = true },
  eos = { hf = "eos_token_id", gguf = "tokenizer.ggml.eos_token_id", optional = true },
}

-- Read the Llama-like hyperparameters and fill the derived defaults.
function nn.read_llama_hparams(extra)
  local spec = {}
  for k, v in pairs(nn.llama_hparams) do spec[k] = v end
  for k, v in pairs(extra or {}) do spec[k] = v end
  local hp = nn.hparams(spec)
  if glm.format == "gguf" and (hp.nextn or 0) > 0 then
    -- the MTP layers come after the decoder's; the forward pass does not run them (as llama.cpp)
    hp.n_layer = hp.n_layer - hp.nextn
    glm.set_meta("hparam.n_layer", hp.n_layer)
  end
  hp.n_layer_all = hp.n_layer   -- the decoder's layers, --layers or not
  if glm.options.layers and glm.options.layers < hp.n_layer then
    hp.n_layer = glm.options.layers
    glm.set_meta("hparam.n_layer", hp.n_layer)
    glm.set_meta("truncated_layers", hp.n_layer)
  end
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
