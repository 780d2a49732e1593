-- A parameter the checkpoint does not have.
local tokens = glm.input("tokens")
local emb = glm.param("token_embd.weight", { 512, 64 }, { source = "model.embed_tokens.weight" })
local extra = glm.param("blk.0.attn_gate.weight", { 64 }, { source = "model.layers.0.self_attn.gate.weight" })
glm.output("logits", glm.embedding(emb, tokens) * extra)
