-- A finalizer that adds to the graph after the model has returned.
setmetatable({}, { __gc = function() glm.output("late", glm.input("pos")) end })
local emb = glm.param("model.embed_tokens.weight", { 512, 64 })
glm.output("logits", glm.embedding(emb, glm.input("tokens")))
