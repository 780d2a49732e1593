-- A loop whose few instructions each call an expensive C function: stopped by the timer's signal.
for i = 1, 1e9 do local s = string.rep("ab", 5e6) end
