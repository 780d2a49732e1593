-- The checkpoint's embedding is [512, 64]; this model expects [512, 32].
local tokens = glm.input("tokens")
local emb = glm.param("token_embd.weight", { 512, 32 }, { source = "model.embed_tokens.weight" })
glm.output("logits", glm.embedding(emb, tokens))
