local tokens = glm.input("tokens")
local y = glm.silu(nil)
