-- table.sort of more elements than one call may handle (built in C, faster than the hook looks).
local t, chunk = {}, { string.byte(("\1"):rep(2^19), 1, -1) }
for k = 0, 8 do table.move(chunk, 1, #chunk, k * #chunk + 1, t) end
table.sort(t)
