local nn = require "nn"
local x = = 3
