-- A linear layer whose weight does not fit its input: the error must name this line and both shapes.
local tokens = glm.input("tokens")
local emb = glm.param("token_embd.weight", { 512, 64 }, { source = "model.embed_tokens.weight" })
local x = glm.embedding(emb, tokens)
local w = glm.param("blk.0.attn_q.weight", { 64, 32 }, { source = "model.layers.0.self_attn.q_proj.weight" })
local y = glm.linear(x, w)
glm.output("logits", y)
