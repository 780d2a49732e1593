-- Backtracking inside one C call (string.find), where the instruction hook never runs.
local s = string.rep("a", 100000)
return s:find(".-.-.-.-.-.-b")
