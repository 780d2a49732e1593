local tokens = glm.input("tokens")
local emb = glm.param("token_embd.weight", { 512, 64 }, { source = "model.embed_tokens.weight" })
local a, b = glm.split(glm.embedding(emb, tokens), -1, { 32, 16 })
