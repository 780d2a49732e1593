-- A string bomb: refused before anything is allocated.
local s = ("a"):rep(2^40)
