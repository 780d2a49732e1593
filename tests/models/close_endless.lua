-- A to-be-closed variable whose __close never returns, run as the error unwinds.
local x <close> = setmetatable({}, { __close = function() while true do end end })
error("unwind")
