-- A canonical name the library's HF name map does not know.
local nn = require "nn"
local W = nn.weights(nn.hf_names)
local w = W("blk.0.attn_qq.weight", { 64, 64 })
