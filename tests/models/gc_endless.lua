-- A finalizer that never returns, run when the Lua state closes (hooks are off in finalizers).
setmetatable({}, { __gc = function() while true do end end })
glm.output("logits", glm.input("tokens"))
