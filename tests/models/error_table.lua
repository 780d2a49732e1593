local x = 1
local y = 2
error({ code = 7 })
